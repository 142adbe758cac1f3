// The gossip combine in difference form, shared by plain gossip (Peer::mix), DSGD, exact
// diffusion and gradient tracking:
//   out_k = start_k + sum_j c_j (m_jk - self_k),   c_j = T(w_ij) * scale,
// each element's terms added in neighbour order. `start` is `self` except under DSGD with a
// lossy codec (its exact psi). The difference form never uses the self weight, so the combine
// weights sum to exactly one whatever the rounding of w_ij in T (see algorithms.cc).
//
// How it is walked changes no bit of the result, only the speed. With up to kFusedNeighbours
// neighbours (a ring, a torus, most graphs) one loop reads every input as a steady stream, which
// the hardware prefetchers keep ahead of, and writes each output once: measured on Peer::mix at
// d = 1e6 (4 ranks, 2 cores) it takes 40% off the round against a pass per neighbour over 4 KB
// blocks, whose short bursts the prefetchers never ramp up for. With more, a pass per neighbour
// over a block that stays in L1. Either way `out` is checked a block at a time while the block
// is in L1 (the engine's divergence check, Algorithm::absorbWithin).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "core/within.h"
#include "optim/algorithm.h"

namespace starling::optim::detail {

inline constexpr size_t kFusedNeighbours = 4;
inline constexpr size_t kCombineBlock = 1024;

template <typename T, size_t N>
void combineFused(T* __restrict out, T* __restrict copy, const T* __restrict start,
                  const T* __restrict self, const T* const* m, const T* c, size_t len) {
  const T* __restrict mj[N > 0 ? N : 1];
  T cj[N > 0 ? N : 1];
  for (size_t j = 0; j < N; ++j) {
    mj[j] = m[j];
    cj[j] = c[j];
  }
  if (copy == nullptr) {
    for (size_t k = 0; k < len; ++k) {
      const T s = self[k];
      T acc = start[k];
      for (size_t j = 0; j < N; ++j) acc += cj[j] * (mj[j][k] - s);
      out[k] = acc;
    }
    return;
  }
  for (size_t k = 0; k < len; ++k) {
    const T s = self[k];
    T acc = start[k];
    for (size_t j = 0; j < N; ++j) acc += cj[j] * (mj[j][k] - s);
    out[k] = acc;
    copy[k] = acc;
  }
}

// out[0, len) from self/start/messages at [offset, offset + len); `copy`, when given, receives
// the same values as `out`. With `limit`, returns whether every |out_k| <= *limit; else true.
template <typename T>
bool combine(T* out, T* copy, const T* start, const T* self,
             std::span<const NeighborMessage<T>> nbrs, T scale, size_t offset, size_t len,
             const T* limit) {
  const size_t count = nbrs.size();
  const T* m[kFusedNeighbours];
  T c[kFusedNeighbours];
  for (size_t j = 0; j < std::min(count, kFusedNeighbours); ++j) {
    m[j] = nbrs[j].message.data() + offset;
    c[j] = static_cast<T>(nbrs[j].weight) * scale;
  }
  bool within = true;
  for (size_t b = 0; b < len; b += kCombineBlock) {
    const size_t n = std::min(kCombineBlock, len - b);
    const T* mb[kFusedNeighbours];
    for (size_t j = 0; j < std::min(count, kFusedNeighbours); ++j) mb[j] = m[j] + b;
    T* o = out + b;
    T* cp = copy != nullptr ? copy + b : nullptr;
    const T* st = start + b;
    const T* sf = self + b;
    switch (count) {
      case 0: combineFused<T, 0>(o, cp, st, sf, mb, c, n); break;
      case 1: combineFused<T, 1>(o, cp, st, sf, mb, c, n); break;
      case 2: combineFused<T, 2>(o, cp, st, sf, mb, c, n); break;
      case 3: combineFused<T, 3>(o, cp, st, sf, mb, c, n); break;
      case 4: combineFused<T, 4>(o, cp, st, sf, mb, c, n); break;
      default:
        std::copy_n(st, n, o);
        for (const auto& nb : nbrs) {
          const T cn = static_cast<T>(nb.weight) * scale;
          const T* __restrict mn = nb.message.data() + offset + b;
          for (size_t k = 0; k < n; ++k) o[k] += cn * (mn[k] - sf[k]);
        }
        if (cp != nullptr) std::copy_n(o, n, cp);
    }
    if (limit != nullptr) within &= core::allWithin(std::span<const T>(o, n), *limit);
  }
  return within;
}

}  // namespace starling::optim::detail
