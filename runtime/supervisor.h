// The supervisor behind `node-launcher run` (runtime/launcher.h): one child process per rank on
// this machine, their output kept and streamed, their exits reaped (Boost.Asio: the children's
// output pipes, SIGCHLD, SIGINT and SIGTERM), lost ranks restarted when the scenario says so, and
// the merger of their logs polled as lines come. Internal to runtime/.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/launcher.h"
#include "runtime/merge.h"

namespace starling::runtime {

// What the supervisor needs of the merger of the peers' logs: PeerLogMerger for peers that run
// the scenario's problem, TrainerLogMerger for trainers (run -- COMMAND).
struct Merging {
  std::function<core::Result<int>()> poll;
  std::function<std::optional<RootCause>()> rootCause;
  std::function<std::optional<uint64_t>()> lastRound;
  std::function<std::string()> detail;  // for the progress line
  // Ranks the survivors declared lost (faults.on_peer_loss "continue"); empty otherwise.
  std::function<std::map<int, uint64_t>()> lost = [] { return std::map<int, uint64_t>{}; };
};

// Starts one process per rank (`node-launcher peer`, or opt.command for trainers) at the given
// addresses and supervises them until every one has finished or the run has failed: after a
// failure the others get opt.failureGrace to report, then SIGTERM and, opt.terminateGrace later,
// SIGKILL. Not thread-safe; call from main(). Errors: kUnavailable naming the peer that failed
// first with its last lines (or every peer lost), kCancelled after SIGINT/SIGTERM, kIoError when
// a process could not be started, or the merger's error.
core::Status supervise(const scenario::Scenario& s, const LaunchOptions& opt, Merging merging,
                       const std::vector<std::string>& addresses);

}  // namespace starling::runtime
