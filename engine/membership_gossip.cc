#include "engine/membership_gossip.h"

#include <algorithm>
#include <cmath>

#include "compression/frame.h"

namespace starling::engine {

void MembershipGossip::start(uint64_t round, const topology::Graph& support,
                             transport::Clock::time_point deadline) {
  round_ = round;
  deadline_ = deadline;
  missing_.clear();
  expected_.clear();
  extended_.clear();
  // [rank, change, takes-effect-at] triples as float64 (exact below 2^53), in a checksummed
  // frame.
  std::vector<double> values;
  for (const auto& [key, p] : proposals_) {
    values.push_back(static_cast<double>(key.first));
    values.push_back(static_cast<double>(key.second));
    values.push_back(static_cast<double>(p.at));
  }
  auto frame = std::make_shared<transport::Bytes>();
  compression::encodeDense<double>(values, *frame);
  const transport::Tag tag{round, kMembershipChannel};
  for (int peer : support.neighbors(rank_)) {
    if (isKnownLost(peer)) continue;
    expected_.push_back(peer);
  }
  pending_ = expected_.size();
  for (int peer : expected_) {
    net_.send(peer, tag, frame, [](const core::Status&) {});  // a failed send shows as a loss
    postReceive(peer, deadline);
  }
  for (int peer : bridges_) {
    if (isKnownLost(peer) || std::find(expected_.begin(), expected_.end(), peer) != expected_.end()) {
      continue;
    }
    // A bridge is waited for like a neighbour, from the first round: both ends find each other
    // by the same pings in the round the rank between them died, and an island of live peers
    // between dead ranks that did not wait for its bridges would finish its rounds ahead of the
    // news crossing them and apply at the change round what it alone knew (found by `simulate`
    // running the peers' own survival code: ring of 8, ranks 2, 5 and 7 killed at once; ranks
    // 3 and 4, and rank 6, applied the departures they had proposed without the others'). A
    // bridge whose other end did not find this peer costs this round its timeout (its
    // neighbours get liveness notices meanwhile) and is dropped; one that does not answer is
    // no loss either way.
    ++pending_;
    net_.send(peer, tag, frame, [](const core::Status&) {});
    net_.recv(peer, tag, deadline,
              [this, peer](const core::Status& st, transport::SharedBytes b) {
                --pending_;
                if (st.isOk()) {
                  merge(peer, *b);
                } else {
                  bridges_.erase(peer);
                }
              });
  }
}

void MembershipGossip::addBridge(int peer) {
  if (peer >= 0 && peer < nodes_ && peer != rank_) bridges_.insert(peer);
}

bool MembershipGossip::pendingDepartures() const {
  for (int r = 0; r < nodes_; ++r) {
    if (departureRound(r)) return true;
  }
  return false;
}

void MembershipGossip::postReceive(int peer, transport::Clock::time_point deadline) {
  const transport::Tag tag{round_, kMembershipChannel};
  net_.recv(peer, tag, deadline, [this, peer](const core::Status& st, transport::SharedBytes b) {
    if (st.code() == core::StatusCode::kTimeout) {
      auto ext = extended_.find(peer);
      if (ext != extended_.end() && ext->second > transport::Clock::now()) {
        postReceive(peer, ext->second);  // a notice said it is alive: wait on
        return;
      }
    }
    --pending_;
    if (!st.isOk()) {
      missing_.push_back(peer);
      return;
    }
    merge(peer, *b);
  });
}

void MembershipGossip::extend(int peer, transport::Clock::time_point until) {
  auto& e = extended_[peer];
  e = std::max(e, until);
}

void MembershipGossip::listen(const topology::Graph& support) {
  listen(support.neighbors(rank_));
}

void MembershipGossip::listen(const std::vector<int>& peers) {
  for (int peer : peers) {
    if (isKnownLost(peer) || listening_[peer]) continue;
    listening_[peer] = true;
    postNotice(peer);
  }
}

void MembershipGossip::postNotice(int peer) {
  // One receive per neighbour at a time, re-posted after each notice; the deadline only bounds
  // a receive nobody answers (the run ends first).
  const auto far = transport::Clock::now() + std::chrono::hours(24);
  net_.recv(peer, transport::Tag{0, kLivenessChannel}, far,
            [this, peer](const core::Status& st, transport::SharedBytes b) {
              if (!st.isOk()) {
                listening_[peer] = false;
                return;
              }
              auto view = compression::parseFrame(*b);
              std::vector<double> scratch;
              if (view && view->elementCount == 1) {
                auto v = compression::decodeDense<double>(*b, 1, scratch);
                if (v && (*v)[0] >= 0 && (*v)[0] < 9.0e15 && onAlive_) {
                  onAlive_(peer, static_cast<uint64_t>((*v)[0]));
                }
              } else {
                ++corrupt_;
              }
              postNotice(peer);
            });
}

void MembershipGossip::notify(uint64_t round, const topology::Graph& support) {
  notify(round, support.neighbors(rank_));
}

void MembershipGossip::notify(uint64_t round, const std::vector<int>& peers) {
  const double value = static_cast<double>(round);
  auto frame = std::make_shared<transport::Bytes>();
  compression::encodeDense<double>(std::span<const double>(&value, 1), *frame);
  for (int peer : peers) {
    if (isKnownLost(peer)) continue;
    net_.send(peer, transport::Tag{0, kLivenessChannel}, frame, [](const core::Status&) {});
  }
}

void MembershipGossip::merge(int from, std::span<const std::byte> bytes) {
  auto view = compression::parseFrame(bytes);
  if (!view || view->elementCount > 3 * kMaxEntries || view->elementCount % 3 != 0) {
    ++corrupt_;
    return;
  }
  std::vector<double> scratch;
  auto values = compression::decodeDense<double>(bytes, view->elementCount, scratch);
  if (!values) {
    ++corrupt_;
    return;
  }
  for (size_t k = 0; k + 2 < values->size(); k += 3) {
    const double r = (*values)[k], c = (*values)[k + 1], at = (*values)[k + 2];
    if (!(r >= 0 && r < nodes_ && r == std::floor(r) && c >= 1 && c <= kMaxChange &&
          c == std::floor(c) && at >= 0 && at < 9.0e15 && at == std::floor(at))) {
      ++corrupt_;
      return;
    }
  }
  for (size_t k = 0; k + 2 < values->size(); k += 3) {
    const int r = static_cast<int>((*values)[k]);
    const auto change = static_cast<uint64_t>((*values)[k + 1]);
    const auto at = static_cast<uint64_t>((*values)[k + 2]);
    auto it = proposals_.find({r, change});
    const bool news = it == proposals_.end() || at < it->second.at;
    if (!news) continue;
    if (r == rank_ && change % 2 == 1 && it == proposals_.end()) {
      excluded_ = true;  // a neighbour declared this peer lost
      continue;
    }
    // A change must be known before its round starts; this one's round has passed here already
    // (or this peer applied it at a later round than the neighbour did).
    if (at <= round_ && disagreement_.isOk()) {
      disagreement_ = core::failedPrecondition(
          "membership disagreement: rank " + std::to_string(from) + " says rank " +
          std::to_string(r) + (change % 2 == 1 ? " left" : " rejoined") + " at round " +
          std::to_string(at) + ", which rank " + std::to_string(rank_) +
          " learned only in round " + std::to_string(round_) +
          " (the news needs more rounds to cross this graph: set faults.agreement_rounds)");
    }
    if (it != proposals_.end() && it->second.applied) continue;  // applied here: it stays
    proposals_[{r, change}] = Proposal{at, false};
  }
}

std::vector<int> MembershipGossip::finish() {
  std::vector<int> out;
  out.swap(missing_);
  std::sort(out.begin(), out.end());
  return out;
}

std::pair<uint64_t, bool> MembershipGossip::latest(int rank) const {
  auto it = proposals_.lower_bound({rank + 1, 0});
  if (it == proposals_.begin()) return {0, true};
  --it;
  if (it->first.first != rank) return {0, true};
  return {it->first.second, it->second.applied};
}

bool MembershipGossip::isKnownLost(int rank) const {
  const auto [change, applied] = latest(rank);
  // In: no change at all, or a return that took effect.
  return !(change % 2 == 0 && applied);
}

bool MembershipGossip::mayRejoin(int rank) const {
  const auto [change, applied] = latest(rank);
  return change % 2 == 1 && applied;
}

std::optional<uint64_t> MembershipGossip::joinRound(int rank) const {
  const auto [change, applied] = latest(rank);
  if (change == 0 || change % 2 == 1 || applied) return std::nullopt;
  return proposals_.at({rank, change}).at;
}

std::optional<uint64_t> MembershipGossip::departureRound(int rank) const {
  const auto [change, applied] = latest(rank);
  if (change % 2 == 0 || applied) return std::nullopt;
  return proposals_.at({rank, change}).at;
}

void MembershipGossip::propose(int rank, uint64_t round, uint64_t agreement) {
  const auto [change, applied] = latest(rank);
  if (change % 2 == 1) {
    // Its departure is known already; an earlier round for it is still news.
    auto& p = proposals_.at({rank, change});
    if (!p.applied && round + agreement < p.at) p.at = round + agreement;
    return;
  }
  if (change > 0 && !applied) return;  // its return is under way: the return's failure will tell
  proposals_[{rank, change + 1}] = Proposal{round + agreement, false};
}

bool MembershipGossip::proposeJoin(int rank, uint64_t round, uint64_t agreement) {
  if (!mayRejoin(rank)) return false;
  const uint64_t change = latest(rank).first;
  if (change + 1 > kMaxChange) return false;
  proposals_[{rank, change + 1}] = Proposal{round + agreement, false};
  return true;
}

MembershipGossip::Due MembershipGossip::dueAt(uint64_t round) {
  Due out;
  for (auto& [key, p] : proposals_) {
    if (p.at <= round && !p.applied) {
      p.applied = true;
      (key.second % 2 == 1 ? out.left : out.joined).push_back(key.first);
    }
  }
  return out;  // sorted: the map is ordered by rank
}

void MembershipGossip::visitState(core::StateVisitor& v) {
  std::vector<uint64_t> ranks, changes, rounds, applied;
  for (const auto& [key, p] : proposals_) {
    ranks.push_back(static_cast<uint64_t>(key.first));
    changes.push_back(key.second);
    rounds.push_back(p.at);
    applied.push_back(p.applied ? 1 : 0);
  }
  v.sized("ranks", ranks);
  v.sized("changes", changes);
  v.sized("rounds", rounds);
  v.sized("applied", applied);
  if (!v.loading() || v.failed()) return;
  if (changes.size() != ranks.size() || rounds.size() != ranks.size() ||
      applied.size() != ranks.size()) {
    return v.fail("checkpoint: membership gossip's lists differ in length");
  }
  std::vector<Entry> entries;
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (ranks[k] >= static_cast<uint64_t>(nodes_) || applied[k] > 1) {
      return v.fail("checkpoint: membership gossip names rank " + std::to_string(ranks[k]) +
                    " of " + std::to_string(nodes_));
    }
    entries.push_back(Entry{static_cast<int>(ranks[k]), changes[k], rounds[k], applied[k] == 1});
  }
  if (auto st = adopt(entries); !st.isOk()) return v.fail("checkpoint: " + st.message());
}

std::vector<MembershipGossip::Entry> MembershipGossip::entries() const {
  std::vector<Entry> out;
  for (const auto& [key, p] : proposals_) out.push_back(Entry{key.first, key.second, p.at, p.applied});
  return out;
}

core::Status MembershipGossip::adopt(const std::vector<Entry>& entries) {
  if (entries.size() > kMaxEntries) return core::invalidArgument("too many membership changes");
  std::map<std::pair<int, uint64_t>, Proposal> next;
  for (const Entry& e : entries) {
    if (e.rank < 0 || e.rank >= nodes_ || e.change < 1 || e.change > kMaxChange) {
      return core::invalidArgument("membership change " + std::to_string(e.change) + " of rank " +
                                   std::to_string(e.rank) + " in a run of " +
                                   std::to_string(nodes_));
    }
    next[{e.rank, e.change}] = Proposal{e.at, e.applied};
  }
  proposals_ = std::move(next);
  return core::Status::ok();
}

std::vector<int> MembershipGossip::knownLost() const {
  std::vector<int> out;
  for (int r = 0; r < nodes_; ++r) {
    if (isKnownLost(r)) out.push_back(r);
  }
  return out;
}

}  // namespace starling::engine
