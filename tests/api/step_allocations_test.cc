// A trainer's step() allocates nothing once its rounds are under way (issue: the engine's round,
// the codec and the UCX transport reuse what they allocated in the first rounds). This
// executable replaces the global operator new to count the allocations each peer's thread makes
// inside its own step() calls: the UCX transport's callbacks run inside step() on that thread.
//
// What may still allocate after the first rounds: a neighbour running further ahead than it ever
// did before leaves more frames in flight than the transport held so far (one receive buffer, one
// queue entry: a new high-water mark). In lock-step rounds that is bounded (a neighbour is at most
// one round ahead), so it happens a few times early and then never; an allocation in every round
// is what this test catches.
#include <starling/peer.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "loopback_steps.h"

namespace {

thread_local bool counting = false;
thread_local long allocations = 0;

void* allocate(std::size_t n, std::size_t align) {
  if (counting) ++allocations;
  void* p = align > alignof(std::max_align_t)
                ? std::aligned_alloc(align, (n + align - 1) / align * align)
                : std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n, 0); }
void* operator new[](std::size_t n) { return allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}
// The nothrow forms too: every allocation of this program comes from allocate() and goes back
// with free() (under ASan a block from its own operator new freed here would be a mismatch).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return allocate(n, static_cast<std::size_t>(a));
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  return operator new(n, a, t);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace starling;
using namespace starling::peer_testing;

namespace {

constexpr int kSteps = 200;
constexpr int kWarmSteps = 50;
constexpr int kWindow = 10;

// Runs 4 peers over UCX loopback for kSteps float32 steps of `dim` parameters and returns, per
// rank, the allocations of each window of kWindow steps after the first kWarmSteps.
std::vector<std::vector<long>> allocationsPerWindow(const std::string& name,
                                                    const std::string& algorithm, size_t dim) {
  std::vector<std::vector<long>> windows(4);
  stepOnLoopback(
      name, algorithm, dim, kSteps,
      [&](int rank, int t, std::span<const float>, std::span<const float>) {
        const bool measured = t >= kWarmSteps;
        if (measured && (t - kWarmSteps) % kWindow == 0) windows[rank].push_back(0);
        allocations = 0;
        counting = measured;
      },
      [&](int rank, int t) {
        counting = false;
        if (t >= kWarmSteps) windows[rank].back() += allocations;
      });
  return windows;
}

// Every rank's measured windows: at least 80 % of them made no allocation at all (a per-round
// allocation would show in every window).
void checkQuiet(const std::vector<std::vector<long>>& windows) {
  for (size_t rank = 0; rank < windows.size(); ++rank) {
    std::string counts;
    size_t quiet = 0;
    for (long n : windows[rank]) {
      counts += std::to_string(n) + " ";
      quiet += n == 0;
    }
    INFO("rank " << rank << ", allocations per window of " << kWindow << " steps: " << counts);
    REQUIRE(windows[rank].size() == (kSteps - kWarmSteps) / kWindow);
    CHECK(quiet * 5 >= windows[rank].size() * 4);
  }
}

}  // namespace

TEST_CASE("the counter counts: a step that allocates is seen", "[api][unit][ucx]") {
  allocations = 0;
  counting = true;
  auto* v = new std::vector<float>(100);
  counting = false;
  delete v;
  CHECK(allocations == 2);  // the vector and its storage
}

TEST_CASE("step() allocates nothing per round: exact diffusion, small model (active messages)",
          "[api][unit][ucx]") {
  checkQuiet(allocationsPerWindow("alloc-ed", R"({"kind": "exact_diffusion", "step_size": 0.01})",
                                  10));
}

TEST_CASE("step() allocates nothing per round: DSGD with Adam", "[api][unit][ucx]") {
  checkQuiet(allocationsPerWindow(
      "alloc-adam", R"({"kind": "dsgd", "step_size": 0.01, "local_optimizer": {"kind": "adam"}})",
      10));
}

TEST_CASE("step() allocates nothing per round: CHOCO with 4-bit QSGD frames", "[api][unit][ucx]") {
  checkQuiet(allocationsPerWindow(
      "alloc-choco",
      R"({"kind": "choco", "step_size": 0.01, "gamma": 0.05},
         "compression": {"kind": "qsgd", "bits": 4})",
      1000));
}

TEST_CASE("step() allocates nothing per round: a 20,000-parameter model (shared memory)",
          "[api][unit][ucx]") {
  checkQuiet(allocationsPerWindow(
      "alloc-large", R"({"kind": "exact_diffusion", "step_size": 0.01})", 20000));
}
