#include "runtime/simulator.h"

#include <chrono>
#include <cstdio>

#include "runtime/node_stack.h"
#include "runtime/progress.h"
#include "runtime/transport/inproc/inproc_transport.h"

namespace starling::runtime {
namespace {

template <typename T>
core::Result<SimulateResult> simulateAs(const Experiment& e, const SimulateOptions& opt) {
  const Scenario& s = e.scenario;
  const int n = s.nodes;

  auto hub = transport::inproc::createHub(n);
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<NodeStack<T>> stacks;
  std::vector<Node<T>*> nodes;
  for (int i = 0; i < n; ++i) {
    transports.push_back(transport::inproc::createTransport(*hub, i));
    auto stack = buildNode<T>(e, i, *transports.back());
    if (!stack) return stack.status();
    stacks.push_back(std::move(*stack));
    nodes.push_back(stacks.back().node.get());
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
  CompressionErrorMean compressionError;
  auto measure = [&](uint64_t round) -> core::Status {
    // Wall time when the round finished, before the metrics themselves are computed.
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int i = 0; i < n; ++i) models[i] = nodes[i]->model();
    RoundMetrics m = measureModels<T>(e, models, result.xMean);
    m.round = round;
    m.wallS = wall;
    double errSum = 0;
    uint64_t errCount = 0;
    for (const Node<T>* node : nodes) {
      m.bytesSent += node->bytesSent();
      m.corruptMessages += node->corruptMessages();
      errSum += node->compressionErrorSum();
      errCount += node->compressionErrorCount();
    }
    m.compressionError = compressionError.next(errSum, errCount);
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
    for (int i = 0; i < n; ++i) {
      const auto st = nodes[i]->startRound(r, *topo, step, deadline);
      if (!st.isOk()) return explainRoundFailure(s, st, "node " + std::to_string(i));
    }
    for (int i = 0; i < n; ++i) {
      while (!nodes[i]->roundComplete()) {
        auto ran = transports[i]->progress(deadline);
        if (!ran) return ran.status();
      }
      const auto st = nodes[i]->finishRound();
      if (!st.isOk()) return explainRoundFailure(s, st, "node " + std::to_string(i));
    }
    const uint64_t done = r + 1;
    if (done % s.logEvery == 0 || done == s.rounds) {
      STARLING_RETURN_IF_ERROR(measure(done));
      char detail[96];
      if (result.last.classification) {
        std::snprintf(detail, sizeof detail, "test_accuracy %.4f", result.last.testAccuracy);
      } else {
        std::snprintf(detail, sizeof detail, "rel_error %.3e", result.last.relError);
      }
      progress.update(done, detail);
    }
  }
  progress.finish();

  for (const Node<T>* node : nodes) {
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
