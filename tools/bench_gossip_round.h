// The round both gossip benchmarks run (bench_gossip.cc over Starling, bench_gossip_mpi.cc over
// MPI): the same data, the same combine and the same closed-form check, so both columns do
// identical work. Header-only, no dependencies beyond the standard library.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

namespace starling::bench {

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// x_r[k] = (r + 1) + g(k): a rank constant plus a pattern shared by all ranks, so that a mixed-up
// neighbour or a shifted index shows in the closed form below.
inline float pattern(size_t k) { return static_cast<float>(k & 1023) / 1024.0f; }

inline void initialValues(int rank, std::span<float> x) {
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(rank + 1) + pattern(k);
}

// out = (x + left + right) / 3 in one pass: each input is read once and out written once (a
// blocked loop over several passes could not touch fewer bytes). `out` may be `x`.
inline void combineRing(std::span<float> out, std::span<const float> x, std::span<const float> left,
                 std::span<const float> right) {
  const float third = 1.0f / 3.0f;
  float* o = out.data();
  const float* s = x.data();
  const float* __restrict l = left.data();
  const float* __restrict r = right.data();
  for (size_t k = 0; k < out.size(); ++k) o[k] = (s[k] + l[k] + r[k]) * third;
}

// The ring average is linear and doubly stochastic, so after `rounds` rounds
// x_r[k] = g(k) + c_r with c = W^rounds (1, 2, ..., P).
inline double expectedOffset(int peers, int rank, int rounds) {
  std::vector<double> c(peers), next(peers);
  for (int i = 0; i < peers; ++i) c[i] = i + 1;
  for (int t = 0; t < rounds; ++t) {
    for (int i = 0; i < peers; ++i) {
      next[i] = (c[(i + peers - 1) % peers] + c[i] + c[(i + 1) % peers]) / 3.0;
    }
    c.swap(next);
  }
  return c[rank];
}

inline double maxError(int peers, int rank, int rounds, std::span<const float> x) {
  const double offset = expectedOffset(peers, rank, rounds);
  double err = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    err = std::max(err, std::abs(static_cast<double>(x[k]) - (offset + pattern(k))));
  }
  return err;
}

}  // namespace starling::bench
