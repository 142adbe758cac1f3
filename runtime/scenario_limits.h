// Limits on what a scenario may ask for, checked before anything is read or allocated.
//
// Files: a scenario file is at most kMaxScenarioFileBytes (a real one is a few hundred bytes;
// parsing a 200 MB JSON array took 4.5 GB), nested at most kMaxJsonDepth levels, and a LIBSVM
// file at most maxDataFileBytes(). Both must be regular files (runtime/read_file.h).
//
// Memory: the limit is kDefaultMemoryLimitGiB (16 GiB: fits a 24 GiB machine with room for the
// system), or the value in GiB of the environment variable STARLING_MEMORY_LIMIT_GIB on bigger
// machines.
//
// Thread-safety: free functions; the environment is read on every call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/core/status.h"

namespace starling::runtime {

// A scenario describes a run in well under a kilobyte; one of a megabyte is a mistake.
inline constexpr uint64_t kMaxScenarioFileBytes = uint64_t{1} << 20;
// Scenarios nest 5 levels deep (/topology/schedule/graphs/0/kind).
inline constexpr int kMaxJsonDepth = 32;
// A scenario's `name` becomes a folder (runs/<name>/); longer ones are refused, well inside the
// 255 bytes file systems allow for one path component.
inline constexpr size_t kMaxNameBytes = 128;

inline constexpr double kDefaultMemoryLimitGiB = 16.0;
inline constexpr const char* kMemoryLimitEnv = "STARLING_MEMORY_LIMIT_GIB";

// The memory limit in bytes. kInvalidArgument when STARLING_MEMORY_LIMIT_GIB is set but is not
// a number in [0.001, 2^30] (GiB).
core::Result<uint64_t> memoryLimitBytes();

// LIBSVM files larger than this are refused before they are read: an eighth of the memory limit
// (2 GiB by default), so the text and the parsed samples together stay below half of it.
core::Result<uint64_t> maxDataFileBytes();

}  // namespace starling::runtime
