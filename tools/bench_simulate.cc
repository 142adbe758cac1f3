// bench-simulate: how fast the simulator runs exact diffusion at scale, next to the bare
// arithmetic of the same rounds, timed in the same program.
//
// Bare arithmetic: for every node i, x_i' = sum_j w_ij x_j over the round's mixing row, i.e.
// n * (deg + 1) * d multiply-adds on plain arrays: the floor any gossip engine must pay. The
// simulator's round also computes gradients, encodes and checksums every message, moves it through
// the in-process transport, verifies and decodes it, and runs exact diffusion's update.
//
//   bench-simulate [--nodes 1024] [--dim 10000] [--rounds 20] [--topology ring,random]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "runtime/simulator.h"
#include "scenario/experiment.h"
#include "scenario/scenario.h"

namespace {

using namespace starling;
using Clock = std::chrono::steady_clock;

// CPU seconds this thread has run: on a shared machine the wall clock also counts the time other
// jobs hold the cores, which moves the simulate and bare columns apart at random.
double threadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timing {
  double wallS, cpuS;  // per round
};

std::string scenarioJson(int nodes, int dim, int rounds, const std::string& topology) {
  // Least squares on very sparse rows (about 10 non-zeros each): the gradient is cheap, so the
  // round is dominated by what the engine does with d-sized vectors.
  const double density = std::min(1.0, 10.0 / dim);
  return R"({"schema_version": 1, "name": "bench", "nodes": )" + std::to_string(nodes) +
         R"(, "seed": 1, "rounds": )" + std::to_string(rounds) + R"(, "log_every": )" +
         std::to_string(rounds) + R"(, "topology": )" + topology +
         R"(, "problem": {"kind": "least_squares", "l2": 0.1, "data": {"synthetic": {"samples": )" +
         std::to_string(2 * nodes) + R"(, "features": )" + std::to_string(dim) +
         R"(, "density": )" + std::to_string(density) +
         R"(}}}, "algorithm": {"kind": "exact_diffusion", "step_size": 0.1}})";
}

// Seconds per round of the bare combine on the experiment's own mixing matrices (best of three,
// wall and thread CPU time each).
Timing bareSecondsPerRound(const scenario::Experiment& e, int rounds) {
  const int n = e.scenario.nodes;
  const size_t d = static_cast<size_t>(e.data.features);
  std::vector<double> x(n * d), y(n * d);
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<double>(k % 97) * 1e-3;
  double best = 1e30, bestCpu = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    const double c0 = threadCpuSeconds();
    for (int r = 0; r < rounds; ++r) {
      const auto topo = e.schedule->at(static_cast<uint64_t>(r));
      for (int i = 0; i < n; ++i) {
        const auto& row = topo->weights.rows[i];
        double* out = &y[i * d];
        const double* self = &x[i * d];
        // Blocked so that `out` stays in L1 while the neighbours are added: each input is read
        // once, `out` written once.
        constexpr size_t kBlock = 1024;
        for (size_t b = 0; b < d; b += kBlock) {
          const size_t end = std::min(d, b + kBlock);
          for (size_t k = b; k < end; ++k) out[k] = row.self * self[k];
          for (const auto& nb : row.peers) {
            const double* xj = &x[nb.peer * d];
            const double w = nb.weight;
            for (size_t k = b; k < end; ++k) out[k] += w * xj[k];
          }
        }
      }
      x.swap(y);
    }
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / rounds);
    bestCpu = std::min(bestCpu, (threadCpuSeconds() - c0) / rounds);
  }
  std::printf("  (bare checksum %.6g)\n", x[d / 2]);
  return {best, bestCpu};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-simulate: simulator rounds/s vs the bare gossip arithmetic"};
  int nodes = 1024, dim = 10000, rounds = 20;
  std::vector<std::string> topologies = {"ring", "random"};
  app.add_option("--nodes", nodes, "n")->check(CLI::PositiveNumber);
  app.add_option("--dim", dim, "d")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "timed rounds")->check(CLI::PositiveNumber);
  app.add_option("--topology", topologies, "ring and/or random")->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  std::printf("bench-simulate: exact diffusion, n = %d, d = %d, float64, %d rounds\n", nodes, dim,
              rounds);
  struct Row {
    std::string topo;
    double degree, simRoundS, bareRoundS, simCpuS, bareCpuS;
  };
  std::vector<Row> rows;
  for (const auto& t : topologies) {
    std::string spec;
    if (t == "ring") {
      spec = R"({"kind": "ring"})";
    } else if (t == "random") {
      spec = R"({"kind": "random", "p": )" + std::to_string(8.0 / (nodes - 1)) + "}";
    } else {
      std::fprintf(stderr, "unknown topology %s\n", t.c_str());
      return 2;
    }
    auto s = scenario::parseScenario(scenarioJson(nodes, dim, rounds, spec), "bench.json", ".");
    if (!s) {
      std::fprintf(stderr, "%s\n", s.status().message().c_str());
      return 2;
    }
    auto e = scenario::prepareExperiment(*s, {.solve = false});
    if (!e) {
      std::fprintf(stderr, "%s\n", e.status().message().c_str());
      return 2;
    }
    const auto g = e->schedule->at(0);
    const double degree = 2.0 * static_cast<double>(g->graph.edgeCount()) / nodes;
    std::vector<double> walls, cpus;
    runtime::SimulateOptions opt;
    opt.onLog = [&](const runtime::RoundMetrics& m) { walls.push_back(m.wallS); };
    // CPU time where wall_s is read: when the round is done, before its metrics (round 0 and the
    // last), so that neither column counts the last round's metrics.
    opt.onRoundEnd = [&](uint64_t) { cpus.push_back(threadCpuSeconds()); };
    auto r = runtime::simulate(*e, opt);
    if (!r) {
      std::fprintf(stderr, "%s\n", r.status().toString().c_str());
      return 1;
    }
    const double simRound = (walls.back() - walls.front()) / rounds;
    const double simCpu = (cpus.back() - cpus.front()) / rounds;
    const Timing bare = bareSecondsPerRound(*e, rounds);
    rows.push_back({t, degree, simRound, bare.wallS, simCpu, bare.cpuS});
  }

  std::printf("\n| topology | mean degree | simulate rounds/s | simulate ms/round | bare arithmetic "
              "ms/round | bare GB/s | engine / bare | engine / bare, CPU time |\n"
              "|---|---|---|---|---|---|---|---|\n");
  for (const auto& row : rows) {
    // The bare combine reads deg + 1 vectors and writes one per node.
    const double bytes = static_cast<double>(nodes) * (row.degree + 2) * dim * sizeof(double);
    std::printf("| %s | %.1f | %.2f | %.1f | %.1f | %.1f | %.2fx | %.2fx (%.1f / %.1f ms) |\n",
                row.topo.c_str(), row.degree, 1.0 / row.simRoundS, row.simRoundS * 1e3,
                row.bareRoundS * 1e3, bytes / row.bareRoundS / 1e9, row.simRoundS / row.bareRoundS,
                row.simCpuS / row.bareCpuS, row.simCpuS * 1e3, row.bareCpuS * 1e3);
  }
  return 0;
}
