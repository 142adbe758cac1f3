#include "runtime/simulator.h"

#include <chrono>
#include <cstdio>

#include "optim/oracle.h"
#include "runtime/node.h"
#include "runtime/progress.h"
#include "runtime/transport/inproc/inproc_transport.h"

namespace starling::runtime {
namespace {

// Seeds of the per-node random streams (minibatch sampling).
constexpr uint64_t kGradientSalt = 0x6772616421;

template <typename T>
core::Result<SimulateResult> simulateAs(const Experiment& e, const SimulateOptions& opt) {
  const Scenario& s = e.scenario;
  const int n = s.nodes;
  const auto d = static_cast<size_t>(e.data.features);

  auto hub = transport::inproc::createHub(n);
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<std::unique_ptr<optim::LocalObjective<T>>> objectives;
  std::vector<std::unique_ptr<optim::ObjectiveOracle<T>>> oracles;
  std::vector<std::unique_ptr<Node<T>>> nodes;
  const std::vector<T> x0(d, T(0));
  for (int i = 0; i < n; ++i) {
    transports.push_back(transport::inproc::createTransport(*hub, i));
    objectives.push_back(optim::LocalObjective<T>::create(s.problem.spec, e.data.subset(e.parts[i]),
                                                          e.data.samples(), n));
    oracles.push_back(std::make_unique<optim::ObjectiveOracle<T>>(
        *objectives.back(), s.problem.batch, core::deriveSeed(s.seed, kGradientSalt, i)));
    nodes.push_back(std::make_unique<Node<T>>(
        i, optim::createAlgorithm<T>(s.algorithm, x0, *oracles.back()), *transports.back()));
  }

  std::unique_ptr<MetricsLog> log;
  if (!opt.outDir.empty()) {
    auto created = MetricsLog::create(opt.outDir);
    if (!created) return created.status();
    log = std::move(*created);
  }

  SimulateResult result;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::span<const T>> models(n);
  auto measure = [&](uint64_t round) -> core::Status {
    // Wall time when the round finished, before the metrics themselves are computed.
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int i = 0; i < n; ++i) models[i] = nodes[i]->model();
    RoundMetrics m = measureModels<T>(e, models, result.xMean);
    m.round = round;
    m.wallS = wall;
    for (const auto& node : nodes) {
      m.bytesSent += node->bytesSent();
      m.corruptMessages += node->corruptMessages();
    }
    result.last = m;
    if (opt.onLog) opt.onLog(m);
    if (log) return log->append(m);
    return core::Status::ok();
  };

  ProgressLine progress(s.name, s.rounds, opt.progress);
  STARLING_RETURN_IF_ERROR(measure(0));
  // In process every message is deposited before anyone waits, so a generous deadline is only a
  // guard against a bug leaving a receive unmatched.
  const auto kRoundDeadline = std::chrono::seconds(60);
  for (uint64_t r = 0; r < s.rounds; ++r) {
    const auto topo = e.schedule->at(r);
    const double step = s.algorithm.stepSize.at(r);
    const auto deadline = transport::Clock::now() + kRoundDeadline;
    for (auto& node : nodes) STARLING_RETURN_IF_ERROR(node->startRound(r, *topo, step, deadline));
    for (int i = 0; i < n; ++i) {
      while (!nodes[i]->roundComplete()) {
        auto ran = transports[i]->progress(deadline);
        if (!ran) return ran.status();
      }
      STARLING_RETURN_IF_ERROR(nodes[i]->finishRound().withContext("node " + std::to_string(i)));
    }
    const uint64_t done = r + 1;
    if (done % s.logEvery == 0 || done == s.rounds) {
      STARLING_RETURN_IF_ERROR(measure(done));
      char detail[96];
      std::snprintf(detail, sizeof detail, "rel_error %.3e", result.last.relError);
      progress.update(done, detail);
    }
  }
  progress.finish();

  for (const auto& node : nodes) {
    result.models.emplace_back(node->model().begin(), node->model().end());
  }
  if (log) STARLING_RETURN_IF_ERROR(log->writeSummary(s, result.last, result.xMean, "simulate"));
  return result;
}

}  // namespace

core::Result<SimulateResult> simulate(const Experiment& e, const SimulateOptions& options) {
  if (e.scenario.precision == Precision::kFloat32) return simulateAs<float>(e, options);
  return simulateAs<double>(e, options);
}

}  // namespace starling::runtime
