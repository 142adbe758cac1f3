// Where a run's samples come from: LIBSVM files, seeded synthetic generators, and the split of the
// samples over the nodes.
//
// All functions are pure apart from reading the named file; the same inputs give the same
// Dataset on every machine. Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "optim/dataset.h"
#include "optim/problem.h"
#include "core/status.h"

namespace starling::scenario {

// The most features a data set may have (a scenario's `features`, a LIBSVM index).
inline constexpr int kMaxFeatures = 1 << 28;

// LIBSVM text format: `label idx:value idx:value ...`, 1-based strictly increasing indices,
// `#` starts a comment, blank lines are skipped. `features`, when given, fixes d (an index above
// it is an error); otherwise d is the largest index seen, at most kMaxFeatures. Errors are
// kCorruption with "<name>:<line>: <what>" (name is the file path, or the name passed to
// parseLibsvm). readLibsvm reads only a regular file of at most maxDataFileBytes()
// (scenario/scenario_limits.h): kInvalidArgument for a FIFO, a device or a larger file,
// kNotFound/kIoError for a file that cannot be read.
core::Result<optim::Dataset> parseLibsvm(std::string_view text, std::string_view name,
                                         std::optional<int> features);
core::Result<optim::Dataset> readLibsvm(const std::string& path, std::optional<int> features);

struct SyntheticSpec {
  size_t samples = 1000;
  int features = 10;
  // 0: every node's samples come from the same model; larger values move node i's local optimum
  // further from the others' (each of the `nodes` groups of samples gets its own model offset).
  double heterogeneity = 0.0;
  double noise = 0.1;    // least squares: std-dev of the label noise; logistic: label flip rate
  double density = 1.0;  // fraction of non-zero features per sample, in (0, 1]
};

// Samples are generated in `nodes` contiguous groups, exactly the blocks that a contiguous
// partitionSamples() hands out, each from its own model x_g = x_true + heterogeneity * delta_g;
// with a contiguous partition node i therefore holds group i. Deterministic in `seed`.
core::Result<optim::Dataset> makeSynthetic(const SyntheticSpec& spec, optim::LossKind loss,
                                           int nodes, uint64_t seed);

// kIid is kRandom under the name used for label data. kDirichlet and kShards follow the labels of
// a classification data set (scenario/partition.h).
enum class PartitionKind { kContiguous, kRandom, kDirichlet, kShards, kIid };

// Sample indices of each node: contiguous blocks of near-equal size (the first samples % nodes
// nodes get one more), or a seeded random permutation cut the same way. Requires
// samples >= nodes (kInvalidArgument otherwise) so every node holds at least one sample.
// Label partitions (kDirichlet, kShards) are refused here: they need the labels.
core::Result<std::vector<std::vector<size_t>>> partitionSamples(size_t samples, int nodes,
                                                                PartitionKind kind,
                                                                uint64_t seed);

}  // namespace starling::scenario
