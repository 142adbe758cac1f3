#include "runtime/node_stack.h"

#include <algorithm>
#include <cmath>

#include "optim/adascale_gossip.h"
#include "optim/local_optimizer.h"
#include "optim/mlp.h"
#include "scenario/compile.h"

namespace starling::runtime {
namespace {
// Seeds of the per-node random streams (gradient estimators' sampling, codecs).
constexpr uint64_t kGradientSalt = 0x6772616421;
constexpr uint64_t kCodecSalt = 0x636f646563;
constexpr uint64_t kSharedCodecSalt = 0x7368617265;
}  // namespace

uint64_t gradientSeed(const scenario::Scenario& s, int rank) {
  return core::deriveSeed(s.seed, kGradientSalt, rank);
}

template <typename T>
core::Result<NodeStack<T>> buildNode(const scenario::Experiment& e, int rank,
                                     transport::Transport& transport, bool simulated) {
  const scenario::Scenario& s = e.scenario;
  NodeStack<T> stack;
  if (s.problem.isMlp()) {
    stack.objective = optim::MlpObjective<T>::create({s.problem.layers, s.problem.spec.l2},
                                                     e.images.subset(e.parts[rank]),
                                                     e.images.samples(), s.nodes);
  } else {
    stack.objective = optim::LocalObjective<T>::create(
        s.problem.spec, e.data.subset(e.parts[rank]), e.data.samples(), s.nodes);
  }
  optim::EstimatorSpec estimator = s.problem.estimator;
  const auto& ada = s.algorithm.adascale;
  // AdaScale: the node's batch B as k micro-batches of B/k (the parser checked k divides B).
  if (ada) estimator.batch /= ada->microBatches;
  if (s.algorithm.codistillation) {
    // The scenario parser allows it only with the mlp problem and the sgd estimator.
    stack.neighbors = std::make_unique<optim::NeighborModels<T>>();
    stack.estimator = std::make_unique<optim::MlpDistillationOracle<T>>(
        static_cast<const optim::MlpObjective<T>&>(*stack.objective), s.problem.estimator.batch,
        gradientSeed(s, rank), s.algorithm.codistillation->loss, *stack.neighbors);
  } else {
    stack.estimator = optim::createOracle<T>(estimator, *stack.objective, gradientSeed(s, rank));
  }
  if (ada) {
    const double micro = static_cast<double>(estimator.batch);
    stack.microBatches = std::make_unique<optim::AdaScaleOracle<T>>(
        *stack.estimator, ada->microBatches, micro / ada->baseBatch.value_or(micro));
  }
  // What a local optimizer (or the algorithm) draws its gradients from.
  optim::GradientOracle<T>& source = stack.microBatches ? *stack.microBatches : *stack.estimator;
  const optim::LocalOptimizerSpec& lo = s.algorithm.localOptimizer;
  if (lo.kind != optim::LocalOptimizerSpec::Kind::kSgd || lo.weightDecay != 0.0) {
    // Per tensor for the MLP (W_l and b_l of each layer: LAMB's trust ratio is per layer), one
    // tensor for the linear models.
    const auto d = static_cast<size_t>(stack.objective->dim());
    const optim::ParameterLayout layout =
        s.problem.isMlp() ? optim::mlpLayout(s.problem.layers) : optim::ParameterLayout::single(d);
    auto opt = optim::LocalOptimizer<T>::create(lo, layout, d);
    if (!opt) return opt.status();
    stack.oracle = std::make_unique<optim::LocalOptimizerOracle<T>>(source, std::move(*opt));
  } else if (stack.microBatches) {
    stack.oracle = std::move(stack.microBatches);
  } else {
    stack.oracle = std::move(stack.estimator);
    stack.estimator = nullptr;
  }
  if (!compression::sendsIdentityOnly(s.compression)) {
    // The mlp problem's layout (experiment.cc) for the compression's layers rules.
    auto codec = compression::createCompressor<T>(s.compression, s.algorithm.layout);
    if (!codec) return codec.status();
    stack.codec = std::move(*codec);
  }
  const std::vector<double> start = scenario::initialModel(e);
  const std::vector<T> x0(start.begin(), start.end());
  stack.spec = s.algorithm;
  if (simulated && s.algorithm.diloco.seconds > 0) {
    // by_time in virtual time: as many steps of step_seconds / speed as fit in a round's
    // seconds / fragments (at most max_steps / fragments).
    optim::DilocoSpec& d = stack.spec.diloco;
    const double speed = d.speeds.empty() ? 1.0 : d.speeds[static_cast<size_t>(rank)];
    const double f = static_cast<double>(std::max<uint64_t>(1, d.fragments));
    const double fit = std::floor(d.seconds / f * speed / d.stepSeconds);
    d.emulatedSteps = static_cast<uint64_t>(
        std::clamp(fit, 1.0, static_cast<double>(d.innerSteps) / f));
  }
  // Every node starts from the same x0 here (not after a membership change, which restarts
  // from each node's own model): DiLoCo's reference points may start there.
  optim::AlgorithmSpec first = stack.spec;
  first.diloco.sharedStart = true;
  stack.node = std::make_unique<engine::Node<T>>(
      rank, stack.algorithmFrom(first, x0), transport, typename engine::Node<T>::LogFn{},
      stack.codec.get(), core::deriveSeed(s.seed, kCodecSalt, rank),
      core::deriveSeed(s.seed, kSharedCodecSalt));
  stack.node->configure(scenario::engineOptions(s), &e.schedule->support());
  if (s.algorithm.kind == optim::AlgorithmKind::kDiloco && s.algorithm.diloco.fragments > 1 &&
      (s.compression.errorFeedback ||
       s.compression.kind == compression::CompressorSpec::Kind::kAdaComp)) {
    // Error feedback's residual (adacomp's residue) per fragment: each round's message is
    // another piece of the model.
    STARLING_RETURN_IF_ERROR(stack.node->setCodecStreams(s.algorithm.diloco.fragments));
  }
  return stack;
}

template core::Result<NodeStack<float>> buildNode<float>(const scenario::Experiment&, int,
                                                         transport::Transport&, bool);
template core::Result<NodeStack<double>> buildNode<double>(const scenario::Experiment&, int,
                                                           transport::Transport&, bool);

}  // namespace starling::runtime
