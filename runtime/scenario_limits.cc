#include "runtime/scenario_limits.h"

#include <cerrno>
#include <cstdlib>
#include <string>

namespace starling::runtime {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

core::Result<uint64_t> memoryLimitBytes() {
  const char* env = std::getenv(kMemoryLimitEnv);
  if (!env || !*env) return static_cast<uint64_t>(kDefaultMemoryLimitGiB * kGiB);
  char* end = nullptr;
  errno = 0;
  const double gib = std::strtod(env, &end);
  if (errno != 0 || end == env || *end != '\0' || !(gib >= 0.001 && gib <= 1073741824.0)) {
    return core::invalidArgument(std::string(kMemoryLimitEnv) + "=" + env +
                                 ": expected the memory limit in GiB, a number in [0.001, 2^30]");
  }
  return static_cast<uint64_t>(gib * kGiB);
}

core::Result<uint64_t> maxDataFileBytes() {
  auto limit = memoryLimitBytes();
  if (!limit) return limit.status();
  return *limit / 8;
}

}  // namespace starling::runtime
