// starling::Peer's rounds: step() through the scenario's algorithm with the trainer's gradients,
// mix() through gossip, both on the same engine (runtime/engine.h) that `node-launcher peer` runs.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <nlohmann/json.hpp>

#include "api/peer_impl.h"
#include "optim/sketch_gossip.h"
#include "runtime/metrics.h"
#include "runtime/peer.h"
#include "runtime/transport/transport.h"

namespace starling {
namespace {

// Seeds of an embedded peer's codec streams (its own, apart from the simulator's).
constexpr uint64_t kStepCodecSalt = 0x70636f6465;
constexpr uint64_t kMixCodecSalt = 0x6d636f6465;
constexpr uint64_t kSharedCodecSalt = 0x7368617265;

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

// `layout`: the trainer's tensor sizes (empty: one tensor), which the compression's layers
// rules index.
template <typename T>
Result<std::unique_ptr<compression::Compressor<T>>> makeCodec(const runtime::Scenario& s,
                                                              std::span<const size_t> layout,
                                                              size_t dim, const char* call) {
  if (compression::sendsIdentityOnly(s.compression)) {
    return std::unique_ptr<compression::Compressor<T>>();
  }
  if (!s.compression.layers.empty() && !layout.empty()) {
    size_t sum = 0;
    for (size_t n : layout) sum += n;
    if (sum != dim) {
      return core::invalidArgument(std::string(call) + ": the layout's tensors hold " +
                                   std::to_string(sum) + " parameters, but the parameter "
                                   "buffer has " + std::to_string(dim) +
                                   " (compression layers index the layout)");
    }
  }
  auto codec = compression::createCompressor<T>(s.compression, layout);
  if (!codec) return codec.status().withContext(call);
  return codec;
}

}  // namespace

template <typename T>
Result<PeerState<T>*> Peer::Impl::stateFor(size_t dim, const char* call) {
  if (closed) return core::failedPrecondition(std::string(call) + " after close()");
  if (dim == 0) return core::invalidArgument(std::string(call) + ": empty parameter buffer");
  if (std::holds_alternative<std::monostate>(state)) {
    runtime::EngineOptions eo{rank, outDir, address, nullptr, {}, std::nullopt, 0, 0};
    std::optional<runtime::JoinState> joined;
    if (rejoin) {
      auto got = requestRejoin(dim);
      if (!got) return got.status();
      if (!outDir.empty()) {
        auto bytes = runtime::rejoinLogBytes(runtime::peerLogPath(outDir, rank),
                                             runtime::peerLogHeader(scenario, rank, address));
        if (!bytes) return bytes.status();
        eo.resumeLogBytes = *bytes;
      }
      eo.resumeRound = got->round;
      joined = std::move(*got);
    }
    state.template emplace<PeerState<T>>(scenario, *schedule, *net, std::move(eo), dim);
    auto& st = std::get<PeerState<T>>(state);
    STARLING_RETURN_IF_ERROR(st.engine.open());
    // A survivor sends a rejoining neighbour the model of its last round.
    st.survival.setJoinSource([&st] {
      std::vector<double> x;
      if (st.last != nullptr) x.assign(st.last->model().begin(), st.last->model().end());
      return x;
    });
    if (joined) {
      STARLING_RETURN_IF_ERROR(st.survival.adopt(*joined));
      rejoinModel = std::move(joined->model);
      rejoinChannel = joined->channel;
      firstAfterRejoin = true;
      pendingRecord = joined->round;  // its line, if that round is logged: the model it got
      st.engine.say("starling peer " + std::to_string(rank) + ": rejoined at round " +
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
  STARLING_RETURN_IF_ERROR(st->engine.failure());
  return st;
}

Result<runtime::JoinState> Peer::Impl::requestRejoin(size_t dim) {
  rejoin = false;  // asked once
  if (scenario.faults.onPeerLoss != runtime::OnPeerLoss::kContinue) {
    return core::invalidArgument("rejoin: a lost rank comes back only with faults.on_peer_loss "
                                 "\"continue\"");
  }
  runtime::RejoinOptions ro;
  ro.rank = rank;
  ro.nodes = scenario.nodes;
  ro.dim = dim;
  ro.ask = schedule->support().neighbors(rank);
  ro.deadline = transport::Clock::now() +
                std::chrono::milliseconds(scenario.transport.connectTimeoutMs) +
                std::chrono::milliseconds(scenario.transport.roundTimeoutMs) * (scenario.nodes + 4);
  ro.log = [r = rank](const std::string& line) {
    std::fprintf(stderr, "starling peer %d: %s\n", r, line.c_str());
  };
  auto got = runtime::requestRejoin(*net, ro);
  if (!got) {
    return Status(got.status().code(), "rank " + std::to_string(rank) +
                                           " could not rejoin: " + got.status().message());
  }
  if (got->round == 0) {
    return Status(core::StatusCode::kPeerGone,
                  "rank " + std::to_string(rank) +
                      " could not rejoin: the run ends before the others could take it back");
  }
  return got;
}

void Peer::Impl::killIfScripted(uint64_t round) const {
  for (const runtime::FaultEvent& ev : scenario.faults.script) {
    if (ev.kind == runtime::FaultEvent::Kind::kKill && ev.kill == rank && ev.atRound == round) {
      // A real crash: no goodbye, no flush; what the log has is on disk already.
      std::fprintf(stderr, "starling peer %d: killed by the fault script before round %llu\n", rank,
                   static_cast<unsigned long long>(round));
      std::raise(SIGKILL);
    }
  }
}

template <typename T>
Status Peer::Impl::stopOnDrop(PeerState<T>& st, runtime::Node<T>& node) {
  if (faults == nullptr || st.survival.enabled()) return Status::ok();
  for (const runtime::FaultInjector::Drop& d : faults->takeDropped()) {
    return st.engine.fail(
        core::unavailable(runtime::FaultInjector::dropStopMessage(rank, d.to, d.tag.round)), &node);
  }
  return Status::ok();
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
  for (const runtime::Node<T>* n : st.nodes()) {
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
  j["wall_s"] = st.engine.wallSeconds();
  const auto x = st.last->model();
  // Large models: the consensus sketch (runtime/metrics.h), from which merge estimates the
  // consensus distance; the model itself is the trainer's to save.
  if (x.size() <= runtime::kFullModelLogMaxDim) {
    j["x"] = std::vector<double>(x.begin(), x.end());
  } else {
    j["sketch"] = runtime::modelSketch<T>(x, runtime::sketchSeed(scenario));
  }
  if (!metrics.empty()) j["metrics"] = metrics;
  return st.engine.append(j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

template <typename T>
Status Peer::Impl::writePending(PeerState<T>& st) {
  if (!pendingRecord) return Status::ok();
  const bool due = *pendingRecord % scenario.logEvery == 0 || !metrics.empty();
  Status s = due ? record(st) : Status::ok();
  pendingRecord.reset();
  metrics.clear();
  return s;
}

Status Peer::Impl::writePendingAny() {
  if (auto* f = std::get_if<PeerState<float>>(&state)) return writePending(*f);
  if (auto* d = std::get_if<PeerState<double>>(&state)) return writePending(*d);
  return Status::ok();
}

Status checkLayoutSizes(const std::vector<size_t>& sizes) {
  for (size_t l = 0; l < sizes.size(); ++l) {
    if (sizes[l] == 0) {
      return core::invalidArgument("layout: tensor " + std::to_string(l) + " of " +
                                   std::to_string(sizes.size()) + " has size 0");
    }
  }
  return Status::ok();
}

Status Peer::Impl::setLayout(std::vector<size_t> sizes) {
  if (closed) return core::failedPrecondition("setLayout after close()");
  // The compression's layers rules index the layout too: mix()'s codec is built at its first call.
  const bool layered = !scenario.compression.layers.empty();
  const bool stepped = std::visit(
      [layered](const auto& st) {
        if constexpr (std::is_same_v<std::decay_t<decltype(st)>, std::monostate>) {
          return false;
        } else {
          return st.stepNode != nullptr || (layered && st.mixNode != nullptr);
        }
      },
      state);
  if (stepped) {
    return core::failedPrecondition(
        "setLayout: step() has run (or mix(), with compression layers rules); the local "
        "optimizer and the codec were built over the layout then");
  }
  STARLING_RETURN_IF_ERROR(checkLayoutSizes(sizes));
  layout = std::move(sizes);
  return Status::ok();
}

template <typename T>
Status Peer::Impl::makeLocalOptimizer(PeerState<T>& st, size_t dim) {
  if (!layout.empty()) {
    size_t sum = 0;
    for (size_t n : layout) sum += n;
    if (sum != dim) {
      return core::invalidArgument(
          "step: the layout's " + std::to_string(layout.size()) + " tensors hold " +
          std::to_string(sum) + " parameters, but the parameter buffer has " +
          std::to_string(dim) + " (the layout is the sizes of the model's tensors in the flat "
          "buffer, in order)");
    }
  }
  const optim::LocalOptimizerSpec& spec = scenario.algorithm.localOptimizer;
  st.localOptimizer.reset();  // (rebuilt if a first step() failed after building it)
  if (spec.kind == optim::LocalOptimizerSpec::Kind::kSgd && spec.weightDecay == 0.0) {
    return Status::ok();  // the gradient itself: no wrapper
  }
  optim::ParameterLayout pl =
      layout.empty() ? optim::ParameterLayout::single(dim) : optim::ParameterLayout{layout};
  auto opt = optim::LocalOptimizer<T>::create(spec, std::move(pl), dim);
  if (!opt) return opt.status().withContext("step");
  st.localOptimizer = std::make_unique<optim::LocalOptimizerOracle<T>>(st.oracle, std::move(*opt));
  return Status::ok();
}

template <typename T>
std::unique_ptr<optim::Algorithm<T>> Peer::Impl::makeStepAlgorithm(PeerState<T>& st,
                                                                   std::span<const T> x0) {
  if (!scenario.algorithm.codistillation) {
    return optim::createAlgorithm<T>(scenario.algorithm, x0, st.stepOracle());
  }
  if (!st.neighbors) st.neighbors = std::make_unique<optim::NeighborModels<T>>();
  return optim::createCodistillationGossip<T>(scenario.algorithm, x0, st.stepOracle(),
                                              *st.neighbors);
}

template <typename T>
Status Peer::Impl::neighbourModels(std::vector<std::span<const T>>& out) const {
  out.clear();
  const auto& c = scenario.algorithm.codistillation;
  if (!c) {
    return core::failedPrecondition(
        "neighbourModels: the scenario's algorithm has no codistillation");
  }
  if (std::holds_alternative<std::monostate>(state)) return Status::ok();  // no step() yet
  const auto* st = std::get_if<PeerState<T>>(&state);
  if (st == nullptr) {
    return core::failedPrecondition(
        std::string("neighbourModels: the steps use ") +
        (std::is_same_v<T, float> ? "float64" : "float32") + " parameters, not " +
        (std::is_same_v<T, float> ? "float32" : "float64"));
  }
  if (!st->neighbors || !c->activeIn(rounds())) return Status::ok();
  for (const auto& m : st->neighbors->models) out.emplace_back(m);
  return Status::ok();
}

template <typename T>
Status Peer::Impl::step(std::span<T> params, std::span<const T> grads, std::optional<double> lr,
                        const StepStats& stats) {
  if (stats.gradientVariance.has_value() != stats.gradientSquaredMean.has_value()) {
    return core::invalidArgument("step: give both gradientVariance and gradientSquaredMean, or "
                                 "neither");
  }
  if (params.size() != grads.size()) {
    return core::invalidArgument("step: " + std::to_string(params.size()) + " parameters but " +
                                 std::to_string(grads.size()) + " gradient values");
  }
  if (lr && !(*lr > 0 && *lr < 1e12)) {
    return core::invalidArgument("step: the step size must be positive and finite");
  }
  if (lr && scenario.algorithm.adascale) {
    return core::invalidArgument("step: AdaScale evaluates the scenario's step_size at its own "
                                 "counter tau (docs/algorithms.md §22); leave lr out");
  }
  if (const auto& sk = scenario.algorithm.sketch) {
    if (const auto bad = optim::sketchMisfit(*sk, params.size())) {
      return core::invalidArgument("step: algorithm.sketch" +
                                   (bad->key.empty() ? std::string() : "." + bad->key) + ": " +
                                   bad->why);
    }
  }
  auto got = stateFor<T>(params.size(), "step");
  if (!got) return got.status();
  PeerState<T>& st = **got;
  if (st.mixParams.data() != nullptr) return core::failedPrecondition("step: a mix is in flight");
  if (!st.stepNode) {
    STARLING_RETURN_IF_ERROR(makeLocalOptimizer(st, params.size()));
    // The model's tensors also give Adasum (combine "adasum") its per-tensor coefficients.
    if (!layout.empty()) scenario.algorithm.layout = layout;
    auto codec = makeCodec<T>(scenario, layout, params.size(), "step");
    if (!codec) return codec.status();
    st.stepCodec = std::move(*codec);
    takeRejoinModel(params);
    auto algorithm = makeStepAlgorithm<T>(st, params);
    st.stepNode = std::make_unique<runtime::Node<T>>(
        rank, std::move(algorithm), *net, typename runtime::Node<T>::LogFn{}, st.stepCodec.get(),
        core::deriveSeed(scenario.seed, kStepCodecSalt, rank),
        core::deriveSeed(scenario.seed, kSharedCodecSalt));
    st.stepNode->setChannel(kStepChannel);
    st.stepNode->setSupport(&schedule->support());
    st.stepNode->setDivergenceLimit(scenario.divergenceMaxAbs);
    // A trainer's own speed is its speed: speeds and compute_ms are simulate's and run's (§26).
    if (scenario.asynchronous.enabled) {
      st.stepNode->setAsynchronous(scenario.asynchronous.maxStaleness);
    }
    // A membership change: the algorithm starts afresh from the current model, with the
    // trainer's gradients (through the same local optimizer, whose moments carry on).
    STARLING_RETURN_IF_ERROR(st.survival.add(*st.stepNode, [this, &st](runtime::Node<T>& n) {
      const auto x = n.model();
      const std::vector<T> x0(x.begin(), x.end());
      n.restartAlgorithm(makeStepAlgorithm<T>(st, x0));
      return Status::ok();
    }));
    if (!st.last) st.last = st.stepNode.get();
  } else {
    const auto model = st.stepNode->model();
    if (std::memcmp(model.data(), params.data(), params.size_bytes()) != 0) {
      size_t k = 0;
      while (k < params.size() && std::memcmp(&model[k], &params[k], sizeof(T)) == 0) ++k;
      return core::failedPrecondition(
          "step: the parameters changed since the last step (element " + std::to_string(k) +
          " is " + std::to_string(params[k]) + ", the step left " + std::to_string(model[k]) +
          "); between steps they must hold what step() left there (use mix() when the trainer "
          "updates them itself)");
    }
  }
  const bool tracking = scenario.algorithm.kind == optim::AlgorithmKind::kGradientTracking;
  const bool first = std::exchange(firstAfterRejoin, false);
  if (first && (rejoinChannel != kStepChannel || (tracking && !restored))) {
    // A rejoined trainer's first call is a step(), but its neighbours applied the return in a
    // mix() call: this step only loads their model (its gradient, taken at the old parameters,
    // is not used), and the trainer's next call, a mix(), runs round Y with theirs. Gradient
    // tracking always waits for a gradient at the loaded model: its tracker starts from the
    // first gradient and would keep an error in it for good. (A trainer that also calls mix()
    // may then be a call behind its neighbours: docs/algorithms.md §19. After restore() the
    // gradient was taken at the neighbours' model and the step runs.)
    st.last = st.stepNode.get();
    return writePending(st);
  }
  // (Otherwise this step is the neighbours' step of round Y. Without restore() its gradient was
  // taken at the trainer's old parameters: a different starting point for the restarted
  // algorithm, which exact diffusion, NIDS and LEAD converge from all the same;
  // docs/algorithms.md §19.)
  STARLING_RETURN_IF_ERROR(writePending(st));
  runtime::Node<T>& node = *st.stepNode;
  killIfScripted(st.engine.rounds());
  std::optional<optim::AdaScaleSample> sample;
  if (stats.gradientVariance) sample = {*stats.gradientVariance, *stats.gradientSquaredMean};
  st.oracle.offer(params, grads, stats.loss.value_or(std::numeric_limits<double>::quiet_NaN()),
                  sample);
  // A change due now restarts the algorithm.
  STARLING_RETURN_IF_ERROR(st.survival.prepare(kStepChannel));
  if (node.algorithm().needsStart()) {
    // nids, lead, prox_lead: the local step from x0 (no message; round() stays).
    if (auto s = node.startAlgorithm(st.engine.rounds(), st.engine.stepSizeAt(lr)); !s.isOk()) {
      return st.engine.fail(s, &node);
    }
  } else {
    STARLING_RETURN_IF_ERROR(st.survival.begin(node, lr, takeDrops()));
    STARLING_RETURN_IF_ERROR(stopOnDrop(st, node));
    STARLING_RETURN_IF_ERROR(st.survival.complete(node));
    pendingRecord = st.engine.rounds();
  }
  if (st.oracle.error()) {
    return st.engine.fail(core::internalError(*st.oracle.error()), &node);
  }
  if (!st.oracle.used()) {
    return st.engine.fail(core::internalError("the algorithm did not use the gradient"), &node);
  }
  const auto model = node.model();
  std::copy(model.begin(), model.end(), params.begin());
  st.last = &node;
  return Status::ok();
}

template <typename T>
Status Peer::Impl::mixStart(std::span<T> params) {
  if (scenario.algorithm.codistillation) {
    return core::failedPrecondition(
        "mix: the scenario codistils (algorithm.codistillation), so models are never averaged; "
        "train with step() and add the term from neighbourModels() to the loss");
  }
  if (scenario.algorithm.sketch) {
    return core::failedPrecondition(
        "mix: algorithm.sketch sketches the gradients step() is given (docs/algorithms.md §27); "
        "mix() has none, so train with step()");
  }
  auto got = stateFor<T>(params.size(), "mix");
  if (!got) return got.status();
  PeerState<T>& st = **got;
  if (st.mixParams.data() != nullptr) return core::failedPrecondition("mix: a mix is in flight");
  const bool loadOnly = std::exchange(firstAfterRejoin, false) && rejoinChannel != kMixChannel;
  if (!st.mixNode) {
    auto codec = makeCodec<T>(scenario, layout, params.size(), "mix");
    if (!codec) return codec.status();
    st.mixCodec = std::move(*codec);
    // A rejoined trainer mixes from a neighbour's model (unless restore() took it already); if
    // its neighbours applied the return in a step() call, this first mix() only loads it
    // (loadOnly: its next call, a step(), lines up with theirs).
    takeRejoinModel(params);
    auto gossip = optim::createGossip<T>(scenario.algorithm.gamma, params.size(),
                                         st.mixCodec != nullptr, scenario.algorithm.timeVarying);
    st.gossip = gossip.get();
    st.mixNode = std::make_unique<runtime::Node<T>>(
        rank, std::move(gossip), *net, typename runtime::Node<T>::LogFn{}, st.mixCodec.get(),
        core::deriveSeed(scenario.seed, kMixCodecSalt, rank),
        core::deriveSeed(scenario.seed, kSharedCodecSalt, 1));
    st.mixNode->setChannel(kMixChannel);
    st.mixNode->setSupport(&schedule->support());
    st.mixNode->setDivergenceLimit(scenario.divergenceMaxAbs);
    if (scenario.asynchronous.enabled) {
      st.mixNode->setAsynchronous(scenario.asynchronous.maxStaleness);
    }
    // A membership change: gossip starts afresh from the current parameters.
    STARLING_RETURN_IF_ERROR(st.survival.add(*st.mixNode, [this, &st](runtime::Node<T>& n) {
      const auto x = n.model();
      const std::vector<T> x0(x.begin(), x.end());
      auto fresh = optim::createGossip<T>(scenario.algorithm.gamma, x0.size(),
                                          st.mixCodec != nullptr, scenario.algorithm.timeVarying);
      fresh->setModel(x0);
      st.gossip = fresh.get();
      n.restartAlgorithm(std::move(fresh));
      return Status::ok();
    }));
  }
  if (!st.last) st.last = st.mixNode.get();  // round 0's line: the model the trainer starts from
  if (loadOnly) {
    st.gossip->setModel(params);
    st.mixParams = params;
    st.mixSkipped = true;
    return Status::ok();
  }
  // The trainer's buffer is the model for this round (GossipAlgorithm::lend): the message is
  // written from it and the mixed model into it, without copies. Every way out of the round ends
  // the loan, so the gossip never keeps a span the trainer may free.
  st.gossip->lend(params);
  Status s = writePending(st);
  if (s.isOk()) {
    killIfScripted(st.engine.rounds());
    s = st.survival.prepare(kMixChannel);  // a change due now restarts gossip
  }
  if (s.isOk()) s = st.survival.begin(*st.mixNode, std::nullopt, takeDrops());
  if (s.isOk()) s = stopOnDrop(st, *st.mixNode);
  if (!s.isOk()) {
    // The round never started: the gossip's model is the trainer's, as before a loan.
    if (!st.gossip->release()) st.gossip->setModel(params);
    return s;
  }
  st.mixParams = params;
  return Status::ok();
}

Status Peer::Impl::mixWait() {
  const auto finish = [this](auto& st) -> Status {
    if (st.mixParams.data() == nullptr) return core::failedPrecondition("mixWait without mixStart");
    const auto params = st.mixParams;
    st.mixParams = {};
    if (st.mixSkipped) {  // it only loaded the neighbours' model into params
      st.mixSkipped = false;
      return Status::ok();
    }
    const Status s = st.survival.complete(*st.mixNode);
    // A membership change during the round replaced the gossip (survival.add): the new one was
    // never lent `params`, and its release() says so.
    const bool mixedInPlace = st.gossip->release();
    STARLING_RETURN_IF_ERROR(s);
    if (!mixedInPlace && !st.mixAbandoned) {
      const auto model = st.mixNode->model();
      std::copy(model.begin(), model.end(), params.begin());
    }
    st.last = st.mixNode.get();
    pendingRecord = st.engine.rounds();
    return Status::ok();
  };
  if (auto* f = std::get_if<PeerState<float>>(&state)) return finish(*f);
  if (auto* d = std::get_if<PeerState<double>>(&state)) return finish(*d);
  return core::failedPrecondition("mixWait without mixStart");
}

Status Peer::Impl::poll() {
  if (closed) return core::failedPrecondition("poll after close()");
  if (auto* f = std::get_if<PeerState<float>>(&state)) return f->engine.poll();
  if (auto* d = std::get_if<PeerState<double>>(&state)) return d->engine.poll();
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
  if (auto* f = std::get_if<PeerState<float>>(&state)) return f->engine.rounds();
  if (auto* d = std::get_if<PeerState<double>>(&state)) return d->engine.rounds();
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
    if (st.mixParams.data() != nullptr) {
      if (fromDestructor) {
        if (st.gossip != nullptr) st.gossip->release();
        st.mixAbandoned = true;
      }
      if (Status s = mixWait(); !s.isOk() && result.isOk()) result = s;
    }
    if (st.engine.failure().isOk()) {
      if (Status s = st.engine.flush(st.nodes()); !s.isOk() && result.isOk()) result = s;
    }
  };
  if (auto* f = std::get_if<PeerState<float>>(&state)) drain(*f);
  if (auto* d = std::get_if<PeerState<double>>(&state)) drain(*d);
  state = std::monostate{};  // the nodes go before the transport they borrow
  net.reset();               // closing it flushes what is in flight
  hub.reset();
  return result;
}

template Status Peer::Impl::step<float>(std::span<float>, std::span<const float>,
                                        std::optional<double>, const StepStats&);
template Status Peer::Impl::step<double>(std::span<double>, std::span<const double>,
                                         std::optional<double>, const StepStats&);
template Status Peer::Impl::mixStart<float>(std::span<float>);
template Status Peer::Impl::mixStart<double>(std::span<double>);

template Status Peer::Impl::restore<float>(std::span<float>);
template Status Peer::Impl::restore<double>(std::span<double>);
template Status Peer::Impl::neighbourModels<float>(std::vector<std::span<const float>>&) const;
template Status Peer::Impl::neighbourModels<double>(std::vector<std::span<const double>>&) const;

}  // namespace starling
