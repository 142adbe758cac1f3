// node-launcher: the command-line front end of Starling.
//
//   node-launcher run      SCENARIO [--out DIR] [--rounds N] [--seed S]
//   node-launcher peer     SCENARIO [--rank R] [--out DIR] [--peers H:P,...] [--rounds N] [--seed S]
//   node-launcher simulate SCENARIO [--out DIR] [--rounds N] [--seed S]
//   node-launcher merge    SCENARIO --out DIR
//   node-launcher validate SCENARIO...
//   node-launcher topology SCENARIO [--round R] [--format text|json|dot]
//
// Exit status: 0 success, 2 bad scenario or usage, 1 a run that failed.
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "runtime/experiment.h"
#include "runtime/launcher.h"
#include "runtime/merge.h"
#include "runtime/peer.h"
#include "runtime/scenario.h"
#include "runtime/simulator.h"
#include "runtime/topology_report.h"

namespace {

using namespace starling;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Set by SIGINT/SIGTERM in a peer process; the peer stops at its next check.
std::atomic<bool> gStop{false};
extern "C" void onStopSignal(int) { gStop.store(true); }

// The rank of a peer: --rank, else the environment of the usual launchers.
std::optional<int> rankFromEnvironment() {
  for (const char* var : {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* v = std::getenv(var); v && *v) {
      char* end = nullptr;
      const long r = std::strtol(v, &end, 10);
      if (*end == '\0' && r >= 0 && r < (1 << 20)) return static_cast<int>(r);
    }
  }
  return std::nullopt;
}

std::vector<std::string> overrideArgs(std::optional<uint64_t> rounds, std::optional<uint64_t> seed) {
  std::vector<std::string> out;
  if (rounds) out.insert(out.end(), {"--rounds", std::to_string(*rounds)});
  if (seed) out.insert(out.end(), {"--seed", std::to_string(*seed)});
  return out;
}

void printResult(const runtime::Experiment& e, const runtime::RoundMetrics& m,
                 const std::filesystem::path& out, const char* how) {
  std::printf("%s: %llu rounds on %d %s (%s, %s): rel_error %.3e, objective %.10g, consensus "
              "%.3e, %.1f MB sent, %.2f s\n  outputs: %s\n",
              e.scenario.name.c_str(), static_cast<unsigned long long>(m.round), e.scenario.nodes,
              how, optim::algorithmKindName(e.scenario.algorithm.kind),
              topology::graphKindName(e.scenario.topology.base.kind), m.relError, m.objective,
              m.consensusDistance, static_cast<double>(m.bytesSent) / 1e6, m.wallS,
              out.string().c_str());
}

// Scenario problems exit 2; anything else that stops a run exits 1.
int report(const core::Status& st) {
  std::fprintf(stderr, "node-launcher: %s\n", st.message().c_str());
  return st.code() == core::StatusCode::kInvalidArgument || st.code() == core::StatusCode::kNotFound
             ? kExitUsage
             : kExitFailure;
}

core::Result<runtime::Experiment> load(const std::string& path, std::optional<uint64_t> rounds,
                                       std::optional<uint64_t> seed, bool solve) {
  auto scenario = runtime::loadScenario(path);
  if (!scenario) return scenario.status();
  runtime::applyOverrides(*scenario, rounds, seed);
  return runtime::prepareExperiment(*scenario, {.solve = solve});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Starling node launcher: decentralized training without a server"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "node-launcher 0.1.0");

  std::string scenarioPath;
  std::string outDir;
  std::optional<uint64_t> rounds, seed;
  auto* sim = app.add_subcommand("simulate", "run every node of SCENARIO in this process");
  sim->add_option("scenario", scenarioPath, "scenario JSON file")->required();
  sim->add_option("--out", outDir, "output folder (default runs/<scenario name>)");
  sim->add_option("--rounds", rounds, "override the scenario's rounds")->check(CLI::PositiveNumber);
  sim->add_option("--seed", seed, "override the scenario's seed");

  auto* run = app.add_subcommand("run", "start one peer process per node on this machine");
  run->add_option("scenario", scenarioPath, "scenario JSON file")->required();
  run->add_option("--out", outDir, "output folder (default runs/<scenario name>)");
  run->add_option("--rounds", rounds, "override the scenario's rounds")->check(CLI::PositiveNumber);
  run->add_option("--seed", seed, "override the scenario's seed");

  std::optional<int> rank;
  std::string peerList;
  auto* peer = app.add_subcommand("peer", "run one peer (rank from --rank, SLURM_PROCID, "
                                          "OMPI_COMM_WORLD_RANK or PMIX_RANK)");
  peer->add_option("scenario", scenarioPath, "scenario JSON file")->required();
  peer->add_option("--rank", rank, "this peer's rank")->check(CLI::NonNegativeNumber);
  peer->add_option("--out", outDir, "output folder (default runs/<scenario name>)");
  peer->add_option("--peers", peerList, "host:port of every rank, comma-separated (overrides "
                                        "the scenario's peers section)");
  peer->add_option("--rounds", rounds, "override the scenario's rounds")->check(CLI::PositiveNumber);
  peer->add_option("--seed", seed, "override the scenario's seed");

  auto* merge = app.add_subcommand("merge", "merge the peer logs of a run into metrics.jsonl and "
                                            "summary.json (after srun/mpirun)");
  merge->add_option("scenario", scenarioPath, "scenario JSON file")->required();
  merge->add_option("--out", outDir, "the run's output folder")->required();
  merge->add_option("--rounds", rounds, "the rounds override the peers ran with");
  merge->add_option("--seed", seed, "the seed override the peers ran with");

  std::vector<std::string> validatePaths;
  auto* val = app.add_subcommand("validate", "check scenario files without running them");
  val->add_option("scenario", validatePaths, "scenario JSON files")->required();

  uint64_t round = 0;
  std::string format = "text";
  auto* topo = app.add_subcommand("topology", "print one round's graph and mixing matrix");
  topo->add_option("scenario", scenarioPath, "scenario JSON file")->required();
  topo->add_option("--round", round, "round number (default 0)");
  topo->add_option("--format", format, "text, json or dot")
      ->check(CLI::IsMember({"text", "json", "dot"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }

  if (*val) {
    int rc = 0;
    for (const auto& path : validatePaths) {
      auto e = load(path, std::nullopt, std::nullopt, /*solve=*/true);
      if (!e) {
        rc = std::max(rc, report(e.status()));
      } else {
        std::printf("%s: ok (%s, %d nodes, %zu samples, d = %d)\n", path.c_str(),
                    e->scenario.name.c_str(), e->scenario.nodes, e->data.samples(), e->data.features);
      }
    }
    return rc;
  }

  if (*topo) {
    auto scenario = runtime::loadScenario(scenarioPath);
    if (!scenario) return report(scenario.status());
    auto schedule = topology::Schedule::create(scenario->topology);
    if (!schedule) return report(core::invalidArgument(scenarioPath + ": /topology: " +
                                                       schedule.status().message()));
    const auto fmt = format == "json"  ? runtime::ReportFormat::kJson
                     : format == "dot" ? runtime::ReportFormat::kDot
                                       : runtime::ReportFormat::kText;
    std::fputs(runtime::describeRound(round, *(*schedule)->at(round), fmt).c_str(), stdout);
    return 0;
  }

  if (*peer) {
    auto e = load(scenarioPath, rounds, seed, /*solve=*/false);
    if (!e) return report(e.status());
    runtime::PeerOptions po;
    if (!rank) rank = rankFromEnvironment();
    if (!rank) {
      return report(core::invalidArgument("no rank: pass --rank or run under a launcher that sets "
                                          "SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMIX_RANK"));
    }
    po.rank = *rank;
    po.outDir = outDir.empty() ? std::filesystem::path("runs") / e->scenario.name
                               : std::filesystem::path(outDir);
    if (!peerList.empty()) {
      for (size_t start = 0;;) {
        const size_t comma = peerList.find(',', start);
        po.addresses.push_back(peerList.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    po.stop = &gStop;
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGTERM, onStopSignal);
    if (auto st = runtime::runPeer(*e, po); !st.isOk()) {
      std::fprintf(stderr, "node-launcher peer %d: %s\n", po.rank, st.toString().c_str());
      return st.code() == core::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
    }
    return 0;
  }

  const auto outFor = [&](const runtime::Experiment& e) {
    return outDir.empty() ? std::filesystem::path("runs") / e.scenario.name
                          : std::filesystem::path(outDir);
  };

  if (*merge) {
    auto e = load(scenarioPath, rounds, seed, /*solve=*/true);
    if (!e) return report(e.status());
    auto log = runtime::MetricsLog::create(outDir);
    if (!log) return report(log.status());
    runtime::PeerLogMerger merger(*e, outDir, **log);
    if (auto merged = merger.poll(); !merged) return report(merged.status());
    if (!merger.last()) return report(core::notFound("no complete round in " + outDir + "/peers"));
    if (auto st = (*log)->writeSummary(e->scenario, *merger.last(), merger.xMean(), "run");
        !st.isOk()) {
      return report(st);
    }
    printResult(*e, *merger.last(), outDir, "peers, merged");
    return merger.last()->round == e->scenario.rounds ? 0 : kExitFailure;
  }

  auto e = load(scenarioPath, rounds, seed, /*solve=*/true);
  if (!e) return report(e.status());

  if (*run && e->scenario.transport.kind == runtime::TransportConfig::Kind::kUcx) {
    runtime::LaunchOptions lo;
    lo.executable = "/proc/self/exe";
    {
      std::error_code ec;
      const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
      if (!ec) lo.executable = self.string();
    }
    lo.scenarioPath = scenarioPath;
    lo.peerArgs = overrideArgs(rounds, seed);
    lo.outDir = outFor(*e);
    auto result = runtime::launchPeers(*e, lo);
    if (!result) {
      std::fprintf(stderr, "node-launcher: run failed: %s\n", result.status().message().c_str());
      return kExitFailure;
    }
    printResult(*e, result->last, lo.outDir, "peer processes");
    return 0;
  }

  // simulate (and run with the inproc transport)
  runtime::SimulateOptions opt;
  opt.outDir = outFor(*e);
  opt.progress = true;
  auto result = runtime::simulate(*e, opt);
  if (!result) {
    std::fprintf(stderr, "node-launcher: run failed: %s\n", result.status().toString().c_str());
    return kExitFailure;
  }
  printResult(*e, result->last, opt.outDir, "simulated nodes");
  return 0;
}
