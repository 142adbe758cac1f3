// node-launcher: the command-line front end of Starling.
//
//   node-launcher simulate SCENARIO [--out DIR] [--rounds N] [--seed S]
//   node-launcher validate SCENARIO...
//   node-launcher topology SCENARIO [--round R] [--format text|json|dot]
//
// Exit status: 0 success, 2 bad scenario or usage, 1 a run that failed.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "runtime/experiment.h"
#include "runtime/scenario.h"
#include "runtime/simulator.h"
#include "runtime/topology_report.h"

namespace {

using namespace starling;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

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

  // simulate
  auto e = load(scenarioPath, rounds, seed, /*solve=*/true);
  if (!e) return report(e.status());
  runtime::SimulateOptions opt;
  opt.outDir = outDir.empty() ? std::filesystem::path("runs") / e->scenario.name
                              : std::filesystem::path(outDir);
  opt.progress = true;
  auto result = runtime::simulate(*e, opt);
  if (!result) {
    std::fprintf(stderr, "node-launcher: run failed: %s\n", result.status().toString().c_str());
    return kExitFailure;
  }
  const auto& m = result->last;
  std::printf("%s: %llu rounds on %d nodes (%s, %s): rel_error %.3e, objective %.10g, consensus "
              "%.3e, %.1f MB sent, %.2f s\n  outputs: %s\n",
              e->scenario.name.c_str(), static_cast<unsigned long long>(m.round), e->scenario.nodes,
              optim::algorithmKindName(e->scenario.algorithm.kind),
              topology::graphKindName(e->scenario.topology.base.kind), m.relError, m.objective,
              m.consensusDistance, static_cast<double>(m.bytesSent) / 1e6, m.wallS,
              opt.outDir.string().c_str());
  return 0;
}
