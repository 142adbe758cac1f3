#include "engine/session.h"

#include <chrono>
#include <csignal>
#include <utility>

#include "engine/peer_log.h"

namespace starling::engine {

template <typename T>
Session<T>::Session(Options run, const topology::Schedule& schedule, transport::Transport& net,
                    SessionOptions options)
    : run_(std::move(run)),
      schedule_(schedule),
      net_(net),
      opt_(std::move(options)),
      engine_(run_, schedule, net, opt_.engine),
      survival_(run_, schedule, opt_.engine.rank, net, opt_.who, opt_.leftRun) {
  for (const FaultEvent& ev : run_.faultScript) {
    if (ev.kind == FaultEvent::Kind::kKill && ev.kill == opt_.engine.rank) {
      killRounds_.push_back(ev.atRound);
    }
  }
}

template <typename T>
core::Result<JoinState> Session<T>::rejoin(size_t dim,
                                           std::function<void(const std::string&)> log) {
  if (run_.onPeerLoss != OnPeerLoss::kContinue) {
    return core::invalidArgument("a lost rank comes back only with faults.on_peer_loss "
                                 "\"continue\"");
  }
  RejoinOptions ro;
  ro.rank = rank();
  ro.nodes = run_.nodes;
  ro.dim = dim;
  ro.ask = schedule_.support().neighbors(rank());
  // The answer comes at the round the survivors agree on: a few rounds after they hear.
  ro.deadline = transport::Clock::now() + std::chrono::milliseconds(run_.connectTimeoutMs) +
                std::chrono::milliseconds(run_.roundTimeoutMs) * (run_.nodes + 4);
  ro.stop = opt_.engine.stop;
  ro.log = std::move(log);
  auto state = requestRejoin(net_, ro);
  if (!state) {
    if (opt_.leftRun && state.status().code() != core::StatusCode::kCancelled) {
      *opt_.leftRun = true;
    }
    return state.status().withContext("rank " + std::to_string(rank()) + " could not rejoin");
  }
  if (state->round == 0) return state;  // refused: the run ends first
  STARLING_RETURN_IF_ERROR(survival_.adopt(*state));
  uint64_t logBytes = 0;
  if (!opt_.engine.outDir.empty()) {
    auto bytes = rejoinLogBytes(peerLogPath(opt_.engine.outDir, rank()), opt_.engine.logHeader);
    if (!bytes) return bytes.status();
    logBytes = *bytes;
  }
  engine_.resumeAt(state->round, logBytes, 0);
  return state;
}

template <typename T>
core::Status Session<T>::open() {
  STARLING_RETURN_IF_ERROR(engine_.open());
  survival_.install(engine_);
  return core::Status::ok();
}

template <typename T>
core::Status Session<T>::add(Node<T>& node, Restart restart) {
  nodes_.push_back(&node);
  return survival_.add(node, std::move(restart));
}

template <typename T>
bool Session<T>::killedBefore(uint64_t round) const {
  for (uint64_t r : killRounds_) {
    if (r == round) return true;
  }
  return false;
}

template <typename T>
core::Status Session<T>::prepare(uint32_t channel) {
  const uint64_t r = engine_.rounds();
  if (killedBefore(r)) {
    const std::string why = "killed by the fault script before round " + std::to_string(r);
    if (opt_.killProcess) {
      // A real crash: no goodbye, no flush; what the log has is on disk already (LineFile).
      engine_.say(opt_.who + ": " + why);
      std::raise(SIGKILL);
    }
    killed_ = true;
    return core::Status(core::StatusCode::kPeerGone,
                        "rank " + std::to_string(rank()) + " was " + why);
  }
  return survival_.prepare(channel);
}

template <typename T>
core::Status Session<T>::begin(Node<T>& node, std::optional<double> stepSize) {
  return survival_.begin(node, stepSize, opt_.faults);
}

template <typename T>
core::Status Session<T>::begin(Node<T>& node, const topology::RoundTopology& topology) {
  if (survival_.enabled() || opt_.faults) {
    return core::failedPrecondition("a session with peer-loss survival or link faults runs its "
                                    "rounds on its own topology");
  }
  return engine_.begin(node, topology);
}

template <typename T>
core::Status Session<T>::complete(Node<T>& node) {
  return survival_.complete(node);
}

template <typename T>
core::Status Session<T>::round(Node<T>& node, std::optional<double> stepSize, uint32_t channel) {
  STARLING_RETURN_IF_ERROR(prepare(channel));
  STARLING_RETURN_IF_ERROR(begin(node, stepSize));
  return complete(node);
}

template <typename T>
core::Status Session<T>::flush() {
  if (!engine_.failure().isOk()) return core::Status::ok();
  return engine_.flush(nodes_);
}

template <typename T>
void Session<T>::visitState(core::StateVisitor& v) {
  if (opt_.faults) {
    core::StateVisitor::Scope scope(v, "faults");
    opt_.faults->visitState(v);
  }
  survival_.visitState(v);  // with on_peer_loss "continue": membership, gossip
}

template <typename T>
std::string Session<T>::faultSummary() const {
  if (!opt_.faults) return {};
  // What the script did to this peer's messages (and the spare copies it collected).
  const FaultInjector::Counts c = opt_.faults->counts();
  return "; link faults: " + std::to_string(c.corrupted) + " corrupted, " +
         std::to_string(c.delayed) + " delayed, " + std::to_string(c.duplicated) +
         " duplicated, " + std::to_string(c.reordered) + " reordered, " +
         std::to_string(c.collected) + " spare copies collected";
}

template class Session<float>;
template class Session<double>;

}  // namespace starling::engine
