#include "runtime/experiment.h"

namespace starling::runtime {

core::Result<Experiment> prepareExperiment(const Scenario& s, const ExperimentOptions& options) {
  Experiment e;
  e.scenario = s;
  const auto fail = [&s](const std::string& path, const core::Status& st) {
    return core::invalidArgument(s.file + ": " + path + ": " + st.message());
  };

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

}  // namespace starling::runtime
