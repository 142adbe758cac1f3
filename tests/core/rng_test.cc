#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/rng.h"

using namespace starling::core;

TEST_CASE("Rng streams are reproducible and seed-dependent", "[unit][core]") {
  Rng a(42), b(42), c(43);
  std::vector<uint64_t> va, vb, vc;
  for (int i = 0; i < 100; ++i) {
    va.push_back(a.nextU64());
    vb.push_back(b.nextU64());
    vc.push_back(c.nextU64());
  }
  CHECK(va == vb);
  CHECK(va != vc);
  // std::mt19937_64's 10000th output for the default seed is fixed by the C++ standard; our
  // engine must be that engine so streams match on every platform.
  std::mt19937_64 ref;
  Rng d(5489u);
  for (int i = 0; i < 9999; ++i) d.nextU64();
  ref.discard(9999);
  CHECK(d.nextU64() == 9981545732273789042ULL);
}

TEST_CASE("Rng distributions have the right moments", "[unit][core]") {
  Rng r(7);
  const int n = 200000;
  double su = 0, su2 = 0, sn = 0, sn2 = 0;
  std::vector<int> counts(7, 0);
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    su += u;
    su2 += u * u;
    const double z = r.normal();
    sn += z;
    sn2 += z * z;
    counts[r.below(7)]++;
  }
  // Means within 5 standard errors: uniform sd 1/sqrt(12), normal sd 1.
  CHECK(std::abs(su / n - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::abs(sn / n) < 5 * std::sqrt(1.0 / n));
  CHECK(std::abs(sn2 / n - 1.0) < 5 * std::sqrt(2.0 / n));
  CHECK(std::abs(su2 / n - 1.0 / 3) < 0.005);
  for (int c : counts) CHECK(std::abs(c - n / 7.0) < 5 * std::sqrt(n * (1.0 / 7) * (6.0 / 7)));
}

TEST_CASE("deriveSeed separates streams", "[unit][core]") {
  CHECK(deriveSeed(1, 2, 3) != deriveSeed(1, 3, 2));
  CHECK(deriveSeed(1, 2, 3) != deriveSeed(2, 2, 3));
  CHECK(deriveSeed(1, 2, 3) == deriveSeed(1, 2, 3));
}
