// The simulator: all n peers of a scenario in one process, on one thread, round by round. Each
// is an engine::Session (engine/session.h), the same object a peer process runs, over the
// in-process transport; the simulator is only the scheduler that starts and completes their
// rounds, so a peer loss goes through the peers' own membership gossip.
//
// Without faults a round is a wavefront (a node completes as soon as its last neighbour has
// started); with a fault script or on_peer_loss "continue" every node starts before any
// completes, a killed rank's endpoint is closed (its neighbours' receives fail as a dead
// process's do) and, once every rank has sent, what has not come for the round ends as a timeout
// would end it (virtual time). Asynchronous gossip (scenario algorithm.asynchronous) runs instead
// as a discrete-event loop in virtual time, each node at its own modelled speed (simulator.cc has
// the order of events). The same Node code and wire frames as a real peer, without a thread per
// node, so thousands of nodes fit. Deterministic: the same scenario and seed give the same
// metrics, apart from wall-clock fields.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include "core/status.h"
#include "engine/membership.h"
#include "runtime/metrics.h"
#include "scenario/experiment.h"

namespace starling::runtime {

struct SimulateOptions {
  // Where metrics.jsonl and summary.json go; nothing is written when empty.
  std::filesystem::path outDir;
  // Prints a progress line on stderr once the run has taken more than a second.
  bool progress = false;
  // Called with every logged round's metrics (tests and tools).
  std::function<void(const RoundMetrics&)> onLog;
  // Called on every logged round as it finishes, before its metrics are computed (where the
  // round's wall_s is read): what a tool times up to there is the rounds alone.
  std::function<void(uint64_t round)> onRoundEnd;
};

struct SimulateResult {
  RoundMetrics last;
  std::vector<double> xMean;
  std::vector<std::vector<double>> models;  // final x_i of every node still running
  std::vector<engine::MembershipChange> changes;  // peers lost (faults.on_peer_loss "continue")
  // Asynchronous gossip (docs/algorithms.md §26): the largest staleness any node mixed with, and
  // the virtual time at which each node finished its last round (a speed-1 round is one unit).
  uint64_t maxStalenessSeen = 0;
  std::vector<double> asyncFinish;
};

core::Result<SimulateResult> simulate(const scenario::Experiment& experiment,
                                      const SimulateOptions& options);

}  // namespace starling::runtime
