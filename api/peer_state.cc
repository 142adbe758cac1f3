// starling::Peer's state between its rounds (api/peer.cc has step() and mix()): the engine and
// nodes the first call builds, rejoining a run as a lost rank's restarted trainer, the fault
// script's kill and drops, the round lines of the peer log with the trainer's metrics, poll()
// and close().
#include <cctype>
#include <cstdio>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "api/peer_impl.h"
#include "engine/peer_log.h"
#include "runtime/metrics.h"
#include "scenario/compile.h"
#include "transport/transport.h"

namespace starling {
namespace {

template <typename T>
constexpr const char* typeName() {
  return std::is_same_v<T, float> ? "float32" : "float64";
}

bool validMetricName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return false;
  }
  return true;
}

// Keys of the peer log's round lines: the trainer's metrics go under "metrics", but merged into
// metrics.jsonl next to these, so they may not take their names.
bool reservedMetricName(const std::string& name) {
  static const char* const kReserved[] = {
      "round", "objective", "rel_error", "consensus_distance", "mean_square_deviation",
      "bytes_sent", "corrupt_messages", "compression_error", "wall_s", "x", "x_mean"};
  for (const char* r : kReserved) {
    if (name == r) return true;
  }
  return false;
}

}  // namespace

template <typename T>
Result<PeerState<T>*> Peer::Impl::stateFor(size_t dim, const char* call) {
  if (closed) return core::failedPrecondition(std::string(call) + " after close()");
  if (dim == 0) return core::invalidArgument(std::string(call) + ": empty parameter buffer");
  if (std::holds_alternative<std::monostate>(state)) {
    engine::SessionOptions so;
    so.engine.rank = rank;
    so.engine.outDir = outDir;
    // A trainer's peer: its log header says so, and `merge SCENARIO` refuses it.
    so.engine.logHeader = scenario::peerLogHeader(scenario, rank, address, /*trainer=*/true);
    so.who = "starling peer " + std::to_string(rank);
    so.faults = faults;
    state.template emplace<PeerState<T>>(scenario::engineOptions(scenario), *schedule, *net,
                                         std::move(so), dim);
    auto& st = std::get<PeerState<T>>(state);
    std::optional<engine::JoinState> joined;
    if (rejoin) {
      auto got = requestRejoin(st);
      if (!got) {
        state = std::monostate{};
        return got.status();
      }
      joined = std::move(*got);
    }
    STARLING_RETURN_IF_ERROR(st.session.open());
    // A survivor sends a rejoining neighbour the model of its last round.
    st.session.setJoinSource([&st] {
      std::vector<double> x;
      if (st.last != nullptr) x.assign(st.last->model().begin(), st.last->model().end());
      return x;
    });
    if (joined) {
      rejoinModel = std::move(joined->model);
      rejoinChannel = joined->channel;
      firstAfterRejoin = true;
      pendingRecord = joined->round;  // its line, if that round is logged: the model it got
      st.engine().say("starling peer " + std::to_string(rank) + ": rejoined at round " +
                      std::to_string(joined->round));
    } else {
      pendingRecord = 0;  // round 0: the model the trainer starts from
    }
  }
  auto* st = std::get_if<PeerState<T>>(&state);
  if (st == nullptr) {
    return core::invalidArgument(std::string(call) + ": " + typeName<T>() +
                                 " parameters, but this peer's first call fixed " +
                                 (std::is_same_v<T, float> ? "float64" : "float32"));
  }
  if (st->dim != dim) {
    return core::invalidArgument(std::string(call) + ": " + std::to_string(dim) +
                                 " parameters, but this peer's first call fixed " +
                                 std::to_string(st->dim));
  }
  STARLING_RETURN_IF_ERROR(st->engine().failure());
  return st;
}

template <typename T>
Result<engine::JoinState> Peer::Impl::requestRejoin(PeerState<T>& st) {
  rejoin = false;  // asked once
  if (scenario.faults.onPeerLoss != engine::OnPeerLoss::kContinue) {
    return core::invalidArgument("rejoin: a lost rank comes back only with faults.on_peer_loss "
                                 "\"continue\"");
  }
  auto got = st.session.rejoin(st.dim, [r = rank](const std::string& line) {
    std::fprintf(stderr, "starling peer %d: %s\n", r, line.c_str());
  });
  if (!got) return got.status();
  if (got->round == 0) {
    return Status(core::StatusCode::kPeerGone,
                  "rank " + std::to_string(rank) +
                      " could not rejoin: the run ends before the others could take it back");
  }
  return got;
}

template <typename T>
Status Peer::Impl::restore(std::span<T> params) {
  if (!rejoin && !rejoinModel) return Status::ok();  // not rejoining, or restored already
  auto got = stateFor<T>(params.size(), "restore");
  if (!got) return got.status();
  if (takeRejoinModel(params)) restored = true;
  return Status::ok();
}

template <typename T>
bool Peer::Impl::takeRejoinModel(std::span<T> params) {
  if (!rejoinModel) return false;
  std::copy(rejoinModel->begin(), rejoinModel->end(), params.begin());
  rejoinModel.reset();
  return true;
}

template <typename T>
Status Peer::Impl::record(PeerState<T>& st) {
  if (outDir.empty() || st.last == nullptr) return Status::ok();
  nlohmann::ordered_json j;
  uint64_t bytes = 0, corrupt = net->stats().corruptMessages, errCount = 0;
  double errSum = 0;
  for (const engine::Node<T>* n : st.nodes()) {
    bytes += n->bytesSent();
    corrupt += n->corruptMessages();
    errSum += n->compressionErrorSum();
    errCount += n->compressionErrorCount();
  }
  j["round"] = *pendingRecord;
  j["bytes_sent"] = bytes;
  j["corrupt_messages"] = corrupt;
  j["compression_error_sum"] = errSum;
  j["compression_error_count"] = errCount;
  j["wall_s"] = st.engine().wallSeconds();
  // Large models: the consensus sketch (runtime/metrics.h), from which merge estimates the
  // consensus distance; the model itself is the trainer's to save.
  if (snapshotTaken) {
    // A mix() round: the model as the round ended (the mixed model), at every round alike.
    if (!snapshotX.empty()) j["x"] = snapshotX;
    if (!snapshotSketch.empty()) j["sketch"] = snapshotSketch;
  } else if (const auto x = st.last->model(); x.size() <= runtime::kFullModelLogMaxDim) {
    j["x"] = std::vector<double>(x.begin(), x.end());
  } else {
    j["sketch"] = runtime::modelSketch<T>(x, runtime::sketchSeed(scenario));
  }
  if (!metrics.empty()) j["metrics"] = metrics;
  return st.engine().append(
      j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

template <typename T>
Status Peer::Impl::writePending(PeerState<T>& st) {
  if (!pendingRecord) return Status::ok();
  const bool due = *pendingRecord % scenario.logEvery == 0 || !metrics.empty();
  Status s = due ? record(st) : Status::ok();
  pendingRecord.reset();
  metrics.clear();
  snapshotTaken = false;
  snapshotX.clear();
  snapshotSketch.clear();
  return s;
}

Status Peer::Impl::writePendingAny() {
  if (auto* f = std::get_if<PeerState<float>>(&state)) return writePending(*f);
  if (auto* d = std::get_if<PeerState<double>>(&state)) return writePending(*d);
  return Status::ok();
}

Status Peer::Impl::poll() {
  if (closed) return core::failedPrecondition("poll after close()");
  if (auto* f = std::get_if<PeerState<float>>(&state)) return f->engine().poll();
  if (auto* d = std::get_if<PeerState<double>>(&state)) return d->engine().poll();
  return Status::ok();  // nothing has run yet
}

Status Peer::Impl::log(const std::map<std::string, double>& m) {
  if (closed) return core::failedPrecondition("log after close()");
  for (const auto& [name, value] : m) {
    if (!validMetricName(name)) {
      return core::invalidArgument("log: metric name \"" + name +
                                   "\" must be 1 to 64 of A-Z, a-z, 0-9, _ and .");
    }
    if (reservedMetricName(name)) {
      return core::invalidArgument("log: \"" + name + "\" is one of Starling's own metrics");
    }
    metrics[name] = value;
  }
  return Status::ok();
}

uint64_t Peer::Impl::rounds() const {
  if (auto* f = std::get_if<PeerState<float>>(&state)) return f->engine().rounds();
  if (auto* d = std::get_if<PeerState<double>>(&state)) return d->engine().rounds();
  return 0;
}

Status Peer::Impl::close(bool fromDestructor) {
  if (closed) return Status::ok();
  closed = true;
  Status result = writePendingAny();
  const auto drain = [&](auto& st) {
    // A mix still in flight is finished first: its neighbours wait for this round's message.
    // From ~Peer the trainer's buffer may be gone (an exception unwinding the trainer's stack):
    // the loan ends first, so the combine writes only the gossip's own model (its `own` is the
    // frame already sent), and nothing is copied out.
    if (st.mixParams.data() != nullptr || st.deviceParams != 0) {
      if (fromDestructor) {
        if (st.gossip != nullptr) st.gossip->release();
        st.mixAbandoned = true;
      }
      if (Status s = mixWait(); !s.isOk() && result.isOk()) result = s;
    }
    if (Status s = st.session.flush(); !s.isOk() && result.isOk()) result = s;
  };
  if (auto* f = std::get_if<PeerState<float>>(&state)) drain(*f);
  if (auto* d = std::get_if<PeerState<double>>(&state)) drain(*d);
  state = std::monostate{};  // the nodes go before the transport they borrow
  net.reset();               // closing it flushes what is in flight
  hub.reset();
  return result;
}

// What api/peer.cc's rounds call.
template Result<PeerState<float>*> Peer::Impl::stateFor<float>(size_t, const char*);
template Result<PeerState<double>*> Peer::Impl::stateFor<double>(size_t, const char*);
template bool Peer::Impl::takeRejoinModel<float>(std::span<float>);
template bool Peer::Impl::takeRejoinModel<double>(std::span<double>);
template Status Peer::Impl::writePending<float>(PeerState<float>&);
template Status Peer::Impl::writePending<double>(PeerState<double>&);

template Status Peer::Impl::restore<float>(std::span<float>);
template Status Peer::Impl::restore<double>(std::span<double>);

}  // namespace starling
