// The engine's finiteness and divergence check, |v| <= limit for every value (NaN never is), as
// one vectorised pass. Node (runtime/node.cc) checks its messages with it, and the algorithms
// (optim/) check their model with it inside their own last pass over it, while it is in cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace starling::core {
namespace within_detail {
// GCC ignores vector_size on a dependent type, so the vector types are spelled out per width.
typedef int64_t Int64s __attribute__((vector_size(16)));
typedef int32_t Int32s __attribute__((vector_size(16)));
template <typename T>
struct Bits;
template <>
struct Bits<double> {
  using I = int64_t;
  using V = Int64s;
};
template <>
struct Bits<float> {
  using I = int32_t;
  using V = Int32s;
};
}  // namespace within_detail

// True when every |v| <= limit; NaN never is. Integer arithmetic on the IEEE bits: for
// non-negative floats the order of the bit patterns is the order of the values, and a NaN's
// magnitude bits exceed infinity's, so |v| <= limit exactly when bits(limit) - (bits(v) without
// its sign) is not negative (no overflow: both lie in [0, 2^63)). The sign bits of those
// differences are ORed together: three integer vector operations per vector (SSE2 in the default
// x86-64 build), where GCC 12 keeps `outside |= !(std::abs(v) <= limit)` scalar for double (a
// comisd and a setb per value) and turns a vector comparison accumulated in a vector into
// per-lane selects.
template <typename T>
bool allWithin(std::span<const T> values, T limit) {
  using I = typename within_detail::Bits<T>::I;
  using V = typename within_detail::Bits<T>::V;
  static_assert(sizeof(I) == sizeof(T));
  if (!(limit >= T(0))) return values.empty();  // (a NaN or negative limit: nothing is within)
  constexpr size_t kLanes = sizeof(V) / sizeof(T);
  constexpr I kMagnitude = ~(I(1) << (8 * sizeof(I) - 1));
  I lim;
  std::memcpy(&lim, &limit, sizeof lim);
  lim &= kMagnitude;  // (-0.0)
  const T* p = values.data();
  const size_t n = values.size();
  const V limV = V{} + lim;
  V acc0 = V{}, acc1 = V{};
  size_t k = 0;
  for (; k + 2 * kLanes <= n; k += 2 * kLanes) {
    V a, b;
    std::memcpy(&a, p + k, sizeof a);
    std::memcpy(&b, p + k + kLanes, sizeof b);
    acc0 |= limV - (a & kMagnitude);
    acc1 |= limV - (b & kMagnitude);
  }
  acc0 |= acc1;
  I acc = 0;
  for (size_t l = 0; l < kLanes; ++l) acc |= acc0[l];
  for (; k < n; ++k) {
    I bits;
    std::memcpy(&bits, p + k, sizeof bits);
    acc |= lim - (bits & kMagnitude);
  }
  return acc >= 0;
}

}  // namespace starling::core
