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
#include "node_launcher_runs.h"
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
using namespace starling::cli;

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

  if (*merge) return mergeRun(scenarioPath, outDir, num->rounds, num->seed, command);

  if (*run && !resumeDir.empty()) return resumeRun(scenarioPath, resumeDir, outDir, num->rounds,
                                                   num->seed, trainerCommand, command);

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
    return launchPeerRun(*e, lo, command, "peer processes");
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
