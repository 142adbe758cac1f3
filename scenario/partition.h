// Splits of a labelled data set over the nodes that follow the labels: the non-iid partitions of
// federated and decentralized learning benchmarks. (The label-blind ones, contiguous blocks and a
// random permutation, "iid", are partitionSamples in scenario/data.h.)
//
//   dirichlet(alpha): for every class c, a draw p_c ~ Dirichlet(alpha, ..., alpha) over the n
//     nodes; class c's samples (in a seeded random order) are cut into n runs of sizes
//     proportional to p_c (Hsu, Qi and Brown, "Measuring the effects of non-identical data
//     distribution", 2019). Small alpha (0.1): most nodes see few classes; large alpha: close to
//     iid.
//   shards(s): the samples sorted by label (stable) are cut into n s equal shards, which are
//     dealt out at random, s per node (McMahan et al., "Communication-efficient learning of deep
//     networks from decentralized data", 2017): with s = 2 a node sees about two labels.
// Every node gets at least one sample: a node left empty by a Dirichlet draw takes one sample from
// the node that holds most (deterministically). Each node's indices are in increasing order.
// Deterministic in `seed` (core::Rng). Thread-safety: free functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace starling::scenario {

// kInvalidArgument when samples < nodes, nodes < 1 or alpha is not a finite number > 0.
core::Result<std::vector<std::vector<size_t>>> partitionDirichlet(std::span<const uint8_t> labels,
                                                                  int nodes, double alpha,
                                                                  uint64_t seed);

// kInvalidArgument when samples < nodes * shardsPerNode, nodes < 1 or shardsPerNode < 1.
core::Result<std::vector<std::vector<size_t>>> partitionShards(std::span<const uint8_t> labels,
                                                               int nodes, int shardsPerNode,
                                                               uint64_t seed);

// Gamma(shape, 1) from core::Rng (Marsaglia and Tsang; shape < 1 through Gamma(shape + 1) U^(1 /
// shape)), for the Dirichlet draws. shape > 0.
double gammaDraw(double shape, core::Rng& rng);

}  // namespace starling::scenario
