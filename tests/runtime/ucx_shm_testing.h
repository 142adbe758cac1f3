// Helpers of the shared-memory frame tests (ucx_shm_test.cc, ucx_shm_hostile_test.cc), next to
// ucx_testing.h's: transport options with shared-memory frames on, and where a received view is
// mapped.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/runtime/ucx_testing.h"

namespace starling::transport::ucx_testing {

constexpr const char* kShm = "sysv,posix,cma,tcp";

inline ucx::Options shmOptions(int rank, const std::vector<uint16_t>& ports, const LogLines& log) {
  ucx::Options o = options(rank, ports, log, kShm);
  o.sharedMemoryFrames = true;
  o.sharedMemoryThreshold = 4096;
  return o;
}

// Whether `p` lies in a mapping of this process backed by a memfd named `name` (the receive-side
// view: "starling-frames" for segments, "starling-ring" for the small-frame rings).
inline bool inMemfdMapping(const void* p, const char* name = "memfd:starling-frames") {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return false;
  char line[512];
  bool found = false;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && addr >= lo && addr < hi) {
      found = std::strstr(line, name) != nullptr;
    }
  }
  std::fclose(f);
  return found;
}

}  // namespace starling::transport::ucx_testing
