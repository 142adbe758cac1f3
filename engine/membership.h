// Membership: which nodes of a run are still in it, and the round topology over the survivors.
//
// With `faults.on_peer_loss: "continue"` a run keeps going when peers die. Every survivor holds
// the same Membership (the same nodes removed at the same rounds, docs/algorithms.md §18) and
// rebuilds each round's graph from the schedule's graph deterministically:
//   - "reconnect" (default): the edges among survivors stay; for every connected group of lost
//     nodes, the survivors that touched the group are joined in a path in id order. A ring closes
//     over the gap; any graph that was connected stays connected.
//   - "none": only the edges among survivors; a graph the loss disconnects is refused with its
//     components named (the run stops: no silent split into separate trainings).
// Weights are recomputed from the repaired graph's degrees with the scenario's rule (uniform
// weights, which need equal degrees across every edge, fall back to Metropolis). Lost nodes are
// left isolated (self weight 1) and take no part.
// Thread-safety: values; a const Membership may be shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/state.h"
#include "core/status.h"
#include "engine/options.h"
#include "topology/graph.h"
#include "topology/schedule.h"

namespace starling::engine {

// One change of membership: the nodes that leave and those that come back (faults.restart), and
// the round from which it holds.
struct MembershipChange {
  uint64_t round = 0;       // first round without them (with them, for `joined`)
  uint64_t epoch = 0;       // the membership's epoch after the change (1 for the first)
  std::vector<int> left;    // sorted
  std::vector<int> joined;  // sorted: lost ranks whose restarted process rejoined
  std::string why;          // "killed by the fault script", "no message in round 12", ...
};

class Membership {
 public:
  explicit Membership(int nodes) : alive_(nodes, true), survivors_(nodes) {}

  int nodes() const { return static_cast<int>(alive_.size()); }
  bool alive(int rank) const { return alive_[rank]; }
  const std::vector<bool>& aliveMask() const { return alive_; }
  int survivors() const { return survivors_; }
  uint64_t epoch() const { return epoch_; }
  bool changed() const { return epoch_ > 0; }

  // Removes `ranks` (those already out are ignored) and advances the epoch.
  void remove(const std::vector<int>& ranks);
  // Takes `ranks` back in (rejoined; those in already are ignored) and advances the epoch.
  void add(const std::vector<int>& ranks);
  // A rejoining peer takes its sponsor's membership (engine/rejoin.h). kInvalidArgument unless
  // `alive` has nodes() entries.
  core::Status adopt(const std::vector<bool>& alive, uint64_t epoch);

  // Checkpoints (core/state.h): the epoch and who is out.
  void visitState(core::StateVisitor& v);

 private:
  std::vector<bool> alive_;
  int survivors_;
  uint64_t epoch_ = 0;
};

// The graph of one round over the survivors of `alive` (see the header comment). Errors
// (kFailedPrecondition): "none" repair and a disconnected survivor graph, naming its components.
core::Result<topology::Graph> repairGraph(const topology::Graph& g, const std::vector<bool>& alive,
                                          RepairKind repair);

// Round topology over the survivors: the repaired graph with weights of `rule`.
core::Result<std::shared_ptr<const topology::RoundTopology>> repairTopology(
    const topology::RoundTopology& base, const std::vector<bool>& alive, RepairKind repair,
    topology::WeightRule rule);

// Caches the repaired topology per epoch for static schedules (a per-round schedule is repaired
// every round). `at(r)` is the schedule's round r while nobody was lost.
class SurvivorSchedule {
 public:
  SurvivorSchedule(const topology::Schedule& schedule, RepairKind repair)
      : schedule_(schedule), repair_(repair) {}
  core::Result<std::shared_ptr<const topology::RoundTopology>> at(uint64_t round,
                                                                  const Membership& m);
  // The schedule's support graph over the survivors (for algorithms that track neighbours).
  core::Result<const topology::Graph*> support(const Membership& m);

 private:
  const topology::Schedule& schedule_;
  RepairKind repair_;
  uint64_t cachedEpoch_ = ~uint64_t{0};
  std::shared_ptr<const topology::RoundTopology> cached_;
  uint64_t supportEpoch_ = ~uint64_t{0};
  topology::Graph support_;
};

// Lines of membership.jsonl (and of a peer log): a loss noticed, and a change applied.
//   {"lost": {"round", "rank", "why"}}
//   {"membership": {"round", "epoch", "left": [...], "joined": [...], "why"}}
// ("joined" only when a rank came back.)
std::string membershipLostLine(uint64_t round, int rank, const std::string& why);
std::string membershipChangeLine(const MembershipChange& c);

// Rounds between a survivor noticing the loss of the ranks in `lost` (those lost before
// included) and the round the change takes effect: long enough for the news to reach every
// survivor over the support graph without them (the diameter of what is left, plus one round of
// skew between neighbours that notice it a round apart, plus one of margin). Every peer computes
// it from the same graph and the same lost ranks, so the proposals agree. faults.agreement_rounds
// when `configured` is above 0, that
// count is taken instead; a graph the loss disconnects gets the node count.
uint64_t agreementRounds(uint64_t configured, const topology::Graph& support,
                         const std::vector<int>& lost);

}  // namespace starling::engine
