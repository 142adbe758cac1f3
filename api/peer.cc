// starling::Peer's rounds: step() through the scenario's algorithm with the trainer's gradients,
// mix() through gossip, both on the same engine (engine/engine.h) that `node-launcher peer` runs.
// What the rounds share between calls (the engine built at the first call, rejoining, the round
// lines of the peer log, close) is in api/peer_state.cc.
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "api/peer_impl.h"
#include "optim/sketch_gossip.h"
#include "runtime/metrics.h"
#include "scenario/compile.h"

namespace starling {
namespace {

// `layout`: the trainer's tensor sizes (empty: one tensor), which the compression's layers
// rules index.
template <typename T>
Result<std::unique_ptr<compression::Compressor<T>>> makeCodec(const scenario::Scenario& s,
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
  if (scenario.algorithm.kind == optim::AlgorithmKind::kDiloco) {
    return core::failedPrecondition(
        "step: diloco takes inner_steps gradients a round at its own local model, and a trainer "
        "gives one per step(); take the inner steps with your optimizer and call mix() every "
        "inner_steps steps (docs/algorithms.md §29), or run the scenario's problem with "
        "node-launcher");
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
  if constexpr (std::is_same_v<T, float>) {
    if (st.deviceStep != nullptr) {
      return core::failedPrecondition(
          "step: this Peer steps GPU memory; one Peer steps either CPU or GPU memory");
    }
    if (st.deviceParams != 0) return core::failedPrecondition("step: a mix is in flight");
  }
  if (!st.stepNode) {
    STARLING_RETURN_IF_ERROR(makeLocalOptimizer(st, params.size()));
    // The model's tensors also give Adasum (combine "adasum") its per-tensor coefficients.
    if (!layout.empty()) scenario.algorithm.layout = layout;
    auto codec = makeCodec<T>(scenario, layout, params.size(), "step");
    if (!codec) return codec.status();
    st.stepCodec = std::move(*codec);
    takeRejoinModel(params);
    auto algorithm = makeStepAlgorithm<T>(st, params);
    st.stepNode = std::make_unique<engine::Node<T>>(
        rank, std::move(algorithm), *net, typename engine::Node<T>::LogFn{}, st.stepCodec.get(),
        core::deriveSeed(scenario.seed, kStepCodecSalt, rank),
        core::deriveSeed(scenario.seed, kSharedCodecSalt));
    // (A trainer's own speed is its speed: speeds and compute_ms are simulate's and run's, §26.)
    st.stepNode->configure(scenario::engineOptions(scenario), &schedule->support(), kStepChannel);
    // A membership change: the algorithm starts afresh from the current model, with the
    // trainer's gradients (through the same local optimizer, whose moments carry on).
    STARLING_RETURN_IF_ERROR(st.session.add(
        *st.stepNode, [this, &st](std::vector<T> x0) { return makeStepAlgorithm<T>(st, x0); }));
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
  engine::Node<T>& node = *st.stepNode;
  // The fault script's kill of this rank, and a change due now, which restarts the algorithm.
  STARLING_RETURN_IF_ERROR(st.session.prepare(kStepChannel));
  std::optional<optim::AdaScaleSample> sample;
  if (stats.gradientVariance) sample = {*stats.gradientVariance, *stats.gradientSquaredMean};
  // The gradient is offered at the node's model, which holds what `params` holds (checked above,
  // or just built or rejoined from them): the oracle then recognises the algorithm's request by
  // its address instead of comparing every parameter a second time.
  st.oracle.offer(node.model(), grads,
                  stats.loss.value_or(std::numeric_limits<double>::quiet_NaN()), sample);
  if (node.needsStart()) {
    // nids, lead, prox_lead: the local step from x0 (no message; round() stays).
    engine::Engine<T>& rounds = st.engine();
    if (auto s = node.startAlgorithm(rounds.rounds(), rounds.stepSizeAt(lr)); !s.isOk()) {
      return rounds.fail(s, &node);
    }
  } else {
    STARLING_RETURN_IF_ERROR(st.session.begin(node, lr));
    STARLING_RETURN_IF_ERROR(st.session.complete(node));
    pendingRecord = st.engine().rounds();
  }
  if (st.oracle.error()) {
    return st.engine().fail(core::internalError(*st.oracle.error()), &node);
  }
  if (!st.oracle.used()) {
    return st.engine().fail(core::internalError("the algorithm did not use the gradient"), &node);
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
  if constexpr (std::is_same_v<T, float>) {
    if (st.deviceParams != 0) return core::failedPrecondition("mix: a mix is in flight");
    if (st.deviceGossip != nullptr) {
      return core::failedPrecondition(
          "mix: this Peer mixes GPU memory; one Peer mixes either CPU or GPU memory");
    }
  }
  const bool loadOnly = std::exchange(firstAfterRejoin, false) && rejoinChannel != kMixChannel;
  if (!st.mixNode) {
    auto codec = makeCodec<T>(scenario, layout, params.size(), "mix");
    if (!codec) return codec.status();
    st.mixCodec = std::move(*codec);
    // A rejoined trainer mixes from a neighbour's model (unless restore() took it already); if
    // its neighbours applied the return in a step() call, this first mix() only loads it
    // (loadOnly: its next call, a step(), lines up with theirs).
    takeRejoinModel(params);
    // mixReference(): the reference points start at the common model, and under diloco's
    // compressed differences the round leaves the mixed reference points (§29).
    // Streaming DiLoCo's fragments under compressed differences: each mix() carries one
    // fragment of the model (ceil(d / F) values, the trainer's schedule: fragment r mod F in
    // round r), and each fragment has reference points of its own.
    // Under error feedback the reference points are per fragment too, and so is the codec's
    // residual (the node's codec streams).
    const bool diloco = scenario.algorithm.kind == optim::AlgorithmKind::kDiloco;
    const bool differences = diloco && scenario.algorithm.diloco.compressedDifferences;
    const size_t pieces = diloco ? std::max<size_t>(1, scenario.algorithm.diloco.fragments) : 1;
    const size_t fragments = pieces;
    const size_t expected =
        mixReference.empty() ? params.size() : (mixReference.size() + pieces - 1) / pieces;
    if (params.size() != expected) {
      return core::invalidArgument(
          "mix: " + std::to_string(params.size()) + " parameters, mixReference() was given " +
          std::to_string(mixReference.size()) +
          (pieces > 1 ? " (in " + std::to_string(pieces) + " fragments: " +
                            std::to_string(expected) + " a mix)"
                      : std::string()));
    }
    const std::vector<T> start(mixReference.begin(), mixReference.end());
    const optim::GossipReference<T> reference{start, !start.empty() && differences, fragments};
    auto gossip = optim::createGossip<T>(scenario.algorithm.gamma, params.size(),
                                         st.mixCodec != nullptr, scenario.algorithm.timeVarying,
                                         reference);
    st.gossip = gossip.get();
    st.mixNode = std::make_unique<engine::Node<T>>(
        rank, std::move(gossip), *net, typename engine::Node<T>::LogFn{}, st.mixCodec.get(),
        core::deriveSeed(scenario.seed, kMixCodecSalt, rank),
        core::deriveSeed(scenario.seed, kSharedCodecSalt, 1));
    st.mixNode->configure(scenario::engineOptions(scenario), &schedule->support(), kMixChannel);
    if (pieces > 1 && st.mixCodec != nullptr && !differences) {
      STARLING_RETURN_IF_ERROR(st.mixNode->setCodecStreams(pieces));
    }
    // A membership change: gossip starts afresh from the current parameters.
    STARLING_RETURN_IF_ERROR(st.session.add(*st.mixNode, [this, &st, fragments](std::vector<T> x0) {
      // (Reference points from zero, as CHOCO-gossip's; a fragment's each.)
      auto fresh = optim::createGossip<T>(scenario.algorithm.gamma, x0.size(),
                                          st.mixCodec != nullptr, scenario.algorithm.timeVarying,
                                          optim::GossipReference<T>{{}, false, fragments});
      fresh->setModel(x0);
      st.gossip = fresh.get();
      return std::unique_ptr<optim::Algorithm<T>>(std::move(fresh));
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
    s = st.session.prepare(kMixChannel);  // a scripted kill; a change due now restarts gossip
  }
  if (s.isOk()) s = st.session.begin(*st.mixNode);
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
    if constexpr (std::is_same_v<std::decay_t<decltype(st)>, PeerState<float>>) {
      if (st.deviceParams != 0) return mixWaitDevice(st);
    }
    if (st.mixParams.data() == nullptr) return core::failedPrecondition("mixWait without mixStart");
    const auto params = st.mixParams;
    st.mixParams = {};
    if (st.mixSkipped) {  // it only loaded the neighbours' model into params
      st.mixSkipped = false;
      return Status::ok();
    }
    const Status s = st.session.complete(*st.mixNode);
    // A membership change during the round replaced the gossip (survival.add): the new one was
    // never lent `params`, and its release() says so.
    const bool mixedInPlace = st.gossip->release();
    STARLING_RETURN_IF_ERROR(s);
    if (!mixedInPlace && !st.mixAbandoned) {
      const auto model = st.mixNode->model();
      std::copy(model.begin(), model.end(), params.begin());
    }
    st.last = st.mixNode.get();
    pendingRecord = st.engine().rounds();
    // consensus_distance at one point for every round: the mixed model, now (the line is
    // written at the next call, after the trainer's next local step changed `params`).
    if (!outDir.empty()) {
      snapshotTaken = true;
      if (params.size() <= runtime::kFullModelLogMaxDim) {
        snapshotX.assign(params.begin(), params.end());
      } else if (*pendingRecord % scenario.logEvery == 0) {
        using E = typename std::remove_reference_t<decltype(params)>::element_type;
        snapshotSketch = runtime::modelSketch(std::span<const E>(params.data(), params.size()),
                                              runtime::sketchSeed(scenario));
      }
    }
    return Status::ok();
  };
  if (auto* f = std::get_if<PeerState<float>>(&state)) return finish(*f);
  if (auto* d = std::get_if<PeerState<double>>(&state)) return finish(*d);
  return core::failedPrecondition("mixWait without mixStart");
}

template Status Peer::Impl::step<float>(std::span<float>, std::span<const float>,
                                        std::optional<double>, const StepStats&);
template Status Peer::Impl::step<double>(std::span<double>, std::span<const double>,
                                         std::optional<double>, const StepStats&);
template Status Peer::Impl::mixStart<float>(std::span<float>);
template Status Peer::Impl::mixStart<double>(std::span<double>);
template Status Peer::Impl::neighbourModels<float>(std::vector<std::span<const float>>&) const;
template Status Peer::Impl::neighbourModels<double>(std::vector<std::span<const double>>&) const;

}  // namespace starling
