#include "optim/regularizer.h"

#include <cassert>
#include <cmath>
#include <sstream>

#include "optim/elementwise.h"

namespace starling::optim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string bound(double v) {
  if (v == kInf) return "inf";
  if (v == -kInf) return "-inf";
  std::ostringstream os;
  os << v;
  return os.str();
}

// The box in precision T, rounded inwards: clamping to it keeps a float model inside the double
// box that regularizerValue checks (float(0.1) > 0.1 would otherwise put an upper bound outside).
template <typename T>
T inwardLower(double lo) {
  T t = static_cast<T>(lo);
  if (static_cast<double>(t) < lo) t = std::nextafter(t, std::numeric_limits<T>::infinity());
  return t;
}
template <typename T>
T inwardUpper(double hi) {
  T t = static_cast<T>(hi);
  if (static_cast<double>(t) > hi) t = std::nextafter(t, -std::numeric_limits<T>::infinity());
  return t;
}

}  // namespace

std::string RegularizerSpec::describe() const {
  if (none()) return "none";
  std::string out;
  if (l1 != 0.0) out = "l1=" + bound(l1);
  if (lower != -kInf || upper != kInf) {
    if (!out.empty()) out += ", ";
    out += "box [" + bound(lower) + ", " + bound(upper) + "]";
  }
  return out;
}

double regularizerValue(const RegularizerSpec& r, std::span<const double> x) {
  double l1Norm = 0.0;
  for (double v : x) {
    if (std::isnan(v)) return std::numeric_limits<double>::quiet_NaN();
    if (v < r.lower || v > r.upper) return kInf;
    l1Norm += std::abs(v);
  }
  return r.l1 == 0.0 ? 0.0 : r.l1 * l1Norm;
}

template <typename T>
ProxParams<T> proxParams(const RegularizerSpec& r, double step) {
  return {static_cast<T>(step * r.l1), inwardLower<T>(r.lower), inwardUpper<T>(r.upper)};
}

template <typename T>
void proximal(const RegularizerSpec& r, double step, std::span<const T> v, std::span<T> out) {
  assert(v.size() == out.size() && step >= 0.0);
  // Each coordinate solves min_u l1|u| + (u - v)^2 / (2 step) on [lo, hi]: a one-dimensional
  // convex problem whose constrained minimiser is the unconstrained one (the soft threshold)
  // clamped to the interval. Reading v[k] before writing out[k] makes aliasing safe.
  const ProxParams<T> p = proxParams<T>(r, step);
  for (size_t k = 0; k < v.size(); ++k)
    out[k] = elementwise::proxL1Box(v[k], p.threshold, p.lo, p.hi);
}

template void proximal<float>(const RegularizerSpec&, double, std::span<const float>,
                              std::span<float>);
template void proximal<double>(const RegularizerSpec&, double, std::span<const double>,
                               std::span<double>);
template ProxParams<float> proxParams<float>(const RegularizerSpec&, double);
template ProxParams<double> proxParams<double>(const RegularizerSpec&, double);

}  // namespace starling::optim
