#include "runtime/topology_report.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

namespace starling::runtime {
namespace {

// rows x cols of the lattice a graph is drawn on, if it is one.
using Shape = std::pair<int, int>;

// True when every edge joins lattice neighbours of a rows x cols grid numbered row-major (as
// topology::buildGraph numbers grids), torus wrap-arounds included.
bool onLattice(const topology::Graph& g, int rows, int cols) {
  for (auto [i, j] : g.edges()) {  // i < j
    const int ri = i / cols, ci = i % cols, rj = j / cols, cj = j % cols;
    const bool across = ri == rj && (cj - ci == 1 || cj - ci == cols - 1);
    const bool down = ci == cj && (rj - ri == 1 || rj - ri == rows - 1);
    if (!across && !down) return false;
  }
  return true;
}

// The grid a round is drawn as. With the scenario's spec: the round's graph kind says it (the
// base graph for static, random_matching and edge_dropout rounds, whose edges are the base's).
// Without it, from the graph alone: a connected graph of lattice edges for some rows x cols
// (both >= 2, the squarest first). Connected, because a sparse round (a matching, a dropout)
// fits many lattices by chance: a matched ring would be drawn as a grid.
std::optional<Shape> latticeShape(uint64_t round, const topology::Graph& g, bool connected,
                                  const topology::TopologySpec* spec) {
  const int n = g.nodes();
  if (spec) {
    const auto& sch = spec->schedule;
    const bool cycle = sch.kind == topology::ScheduleKind::kCycle && !sch.cycle.empty();
    const bool fromBase = sch.kind != topology::ScheduleKind::kOnePeerExponential && !cycle;
    const topology::GraphSpec& gs = cycle ? sch.cycle[round % sch.cycle.size()] : spec->base;
    if ((cycle || fromBase) && gs.kind == topology::GraphKind::kGrid &&
        static_cast<int64_t>(gs.rows) * gs.cols == n && gs.rows > 1 && gs.cols > 1) {
      return Shape{gs.rows, gs.cols};
    }
    return std::nullopt;
  }
  if (!connected || n < 4) return std::nullopt;
  std::vector<Shape> shapes;
  for (int cols = 2; cols <= n / 2; ++cols) {
    if (n % cols == 0) shapes.push_back({n / cols, cols});
  }
  std::stable_sort(shapes.begin(), shapes.end(), [](Shape a, Shape b) {
    return std::abs(a.first - a.second) < std::abs(b.first - b.second);
  });
  for (const Shape& s : shapes) {
    if (onLattice(g, s.first, s.second)) return s;
  }
  return std::nullopt;
}

// The round as a Graphviz graph: nodes labelled with their id and self weight, edges with w_ij.
//
// Graphviz's default engine (dot) ranks nodes top to bottom, so a ring came out as a column;
// circo and neato choose positions of their own, which move from round to round of a changing
// schedule. Here every node's position is pinned (`pos="x,y!"` under layout=neato, which
// `dot -T...` switches to by itself), so every round of a scenario draws its nodes in the same
// places: a lattice for grids and tori (row 0 at the top), and otherwise a circle in node order,
// clockwise from the top, which is how rings, exponential graphs and one-peer rounds are drawn in
// the literature and keeps star, complete and random graphs readable (chords drawn straight). On
// a lattice, splines=true routes the edges around the nodes, so a torus's wrap-around edges bend
// round their row or column instead of hiding under it.
void writeDot(std::ostream& os, uint64_t round, const topology::RoundTopology& r,
              std::optional<Shape> lattice) {
  constexpr double kSpacing = 1.5;  // inches between neighbouring nodes
  const int n = r.graph.nodes();
  os << "graph round_" << round << " {\n"
     << "  layout=neato;\n" << (lattice ? "  splines=true;\n" : "")
     << "  node [shape=ellipse, fontsize=10, margin=\"0.04,0.02\"];\n"
     << "  edge [fontsize=9];\n";
  char buf[160];
  for (int i = 0; i < n; ++i) {
    double x, y;
    if (lattice) {
      x = kSpacing * (i % lattice->second);
      y = -kSpacing * (i / lattice->second);
    } else {
      const double radius = std::max(1.5, kSpacing * n / (2 * M_PI));
      const double angle = M_PI / 2 - 2 * M_PI * i / n;
      x = radius * std::cos(angle);
      y = radius * std::sin(angle);
    }
    if (std::abs(x) < 5e-4) x = 0.0;  // no "-0.000"
    if (std::abs(y) < 5e-4) y = 0.0;
    std::snprintf(buf, sizeof buf, "  %d [label=\"%d\\nw_ii=%.4g\", pos=\"%.3f,%.3f!\"];\n", i, i,
                  r.weights.rows[i].self, x, y);
    os << buf;
  }
  for (auto [i, j] : r.graph.edges()) {
    double w = 0;
    for (const auto& e : r.weights.rows[i].peers) {
      if (e.peer == j) w = e.weight;
    }
    std::snprintf(buf, sizeof buf, "  %d -- %d [label=\"%.4g\"];\n", i, j, w);
    os << buf;
  }
  os << "}\n";
}

}  // namespace

std::string describeRound(uint64_t round, const topology::RoundTopology& r, ReportFormat format,
                          const topology::TopologySpec* spec) {
  const topology::Graph& g = r.graph;
  const int n = g.nodes();
  // The diameter (a search from every node), the dense W and its eigenvalues grow as n^2 to n^3:
  // past kDenseReportNodes they are left out (a ring of 2^20 nodes is allowed, and would need
  // 8 TiB for W).
  const bool small = n <= kDenseReportNodes;
  const int diam = small ? topology::diameter(g) : -1;
  const bool connected = topology::isConnected(g);
  // A disconnected round has lambda_2 = 1 exactly (one eigenvalue 1 per component), so its gap
  // is 0; the eigen-solver returns 1 +- a few ulps, and 1 - |lambda| then prints as +-2e-16.
  // Below the solver's accuracy (about n ulps of ||W|| = 1) a gap is noise: 0 as well; and it is
  // never negative (W is doubly stochastic, |lambda| <= 1).
  double gap = small && connected ? topology::spectralGap(r.weights) : 0.0;
  if (gap <= 64.0 * std::max(n, 1) * DBL_EPSILON) gap = 0.0;
  const auto dense = small ? r.weights.dense() : std::vector<std::vector<double>>{};
  std::vector<int> degrees(n);
  for (int i = 0; i < n; ++i) degrees[i] = g.degree(i);

  if (format == ReportFormat::kJson) {
    nlohmann::json edges = nlohmann::json::array();
    for (auto [i, j] : g.edges()) edges.push_back({i, j});
    // No finite diameter when disconnected: null (JSON has no infinity), where the text says inf.
    const nlohmann::json diameter = diam < 0 ? nlohmann::json(nullptr) : nlohmann::json(diam);
    nlohmann::json j{{"round", round}, {"nodes", n}, {"edges", edges}, {"degrees", degrees}};
    if (small) {
      j["diameter"] = diameter;
      j["weights"] = dense;
      j["spectral_gap"] = gap;
    } else {
      j["not_computed"] = {"diameter", "weights", "spectral_gap"};
    }
    j["connected"] = connected;
    return j.dump() + "\n";
  }
  std::ostringstream os;
  if (format == ReportFormat::kDot) {
    writeDot(os, round, r, latticeShape(round, g, connected, spec));
    return os.str();
  }
  os << "round " << round << ": " << n << " nodes, " << g.edgeCount() << " edges, ";
  if (small) {
    os << "diameter "
       << (diam < 0 ? std::string("inf (disconnected this round)") : std::to_string(diam))
       << ", spectral gap " << gap << "\n";
  } else {
    os << (connected ? "connected" : "disconnected this round")
       << "; diameter and spectral gap not computed for more than " << kDenseReportNodes
       << " nodes\n";
  }
  for (int i = 0; i < n; ++i) {
    os << "  node " << i << " (degree " << degrees[i] << "): self " << r.weights.rows[i].self;
    for (const auto& e : r.weights.rows[i].peers) os << ", " << e.peer << ":" << e.weight;
    os << "\n";
  }
  if (n <= 32) {
    os << "mixing matrix W:\n";
    char buf[32];
    for (int i = 0; i < n; ++i) {
      os << " ";
      for (int j = 0; j < n; ++j) {
        std::snprintf(buf, sizeof buf, " %6.4f", dense[i][j]);
        os << buf;
      }
      os << "\n";
    }
  }
  return os.str();
}

}  // namespace starling::runtime
