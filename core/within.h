// The engine's finiteness and divergence check, |v| <= limit for every value (NaN never is), as
// one vectorised pass. Node (engine/node.cc) checks its messages with it, and the algorithms
// (optim/) check their model with it inside their own last pass over it, while it is in cache.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

namespace starling::core {
namespace within_detail {
// Out of line (core/within.cc), compiled for AVX-512, AVX2 and the baseline (core/simd.h).
bool allWithin(const double* values, size_t n, double limit);
bool allWithin(const float* values, size_t n, float limit);
}  // namespace within_detail

// True when every |v| <= limit; NaN never is, and with a NaN or negative limit only an empty span
// is within. Exact: the same answer as `std::abs(v) <= limit` for every value (integer arithmetic
// on the IEEE bits, core/within.cc).
template <typename T>
bool allWithin(std::span<const T> values, T limit) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>);
  return within_detail::allWithin(values.data(), values.size(), limit);
}

}  // namespace starling::core
