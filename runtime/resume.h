// Resuming a killed run (`node-launcher run SCENARIO --resume OUT`): which round to restart
// from, and putting the output folder back to that round (runtime/checkpoint.h has the files).
//
// For every rank, the newest checkpoint in OUT/checkpoints/rank-R/ that verifies (magic,
// version, length, CRC32C, the rank and round its name says, and a peer log at least as long as
// the checkpoint recorded, ending a line there) counts; a damaged one is skipped with a message
// naming the file and why, and the one before it is used. The resume round is the newest round
// that every rank has a verified checkpoint of. With faults.on_peer_loss "continue", a rank
// without one may instead be one that the other ranks' checkpoints of that round hold lost (it
// is not restarted; the survivors carry on without it, as they did).
// Thread-safety: free functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "scenario/scenario.h"

namespace starling::runtime {

struct ResumePlan {
  uint64_t round = 0;             // rounds completed at the checkpoints resumed from
  std::vector<int> lost;          // ranks not restarted (lost before `round`), sorted
  std::vector<uint64_t> logBytes;  // per rank: the peer log's length at its checkpoint
};

// Chooses the round. `say` gets one line per checkpoint skipped (file and why). Errors
// (kInvalidArgument, for exit status 2): no checkpoints in `outDir`; checkpoints written for
// another scenario (hash); no round every rank has.
core::Result<ResumePlan> planResume(const scenario::Scenario& s,
                                    const std::filesystem::path& outDir,
                                    const std::function<void(const std::string&)>& say);

// Puts `outDir` back to the plan's round: each restarted rank's peer log is cut after the
// length its checkpoint recorded (a failure line the killed peer wrote goes with the rest), and
// checkpoints of later rounds, which the resumed run writes again, are deleted.
core::Status rewindToPlan(const scenario::Scenario& s, const std::filesystem::path& outDir,
                          const ResumePlan& plan);

}  // namespace starling::runtime
