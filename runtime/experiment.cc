#include "runtime/experiment.h"

#include <sstream>

#include "runtime/scenario_limits.h"

namespace starling::runtime {

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

  if (s.problem.data.kind == DataSource::Kind::kSynthetic) {
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
  if (s.problem.usesBatch() && s.problem.estimator.batch > e.data.samples()) {
    return fail(s.problem.batchPath, core::invalidArgument("larger than the number of samples (" +
                                                           std::to_string(e.data.samples()) + ")"));
  }
  auto parts = partitionSamples(e.data.samples(), s.nodes, s.problem.partition,
                                core::deriveSeed(s.seed, 0x9a27));
  if (!parts) return fail("/problem/data", parts.status());
  e.parts = std::move(*parts);

  if (options.solve) {
    auto xs = optim::solveCentral(s.problem.spec, e.data);
    if (!xs) return fail("/problem", xs.status());
    e.xStar = std::move(*xs);
  }
  return e;
}

core::Status explainRoundFailure(const Scenario& s, const core::Status& st,
                                 const std::string& context) {
  if (st.code() != core::StatusCode::kDiverged) return st.withContext(context);
  using AK = optim::AlgorithmKind;
  const auto& a = s.algorithm;
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

}  // namespace starling::runtime
