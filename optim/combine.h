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
#include <cstdint>
#include <cstring>
#include <span>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "compression/codecs/elementwise.h"
#include "core/within.h"
#include "optim/algorithm.h"

namespace starling::optim::detail {

// memcpy with non-temporal stores (past the cache), for a destination nobody here reads soon.
// streamFence() orders them before any later store (the frame's trailer, its descriptor).
// kStreamBytes: the size from which plain gossip streams its message (a core's L2 here).
inline constexpr size_t kStreamBytes = size_t{1} << 20;
inline void streamCopy(const void* from, void* to, size_t bytes) {
#if defined(__x86_64__)
  auto* d = static_cast<char*>(to);
  const auto* s = static_cast<const char*>(from);
  size_t i = 0;
  // Plain copy up to 16-byte alignment of the destination, then 16 bytes a store.
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(to, from, bytes);
#endif
}
inline void streamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

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
      for (size_t j = 0; j < N; ++j)
        acc = compression::elementwise::combineTerm(acc, cj[j], mj[j][k], s);
      out[k] = acc;
    }
    return;
  }
  for (size_t k = 0; k < len; ++k) {
    const T s = self[k];
    T acc = start[k];
    for (size_t j = 0; j < N; ++j)
      acc = compression::elementwise::combineTerm(acc, cj[j], mj[j][k], s);
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
          for (size_t k = 0; k < n; ++k)
            o[k] = compression::elementwise::combineTerm(o[k], cn, mn[k], sf[k]);
        }
        if (cp != nullptr) std::copy_n(o, n, cp);
    }
    if (limit != nullptr) within &= core::allWithin(std::span<const T>(o, n), *limit);
  }
  return within;
}

}  // namespace starling::optim::detail
