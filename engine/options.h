// What the engine (one peer's rounds, its survival of lost peers, its scripted faults) needs
// to know about a run: a few typed numbers and the fault script, compiled from a scenario by
// scenario::engineOptions (scenario/compile.h) or filled in by a test. The engine never sees
// a Scenario. Thread-safety: values.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "optim/step_size.h"

namespace starling::engine {

// `faults.on_peer_loss` and `faults.repair` (scenarios/README.md).
enum class OnPeerLoss { kStop, kContinue };
enum class RepairKind { kReconnect, kNone };
// {"kill": R, "at_round": N}: rank R dies before round N (0-based; after N completed rounds). In
// `run` a real SIGKILL of the peer process, which sends it to itself; in `simulate` the node
// stops taking part.
// {"corrupt": P, "from_round": N, "to_round": M}: each model message sent in rounds [N, M) is
// preceded, with probability P, by a copy with one byte flipped (what an attacker or a broken
// link would inject): receivers must count and reject it and the results stay the same.
// {"delay_ms": D, "from_round": N, "to_round": M}: model messages sent in those rounds leave D ms
// late (in `run`; `simulate` has no clock, so nothing changes there).
// {"drop": P, ...}: each such message is lost with probability P. Its receiver cannot tell it
// from a silent sender: with on_peer_loss "stop" the run stops naming the link; with "continue"
// the receiver takes the sender for lost and the sender, which knows, leaves the run in that
// round, once its messages are sent (docs/algorithms.md §18, "Dropped messages").
// {"duplicate": P, ...}: the message is delivered twice; the receiver uses one copy and the
// other is collected (FaultInjector).
// {"reorder": P, ...}: the message is held back and leaves after the next message its sender
// sends (or when the sender next waits), out of send order.
// "link": [A, B] limits any of these to messages between ranks A and B.
struct FaultEvent {
  enum class Kind { kKill, kCorrupt, kDelay, kDrop, kDuplicate, kReorder };
  Kind kind = Kind::kKill;
  int kill = -1;
  uint64_t atRound = 0;
  double probability = 0;
  uint64_t delayMs = 0;
  uint64_t fromRound = 0;
  uint64_t toRound = 0;
  int linkA = -1, linkB = -1;  // -1: every link
};
// The engine's view of a run.
struct Options {
  int nodes = 0;
  uint64_t rounds = 0;  // 0: open-ended (a trainer's run)
  optim::StepSizeSchedule stepSize;
  uint64_t connectTimeoutMs = 10000;
  uint64_t roundTimeoutMs = 30000;
  OnPeerLoss onPeerLoss = OnPeerLoss::kStop;
  RepairKind repair = RepairKind::kReconnect;
  uint64_t agreementRounds = 0;  // rounds from noticing a loss to the change; 0: automatic
  std::vector<FaultEvent> faultScript;
  // Every node's divergence guard (Node::setDivergenceLimit; `divergence_max_abs`).
  double divergenceMaxAbs = std::numeric_limits<double>::infinity();
  // Asynchronous gossip's staleness bound (Node::setAsynchronous); none: synchronous rounds.
  std::optional<uint64_t> maxStaleness;
  // A failed round's status as the user sees it, with `context` ("rank 3, round 12") added; the
  // default only adds the context. The scenario's names the knobs that help a diverged run.
  std::function<core::Status(const core::Status&, const std::string& context)> explainFailure;
};

}  // namespace starling::engine
