// node-launcher: the command-line front end of Starling.
//
//   node-launcher run      SCENARIO [--out DIR] [--rounds N] [--seed S]
//   node-launcher run      SCENARIO --resume DIR [--rounds N] [--seed S]   (a killed run)
//   node-launcher run      SCENARIO [--out DIR] -- COMMAND [ARGS...]   (the user's trainer)
//   node-launcher peer     SCENARIO [--rank R] [--out DIR] [--peers H:P,... | --hostfile F]
//                          [--rounds N] [--seed S]
//                          [--rejoin]   (a lost peer restarted: back into the run)
//   node-launcher simulate SCENARIO [--out DIR] [--rounds N] [--seed S]
//   node-launcher merge    SCENARIO --out DIR [--rounds N] [--seed S]
//   node-launcher validate SCENARIO...
//   node-launcher topology SCENARIO [--round R] [--format text|json|dot]
//
// Exit status: 0 success, 2 bad scenario or usage, 1 a run that failed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

#include "core/line_file.h"
#include "runtime/launcher.h"
#include "runtime/merge.h"
#include "runtime/peer.h"
#include "runtime/peer_placement.h"
#include "runtime/resume.h"
#include "runtime/run_folder.h"
#include "runtime/simulator.h"
#include "runtime/topology_report.h"
#include "scenario/experiment.h"
#include "scenario/scenario.h"
#include "scenario/scenario_writer.h"

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
      if (*end == '\0' && r >= 0 && r < scenario::kMaxNodes) return static_cast<int>(r);
    }
  }
  return std::nullopt;
}

// A non-negative decimal integer from the command line, checked like the scenario file's numbers
// ("must be between LO and HI, got X"): no sign, no spaces, no wrap-around past 2^64 - 1.
core::Result<uint64_t> parseCount(const std::string& flag, const std::string& text, uint64_t lo,
                                  uint64_t hi) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || ec != std::errc() || p != end || v < lo || v > hi) {
    std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
    return core::invalidArgument(flag + ": must be between " + std::to_string(lo) + " and " +
                                 std::to_string(hi) + ", got " + (digits ? shown : "\"" + shown + "\""));
  }
  return v;
}

// The optional numeric flags, as text until checked.
struct NumberFlags {
  std::optional<std::string> rounds, seed, rank, round, resumeRound;
};

struct Numbers {
  std::optional<uint64_t> rounds, seed;
  std::optional<int> rank;
  uint64_t round = 0;
  std::optional<uint64_t> resumeRound;
};

core::Result<Numbers> checkNumbers(const NumberFlags& f) {
  Numbers n;
  if (f.rounds) {
    auto v = parseCount("--rounds", *f.rounds, 1, scenario::kMaxRounds);
    if (!v) return v.status();
    n.rounds = *v;
  }
  if (f.seed) {
    auto v = parseCount("--seed", *f.seed, 0, std::numeric_limits<uint64_t>::max());
    if (!v) return v.status();
    n.seed = *v;
  }
  if (f.rank) {
    auto v = parseCount("--rank", *f.rank, 0, scenario::kMaxNodes - 1);
    if (!v) return v.status();
    n.rank = static_cast<int>(*v);
  }
  if (f.round) {
    auto v = parseCount("--round", *f.round, 0, scenario::kMaxRounds);
    if (!v) return v.status();
    n.round = *v;
  }
  if (f.resumeRound) {
    auto v = parseCount("--resume-round", *f.resumeRound, 1, scenario::kMaxRounds);
    if (!v) return v.status();
    n.resumeRound = *v;
  }
  return n;
}

std::vector<std::string> overrideArgs(std::optional<uint64_t> rounds, std::optional<uint64_t> seed) {
  std::vector<std::string> out;
  if (rounds) out.insert(out.end(), {"--rounds", std::to_string(*rounds)});
  if (seed) out.insert(out.end(), {"--seed", std::to_string(*seed)});
  return out;
}

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
core::Status needsTrainer(const scenario::Scenario& s, const std::string& path) {
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
int mergeRun(const std::string& scenarioPath, const std::string& outDir, const Numbers& num,
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
  if (num.seed && *num.seed != h0.seed) {
    return report(core::invalidArgument("--seed " + std::to_string(*num.seed) +
                                        ": the peers ran with seed " + std::to_string(h0.seed) +
                                        " (" + engine::peerLogPath(outDir, 0).string() +
                                        "); leave --seed out, merge reads it from the logs"));
  }
  if (num.rounds && *num.rounds != h0.rounds) {
    return report(core::invalidArgument("--rounds " + std::to_string(*num.rounds) +
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
              const Numbers& num, const std::vector<std::string>& trainerCommand,
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
  std::optional<uint64_t> rounds = num.rounds, seed = num.seed;
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
  if (auto st = runtime::writeRunInfo(lo.outDir, e->scenario, "run", command); !st.isOk()) {
    return runFailed(st);
  }
  auto result = runtime::launchPeers(*e, lo);
  if (!result) return runFailed(result.status());
  printResult(*e, result->last, lo.outDir, "peer processes, resumed");
  return 0;
}

}  // namespace

int launcherMain(int argc, char** argv) {
  core::ignoreFileSizeSignal();  // a full disk or file-size limit is an error, not a crash
  const std::vector<std::string> command(argv, argv + argc);
  CLI::App app{"Starling node launcher: decentralized training without a server"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "node-launcher " STARLING_VERSION);

  std::string scenarioPath;
  std::string outDir;
  NumberFlags flags;
  const std::string roundsHelp =
      "override the scenario's rounds (1.." + std::to_string(scenario::kMaxRounds) + ")";
  auto* sim = app.add_subcommand("simulate", "run every node of SCENARIO in this process");
  sim->add_option("scenario", scenarioPath, "scenario JSON file")->required();
  sim->add_option("--out", outDir, "output folder (default runs/<scenario name>)");
  sim->add_option("--rounds", flags.rounds, roundsHelp);
  sim->add_option("--seed", flags.seed, "override the scenario's seed (0..2^64-1)");

  auto* run = app.add_subcommand("run", "start one peer process per node on this machine");
  run->add_option("scenario", scenarioPath, "scenario JSON file")->required();
  run->add_option("--out", outDir, "output folder (default runs/<scenario name>)");
  run->add_option("--rounds", flags.rounds, roundsHelp);
  run->add_option("--seed", flags.seed, "override the scenario's seed (0..2^64-1)");
  std::string resumeDir;
  run->add_option("--resume", resumeDir,
                  "continue the killed run whose output folder is DIR from its newest "
                  "checkpoints (the scenario needs a \"checkpoint\" section)");
  std::vector<std::string> trainerCommand;
  run->add_option("command", trainerCommand,
                  "after --: the trainer to start once per node (it makes its starling::Peer "
                  "with Peer::fromEnv())");

  std::string peerList;
  auto* peer = app.add_subcommand("peer", "run one peer (rank from --rank, SLURM_PROCID, "
                                          "OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK)");
  peer->add_option("scenario", scenarioPath, "scenario JSON file")->required();
  peer->add_option("--rank", flags.rank, "this peer's rank (default: SLURM_PROCID, "
                                         "OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK)");
  peer->add_option("--out", outDir, "output folder (default runs/<scenario name>)");
  peer->add_option("--peers", peerList, "host:port of every rank, comma-separated (overrides "
                                        "the scenario's peers section)");
  std::string hostfile;
  peer->add_option("--hostfile", hostfile,
                   "OpenMPI-style hostfile (\"host slots=N\" per line): rank r runs on the host "
                   "whose slots it fills, listening on peers.base_port + r");
  peer->add_option("--rounds", flags.rounds, roundsHelp);
  peer->add_option("--seed", flags.seed, "override the scenario's seed (0..2^64-1)");
  // Set by `run --resume`: load OUT/checkpoints/rank-R/round-N.ckpt and go on from round N.
  peer->add_option("--resume-round", flags.resumeRound, "")->group("");
  bool rejoin = false;
  peer->add_flag("--rejoin", rejoin,
                 "this rank was lost and restarted: ask its neighbours to take it back (their "
                 "state, at a round they agree on; needs faults.on_peer_loss \"continue\")");

  auto* merge = app.add_subcommand("merge", "merge the peer logs of a run into metrics.jsonl and "
                                            "summary.json (after srun/mpirun)");
  merge->add_option("scenario", scenarioPath, "scenario JSON file the peers ran")->required();
  merge->add_option("--out", outDir, "the run's output folder")->required();
  merge->add_option("--rounds", flags.rounds, "optional: checked against the peer logs");
  merge->add_option("--seed", flags.seed, "optional: checked against the peer logs");

  std::vector<std::string> validatePaths;
  auto* val = app.add_subcommand("validate", "check scenario files without running them");
  val->add_option("scenario", validatePaths, "scenario JSON files")->required();

  std::string format = "text";
  auto* topo = app.add_subcommand("topology", "print one round's graph and mixing matrix");
  topo->add_option("scenario", scenarioPath, "scenario JSON file")->required();
  topo->add_option("--round", flags.round, "round number (default 0)");
  topo->add_option("--format", format, "text, json or dot")
      ->check(CLI::IsMember({"text", "json", "dot"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  auto num = checkNumbers(flags);
  if (!num) return report(num.status());
  const std::optional<uint64_t> rounds = num->rounds, seed = num->seed;

  if (*val) {
    int rc = 0;
    for (const auto& path : validatePaths) {
      if (auto s = scenario::loadScenario(path); s && !s->hasProblem) {
        if (auto st = runtime::checkBeforeStart(*s, /*local=*/false); !st.isOk()) {
          rc = std::max(rc, report(st));
          continue;
        }
        std::printf("%s: ok (%s, %d nodes, for a trainer: run it with `node-launcher run %s -- "
                    "COMMAND`)\n", path.c_str(), s->name.c_str(), s->nodes, path.c_str());
        continue;
      }
      auto e = load(path, std::nullopt, std::nullopt, /*solve=*/true);
      if (!e) {
        rc = std::max(rc, report(e.status()));
      } else if (auto st = runtime::checkBeforeStart(e->scenario, /*local=*/false); !st.isOk()) {
        rc = std::max(rc, report(st));
      } else {
        std::printf("%s: ok (%s, %d nodes, %zu samples, d = %d)\n", path.c_str(),
                    e->scenario.name.c_str(), e->scenario.nodes, e->trainingSamples(),
                    static_cast<int>(e->modelDim()));
      }
    }
    return rc;
  }

  if (*topo) {
    auto scenario = scenario::loadScenario(scenarioPath);
    if (!scenario) return report(scenario.status());
    auto schedule = topology::Schedule::create(scenario->topology);
    if (!schedule) return report(core::invalidArgument(scenarioPath + ": /topology: " +
                                                       schedule.status().message()));
    const auto fmt = format == "json"  ? runtime::ReportFormat::kJson
                     : format == "dot" ? runtime::ReportFormat::kDot
                                       : runtime::ReportFormat::kText;
    std::fputs(runtime::describeRound(num->round, *(*schedule)->at(num->round), fmt,
                                      &scenario->topology)
                   .c_str(),
               stdout);
    return 0;
  }

  if (*peer) {
    auto e = load(scenarioPath, rounds, seed, /*solve=*/false);
    if (!e) return report(e.status());
    runtime::PeerOptions po;
    std::optional<int> rank = num->rank;
    if (!rank) rank = rankFromEnvironment();
    runtime::PeerPlacementRequest request;
    request.peersFlag = peerList;
    request.hostfile = hostfile;
    request.rank = rank;
    auto placed = runtime::placePeer(e->scenario, request, runtime::processEnvironment());
    if (!placed) {
      return report(core::Status(placed.status().code(),
                                 "peer" + (rank ? " " + std::to_string(*rank) : std::string()) +
                                     ": " + placed.status().message()));
    }
    po.rank = placed->rank;
    po.addresses = std::move(placed->addresses);
    po.outDir = outDir.empty() ? std::filesystem::path("runs") / e->scenario.name
                               : std::filesystem::path(outDir);
    std::fprintf(stderr, "node-launcher peer %d: addresses from %s\n", po.rank,
                 placed->source.c_str());
    po.stop = &gStop;
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGTERM, onStopSignal);
    bool leftRun = false;
    po.leftRun = &leftRun;
    po.resumeRound = num->resumeRound;
    po.rejoin = rejoin;
    if (auto st = runtime::runPeer(*e, po); !st.isOk()) {
      if (leftRun) {
        std::fprintf(stderr, "node-launcher peer %d: %s\n", po.rank, st.message().c_str());
        return runtime::kExitLeftRun;
      }
      if (st.code() == core::StatusCode::kDiverged) {
        std::fprintf(stderr, "node-launcher peer %d: %s\n", po.rank, st.message().c_str());
      } else {
        std::fprintf(stderr, "node-launcher peer %d: %s\n", po.rank, st.toString().c_str());
      }
      return st.code() == core::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
    }
    return 0;
  }

  const auto outFor = [&](const scenario::Experiment& e) {
    return outDir.empty() ? std::filesystem::path("runs") / e.scenario.name
                          : std::filesystem::path(outDir);
  };

  if (*merge) return mergeRun(scenarioPath, outDir, *num, command);

  if (*run && !resumeDir.empty()) return resumeRun(scenarioPath, resumeDir, outDir, *num,
                                                   trainerCommand, command);

  if (*run && !trainerCommand.empty()) {
    auto scenario = scenario::loadScenario(scenarioPath);
    if (!scenario) return report(scenario.status());
    if (rounds || seed) {
      return report(core::invalidArgument("--rounds and --seed do not apply to a trainer's run (the "
                                          "trainer decides its steps; set seed in the scenario)"));
    }
    if (scenario->transport.kind != scenario::TransportConfig::Kind::kUcx) {
      return report(core::invalidArgument(scenarioPath + ": /transport/kind: a trainer's run needs "
                                          "\"ucx\" (one process per node)"));
    }
    if (auto st = runtime::checkBeforeStart(*scenario, /*local=*/true); !st.isOk()) {
      return report(st);
    }
    runtime::LaunchOptions lo;
    lo.scenarioPath = scenarioPath;
    lo.command = trainerCommand;
    lo.outDir = outDir.empty() ? std::filesystem::path("runs") / scenario->name
                               : std::filesystem::path(outDir);
    auto lock = claimRunFolder(lo.outDir, /*fresh=*/true);
    if (!lock) return report(lock.status());
    if (auto st = runtime::writeRunInfo(lo.outDir, *scenario, "run", command); !st.isOk()) {
      return runFailed(st);
    }
    auto result = runtime::launchTrainers(*scenario, lo);
    if (!result) return runFailed(result.status());
    if (!result->rounds) {
      std::printf("%s: the trainers finished without logging a round (no Peer step or mix)\n"
                  "  outputs: %s\n", scenario->name.c_str(), lo.outDir.string().c_str());
      return 0;
    }
    std::string lost;
    for (const auto& [rank, round] : result->lost) {
      lost += (lost.empty() ? "; lost: rank " : ", rank ") + std::to_string(rank) +
              " in round " + std::to_string(round);
    }
    // Ranks that stopped short of the others (and are not lost): named, with where they got.
    std::string shortRanks;
    for (int r = 0; r < scenario->nodes; ++r) {
      if (result->lost.count(r)) continue;
      const auto it = result->lastRoundByRank.find(r);
      if (it != result->lastRoundByRank.end() && it->second == *result->rounds) continue;
      shortRanks += (shortRanks.empty() ? "; stopped short: rank " : ", rank ") +
                    std::to_string(r) +
                    (it == result->lastRoundByRank.end()
                         ? std::string(" (no round logged)")
                         : " at round " + std::to_string(it->second));
    }
    std::printf("%s: %llu rounds on %d trainer processes (%s, %s): %s%s%s\n  outputs: %s\n",
                scenario->name.c_str(), static_cast<unsigned long long>(*result->rounds),
                scenario->nodes, optim::algorithmKindName(scenario->algorithm.kind),
                topology::graphKindName(scenario->topology.base.kind), result->detail.c_str(),
                lost.c_str(), shortRanks.c_str(), lo.outDir.string().c_str());
    return 0;
  }

  auto e = load(scenarioPath, rounds, seed, /*solve=*/true);
  if (!e) return report(e.status());

  if (*run && e->scenario.transport.kind == scenario::TransportConfig::Kind::kUcx) {
    if (auto st = runtime::checkBeforeStart(e->scenario, /*local=*/true); !st.isOk()) {
      return report(st);
    }
    runtime::LaunchOptions lo = peerLaunch(scenarioPath, rounds, seed, outFor(*e));
    auto lock = claimRunFolder(lo.outDir, /*fresh=*/true);
    if (!lock) return report(lock.status());
    if (auto st = runtime::writeRunInfo(lo.outDir, e->scenario, "run", command); !st.isOk()) {
      return runFailed(st);
    }
    auto result = runtime::launchPeers(*e, lo);
    if (!result) return runFailed(result.status());
    printResult(*e, result->last, lo.outDir, "peer processes");
    return 0;
  }

  // simulate (and run with the inproc transport)
  runtime::SimulateOptions opt;
  opt.outDir = outFor(*e);
  opt.progress = true;
  auto lock = claimRunFolder(opt.outDir, /*fresh=*/true);
  if (!lock) return report(lock.status());
  if (auto st = runtime::writeRunInfo(opt.outDir, e->scenario, "simulate", command); !st.isOk()) {
    return runFailed(st);
  }
  auto result = runtime::simulate(*e, opt);
  if (!result) return runFailed(result.status());
  printResult(*e, result->last, opt.outDir, "simulated nodes");
  if (e->scenario.asynchronous.enabled && !result->asyncFinish.empty()) {
    const auto [first, last] =
        std::minmax_element(result->asyncFinish.begin(), result->asyncFinish.end());
    std::printf(
        "  asynchronous: staleness mixed at most %llu (bound %llu); nodes finished at "
        "virtual time %.6g to %.6g\n",
        static_cast<unsigned long long>(result->maxStalenessSeen),
        static_cast<unsigned long long>(e->scenario.asynchronous.maxStaleness), *first, *last);
  }
  return 0;
}

// Sizes are checked before anything large is allocated (scenario/scenario_limits.h), but that is
// an estimate: running out of memory anyway is a clear error, not an abort.
int main(int argc, char** argv) {
  try {
    return launcherMain(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "node-launcher: out of memory (the scenario's sizes passed the estimate of "
                 "scenario/scenario_limits.h; STARLING_MEMORY_LIMIT_GIB lowers the limit it checks "
                 "against)\n");
    return kExitFailure;
  }
}
