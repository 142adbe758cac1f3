#include "runtime/membership_gossip.h"

#include <algorithm>
#include <cmath>

#include "compression/frame.h"

namespace starling::runtime {

void MembershipGossip::start(uint64_t round, const topology::Graph& support,
                             transport::Clock::time_point deadline) {
  round_ = round;
  deadline_ = deadline;
  missing_.clear();
  expected_.clear();
  extended_.clear();
  // [rank, leaves-at] pairs as float64 (exact below 2^53), in a checksummed frame.
  std::vector<double> values;
  for (const auto& [r, at] : proposals_) {
    values.push_back(static_cast<double>(r));
    values.push_back(static_cast<double>(at));
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
  for (int peer : support.neighbors(rank_)) {
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
  const double value = static_cast<double>(round);
  auto frame = std::make_shared<transport::Bytes>();
  compression::encodeDense<double>(std::span<const double>(&value, 1), *frame);
  for (int peer : support.neighbors(rank_)) {
    if (isKnownLost(peer)) continue;
    net_.send(peer, transport::Tag{0, kLivenessChannel}, frame, [](const core::Status&) {});
  }
}

void MembershipGossip::merge(int from, std::span<const std::byte> bytes) {
  auto view = compression::parseFrame(bytes);
  const size_t limit = 2 * static_cast<size_t>(nodes_);
  if (!view || view->elementCount > limit || view->elementCount % 2 != 0) {
    ++corrupt_;
    return;
  }
  std::vector<double> scratch;
  auto values = compression::decodeDense<double>(bytes, view->elementCount, scratch);
  if (!values) {
    ++corrupt_;
    return;
  }
  for (size_t k = 0; k + 1 < values->size(); k += 2) {
    const double r = (*values)[k], at = (*values)[k + 1];
    if (!(r >= 0 && r < nodes_ && r == std::floor(r) && at >= 0 && at < 9.0e15 &&
          at == std::floor(at))) {
      ++corrupt_;
      return;
    }
  }
  for (size_t k = 0; k + 1 < values->size(); k += 2) {
    const int r = static_cast<int>((*values)[k]);
    const auto at = static_cast<uint64_t>((*values)[k + 1]);
    if (r == rank_) {  // a neighbour declared this peer lost
      excluded_ = true;
      continue;
    }
    auto it = proposals_.find(r);
    const bool news = it == proposals_.end() || at < it->second;
    if (!news) continue;
    // A change must be known before its round starts; this one's round (at <= round_ + 1 is
    // the next round at the earliest a peer can still apply) has passed here already.
    if (at <= round_ && disagreement_.isOk()) {
      disagreement_ = core::failedPrecondition(
          "membership disagreement: rank " + std::to_string(from) + " says rank " +
          std::to_string(r) + " left at round " + std::to_string(at) + ", which rank " +
          std::to_string(rank_) + " learned only in round " + std::to_string(round_) +
          " (the news needs more rounds to cross this graph: set faults.agreement_rounds)");
    }
    proposals_[r] = at;
  }
}

std::vector<int> MembershipGossip::finish() {
  std::vector<int> out;
  out.swap(missing_);
  std::sort(out.begin(), out.end());
  return out;
}

void MembershipGossip::propose(int rank, uint64_t round, uint64_t agreement) {
  const uint64_t at = round + agreement;
  auto it = proposals_.find(rank);
  if (it == proposals_.end() || at < it->second) proposals_[rank] = at;
}

std::vector<int> MembershipGossip::dueAt(uint64_t round) {
  std::vector<int> out;
  for (const auto& [r, at] : proposals_) {
    if (at <= round && !applied_[r]) {
      applied_[r] = true;
      out.push_back(r);
    }
  }
  return out;
}

void MembershipGossip::visitState(core::StateVisitor& v) {
  std::vector<uint64_t> ranks, rounds, applied;
  for (const auto& [r, at] : proposals_) {
    ranks.push_back(static_cast<uint64_t>(r));
    rounds.push_back(at);
    const auto it = applied_.find(r);
    applied.push_back(it != applied_.end() && it->second ? 1 : 0);
  }
  v.sized("lost", ranks);
  v.sized("leaves_at", rounds);
  v.sized("applied", applied);
  if (!v.loading() || v.failed()) return;
  if (rounds.size() != ranks.size() || applied.size() != ranks.size()) {
    return v.fail("checkpoint: membership gossip's lists differ in length");
  }
  proposals_.clear();
  applied_.clear();
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (ranks[k] >= static_cast<uint64_t>(nodes_) || applied[k] > 1) {
      return v.fail("checkpoint: membership gossip names rank " + std::to_string(ranks[k]) +
                    " of " + std::to_string(nodes_));
    }
    proposals_[static_cast<int>(ranks[k])] = rounds[k];
    if (applied[k] == 1) applied_[static_cast<int>(ranks[k])] = true;
  }
}

std::vector<int> MembershipGossip::knownLost() const {
  std::vector<int> out;
  for (const auto& [r, at] : proposals_) out.push_back(r);
  return out;
}

}  // namespace starling::runtime
