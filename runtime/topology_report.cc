#include "runtime/topology_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace starling::runtime {

std::string describeRound(uint64_t round, const topology::RoundTopology& r, ReportFormat format) {
  const topology::Graph& g = r.graph;
  const int n = g.nodes();
  const int diam = topology::diameter(g);
  const double gap = topology::spectralGap(r.weights);
  const auto dense = r.weights.dense();
  std::vector<int> degrees(n);
  for (int i = 0; i < n; ++i) degrees[i] = g.degree(i);

  if (format == ReportFormat::kJson) {
    nlohmann::json edges = nlohmann::json::array();
    for (auto [i, j] : g.edges()) edges.push_back({i, j});
    nlohmann::json j{{"round", round},     {"nodes", n},        {"edges", edges},
                     {"degrees", degrees},   {"diameter", diam},  {"weights", dense},
                     {"spectral_gap", gap},  {"connected", topology::isConnected(g)}};
    return j.dump() + "\n";
  }
  std::ostringstream os;
  if (format == ReportFormat::kDot) {
    os << "graph round_" << round << " {\n";
    for (int i = 0; i < n; ++i) {
      os << "  " << i << " [label=\"" << i << "\\nw_ii=" << r.weights.rows[i].self << "\"];\n";
    }
    for (auto [i, j] : g.edges()) os << "  " << i << " -- " << j << " [label=\"" << dense[i][j] << "\"];\n";
    os << "}\n";
    return os.str();
  }
  os << "round " << round << ": " << n << " nodes, " << g.edgeCount() << " edges, diameter "
     << (diam < 0 ? std::string("inf (disconnected this round)") : std::to_string(diam))
     << ", spectral gap " << gap << "\n";
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
