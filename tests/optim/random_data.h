// Random datasets for the optim tests, built with core::Rng only (runtime's generators are not a
// dependency of optim_test).
#pragma once

#include <cstdint>
#include <vector>

#include "optim/dataset.h"
#include "core/rng.h"

namespace starling::optim::testing {

// m samples, d features; each entry non-zero with probability `density` (density 1: dense).
// Labels: a_j^T w + noise for least squares, a random sign otherwise (the caller chooses the loss).
inline Dataset randomDataset(size_t m, int d, double density, uint64_t seed) {
  core::Rng rng(seed);
  std::vector<double> w(d);
  for (double& v : w) v = rng.normal();
  Dataset data;
  data.features = d;
  std::vector<int32_t> cols;
  std::vector<double> vals;
  for (size_t j = 0; j < m; ++j) {
    cols.clear();
    vals.clear();
    double z = 0.0;
    for (int k = 0; k < d; ++k) {
      if (density >= 1.0 || rng.uniform() < density) {
        cols.push_back(k);
        vals.push_back(rng.normal());
        z += vals.back() * w[k];
      }
    }
    // Labels in a form both losses use: a noisy linear response (logistic takes its sign).
    data.addRow(z + 0.5 * rng.normal(), cols, vals);
  }
  return data;
}

inline std::vector<double> randomVector(int d, double scale, uint64_t seed) {
  core::Rng rng(seed);
  std::vector<double> x(d);
  for (double& v : x) v = scale * rng.normal();
  return x;
}

}  // namespace starling::optim::testing
