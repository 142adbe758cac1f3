// node-launcher's runs (tools/node_launcher_runs.h): what `run`, `run --resume`, `merge` and
// `simulate` share, and the `merge` and `--resume` verbs themselves.
#include "node_launcher_runs.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/peer_log.h"
#include "runtime/merge.h"
#include "runtime/resume.h"
#include "runtime/run_folder.h"
#include "scenario/scenario.h"
#include "scenario/scenario_writer.h"

namespace starling::cli {

namespace {

std::vector<std::string> overrideArgs(std::optional<uint64_t> rounds, std::optional<uint64_t> seed) {
  std::vector<std::string> out;
  if (rounds) out.insert(out.end(), {"--rounds", std::to_string(*rounds)});
  if (seed) out.insert(out.end(), {"--seed", std::to_string(*seed)});
  return out;
}

}  // namespace

// Options for `run` to start `node-launcher peer` processes (this executable) on the scenario.
runtime::LaunchOptions peerLaunch(const std::string& scenarioPath, std::optional<uint64_t> rounds,
                                  std::optional<uint64_t> seed, std::filesystem::path outDir) {
  runtime::LaunchOptions lo;
  lo.executable = "/proc/self/exe";
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) lo.executable = self.string();
  lo.scenarioPath = scenarioPath;
  lo.peerArgs = overrideArgs(rounds, seed);
  lo.outDir = std::move(outDir);
  return lo;
}

void printResult(const scenario::Experiment& e, const runtime::RoundMetrics& m,
                 const std::filesystem::path& out, const char* how) {
  // A classification problem has no x*: its loss and test accuracy instead of rel_error.
  char quality[96];
  if (m.classification) {
    std::snprintf(quality, sizeof quality, "train_loss %.4f, test_accuracy %.4f", m.trainLoss,
                  m.testAccuracy);
  } else {
    std::snprintf(quality, sizeof quality, "rel_error %.3e, objective %.10g", m.relError,
                  m.objective);
  }
  std::printf("%s: %llu rounds on %d %s (%s, %s): %s, consensus %.3e, %.1f MB sent, %.2f s\n"
              "  outputs: %s\n",
              e.scenario.name.c_str(), static_cast<unsigned long long>(m.round), e.scenario.nodes,
              how, optim::algorithmKindName(e.scenario.algorithm.kind),
              topology::graphKindName(e.scenario.topology.base.kind), quality,
              m.consensusDistance, static_cast<double>(m.bytesSent) / 1e6, m.wallS,
              out.string().c_str());
}

// Scenario problems exit 2; anything else that stops a run exits 1.
int report(const core::Status& st) {
  std::fprintf(stderr, "node-launcher: %s\n", st.message().c_str());
  std::fflush(stderr);
  return st.code() == core::StatusCode::kInvalidArgument || st.code() == core::StatusCode::kNotFound
             ? kExitUsage
             : kExitFailure;
}

// A run that started and failed: exit 1. A divergence is its own headline.
int runFailed(const core::Status& st) {
  if (st.code() == core::StatusCode::kDiverged) {
    std::fprintf(stderr, "node-launcher: %s\n", st.message().c_str());
  } else {
    std::fprintf(stderr, "node-launcher: run failed: %s\n", st.toString().c_str());
  }
  return kExitFailure;
}

// The run folder for this process alone (runtime/run_folder.h): locked for as long as the
// launcher lives; for a fresh run, cleared of an earlier run's files (and refused when it holds
// files Starling did not write).
core::Result<runtime::RunFolderLock> claimRunFolder(const std::filesystem::path& dir, bool fresh) {
  auto lock = runtime::lockRunFolder(dir);
  if (!lock) return lock.status();
  if (fresh) STARLING_RETURN_IF_ERROR(runtime::clearRunFolder(dir));
  return lock;
}

// A scenario without a problem or without rounds is for a trainer that owns model, data and step
// count (starling::Peer); only `run SCENARIO -- COMMAND` can run it.
static core::Status needsTrainer(const scenario::Scenario& s, const std::string& path) {
  const char* missing = !s.hasProblem ? "\"problem\"" : s.rounds == 0 ? "\"rounds\"" : nullptr;
  if (missing == nullptr) return core::Status::ok();
  return core::invalidArgument(path + ": no " + missing +
                               ": this scenario is for a trainer that owns its model, data and "
                               "step count; run it with `node-launcher run " + path +
                               " -- COMMAND [ARGS...]`");
}

core::Result<scenario::Experiment> load(const std::string& path, std::optional<uint64_t> rounds,
                                        std::optional<uint64_t> seed, bool solve) {
  auto scenario = scenario::loadScenario(path);
  if (!scenario) return scenario.status();
  scenario::applyOverrides(*scenario, rounds, seed);
  STARLING_RETURN_IF_ERROR(needsTrainer(*scenario, path));
  return scenario::prepareExperiment(*scenario, {.solve = solve});
}

// `node-launcher merge`: the peer logs say what the peers ran (seed, rounds, scenario hash); the
// scenario file must be the one they ran, and --seed/--rounds, if given, must agree.
int mergeRun(const std::string& scenarioPath, const std::string& outDir,
             std::optional<uint64_t> rounds, std::optional<uint64_t> seed,
             const std::vector<std::string>& command) {
  auto scenario = scenario::loadScenario(scenarioPath);
  if (!scenario) return report(scenario.status());
  // Not while a launcher still writes into the folder (or another merge does).
  auto lock = claimRunFolder(outDir, /*fresh=*/false);
  if (!lock) return report(lock.status());
  auto headers = runtime::readPeerLogHeaders(outDir, scenario->nodes);
  if (!headers) {
    std::fprintf(stderr, "node-launcher merge: %s\n", headers.status().message().c_str());
    return kExitFailure;
  }
  const runtime::PeerLogHeader& h0 = headers->front();
  for (const auto& h : *headers) {
    if (h.seed != h0.seed || h.rounds != h0.rounds || h.scenarioHash != h0.scenarioHash ||
        h.nodes != h0.nodes) {
      std::fprintf(stderr,
                   "node-launcher merge: the peer logs in %s/peers come from different runs: rank 0 "
                   "ran seed %llu, %llu rounds, scenario hash %s; rank %d ran seed %llu, %llu "
                   "rounds, scenario hash %s\n",
                   outDir.c_str(), static_cast<unsigned long long>(h0.seed),
                   static_cast<unsigned long long>(h0.rounds), h0.scenarioHash.c_str(), h.rank,
                   static_cast<unsigned long long>(h.seed),
                   static_cast<unsigned long long>(h.rounds), h.scenarioHash.c_str());
      return kExitFailure;
    }
  }
  for (const auto& h : *headers) {
    if (h.runId != h0.runId) {
      std::fprintf(stderr,
                   "node-launcher merge: the peer logs in %s/peers come from different runs of "
                   "the same scenario: rank 0's says run id \"%s\", rank %d's \"%s\"; merge "
                   "the logs of one run (each in a folder of its own)\n",
                   outDir.c_str(), h0.runId.c_str(), h.rank, h.runId.c_str());
      return kExitFailure;
    }
    if (h.trainer) {
      return report(core::invalidArgument(
          engine::peerLogPath(outDir, h.rank).string() +
          " is a trainer's log (run SCENARIO -- "
          "COMMAND): its rounds are the trainer's model, not the problem in " +
          scenarioPath +
          "; that run's launcher wrote its metrics.jsonl and summary.json, and `merge` leaves "
          "them alone"));
    }
  }
  if (seed && *seed != h0.seed) {
    return report(core::invalidArgument("--seed " + std::to_string(*seed) +
                                        ": the peers ran with seed " + std::to_string(h0.seed) +
                                        " (" + engine::peerLogPath(outDir, 0).string() +
                                        "); leave --seed out, merge reads it from the logs"));
  }
  if (rounds && *rounds != h0.rounds) {
    return report(core::invalidArgument("--rounds " + std::to_string(*rounds) +
                                        ": the peers ran " + std::to_string(h0.rounds) +
                                        " rounds (" + engine::peerLogPath(outDir, 0).string() +
                                        "); leave --rounds out, merge reads it from the logs"));
  }
  scenario::applyOverrides(*scenario, h0.rounds, h0.seed);
  const std::string hash = scenario::scenarioHashHex(scenario::scenarioHash(*scenario));
  if (hash != h0.scenarioHash) {
    return report(core::invalidArgument(
        scenarioPath + ": not the scenario the peers in " + outDir + " ran (its hash with their "
        "seed and rounds is " + hash + ", their logs say " + h0.scenarioHash +
        "): pass the same scenario file, unchanged; " + outDir +
        "/scenario.resolved.json is a copy when `run` or a previous merge wrote one"));
  }
  auto e = scenario::prepareExperiment(*scenario, {.solve = true});
  if (!e) return report(e.status());
  if (auto st = runtime::writeRunInfo(outDir, e->scenario, "merge", command); !st.isOk()) {
    return runFailed(st);
  }
  auto log = runtime::MetricsLog::create(outDir);
  if (!log) return runFailed(log.status());
  runtime::PeerLogMerger merger(*e, outDir, **log);
  if (auto merged = merger.poll(); !merged) return runFailed(merged.status());
  const auto root = merger.rootCause();
  if (!merger.last()) {
    std::fprintf(stderr, "node-launcher merge: no round that every peer logged in %s/peers:%s\n",
                 outDir.c_str(), merger.shortLogs().c_str());
    if (root) std::fprintf(stderr, "  root cause: %s\n", root->describe().c_str());
    return kExitFailure;
  }
  std::optional<runtime::AsyncReport> async;
  if (e->scenario.asynchronous.enabled) {
    async = runtime::asyncReportFromPeerLogs(e->scenario, outDir);
  }
  if (auto st = (*log)->writeSummary(e->scenario, *merger.last(), merger.xMean(), "run",
                                     async ? &*async : nullptr);
      !st.isOk()) {
    return runFailed(st);
  }
  printResult(*e, *merger.last(), outDir, "peers, merged");
  if (merger.last()->round != e->scenario.rounds) {
    std::fprintf(stderr,
                 "node-launcher merge: merged %llu of %llu rounds; the peer logs stop short:%s\n",
                 static_cast<unsigned long long>(merger.last()->round),
                 static_cast<unsigned long long>(e->scenario.rounds), merger.shortLogs().c_str());
    if (root) std::fprintf(stderr, "  root cause: %s\n", root->describe().c_str());
    return kExitFailure;
  }
  return 0;
}

// `node-launcher run SCENARIO --resume DIR`: the run whose output folder is DIR goes on from
// the newest round every peer has a verified checkpoint of (runtime/resume.h).
int resumeRun(const std::string& scenarioPath, const std::string& dir, const std::string& outDir,
              std::optional<uint64_t> givenRounds, std::optional<uint64_t> givenSeed,
              const std::vector<std::string>& trainerCommand,
              const std::vector<std::string>& command) {
  if (!trainerCommand.empty()) {
    return report(core::invalidArgument("--resume: a trainer's run (run -- COMMAND) has no "
                                        "checkpoints to resume from"));
  }
  if (!outDir.empty() && std::filesystem::path(outDir).lexically_normal() !=
                             std::filesystem::path(dir).lexically_normal()) {
    return report(core::invalidArgument("--resume " + dir + " writes into " + dir +
                                        "; leave --out out (it says " + outDir + ")"));
  }
  if (!std::filesystem::is_directory(dir)) {
    return report(core::invalidArgument("--resume " + dir + ": no such folder"));
  }
  auto scenario = scenario::loadScenario(scenarioPath);
  if (!scenario) return report(scenario.status());
  auto lock = claimRunFolder(dir, /*fresh=*/false);
  if (!lock) return report(lock.status());
  // Seed and rounds as the run used them (its --seed/--rounds): from its peer logs unless given.
  std::optional<uint64_t> rounds = givenRounds, seed = givenSeed;
  if (auto headers = runtime::readPeerLogHeaders(dir, scenario->nodes); headers) {
    if (!rounds) rounds = headers->front().rounds;
    if (!seed) seed = headers->front().seed;
  }
  auto e = load(scenarioPath, rounds, seed, /*solve=*/true);
  if (!e) return report(e.status());
  if (e->scenario.transport.kind != scenario::TransportConfig::Kind::kUcx) {
    return report(core::invalidArgument(
        scenarioPath + ": /transport/kind: --resume continues a run of peer processes "
        "(\"ucx\"); `simulate` and the inproc transport write no checkpoints"));
  }
  if (auto st = runtime::checkBeforeStart(e->scenario, /*local=*/true); !st.isOk()) {
    return report(st);
  }
  auto plan = runtime::planResume(e->scenario, dir, [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
  });
  if (!plan) return report(plan.status());
  std::string lost;
  for (int r : plan->lost) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
  std::fprintf(stderr, "node-launcher: resuming %s at round %llu of %llu%s\n", dir.c_str(),
               static_cast<unsigned long long>(plan->round),
               static_cast<unsigned long long>(e->scenario.rounds),
               plan->round >= e->scenario.rounds
                   ? " (the run had finished: its logs are merged again)"
                   : lost.empty() ? ""
                                  : (" (rank" + std::string(plan->lost.size() > 1 ? "s " : " ") +
                                     lost + ", lost before it, stay out)")
                                        .c_str());
  if (auto st = runtime::rewindToPlan(e->scenario, dir, *plan); !st.isOk()) return runFailed(st);
  runtime::LaunchOptions lo = peerLaunch(scenarioPath, rounds, seed, dir);
  lo.resumeRound = plan->round;
  lo.notStarted = plan->lost;
  return launchPeerRun(*e, lo, command, "peer processes, resumed");
}

int launchPeerRun(const scenario::Experiment& e, const runtime::LaunchOptions& lo,
                  const std::vector<std::string>& command, const char* how) {
  if (auto st = runtime::writeRunInfo(lo.outDir, e.scenario, "run", command); !st.isOk()) {
    return runFailed(st);
  }
  auto result = runtime::launchPeers(e, lo);
  if (!result) return runFailed(result.status());
  printResult(e, result->last, lo.outDir, how);
  return 0;
}

}  // namespace starling::cli
