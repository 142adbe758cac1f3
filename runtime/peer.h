// One peer of a multi-process run: node `rank` of the scenario, over the network transport.
//
// The peer trains and writes <outDir>/peers/rank-<R>.jsonl, one JSON object per line, each on
// disk before the next round starts (LineFile: whole lines or none):
//   a header   {"peer_log": 1, "rank", "nodes", "seed", "rounds", "scenario_hash", "address",
//               "version", "run_id", "trainer"}: what `merge` needs to check it merges the run
//               it thinks it does (one run, of the scenario's problem);
//   per logged round {"round", "bytes_sent", "corrupt_messages", "compression_error_sum",
//               "compression_error_count", "wall_s", "x"}: its counters and its model x_i
//               (a model of more than kFullModelLogMaxDim elements: "sketch", its consensus
//               sketch (metrics.h), in place of "x" except at the last round, and, for the
//               mlp problem, "test_accuracy_own": its own model's accuracy on the first
//               1,000 test images); with asynchronous gossip also "staleness" (the
//               largest of its last round) and "staleness_max" (over all its rounds);
//   on failure {"failed": {"round", "code", "lost_rank" (the neighbour it lost, if any),
//               "message"}}: so that the launcher and `merge` can name the root cause.
// The launcher (or `node-launcher merge`) turns the n peer logs into metrics.jsonl and
// summary.json, exactly as the simulator computes them. Format: README.md "Output files".
// A peer prints one line when it starts (rank, address) and one when it ends.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/peer_log.h"
#include "scenario/compile.h"
#include "scenario/experiment.h"
#include "transport/factory.h"

namespace starling::runtime {

// `node-launcher peer`'s exit status when the other peers declared it lost (it stalled past the
// round timeout) and it left the run: a loss, not a failure, for the launcher.
inline constexpr int kExitLeftRun = 3;

struct PeerOptions {
  int rank = 0;
  std::filesystem::path outDir;
  std::vector<std::string> addresses;  // "host:port" per rank; empty: from the scenario
  // Polled between waits (at least every 200 ms); when it becomes true the peer stops with
  // kCancelled. Owned by the caller (a signal handler's flag).
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const std::string&)> log;  // diagnostics; default stderr
  // Set when the peer left because the others declared it lost (exit with kExitLeftRun).
  bool* leftRun = nullptr;
  // Resume (runtime/checkpoint.h): load the state of outDir/checkpoints/rank-R/round-N.ckpt,
  // append to the peer log after the length that checkpoint recorded, and run rounds N onwards.
  std::optional<uint64_t> resumeRound;
  // Rejoin (engine/rejoin.h): this is a lost rank's restarted process. It asks its neighbours
  // to take it back, starts at the round they name from the model they send, and appends to its
  // peer log. Failing to get back in is a loss (leftRun), not a failure of the run.
  bool rejoin = false;
};

// Runs every round of the scenario as peer `rank` (from options.resumeRound when set). With the
// scenario's `checkpoint` section it writes its whole state every `every` rounds and at the last
// (runtime/checkpoint.h). Errors name the round and the neighbour:
// kTimeout (a neighbour's message did not come within round_timeout_ms), kUnavailable (a
// neighbour could not be reached within connect_timeout_ms), kPeerGone, kCorruption.
core::Status runPeer(const scenario::Experiment& e, const PeerOptions& options);

// What would stop the peers of `s` once started, checked before any starts (`validate`, and the
// launcher before it starts anything): security.encrypt without a key (neither
// /security/key_file nor STARLING_KEY_FILE), a STARLING_KEY_FILE that cannot be used (missing,
// readable by others, the wrong size); and with `local` (every rank starts on this machine, as
// `run` starts them) an address whose host no interface here holds, or whose port another
// process holds. kInvalidArgument naming the scenario file and the JSON path (or the variable).
core::Status checkBeforeStart(const scenario::Scenario& s, bool local);

}  // namespace starling::runtime
