// Human- and machine-readable descriptions of one round's graph (node-launcher topology).
#pragma once

#include <string>

#include "topology/schedule.h"

namespace starling::runtime {

enum class ReportFormat { kText, kJson, kDot };

// Nodes, edges, degrees, diameter, the dense mixing matrix and its spectral gap. The JSON object
// has the keys round, nodes, edges ([i, j] pairs with i < j), degrees, diameter, weights (n x n)
// and spectral_gap. O(n^3) for the spectral gap.
std::string describeRound(uint64_t round, const topology::RoundTopology& topology,
                          ReportFormat format);

}  // namespace starling::runtime
