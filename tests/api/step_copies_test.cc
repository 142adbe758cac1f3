// A trainer's step() copies its parameters at most once a round, and its gradient at most once
// (issue: the gradient handed to the algorithm, the new model handed back). This executable
// replaces memcpy and memmove (what std::copy of floats and the engine's copies call) with
// versions that count the bytes each peer's thread copies out of or into the trainer's two
// buffers, the parameters and the gradient, inside its own step() calls.
//
// Its own executable: the replacement covers every copy the program makes. Not built with the
// sanitizers, which bring memcpy and memmove of their own.
#include <starling/peer.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loopback_steps.h"

namespace {

// The trainer's buffers of this thread's peer, and what its step() calls copied to and from them.
struct Watch {
  const unsigned char* params = nullptr;
  const unsigned char* grads = nullptr;
  size_t bytes = 0;
  bool on = false;
  size_t paramBytes = 0;  // copied out of or into the parameters
  size_t gradBytes = 0;   // copied out of the gradient
};
thread_local Watch watch;

// The bytes of [p, p + n) inside [lo, lo + len).
size_t overlap(const unsigned char* p, size_t n, const unsigned char* lo, size_t len) {
  if (lo == nullptr) return 0;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto b = reinterpret_cast<std::uintptr_t>(lo);
  const std::uintptr_t from = a > b ? a : b;
  const std::uintptr_t to = a + n < b + len ? a + n : b + len;
  return to > from ? static_cast<size_t>(to - from) : 0;
}

void note(void* dst, const void* src, size_t n) {
  if (!watch.on) return;
  const auto* d = static_cast<const unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  watch.paramBytes += overlap(d, n, watch.params, watch.bytes);
  watch.paramBytes += overlap(s, n, watch.params, watch.bytes);
  watch.gradBytes += overlap(s, n, watch.grads, watch.bytes);
}

}  // namespace

// Byte loops that the compiler must not turn back into calls of these very functions.
extern "C" {
__attribute__((optimize("no-tree-loop-distribute-patterns"))) void* memmove(void* dst,
                                                                            const void* src,
                                                                            size_t n) {
  note(dst, src, n);
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (d < s) {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  } else {
    for (size_t i = n; i > 0; --i) d[i - 1] = s[i - 1];
  }
  return dst;
}

__attribute__((optimize("no-tree-loop-distribute-patterns"))) void* memcpy(
    void* __restrict dst, const void* __restrict src, size_t n) {
  note(dst, src, n);
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = s[i];
  return dst;
}
}

using namespace starling;
using namespace starling::peer_testing;

namespace {

constexpr int kSteps = 60;
constexpr int kWarmSteps = 10;

// 4 peers over UCX loopback, kSteps float32 steps of `dim` parameters each (the gradient: a pull
// towards a per-rank target); per rank and measured step, the parameter and gradient copies
// (bytes copied over the buffer's size).
struct Copies {
  std::vector<double> params, grads;
};

std::vector<Copies> copiesPerStep(const std::string& name, const std::string& algorithm,
                                  size_t dim) {
  std::vector<Copies> copies(4);
  stepOnLoopback(
      name, algorithm, dim, kSteps,
      [&](int, int t, std::span<const float> x, std::span<const float> g) {
        watch.params = reinterpret_cast<const unsigned char*>(x.data());
        watch.grads = reinterpret_cast<const unsigned char*>(g.data());
        watch.bytes = dim * sizeof(float);
        watch.paramBytes = watch.gradBytes = 0;
        watch.on = t >= kWarmSteps;
      },
      [&](int rank, int t) {
        watch.on = false;
        if (t < kWarmSteps) return;
        copies[rank].params.push_back(static_cast<double>(watch.paramBytes) /
                                      static_cast<double>(watch.bytes));
        copies[rank].grads.push_back(static_cast<double>(watch.gradBytes) /
                                     static_cast<double>(watch.bytes));
      });
  return copies;
}

void checkAtMostOnce(const std::vector<Copies>& copies) {
  for (size_t rank = 0; rank < copies.size(); ++rank) {
    REQUIRE(copies[rank].params.size() == kSteps - kWarmSteps);
    for (size_t t = 0; t < copies[rank].params.size(); ++t) {
      INFO("rank " << rank << ", step " << kWarmSteps + t);
      // The new model into the parameters: exactly one whole copy.
      CHECK(copies[rank].params[t] == 1.0);
      CHECK(copies[rank].grads[t] <= 1.0);
    }
  }
}

}  // namespace

TEST_CASE("the copy counter counts: std::copy of the watched buffers is seen", "[api][unit][ucx]") {
  std::vector<float> a(1000, 1.0f), b(1000), c(1000);
  watch.params = reinterpret_cast<const unsigned char*>(a.data());
  watch.grads = reinterpret_cast<const unsigned char*>(b.data());
  watch.bytes = a.size() * sizeof(float);
  // Lengths the compiler cannot see (a known one may be copied inline, as no library size is).
  size_t n = a.size(), half = n / 2;
  asm volatile("" : "+r"(n), "+r"(half));
  watch.paramBytes = watch.gradBytes = 0;
  watch.on = true;
  std::copy_n(a.data(), n, c.data());     // the parameters out
  std::copy_n(c.data(), n, a.data());     // and back in
  std::copy_n(b.data(), half, c.data());  // half the gradient
  watch.on = false;
  CHECK(watch.paramBytes == 2 * watch.bytes);
  CHECK(watch.gradBytes == watch.bytes / 2);
  CHECK(c[0] == 0.0f);
  CHECK(c[999] == 1.0f);
  watch = Watch{};
}

TEST_CASE("step() copies the parameters once and the gradient at most once: DSGD",
          "[api][unit][ucx]") {
  checkAtMostOnce(copiesPerStep("copies-dsgd", R"({"kind": "dsgd", "step_size": 0.01})", 1000));
}

TEST_CASE(
    "step() copies the parameters once and the gradient at most once: exact diffusion, "
    "a 20,000-parameter model (shared memory)",
    "[api][unit][ucx]") {
  checkAtMostOnce(
      copiesPerStep("copies-ed", R"({"kind": "exact_diffusion", "step_size": 0.01})", 20000));
}

TEST_CASE(
    "step() copies the parameters once and the gradient at most once: CHOCO with 4-bit "
    "QSGD frames",
    "[api][unit][ucx]") {
  checkAtMostOnce(copiesPerStep("copies-choco",
                                R"({"kind": "choco", "step_size": 0.01, "gamma": 0.05},
         "compression": {"kind": "qsgd", "bits": 4})",
                                1000));
}
