// core::allWithin against the plain definition, |v| <= limit for every v (NaN never is), over
// special values, limits at and next to a value, every length and start up to a few vectors
// (so that each value is seen in the vector loop and in the scalar tail), and long spans.
#include "core/within.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace starling::core {
namespace {

template <typename T>
bool reference(std::span<const T> values, T limit) {
  for (T v : values) {
    if (!(std::abs(v) <= limit)) return false;
  }
  return true;
}

template <typename T>
std::vector<T> specials() {
  using L = std::numeric_limits<T>;
  return {T(0),         -T(0),          T(1),          T(-1),          L::min(),
          -L::min(),    L::denorm_min(), -L::denorm_min(), L::max(),      -L::max(),
          L::infinity(), -L::infinity(), L::quiet_NaN(),  -L::quiet_NaN(), L::signaling_NaN(),
          T(1e-3),      T(-2.5)};
}

template <typename T>
void checkEverywhere() {
  using L = std::numeric_limits<T>;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> limits = {T(0), -T(0), T(1), std::nextafter(T(1), T(0)), std::nextafter(T(1), T(2)),
                           L::max(), L::infinity(), T(-1), L::quiet_NaN(), L::denorm_min()};
  // Lengths 0 … 80 (floats: two and a half of the 32-value steps, doubles five of 16) at starts
  // 0 … 3, every value inside [-1, 1] but one, which takes each special value in turn at each
  // position.
  std::vector<T> x(90);
  for (auto& v : x) v = static_cast<T>(u(rng));
  size_t cases = 0, wrong = 0;
  std::string first;  // the first case that disagrees
  const auto check = [&](size_t start, size_t n, T limit, size_t at, T special) {
    const std::span<const T> s(x.data() + start, n);
    ++cases;
    if (allWithin(s, limit) != reference(s, limit) && wrong++ == 0) {
      first = "start " + std::to_string(start) + ", n " + std::to_string(n) + ", limit " +
              std::to_string(limit) + ", value " + std::to_string(special) + " at " +
              std::to_string(at);
    }
  };
  for (size_t start = 0; start < 4; ++start) {
    for (size_t n = 0; start + n <= 84; ++n) {
      for (T limit : limits) {
        check(start, n, limit, 0, x[start]);
        for (size_t at = 0; at < n; ++at) {
          const T old = x[start + at];
          for (T special : specials<T>()) {
            x[start + at] = special;
            check(start, n, limit, at, special);
          }
          x[start + at] = old;
        }
      }
    }
  }
  INFO("first disagreement: " << first);
  CHECK(wrong == 0);
  CHECK(cases > 1000000);
  // A long span: within, then one value just past the limit at the first, a middle and the last
  // position, and a NaN there.
  x.assign(100003, T(0));
  for (auto& v : x) v = static_cast<T>(u(rng));
  const std::span<const T> all(x);
  CHECK(allWithin(all, T(1)));
  for (size_t at : {size_t(0), x.size() / 2, x.size() - 1}) {
    const T old = x[at];
    x[at] = std::nextafter(T(1), T(2));
    CHECK_FALSE(allWithin(all, T(1)));
    CHECK(allWithin(all, std::nextafter(T(1), T(2))));
    x[at] = L::quiet_NaN();
    CHECK_FALSE(allWithin(all, L::infinity()));
    x[at] = old;
  }
  CHECK(allWithin(all, T(1)));
}

TEST_CASE("allWithin answers as |v| <= limit for every value, double", "[core][unit]") {
  checkEverywhere<double>();
}

TEST_CASE("allWithin answers as |v| <= limit for every value, float", "[core][unit]") {
  checkEverywhere<float>();
}

TEST_CASE("core::allWithin: NaN, infinities, the limit itself, every length", "[core][unit]") {
  auto reference = [](const std::vector<double>& v, double limit) {
    for (double x : v) {
      if (!(std::abs(x) <= limit)) return false;
    }
    return true;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> specials = {0.0, -0.0, 1.5, -1.5, 1.5000000000000002, inf, -inf,
                                        std::numeric_limits<double>::quiet_NaN(),
                                        -std::numeric_limits<double>::quiet_NaN(),
                                        std::numeric_limits<double>::max(),
                                        std::numeric_limits<double>::denorm_min()};
  for (double limit : {0.0, -0.0, 1.5, std::numeric_limits<double>::max(), inf}) {
    for (size_t n = 0; n < 20; ++n) {
      for (size_t at = 0; at < n; ++at) {
        for (double s : specials) {
          std::vector<double> v(n, 0.5);
          v[at] = s;
          CAPTURE(limit, n, at, s);
          CHECK(core::allWithin<double>(v, limit) == reference(v, limit));
          std::vector<float> f(v.begin(), v.end());
          std::vector<double> back(f.begin(), f.end());
          CHECK(core::allWithin<float>(f, static_cast<float>(limit)) ==
                reference(back, static_cast<double>(static_cast<float>(limit))));
        }
      }
    }
  }
}

}  // namespace
}  // namespace starling::core
