#include "scenario/experiment.h"

#include <sstream>

#include "optim/local_optimizer.h"
#include "optim/mlp.h"
#include "optim/sketch_gossip.h"
#include "scenario/idx.h"
#include "scenario/partition.h"
#include "scenario/scenario_limits.h"

namespace starling::scenario {
namespace {

constexpr uint64_t kInitSalt = 0x4d4c50'494e4954ULL;  // "MLPINIT"

// The idx training and test sets of the mlp problem, checked against its layers.
core::Status loadImages(const Scenario& s, Experiment& e) {
  const DataSource& src = s.problem.data;
  const auto fail = [&s](const core::Status& st) {
    return core::invalidArgument(s.file + ": /problem/data: " + st.message());
  };
  auto maxBytes = maxDataFileBytes();
  if (!maxBytes) return maxBytes.status();
  const int classes = s.problem.layers.back();
  auto train = readIdxImages(src.images, src.labels, *maxBytes, classes, src.trainSamples);
  if (!train) return fail(train.status());
  auto test = readIdxImages(src.testImages, src.testLabels, *maxBytes, classes, src.testSamples);
  if (!test) return fail(test.status());
  if (train->features != s.problem.layers.front() || test->features != train->features) {
    return core::invalidArgument(
        s.file + ": /problem/layers/0: the network takes " +
        std::to_string(s.problem.layers.front()) + " inputs, the images have " +
        std::to_string(train->features) + " pixels (" + src.images + ") and " +
        std::to_string(test->features) + " (" + src.testImages + ")");
  }
  e.images = std::move(*train);
  e.testImages = std::move(*test);
  return core::Status::ok();
}

}  // namespace

core::Status resolveLeaderDiameter(Scenario& s, const topology::Schedule& schedule) {
  const auto& leader = s.algorithm.leader;
  if (!leader) return core::Status::ok();
  const int diameter = topology::diameter(schedule.support());
  s.algorithm.diameter = diameter < 0 ? 0 : static_cast<uint64_t>(diameter);
  if (leader->globalPeriod < s.algorithm.diameter) {
    return core::invalidArgument(
        s.file + ": /algorithm/leader/global_period: must be at least the graph's diameter (" +
        std::to_string(diameter) + " rounds): a global election takes that long, got " +
        std::to_string(leader->globalPeriod));
  }
  return core::Status::ok();
}

core::Result<Experiment> prepareExperiment(const Scenario& s, const ExperimentOptions& options) {
  Experiment e;
  e.scenario = s;
  const auto fail = [&s](const std::string& path, const core::Status& st) {
    return core::invalidArgument(s.file + ": " + path + ": " + st.message());
  };
  // Refused before anything is allocated. parseScenario checks the same; this covers scenarios
  // built in code.
  STARLING_RETURN_IF_ERROR(checkMemory(s, scenarioShape(s)));

  auto schedule = topology::Schedule::create(s.topology);
  if (!schedule) return fail("/topology", schedule.status());
  e.schedule = std::move(*schedule);

  STARLING_RETURN_IF_ERROR(resolveLeaderDiameter(e.scenario, *e.schedule));

  if (s.problem.data.kind == DataSource::Kind::kIdx) {
    STARLING_RETURN_IF_ERROR(loadImages(s, e));
  } else if (s.problem.data.kind == DataSource::Kind::kSynthetic) {
    auto data = makeSynthetic(s.problem.data.synthetic, s.problem.spec.loss, s.nodes,
                              core::deriveSeed(s.seed, 0x5d47a));
    if (!data) return fail("/problem/data/synthetic", data.status());
    e.data = std::move(*data);
  } else {
    auto data = readLibsvm(s.problem.data.path, s.problem.data.features);
    if (!data) return fail("/problem/data/path", data.status());
    e.data = std::move(*data);
    // Only now is d known when the scenario does not fix `features`, and the samples' sizes.
    STARLING_RETURN_IF_ERROR(checkMemory(s, shapeOf(e.data)));
  }
  const size_t m = e.trainingSamples();
  if (s.problem.usesBatch() && s.problem.estimator.batch > m) {
    return fail(s.problem.batchPath, core::invalidArgument("larger than the number of samples (" +
                                                           std::to_string(m) + ")"));
  }
  if (const auto& sk = s.algorithm.sketch) {
    if (const auto bad = optim::sketchMisfit(*sk, e.modelDim())) {
      return fail(bad->key.empty() ? "/algorithm/sketch" : "/algorithm/sketch/" + bad->key,
                  core::invalidArgument(bad->why));
    }
  }
  // The model's tensors (Adasum's coefficients are per tensor): each layer's W and b for the MLP.
  if (s.problem.isMlp()) e.scenario.algorithm.layout = optim::mlpLayout(s.problem.layers).sizes;
  // LEGW's defaults need the data: the network's batch (nodes x the per-node batch, all of a
  // node's samples for full gradients) and the rounds in which it sees the training set once.
  if (auto& st = e.scenario.algorithm.stepSize; st.kind == optim::StepSizeSchedule::Kind::kLegw) {
    const double perNode = s.problem.usesBatch() ? static_cast<double>(s.problem.estimator.batch)
                                                 : static_cast<double>(m) / s.nodes;
    if (!st.batchGiven) st.batch = perNode * s.nodes;
    if (!st.roundsPerEpochGiven) st.roundsPerEpoch = std::max(1.0, static_cast<double>(m) / st.batch);
    if (auto c = st.check(); !c.isOk()) return fail("/algorithm/step_size", c);
  }
  const uint64_t partitionSeed = core::deriveSeed(s.seed, 0x9a27);
  core::Result<std::vector<std::vector<size_t>>> parts = std::vector<std::vector<size_t>>{};
  if (s.problem.partition == PartitionKind::kDirichlet) {
    parts = partitionDirichlet(e.images.labels, s.nodes, s.problem.partitionAlpha, partitionSeed);
  } else if (s.problem.partition == PartitionKind::kShards) {
    parts = partitionShards(e.images.labels, s.nodes, s.problem.shardsPerNode, partitionSeed);
  } else {
    parts = partitionSamples(m, s.nodes, s.problem.partition, partitionSeed);
  }
  if (!parts) return fail("/problem/data", parts.status());
  e.parts = std::move(*parts);

  if (options.solve && !s.problem.isMlp()) {
    auto xs = optim::solveCentral(s.problem.spec, e.data);
    if (!xs) return fail("/problem", xs.status());
    e.xStar = std::move(*xs);
  }
  return e;
}

size_t Experiment::modelDim() const {
  if (scenario.problem.isMlp()) return optim::mlpParameterCount(scenario.problem.layers);
  return static_cast<size_t>(data.features);
}

size_t Experiment::trainingSamples() const {
  return scenario.problem.isMlp() ? images.samples() : data.samples();
}

std::vector<double> initialModel(const Experiment& e) {
  if (!e.scenario.problem.isMlp()) return std::vector<double>(e.modelDim(), 0.0);
  return optim::mlpInitialModel(e.scenario.problem.layers,
                                core::deriveSeed(e.scenario.seed, kInitSalt));
}

core::Status explainRoundFailure(const optim::AlgorithmSpec& a, const core::Status& st,
                                 const std::string& context) {
  if (st.code() != core::StatusCode::kDiverged) return st.withContext(context);
  using AK = optim::AlgorithmKind;
  std::ostringstream hint;
  hint << "; hint: lower /algorithm/step_size (now " << a.stepSize.value;
  if (a.stepSize.kind != optim::StepSizeSchedule::Kind::kConstant) hint << " at round 0";
  hint << ")";
  if (a.kind == AK::kChoco) {
    hint << " or /algorithm/gamma (now " << a.gamma << "; coarser compression needs a smaller gamma)";
  } else if (a.kind == AK::kLead || a.kind == AK::kProxLead) {
    hint << ", /algorithm/alpha (now " << a.alpha << ") or /algorithm/gamma (now " << a.gamma
         << "); coarser compression needs smaller ones";
  }
  if (st.message().find("divergence.max_abs") != std::string::npos) {
    hint << "; if models this large are expected, raise /divergence/max_abs";
  }
  hint << " (scenarios/README.md, \"Choosing step sizes\")";
  return core::diverged(st.message() + hint.str());
}

}  // namespace starling::scenario
