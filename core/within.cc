// core::allWithin: |v| <= limit for every value, in integer arithmetic on the IEEE bits. For
// non-negative floats the order of the bit patterns is the order of the values, and a NaN's
// magnitude bits exceed infinity's, so |v| <= limit exactly when bits(limit) - (bits(v) without
// its sign) is not negative (no overflow: both lie in [0, 2^63)). The sign bits of those
// differences are ORed together: three integer vector operations per vector, no comparison and
// no branch, where GCC 12 keeps `outside |= !(std::abs(v) <= limit)` scalar for double (a comisd
// and a setb per value). The vectors are 64 bytes: one AVX-512 register in the x86-64-v4 clone,
// two AVX2 or four SSE2 registers in the others (core/simd.h); every clone gives the same answer.
#include "core/within.h"

#include <cstdint>
#include <cstring>

#include "core/simd.h"

namespace starling::core::within_detail {
namespace {

// GCC ignores vector_size on a dependent type, so the vector types are spelled out per width.
typedef int64_t Int64s __attribute__((vector_size(64)));
typedef int32_t Int32s __attribute__((vector_size(64)));

template <typename T, typename I, typename V>
__attribute__((always_inline)) inline bool within(const T* p, size_t n, T limit) {
  static_assert(sizeof(I) == sizeof(T));
  if (!(limit >= T(0))) return n == 0;  // (a NaN or negative limit: nothing is within)
  constexpr size_t kLanes = sizeof(V) / sizeof(T);
  constexpr I kMagnitude = ~(I(1) << (8 * sizeof(I) - 1));
  I lim;
  std::memcpy(&lim, &limit, sizeof lim);
  lim &= kMagnitude;  // (-0.0)
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

}  // namespace

STARLING_SIMD_CLONES bool allWithin(const double* values, size_t n, double limit) {
  return within<double, int64_t, Int64s>(values, n, limit);
}

STARLING_SIMD_CLONES bool allWithin(const float* values, size_t n, float limit) {
  return within<float, int32_t, Int32s>(values, n, limit);
}

}  // namespace starling::core::within_detail
