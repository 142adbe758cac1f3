// Time-varying topologies: round r's graph and weights as a pure function of (spec, seed, r).
//
// A Schedule is built once from a TopologySpec (validated there: sizes, probabilities, and that
// the graphs connect the nodes over time) and then answers at(r) for any round, in any order, on
// any node, always with the same result: that is how peers agree on the graph without talking.
// Thread-safety: at() is const and does not mutate; safe from several threads.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "topology/graph.h"
#include "topology/mixing.h"
#include "topology/spec.h"

namespace starling::topology {

// One round's communication graph with its mixing weights. Immutable; shared between the nodes
// of a simulation through std::shared_ptr<const RoundTopology>.
struct RoundTopology {
  // The round this object was built for. Cached objects (static and cycle schedules) are shared
  // by many rounds and keep the first; callers track the round themselves.
  uint64_t round = 0;
  Graph graph;
  MixingMatrix weights;
};

class Schedule {
 public:
  // Errors (kInvalidArgument, message names the offending field): anything buildGraph rejects; a
  // static or cycle schedule whose graphs (union over the cycle) leave nodes disconnected; a base
  // graph that is disconnected for random_matching/edge_dropout; p outside [0, 1) for
  // edge_dropout; uniform weights on a graph where they are not symmetric.
  static core::Result<std::unique_ptr<Schedule>> create(const TopologySpec& spec);

  // Round r's graph and weights. Cheap for static schedules (the same object every round).
  // Hold the returned pointer while using the graph: per-round kinds build a fresh object.
  std::shared_ptr<const RoundTopology> at(uint64_t round) const;

  int nodes() const { return spec_.nodes; }
  const TopologySpec& spec() const { return spec_; }
  // True when every round has the same graph (kStatic).
  bool isStatic() const { return spec_.schedule.kind == ScheduleKind::kStatic; }

  // Every edge any round can have: the base graph (static, random_matching, edge_dropout), the
  // union of the cycle's graphs, or of one period of one_peer_exponential. Algorithms that keep
  // state per neighbour exchange messages over this graph every round.
  const Graph& support() const { return support_; }

 private:
  explicit Schedule(TopologySpec spec) : spec_(std::move(spec)) {}

  TopologySpec spec_;
  std::shared_ptr<const RoundTopology> staticRound_;       // kStatic
  std::vector<std::shared_ptr<const RoundTopology>> cycle_;  // kCycle
  Graph base_;                                             // matching / dropout base graph
  MixingMatrix baseWeights_;                               // dropout: weights of the base graph
  Graph support_;
};

}  // namespace starling::topology
