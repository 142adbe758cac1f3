#include "engine/survival.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>

namespace starling::engine {

template <typename T>
Survival<T>::Survival(Options run, const topology::Schedule& schedule, int rank,
                      transport::Transport& net, std::string who, bool* leftRun)
    : run_(std::move(run)),
      schedule_(schedule),
      rank_(rank),
      who_(std::move(who)),
      leftRun_(leftRun),
      enabled_(run_.onPeerLoss == OnPeerLoss::kContinue),
      membership_(run_.nodes),
      survivors_(schedule, run_.repair),
      gossip_(rank, run_.nodes, net),
      net_(net),
      joinListening_(static_cast<size_t>(run_.nodes), false) {}

template <typename T>
core::Status Survival<T>::adopt(const JoinState& state) {
  if (!enabled_) return core::failedPrecondition("rejoining needs faults.on_peer_loss \"continue\"");
  STARLING_RETURN_IF_ERROR(membership_.adopt(state.alive, state.epoch));
  return gossip_.adopt(state.entries);
}

template <typename T>
void Survival<T>::visitState(core::StateVisitor& v) {
  if (!enabled_) return;
  {
    core::StateVisitor::Scope scope(v, "membership");
    membership_.visitState(v);
  }
  core::StateVisitor::Scope scope(v, "gossip");
  gossip_.visitState(v);
}

template <typename T>
void Survival<T>::install(Engine<T>& engine) {
  engine_ = &engine;
  if (!enabled_) return;
  engine_->setAlsoWaitFor([this] { return gossip_.complete(); });
  gossip_.setOnAlive([this](int peer, uint64_t round) {
    // `peer` is alive and still in `round`: its messages of the next round may come late.
    // A neighbour further behind (new to this peer since a change: the old graph let it fall
    // as many rounds behind as it was hops away) is waited for while its notices show it
    // advancing, round after round; one that stays put is not.
    const auto last = noticed_.find(peer);
    const bool advancing = last != noticed_.end() && round > last->second;
    noticed_[peer] = round;
    if (round + 1 >= engine_->rounds()) {
      extendFor(peer, kMaxExtendedWaits);
    } else if (advancing && current_ != nullptr) {
      const auto awaited = current_->awaited();
      if (std::find(awaited.begin(), awaited.end(), peer) != awaited.end()) extendFor(peer, 0);
    }
  });
  engine_->setOnLongWait([this] {
    notifyAlive();
    pingSilent();
  });
}

// Twice the timeout: the notice comes a third of a timeout into the neighbour's wait, and a
// loaded host can delay the neighbour's next message by well over a second after it.
// But not for ever (`cap`, in round timeouts from the round's start; 0: none): two live peers
// that wait for each other on different channels (a trainer whose calls went out of step with its
// neighbours') would keep each other waiting with their notices, so a notice extends a round to
// kMaxExtendedWaits timeouts at most. Only a neighbour whose notices show it advancing is waited
// for longer.
template <typename T>
void Survival<T>::extendFor(int peer, int cap) {
  const auto timeout = std::chrono::milliseconds(run_.roundTimeoutMs);
  auto until = transport::Clock::now() + 2 * timeout;
  if (cap > 0) until = std::min(until, roundStart_ + cap * timeout);
  if (current_ != nullptr) current_->extend(peer, until);
  gossip_.extend(peer, until);
  engine_->extendDeadline(until);
}

template <typename T>
void Survival<T>::pingSilent() {
  if (current_ == nullptr) return;
  const auto third = std::chrono::milliseconds(std::max<uint64_t>(1, run_.roundTimeoutMs / 3));
  for (int peer : current_->awaited()) {
    if (gossip_.isKnownLost(peer) || !pinging_.insert(peer).second) continue;
    net_.ping(peer, transport::Clock::now() + third,
              [this, peer, round = roundsBegun_](const core::Status& st) {
                // An answer for a round that is over extends nothing.
                if (round != roundsBegun_ || current_ == nullptr) return;
                pinging_.erase(peer);
                if (st.isOk()) extendFor(peer, kPingExtendedWaits);
              });
  }
}

template <typename T>
void Survival<T>::notifyAlive() {
  auto support = survivors_.support(membership_);
  if (!support) return;
  std::vector<int> to = (*support)->neighbors(rank_);
  for (int peer : neighboursToBe()) {
    if (std::find(to.begin(), to.end(), peer) == to.end()) to.push_back(peer);
  }
  gossip_.notify(engine_->rounds(), to);
}

template <typename T>
const std::vector<int>& Survival<T>::neighboursToBe() {
  std::vector<int> lost = gossip_.knownLost();
  if (toBeValid_ && lost == toBeLost_) return toBe_;
  toBeValid_ = true;
  toBeLost_ = lost;
  toBe_.clear();
  std::vector<bool> alive = membership_.aliveMask();
  for (int r : lost) alive[static_cast<size_t>(r)] = false;
  if (!alive[static_cast<size_t>(rank_)]) return toBe_;
  if (auto g = repairGraph(schedule_.support(), alive, run_.repair)) {
    toBe_ = g->neighbors(rank_);
  }
  return toBe_;
}

template <typename T>
core::Status Survival<T>::add(Node<T>& node, Restart restart) {
  if (!enabled_) return core::Status::ok();
  node.setTolerateLoss(true);
  if (membership_.changed()) {
    // Registered after a change (resumed, or a node created late): it exchanges with the
    // survivors' support graph, as applyChange sets it.
    auto support = survivors_.support(membership_);
    if (!support) return engine_->fail(support.status(), &node);
    node.setSupport(*support);
  }
  for (int lost : gossip_.knownLost()) node.setLost(lost);
  nodes_.push_back(Registered{&node, std::move(restart)});
  return core::Status::ok();
}

// A membership change at the start of `round`: the ranks in due.left are out, those in
// due.joined back; every node restarts its algorithm from its model over the repaired graph
// (docs/algorithms.md §18), and each returning neighbour gets this peer's join state.
template <typename T>
core::Status Survival<T>::applyChange(const MembershipGossip::Due& due, uint64_t round) {
  if (!due.left.empty()) membership_.remove(due.left);
  if (!due.joined.empty()) membership_.add(due.joined);
  auto support = survivors_.support(membership_);
  if (!support) return engine_->fail(support.status(), nodes_.empty() ? nullptr : nodes_[0].node);
  for (int j : due.joined) {
    net_.revive(j);  // a new process listens on its address now
    for (Registered& r : nodes_) r.node->setFound(j);
  }
  for (Registered& r : nodes_) {
    const auto x = r.node->model();
    r.node->restartAlgorithm(r.restart(std::vector<T>(x.begin(), x.end())));
    r.node->setSupport(*support);
  }
  std::string why;
  for (int r : due.left)
    why += (why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " lost";
  for (int r : due.joined)
    why += (why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " rejoined";
  STARLING_RETURN_IF_ERROR(engine_->append(membershipChangeLine(
      MembershipChange{round, membership_.epoch(), due.left, due.joined, why})));
  for (int j : due.joined) {
    if (j == rank_) continue;
    const auto& nb = (*support)->neighbors(rank_);
    if (std::find(nb.begin(), nb.end(), j) != nb.end()) sendJoinState(j, round);
    engine_->say(who_ + ": rank " + std::to_string(j) + " rejoined at round " +
                 std::to_string(round));
  }
  return core::Status::ok();
}

template <typename T>
void Survival<T>::sendJoinState(int to, uint64_t round) {
  JoinState st;
  st.round = round;
  if (round > 0) {
    st.epoch = membership_.epoch();
    st.alive = membership_.aliveMask();
    st.entries = gossip_.entries();
    st.model = joinSource_();
    if (joinCarried_) st.carried = joinCarried_();
    st.channel = prepareChannel_;
  } else {
    st.alive.assign(static_cast<size_t>(run_.nodes), false);
  }
  auto bytes = std::make_shared<transport::Bytes>(encodeJoinState(st));
  net_.send(to, transport::Tag{0, kJoinStateChannel}, bytes, [](const core::Status&) {});
}

template <typename T>
void Survival<T>::listenForJoins() {
  const auto far = transport::Clock::now() + std::chrono::hours(24);
  for (int j : gossip_.knownLost()) {
    if (joinListening_[j]) continue;
    joinListening_[j] = true;
    net_.recv(j, transport::Tag{0, kJoinChannel}, far,
              [this, j](const core::Status& st, transport::SharedBytes b) {
                joinListening_[j] = false;  // listened for again at the next round's start
                if (!st.isOk()) return;     // its old process's failure, most likely
                auto attempt = decodeJoinRequest(*b);
                if (!attempt) {
                  engine_->say(who_ + ": ignored a malformed join request from rank " +
                               std::to_string(j) + ": " + attempt.status().message());
                  return;
                }
                joinRequests_.emplace_back(j, *attempt);
              });
  }
}

template <typename T>
core::Status Survival<T>::answerJoins(uint64_t round) {
  std::vector<std::pair<int, uint64_t>> later;
  for (const auto& [j, attempt] : joinRequests_) {
    if (honoured_[j].count(attempt)) continue;
    if (gossip_.joinRound(j)) {
      honoured_[j].insert(attempt);  // under way: its state comes at that round
      continue;
    }
    const uint64_t agreement =
        agreementRounds(run_.agreementRounds, schedule_.support(), gossip_.knownLost());
    if (!gossip_.mayRejoin(j)) {
      // Its departure has not taken effect yet here: asked again next round, unless the return
      // could only come after the last round anyway.
      // (A trainer's run, rounds 0, has no last round known here.)
      const auto leaves = gossip_.departureRound(j);
      const bool inTime = run_.rounds == 0 || (leaves && *leaves + agreement < run_.rounds);
      if (leaves && inTime) later.emplace_back(j, attempt);
      if (!leaves || inTime) continue;
    }
    honoured_[j].insert(attempt);
    if (run_.rounds > 0 &&
        std::max(round, gossip_.departureRound(j).value_or(0)) + agreement >= run_.rounds) {
      engine_->say(who_ + ": rank " + std::to_string(j) +
                   " asked to rejoin, but the run ends first; refused");
      sendJoinState(j, 0);
      continue;
    }
    if (!gossip_.proposeJoin(j, round, agreement)) continue;  // its change numbers ran out
    engine_->say(who_ + ": rank " + std::to_string(j) + " asked to rejoin; it comes back at round " +
                 std::to_string(*gossip_.joinRound(j)));
  }
  joinRequests_ = std::move(later);
  return core::Status::ok();
}

template <typename T>
core::Status Survival<T>::prepare(uint32_t channel) {
  if (!enabled_) return core::Status::ok();
  prepareChannel_ = channel;
  const uint64_t r = engine_->rounds();
  if (auto due = gossip_.dueAt(r); !due.empty()) {
    STARLING_RETURN_IF_ERROR(applyChange(due, r));
    // Every loss has taken effect: the repaired graph joins what the bridges joined.
    if (!gossip_.pendingDepartures()) gossip_.clearBridges();
  }
  if (joinSource_) {
    STARLING_RETURN_IF_ERROR(answerJoins(r));
    listenForJoins();
  }
  return core::Status::ok();
}

template <typename T>
core::Status Survival<T>::leave(const std::string& why) {
  if (leftRun_) *leftRun_ = true;
  return engine_->fail(core::Status(core::StatusCode::kPeerGone, why), nullptr);
}

template <typename T>
core::Status Survival<T>::begin(Node<T>& node, std::optional<double> stepSize,
                                FaultInjector* faults) {
  if (!enabled_) {
    STARLING_RETURN_IF_ERROR(engine_->begin(node, stepSize));
    if (faults) {
      for (const FaultInjector::Drop& d : faults->takeDropped()) {
        return engine_->fail(
            core::unavailable(FaultInjector::dropStopMessage(rank_, d.to, d.tag.round)), &node);
      }
    }
    return core::Status::ok();
  }
  const uint64_t r = engine_->rounds();
  auto topo = survivors_.at(r, membership_);
  if (!topo) return engine_->fail(topo.status(), &node);
  auto support = survivors_.support(membership_);
  if (!support) return engine_->fail(support.status(), &node);
  support_ = *support;
  for (int lost : gossip_.knownLost()) node.setLost(lost);
  current_ = &node;
  roundStart_ = transport::Clock::now();
  ++roundsBegun_;
  pinging_.clear();
  STARLING_RETURN_IF_ERROR(engine_->begin(node, **topo, stepSize));
  std::vector<FaultInjector::Drop> drops;
  if (faults) drops = faults->takeDropped();
  // A model message of this peer was dropped (docs/algorithms.md §18, "Dropped messages"): its
  // receiver will take this peer for lost. Out of the run either way, it leaves in this round,
  // once its other messages are on their way, rather than be found out by timeouts (two peers
  // whose messages to each other were both dropped would otherwise wait for each other, each
  // telling the other it is alive). It proposes its own departure in this round's gossip, so
  // every neighbour knows from this round and the change comes D rounds after it, whoever else
  // notices and when.
  if (!drops.empty()) {
    std::vector<int> gone = gossip_.knownLost();
    gone.push_back(rank_);
    gossip_.propose(rank_, r, agreementRounds(run_.agreementRounds, schedule_.support(), gone));
  }
  gossip_.listen(*support_);
  gossip_.listen(neighboursToBe());  // their notices come before the change (notifyAlive)
  gossip_.start(r, *support_, engine_->deadline());
  if (!drops.empty()) {
    const std::string why = FaultInjector::dropMessage(rank_, drops.front().to, r);
    // Its own log says it was lost in round r: it leaves without finishing the round, so its
    // last model is the one logged before (PeerLogMerger counts it up to round r).
    STARLING_RETURN_IF_ERROR(engine_->append(membershipLostLine(r, rank_, why)));
    std::vector<const Node<T>*> all;
    for (const Registered& reg : nodes_) all.push_back(reg.node);
    STARLING_RETURN_IF_ERROR(engine_->flush(all));
    return leave(why + "; rank " + std::to_string(drops.front().to) +
                 " takes this peer for lost, so it leaves the run");
  }
  return core::Status::ok();
}

template <typename T>
core::Status Survival<T>::round(Node<T>& node, std::optional<double> stepSize,
                                FaultInjector* faults, uint32_t channel) {
  STARLING_RETURN_IF_ERROR(prepare(channel));
  STARLING_RETURN_IF_ERROR(begin(node, stepSize, faults));
  return complete(node);
}

template <typename T>
core::Status Survival<T>::complete(Node<T>& node) {
  if (!enabled_) return engine_->complete(node);
  const uint64_t r = engine_->rounds();
  STARLING_RETURN_IF_ERROR(engine_->complete(node));
  current_ = nullptr;
  std::vector<int> lostNow = node.takeNewlyLost();
  for (int peer : gossip_.finish()) lostNow.push_back(peer);
  std::sort(lostNow.begin(), lostNow.end());
  lostNow.erase(std::unique(lostNow.begin(), lostNow.end()), lostNow.end());
  // Every live neighbour silent at once (two or more of them, or the only one after a round that
  // took over twice the timeout): far more likely this peer was the one that stopped (SIGSTOP, a
  // long swap) and the others declared it lost. It leaves rather than carry on as a run of its
  // own.
  const bool longRound =
      transport::Clock::now() - roundStart_ > 2 * std::chrono::milliseconds(run_.roundTimeoutMs);
  size_t live = 0, missing = 0;
  for (int peer : support_->neighbors(rank_)) {
    if (gossip_.isKnownLost(peer)) continue;
    ++live;
    missing += std::binary_search(lostNow.begin(), lostNow.end(), peer);
  }
  // Who is really gone: the silent neighbours are pinged, and behind each dead one its own
  // neighbours, as far as the dead reach (a block of ranks killed together is found in this
  // round, not a timeout at a time as the repaired graph reaches each).
  std::vector<int> fresh;
  for (int peer : lostNow) {
    if (!gossip_.isKnownLost(peer)) fresh.push_back(peer);
  }
  const Probe probe = fresh.empty() ? Probe{} : probeLosses(fresh);
  // The live peers behind the dead: gossip goes to them until the loss takes effect.
  for (int peer : probe.aliveBeyond) gossip_.addBridge(peer);
  if (live > 0 && missing == live && (live >= 2 || longRound)) {
    // Every live neighbour silent at once. Only when each of them is dead (refused) and the run
    // goes on (a peer behind them answered, or the refusals show this host's network works) does
    // this peer stay; a silent neighbour that answers, or no answer at all, says this peer is
    // the one that stopped.
    bool neighboursDead = true, refused = true;
    for (int peer : fresh) {
      neighboursDead = neighboursDead && probe.dead.count(peer) > 0;
      refused = refused && probe.refused.count(peer) > 0;
    }
    if (!neighboursDead || (!probe.othersAlive && !refused)) {
      return leave("no neighbour's message came in round " + std::to_string(r) +
                   " (was this process stopped?); it leaves the run, the others carry on");
    }
    engine_->say(who_ + ": every neighbour died in round " + std::to_string(r) +
                 "; the run goes on (" +
                 (probe.othersAlive ? "peers behind them answer" : "their hosts refuse") + ")");
  }
  // Each loss takes effect D rounds after this one, D computed from the losses known before this
  // round and that one alone (as every peer that notices it computes it, and as `simulate` does),
  // whatever else this peer noticed in the same round.
  const std::vector<int> before = gossip_.knownLost();
  for (int peer : probe.beyond) {
    if (std::find(lostNow.begin(), lostNow.end(), peer) == lostNow.end()) lostNow.push_back(peer);
  }
  for (int peer : lostNow) {
    if (gossip_.isKnownLost(peer)) continue;
    std::vector<int> gone = before;
    gone.push_back(peer);
    gossip_.propose(peer, r, agreementRounds(run_.agreementRounds, schedule_.support(), gone));
    std::string why = node.lostWhy(peer);
    for (Registered& reg : nodes_) reg.node->setLost(peer);
    node.setLost(peer);
    if (why.empty() && probe.beyond.count(peer)) {
      why = "rank " + std::to_string(peer) + " did not answer a ping in round " +
            std::to_string(r) + " (it lies behind a lost neighbour)";
    }
    if (why.empty()) {
      why = "no membership message from rank " + std::to_string(peer) + " in round " +
            std::to_string(r);
    }
    STARLING_RETURN_IF_ERROR(engine_->append(membershipLostLine(r, peer, why)));
    engine_->say(who_ + ": lost rank " + std::to_string(peer) + " in round " + std::to_string(r) +
                 "; carrying on without it");
  }
  if (gossip_.excluded()) {
    return leave(
        "the other peers declared this peer lost (it missed the round timeout); it "
        "leaves the run");
  }
  if (!gossip_.disagreement().isOk()) return engine_->fail(gossip_.disagreement(), &node);
  return core::Status::ok();
}

template <typename T>
typename Survival<T>::Probe Survival<T>::probeLosses(const std::vector<int>& silent) {
  Probe out;
  const auto deadline = transport::Clock::now() + std::chrono::milliseconds(run_.roundTimeoutMs);
  // Not asked: this peer, its neighbours (those whose messages came this round are alive; the
  // silent ones are the first wave), and whoever was asked already.
  std::set<int> seen(silent.begin(), silent.end());
  seen.insert(rank_);
  for (int peer : support_->neighbors(rank_)) seen.insert(peer);
  std::vector<int> wave = silent;
  bool first = true;
  // A ping to a stopped process waits out the deadline, and meanwhile this peer sends nothing:
  // its live neighbours, waiting for its next message, would take it for lost in turn. They get
  // the liveness notices a long wait sends, from the start and every third of the timeout.
  const auto third = std::chrono::milliseconds(std::max<uint64_t>(1, run_.roundTimeoutMs / 3));
  notifyAlive();
  auto nextNotice = transport::Clock::now() + third;
  while (!wave.empty() && transport::Clock::now() < deadline) {
    // Shared with the callbacks: a ping still out when the time runs out answers later, into
    // this map rather than a dead stack frame.
    auto shared = std::make_shared<std::map<int, core::Status>>();
    const auto& answers = *shared;
    for (int peer : wave) {
      net_.ping(peer, deadline, [shared, peer](const core::Status& st) { (*shared)[peer] = st; });
    }
    while (answers.size() < wave.size() && transport::Clock::now() < deadline) {
      if (auto p = net_.progress(std::min(deadline, transport::Clock::now() +
                                                        std::chrono::milliseconds(20)));
          !p) {
        break;
      }
      if (transport::Clock::now() >= nextNotice) {
        notifyAlive();
        nextNotice = transport::Clock::now() + third;
      }
    }
    std::vector<int> next;
    for (int peer : wave) {
      auto it = answers.find(peer);
      if (it != answers.end() && it->second.isOk()) {
        if (!first) {
          out.othersAlive = true;
          out.aliveBeyond.insert(peer);
        }
        continue;
      }
      out.dead.insert(peer);
      if (it != answers.end() && it->second.code() == core::StatusCode::kUnavailable) {
        out.refused.insert(peer);
      }
      if (!first) out.beyond.insert(peer);
      for (int n : support_->neighbors(peer)) {
        if (seen.count(n) || gossip_.isKnownLost(n)) continue;
        seen.insert(n);
        next.push_back(n);
      }
    }
    wave = std::move(next);
    first = false;
  }
  return out;
}

template class Survival<float>;
template class Survival<double>;

}  // namespace starling::engine
