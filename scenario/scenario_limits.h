// Limits on what a scenario may ask for, checked before anything is read or allocated.
//
// Files: a scenario file is at most kMaxScenarioFileBytes (a real one is a few hundred bytes;
// parsing a 200 MB JSON array took 4.5 GB), nested at most kMaxJsonDepth levels, and a LIBSVM
// file at most maxDataFileBytes(). Both must be regular files (core/read_file.h).
//
// Memory: every size a scenario may give is bounded on its own (nodes <= 2^20, features <= 2^28,
// ...), but their products are not: 2^32 samples, or 2^28 features on 4 nodes, or a 5 x 2^31
// sketch table per node, each pass every per-key check and then die in the allocator
// (std::bad_alloc, exit 134) after seconds or minutes of work. estimateMemory() multiplies the
// sizes out the way the runtime allocates (see scenario_limits.cc for each term) and a scenario
// above the limit is refused with exit 2, naming the JSON path of the largest term, every term
// and the limit. The limit is kDefaultMemoryLimitGiB (16 GiB: fits a 24 GiB machine with room
// for the system), or the value in GiB of the environment variable STARLING_MEMORY_LIMIT_GIB on
// bigger machines.
//
// Thread-safety: free functions; the environment is read on every call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/read_file.h"
#include "core/status.h"
#include "optim/dataset.h"
#include "scenario/scenario.h"

namespace starling::scenario {

// A scenario describes a run in well under a kilobyte; one of a megabyte is a mistake.
inline constexpr uint64_t kMaxScenarioFileBytes = uint64_t{1} << 20;
// Scenarios nest 5 levels deep (/topology/schedule/graphs/0/kind).
inline constexpr int kMaxJsonDepth = 32;
// A scenario's `name` becomes a folder (runs/<name>/); longer ones are refused, well inside the
// 255 bytes file systems allow for one path component.
inline constexpr size_t kMaxNameBytes = 128;

// memoryLimitBytes() (core/read_file.h) is the limit.

// LIBSVM files larger than this are refused before they are read: an eighth of the memory limit
// (2 GiB by default), so the text and the parsed samples together stay below half of it.
core::Result<uint64_t> maxDataFileBytes();

// What the estimate needs to know about the data set; doubles, because products of the allowed
// sizes overflow 64 bits.
struct DataShape {
  double samples = 0;
  double features = 0;
  double nonZeros = 0;
  // Sum over samples of (non-zeros in the sample)^2: with d^2 it bounds the non-zeros of A^T A,
  // the matrix the central solver factorises.
  double rowNonZerosSquared = 0;
};

DataShape shapeOf(const optim::Dataset& data);
// Expected values for a synthetic data set (its density is random per sample).
DataShape expectedShape(const SyntheticSpec& spec);
// What the scenario alone tells: expectedShape() of synthetic data; for a LIBSVM file only its
// `features`, when given.
DataShape scenarioShape(const Scenario& s);

// Bytes, by where they go.
struct MemoryEstimate {
  double data = 0;      // the samples: data set, the nodes' shards, the solver's matrix
  double solver = 0;    // the central solver's A^T A and its factor
  double models = 0;    // per-node vectors: algorithm state, gradients, frames, decode buffers
  double sketch = 0;    // Count-Sketch tables: frame, encode table, accumulator
  double topology = 0;  // graph adjacency, edge lists and mixing weights
  double total() const { return data + solver + models + sketch + topology; }
};

MemoryEstimate estimateMemory(const Scenario& s, const DataShape& data);

// kInvalidArgument "<file>: <json path>: this run needs an estimated ... of memory, more than the
// limit of ..." when the estimate is above the limit. With a LIBSVM source the scenario alone
// gives only the models' part (and that only when it fixes `features`); it is checked again
// once the file has been read.
core::Status checkMemory(const Scenario& s, const DataShape& data);

}  // namespace starling::scenario
