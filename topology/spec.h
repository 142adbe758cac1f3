// Plain descriptions of a communication graph and of how it changes from round to round.
//
// These are values parsed once from a scenario (scenario/scenario.cc) and handed to the topology
// module; nothing here knows JSON. Every field has the scenario's default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace starling::topology {

enum class GraphKind { kRing, kLine, kGrid, kRandom, kExponential, kComplete, kStar };
enum class WeightRule { kMetropolis, kMaxDegree, kUniform };

struct GraphSpec {
  GraphKind kind = GraphKind::kRing;
  WeightRule weights = WeightRule::kMetropolis;
  int rows = 0;        // grid only; rows * cols == nodes
  int cols = 0;        // grid only
  bool torus = false;  // grid only: wrap-around edges
  double p = 0.0;      // random only: Erdős–Rényi edge probability, in (0, 1]
};

enum class ScheduleKind {
  kStatic,              // the base graph every round
  kCycle,               // round r uses cycle[r % cycle.size()]
  kOnePeerExponential,  // round r pairs i with i XOR 2^(r mod ceil(log2 n))
  kRandomMatching,      // a random maximal matching of the base graph's edges, redrawn each round
  kEdgeDropout,         // each base edge dropped independently with probability p each round
};

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::kStatic;
  std::vector<GraphSpec> cycle;  // kCycle only, at least one entry
  double p = 0.0;                // kEdgeDropout only, in [0, 1)
};

struct TopologySpec {
  int nodes = 0;
  uint64_t seed = 0;
  GraphSpec base;  // used by kStatic, kRandomMatching, kEdgeDropout (and for weights of matchings)
  ScheduleSpec schedule;
};

const char* graphKindName(GraphKind kind);
const char* weightRuleName(WeightRule rule);
const char* scheduleKindName(ScheduleKind kind);

}  // namespace starling::topology
