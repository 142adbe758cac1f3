// The consensus sketch (runtime/metrics.h, docs/algorithms.md §16) against its claims, with the
// moments computed by hand in this test: linear, E||Sv||^2 = ||v||^2 over the seeds, and
// Var ||Sv||^2 = (2/k)(||v||^4 - sum v_j^4).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "runtime/metrics.h"

namespace starling::runtime {
namespace {

std::vector<double> randomVector(size_t d, uint64_t seed) {
  core::Rng rng(seed);
  std::vector<double> v(d);
  for (double& x : v) x = rng.normal() + (rng.uniform() < 0.01 ? 10.0 : 0.0);
  return v;
}

double squaredNorm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}

TEST_CASE("the consensus sketch is linear and the same for float and double", "[runtime][unit]") {
  const auto x = randomVector(5000, 1);
  const auto y = randomVector(5000, 2);
  std::vector<double> diff(x.size());
  for (size_t j = 0; j < x.size(); ++j) diff[j] = x[j] - y[j];
  const auto sx = modelSketch<double>(x, 42);
  const auto sy = modelSketch<double>(y, 42);
  const auto sd = modelSketch<double>(diff, 42);
  REQUIRE(sx.size() == kSketchDim);
  for (size_t r = 0; r < kSketchDim; ++r) CHECK(sd[r] == Approx(sx[r] - sy[r]).margin(1e-9));
  // Every coordinate lands in exactly one bucket with sign +-1: e_j sketches to one +-1.
  for (size_t j : {size_t{0}, size_t{1}, size_t{4999}}) {
    std::vector<double> e(5000, 0.0);
    e[j] = 1.0;
    const auto s = modelSketch<double>(e, 42);
    int nonzero = 0;
    for (double v : s) {
      if (v != 0) {
        ++nonzero;
        CHECK(std::abs(v) == 1.0);
      }
    }
    CHECK(nonzero == 1);
  }
  std::vector<float> xf(x.begin(), x.end());
  const auto sf = modelSketch<float>(xf, 42);
  const auto sdouble = modelSketch<double>(std::vector<double>(xf.begin(), xf.end()), 42);
  CHECK(sf == sdouble);
  CHECK(modelSketch<double>(x, 43) != sx);  // another seed, another matrix
}

TEST_CASE("the consensus sketch preserves the squared norm without bias, with the stated "
          "variance", "[runtime][unit]") {
  const auto v = randomVector(20000, 7);
  const double n2 = squaredNorm(v);
  double fourth = 0;
  for (double x : v) fourth += x * x * x * x;
  const double k = static_cast<double>(kSketchDim);
  const double var = (2.0 / k) * (n2 * n2 - fourth);  // the closed form (§16)
  const int seeds = 2000;
  double sum = 0, sum2 = 0;
  for (int s = 0; s < seeds; ++s) {
    const double e = squaredNorm(modelSketch<double>(v, core::deriveSeed(99, s)));
    sum += e;
    sum2 += e * e;
  }
  const double mean = sum / seeds;
  const double sampleVar = sum2 / seeds - mean * mean;
  // Mean within 4 standard errors of ||v||^2; variance within 15% (its own relative standard
  // error is about sqrt(2/seeds) = 3% for a near-normal estimate).
  CHECK(std::abs(mean - n2) < 4 * std::sqrt(var / seeds));
  CHECK(sampleVar == Approx(var).epsilon(0.15));
  // The headline bound: relative sd at most sqrt(2/k).
  CHECK(std::sqrt(sampleVar) / n2 < 1.1 * std::sqrt(2.0 / k));
}

}  // namespace
}  // namespace starling::runtime
