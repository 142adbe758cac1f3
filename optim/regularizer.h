// Non-smooth, separable regularizers r(x) with their proximal operators, for composite problems
// min_x (1/n) sum_i f_i(x) + r(x) (docs/algorithms.md §10). The smooth l2 term stays in
// ProblemSpec.
//
//   l1:     r(x) = l1 ||x||_1              prox_{s r}(v)_k = sign(v_k) max(|v_k| - s l1, 0)
//   box:    r(x) = indicator(lo <= x <= hi)  prox(v)_k = clamp(v_k, lo, hi)
//   nonneg: r(x) = indicator(x >= 0)         prox(v)_k = max(v_k, 0)
// Terms combine: l1 with box or nonneg has the prox clamp(soft-threshold(v)), exact because each
// coordinate's problem is one-dimensional and convex.
// Thread-safety: a value type; const methods only.
#pragma once

#include <cstddef>
#include <limits>
#include <span>
#include <string>

namespace starling::optim {

struct RegularizerSpec {
  double l1 = 0.0;  // >= 0
  double lower = -std::numeric_limits<double>::infinity();  // box (nonneg: lower = 0)
  double upper = std::numeric_limits<double>::infinity();

  // True when r is identically zero (no regularizer).
  bool none() const {
    return l1 == 0.0 && lower == -std::numeric_limits<double>::infinity() &&
           upper == std::numeric_limits<double>::infinity();
  }
  // "l1=0.01, box [0, inf)" style description for messages and summaries.
  std::string describe() const;
};

// r(x): +infinity outside the box.
double regularizerValue(const RegularizerSpec& r, std::span<const double> x);

// out = prox_{step * r}(v); out may alias v. step >= 0.
template <typename T>
void proximal(const RegularizerSpec& r, double step, std::span<const T> v, std::span<T> out);

// What proximal() applies to every coordinate (elementwise.h's proxL1Box): the soft threshold
// step * l1 in T, and the box [lo, hi] rounded inwards to T.
template <typename T>
struct ProxParams {
  T threshold, lo, hi;
};
template <typename T>
ProxParams<T> proxParams(const RegularizerSpec& r, double step);

}  // namespace starling::optim
