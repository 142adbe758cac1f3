// Human- and machine-readable descriptions of one round's graph (node-launcher topology).
#pragma once

#include <string>

#include "topology/schedule.h"
#include "topology/spec.h"

namespace starling::runtime {

enum class ReportFormat { kText, kJson, kDot };

// Above this many nodes the report leaves out the diameter, the dense W and the spectral gap
// (O(n m), O(n^2) memory and O(n^3) time): JSON lists them under "not_computed".
inline constexpr int kDenseReportNodes = 4096;

// Nodes, edges, degrees, diameter, the dense mixing matrix and its spectral gap. The JSON object
// has the keys round, nodes, edges ([i, j] pairs with i < j), degrees, diameter (null when the
// round is disconnected; the text says "inf"), weights (n x n), spectral_gap (exactly 0 when the
// round is disconnected, never negative) and connected. O(n^3) for the spectral gap; past
// kDenseReportNodes nodes diameter, weights and spectral_gap are replaced by
// "not_computed": ["diameter", "weights", "spectral_gap"].
//
// DOT output pins every node's position (for Graphviz's neato, which `dot -T...` switches to by
// itself): a lattice for grids and tori, a circle in node order for every other graph. `spec`,
// when given, is the scenario's topology: it says which rounds are grids (the base graph's kind,
// or cycle[round % size]'s). Without it, a round is drawn as a lattice when it is connected and
// made of lattice edges only (a grid or torus in Starling's row-major numbering).
std::string describeRound(uint64_t round, const topology::RoundTopology& topology,
                          ReportFormat format, const topology::TopologySpec* spec = nullptr);

}  // namespace starling::runtime
