#include "topology/mixing.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

namespace starling::topology {
namespace {

// Fills row i's peers with weight(i, j) and sets the self weight to what is left, so that the row
// sums to 1 up to one rounding. The rules are symmetric in (i, j), so W is symmetric bit for bit.
MixingMatrix fill(const Graph& g, const std::function<double(int, int)>& weight) {
  MixingMatrix w;
  w.rows.resize(static_cast<size_t>(g.nodes()));
  for (int i = 0; i < g.nodes(); ++i) {
    MixingRow& row = w.rows[i];
    row.peers.reserve(g.neighbors(i).size());
    double sum = 0.0;
    for (int j : g.neighbors(i)) {
      const double wij = weight(i, j);
      row.peers.push_back({j, wij});
      sum += wij;
    }
    row.self = 1.0 - sum;
  }
  return w;
}

}  // namespace

std::vector<std::vector<double>> MixingMatrix::dense() const {
  const int n = nodes();
  std::vector<std::vector<double>> d(n, std::vector<double>(n, 0.0));
  for (int i = 0; i < n; ++i) {
    d[i][i] = rows[i].self;
    for (const MixingEntry& e : rows[i].peers) d[i][e.peer] = e.weight;
  }
  return d;
}

core::Result<MixingMatrix> mixingWeights(const Graph& g, WeightRule rule) {
  switch (rule) {
    case WeightRule::kMetropolis:
      return fill(g, [&g](int i, int j) {
        return 1.0 / (1.0 + static_cast<double>(std::max(g.degree(i), g.degree(j))));
      });
    case WeightRule::kMaxDegree: {
      const double w = 1.0 / (1.0 + static_cast<double>(g.maxDegree()));
      return fill(g, [w](int, int) { return w; });
    }
    case WeightRule::kUniform:
      for (const auto& [i, j] : g.edges()) {
        if (g.degree(i) != g.degree(j)) {
          return core::invalidArgument(
              "weights: uniform weights need every edge to join nodes of equal degree, but edge (" +
              std::to_string(i) + ", " + std::to_string(j) + ") joins degrees " +
              std::to_string(g.degree(i)) + " and " + std::to_string(g.degree(j)) +
              "; use metropolis or max_degree");
        }
      }
      return fill(g, [&g](int i, int) { return 1.0 / (1.0 + static_cast<double>(g.degree(i))); });
  }
  return core::invalidArgument("weights: unknown weight rule " +
                               std::to_string(static_cast<int>(rule)));
}

double spectralGap(const MixingMatrix& w) {
  const int n = w.nodes();
  if (n <= 1) return 1.0;  // a single node is at consensus after every round
  Eigen::MatrixXd m = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    m(i, i) = w.rows[i].self;
    for (const MixingEntry& e : w.rows[i].peers) m(i, e.peer) = e.weight;
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(m, Eigen::EigenvaluesOnly);
  // Eigen sorts ascending: lambda_1 is the last entry, lambda_2 the one before, lambda_n the first.
  const Eigen::VectorXd& ev = solver.eigenvalues();
  const double second = std::abs(ev(n - 2));
  const double last = std::abs(ev(0));
  return 1.0 - std::max(second, last);
}

}  // namespace starling::topology
