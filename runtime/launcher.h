// The launcher of `node-launcher run`: starts one peer process per node on this machine,
// supervises them, and merges their logs into metrics.jsonl and summary.json as they are written.
//
// The peers do the training; the launcher only supervises (Boost.Asio: the children's output
// pipes, their exits through SIGCHLD, and SIGINT/SIGTERM). If a peer fails, the others get a grace
// period to report what they saw (a lost neighbour is named in their errors), are then stopped
// (SIGTERM, later SIGKILL), and the launcher reports which peer failed first with its last log
// lines. Children are started with PR_SET_PDEATHSIG so that none outlives the launcher, even when
// the launcher itself is killed. Not thread-safe; call from main().
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/metrics.h"
#include "scenario/experiment.h"

namespace starling::runtime {

struct LaunchOptions {
  std::string executable;                // node-launcher (for `node-launcher peer`)
  std::string scenarioPath;              // as given on the command line
  std::vector<std::string> peerArgs;     // extra arguments for every peer (--rounds, --seed)
  // launchTrainers: the user's program (run SCENARIO -- COMMAND...), one copy per node, with
  // STARLING_RANK, STARLING_NODES, STARLING_SCENARIO, STARLING_OUT and STARLING_PEERS (the
  // host:port of every rank, comma-separated) in its environment.
  std::vector<std::string> command;
  std::filesystem::path outDir;
  bool progress = true;                  // progress line on stderr
  // Resume (runtime/resume.h): every peer starts with `--resume-round resumeRound` and the
  // output folder's peer logs and checkpoints are kept; the ranks in `notStarted` (lost before
  // that round, on_peer_loss "continue") are not started. resumeRound == rounds: nothing is
  // started, the logs are merged.
  std::optional<uint64_t> resumeRound;
  std::vector<int> notStarted;
  std::chrono::milliseconds failureGrace{3000};    // others may report after a failure
  std::chrono::milliseconds terminateGrace{3000};  // SIGTERM, then SIGKILL
};

struct LaunchResult {
  RoundMetrics last;
  std::vector<double> xMean;
};

// Errors: kUnavailable when a peer failed (the message names it and quotes its last lines),
// kCancelled after SIGINT/SIGTERM, kIoError when a process could not be started.
core::Result<LaunchResult> launchPeers(const scenario::Experiment& e, const LaunchOptions& options);

// Asynchronous gossip's account of a run from its peer logs in outDir/peers (runtime/peer.h):
// the largest "staleness_max" and each peer's wall_s at the scenario's last round (0 where its
// log stops short). What `run` and `merge` write as summary.json's "asynchronous".
AsyncReport asyncReportFromPeerLogs(const scenario::Scenario& s,
                                    const std::filesystem::path& outDir);

struct TrainerRunResult {
  std::optional<uint64_t> rounds;  // the last round every trainer logged (none: no round)
  std::string detail;              // consensus distance and the trainers' metrics, in words
  std::map<int, uint64_t> lost;    // on_peer_loss "continue": rank -> the round it was lost in
  std::map<int, uint64_t> lastRoundByRank;  // the last round each rank logged
};

// `node-launcher run SCENARIO -- COMMAND`: starts COMMAND once per node (options.command), with
// the same supervision as launchPeers, and merges what their starling::Peer objects log into
// metrics.jsonl and summary.json (runtime/trainer_merge.h). Errors as launchPeers.
core::Result<TrainerRunResult> launchTrainers(const scenario::Scenario& s,
                                              const LaunchOptions& options);

// Where the launcher keeps everything rank `rank`'s process printed (stdout and stderr, in
// order; a restarted process appends after a "[node-launcher] rank R restarted" line):
// OUT/peers/rank-R.out. A trainer's lines are also printed on the launcher's stdout as they come,
// each after "[rank R] ".
std::filesystem::path outputPath(const std::filesystem::path& outDir, int rank);

// `count` free TCP ports on 127.0.0.1, outside the kernel's ephemeral range (where every UCX
// worker and outgoing connection takes ports, so a port picked there could be gone by the time
// a peer binds it), each checked by binding it.
core::Result<std::vector<uint16_t>> freeLoopbackPorts(int count);

}  // namespace starling::runtime
