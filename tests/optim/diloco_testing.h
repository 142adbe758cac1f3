// Shared by the DiLoCo unit tests (diloco_test.cc, diloco_state_test.cc): heterogeneous
// quadratics, the weights of the complete graph and the ring, a lossy test codec, and nodes driven
// through synchronous rounds as the engine drives them.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "methods_testing.h"
#include "optim/algorithm.h"
#include "optim/diloco.h"

namespace diloco_testing {

using namespace starling;
using namespace starling::optim;
using starling::optim::testing::randomVec;
using starling::optim::testing::Vec;

// f_i(x) = 1/2 sum_k a_ik (x_k - b_ik)^2: grad_k = a_ik (x_k - b_ik). Different a_i and b_i per
// node make the data heterogeneous; the optimum of the mean is x*_k = sum_i a_ik b_ik / sum_i a_ik.
struct Quadratic {
  Vec a, b;
  void gradient(const Vec& x, Vec& g) const {
    for (size_t k = 0; k < x.size(); ++k) g[k] = a[k] * (x[k] - b[k]);
  }
};

class QuadraticOracle final : public GradientOracle<double> {
 public:
  explicit QuadraticOracle(const Quadratic& f) : f_(f) {}
  void gradient(std::span<const double> x, std::span<double> out) override {
    for (size_t k = 0; k < x.size(); ++k) out[k] = f_.a[k] * (x[k] - f_.b[k]);
    ++calls;
  }
  int calls = 0;

 private:
  const Quadratic& f_;
};

inline std::vector<Quadratic> problems(size_t n, size_t d, uint64_t seed) {
  std::vector<Quadratic> fs(n);
  for (size_t i = 0; i < n; ++i) {
    fs[i].a = randomVec(d, 1.0, seed + 2 * i);
    for (double& v : fs[i].a) v = 0.5 + std::abs(v);  // curvature in [0.5, ~4]
    fs[i].b = randomVec(d, 3.0, seed + 2 * i + 1);
  }
  return fs;
}

// The optimum of the mean of the quadratics: x*_k = sum_i a_ik b_ik / sum_i a_ik.
inline Vec optimumOf(const std::vector<Quadratic>& fs) {
  Vec opt(fs[0].a.size());
  for (size_t k = 0; k < opt.size(); ++k) {
    double num = 0, den = 0;
    for (const auto& f : fs) {
      num += f.a[k] * f.b[k];
      den += f.a[k];
    }
    opt[k] = num / den;
  }
  return opt;
}

using Matrix = std::vector<Vec>;

inline Matrix completeWeights(size_t n) { return Matrix(n, Vec(n, 1.0 / static_cast<double>(n))); }

inline Matrix ringWeights(size_t n) {
  Matrix w(n, Vec(n, 0.0));
  for (size_t i = 0; i < n; ++i) {
    w[i][i] = 1.0 / 3;
    w[i][(i + 1) % n] = 1.0 / 3;
    w[i][(i + n - 1) % n] = 1.0 / 3;
  }
  return w;
}

// Drives one algorithm per node through `rounds` synchronous rounds of the weights w, as the
// engine does: every node prepares, then absorbs its own message and its neighbours' (by peer id).
// A lossy codec for the tests: keeps the half of the message's values largest in magnitude
// (ties to the lower index), zero elsewhere; deterministic, so every receiver decodes the same.
inline void topHalf(Vec& m) {
  std::vector<size_t> order(m.size());
  for (size_t k = 0; k < m.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return std::abs(m[a]) > std::abs(m[b]); });
  for (size_t r = (m.size() + 1) / 2; r < m.size(); ++r) m[order[r]] = 0.0;
}

inline void drive(std::vector<std::unique_ptr<Algorithm<double>>>& nodes, const Matrix& w,
                  double alpha, int rounds, int first = 0, void (*codec)(Vec&) = nullptr) {
  const size_t n = nodes.size();
  for (int r = first; r < first + rounds; ++r) {
    std::vector<Vec> msg(n, Vec(nodes[0]->messageSize()));
    for (size_t i = 0; i < n; ++i) {
      RoundInfo info;
      info.round = static_cast<uint64_t>(r);
      info.stepSize = alpha;
      info.self = static_cast<int>(i);
      info.selfWeight = w[i][i];
      nodes[i]->prepare(info, msg[i]);
      if (codec) codec(msg[i]);  // what every receiver, the sender included, decodes
    }
    // The work an algorithm does while the messages travel (overlap), as the engine calls it.
    for (auto& node : nodes) {
      if (node->computesDuringExchange()) node->computeDuringExchange([] {});
    }
    for (size_t i = 0; i < n; ++i) {
      std::vector<NeighborMessage<double>> nbrs;
      for (size_t j = 0; j < n; ++j) {
        if (j != i && w[i][j] != 0.0) nbrs.push_back({static_cast<int>(j), w[i][j], msg[j]});
      }
      RoundInfo info;
      info.round = static_cast<uint64_t>(r);
      info.stepSize = alpha;
      info.self = static_cast<int>(i);
      info.selfWeight = w[i][i];
      nodes[i]->absorb(info, msg[i], nbrs);
    }
  }
}

struct Nodes {
  std::vector<std::unique_ptr<QuadraticOracle>> oracles;
  std::vector<std::unique_ptr<Algorithm<double>>> algs;
};

inline Nodes makeNodes(const std::vector<Quadratic>& fs, const DilocoSpec& spec, const Vec& x0) {
  Nodes ns;
  for (const auto& f : fs) {
    ns.oracles.push_back(std::make_unique<QuadraticOracle>(f));
    ns.algs.push_back(createDiloco<double>(spec, x0, *ns.oracles.back()));
  }
  return ns;
}

inline Vec modelOf(const Algorithm<double>& a) { return Vec(a.model().begin(), a.model().end()); }

inline double relDiff(const Vec& got, const Vec& want) {
  double num = 0, den = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    num += (got[k] - want[k]) * (got[k] - want[k]);
    den += want[k] * want[k];
  }
  return std::sqrt(num / den);
}

// H inner SGD steps of node i from theta.
inline Vec innerSteps(const Quadratic& f, Vec x, double alpha, uint64_t h, const Vec* y = nullptr) {
  Vec g(x.size());
  for (uint64_t s = 0; s < h; ++s) {
    f.gradient(x, g);
    for (size_t k = 0; k < x.size(); ++k) x[k] -= alpha * (g[k] + (y ? (*y)[k] : 0.0));
  }
  return x;
}

// One coordinate's outer step as §29 writes it: exact_diffusion (the dual y from the sent local
// value x, over alpha H) or nesterov (the momentum m); returns theta's new value.
inline double outerStep(const DilocoSpec& spec, bool ed, double alphaH, double theta, double xbar,
                        double x, double& m, double& y) {
  const double delta = theta - xbar;
  if (ed) {
    y += (x - xbar) / (2 * alphaH);
    return theta - spec.outerLr * delta;
  }
  m = spec.outerMomentum * m + delta;
  return theta - spec.outerLr * (delta + spec.outerMomentum * m);
}

}  // namespace diloco_testing
