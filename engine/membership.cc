#include "engine/membership.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "topology/mixing.h"

namespace starling::engine {
namespace {

// Connected components of the survivors in g (lost nodes left out), each sorted.
std::vector<std::vector<int>> survivorComponents(const topology::Graph& g,
                                                 const std::vector<bool>& alive) {
  const int n = g.nodes();
  std::vector<int> comp(n, -1);
  std::vector<std::vector<int>> out;
  for (int s = 0; s < n; ++s) {
    if (!alive[s] || comp[s] >= 0) continue;
    out.emplace_back();
    std::queue<int> q;
    q.push(s);
    comp[s] = static_cast<int>(out.size()) - 1;
    while (!q.empty()) {
      const int v = q.front();
      q.pop();
      out.back().push_back(v);
      for (int w : g.neighbors(v)) {
        if (alive[w] && comp[w] < 0) {
          comp[w] = comp[s];
          q.push(w);
        }
      }
    }
    std::sort(out.back().begin(), out.back().end());
  }
  return out;
}

std::string describeComponents(const std::vector<std::vector<int>>& comps) {
  std::string s;
  for (size_t c = 0; c < comps.size() && c < 8; ++c) {
    s += (c ? ", {" : "{");
    for (size_t k = 0; k < comps[c].size() && k < 16; ++k) {
      s += (k ? " " : "") + std::to_string(comps[c][k]);
    }
    if (comps[c].size() > 16) s += " ...";
    s += "}";
  }
  if (comps.size() > 8) s += ", ...";
  return s;
}

}  // namespace

void Membership::remove(const std::vector<int>& ranks) {
  for (int r : ranks) {
    if (r >= 0 && r < nodes() && alive_[r]) {
      alive_[r] = false;
      --survivors_;
    }
  }
  ++epoch_;
}

void Membership::add(const std::vector<int>& ranks) {
  for (int r : ranks) {
    if (r >= 0 && r < nodes() && !alive_[r]) {
      alive_[r] = true;
      ++survivors_;
    }
  }
  ++epoch_;
}

core::Status Membership::adopt(const std::vector<bool>& alive, uint64_t epoch) {
  if (alive.size() != alive_.size()) {
    return core::invalidArgument("a membership of " + std::to_string(alive.size()) +
                                 " nodes for a run of " + std::to_string(alive_.size()));
  }
  alive_ = alive;
  survivors_ = static_cast<int>(std::count(alive_.begin(), alive_.end(), true));
  epoch_ = epoch;
  return core::Status::ok();
}

void Membership::visitState(core::StateVisitor& v) {
  v.scalar("epoch", epoch_);
  std::vector<uint64_t> out;
  for (int r = 0; r < nodes(); ++r) {
    if (!alive_[r]) out.push_back(static_cast<uint64_t>(r));
  }
  v.sized("out", out);
  if (!v.loading() || v.failed()) return;
  alive_.assign(alive_.size(), true);
  survivors_ = nodes();
  for (uint64_t r : out) {
    if (r >= static_cast<uint64_t>(nodes()) || !alive_[r]) {
      return v.fail("checkpoint: membership/out holds rank " + std::to_string(r) + " of " +
                    std::to_string(nodes()));
    }
    alive_[r] = false;
    --survivors_;
  }
}

core::Result<topology::Graph> repairGraph(const topology::Graph& g, const std::vector<bool>& alive,
                                          RepairKind repair) {
  const int n = g.nodes();
  std::vector<std::pair<int, int>> edges;
  for (const auto& [i, j] : g.edges()) {
    if (alive[i] && alive[j]) edges.emplace_back(i, j);
  }
  if (repair == RepairKind::kReconnect) {
    // Every connected group of lost nodes: join the survivors around it in a path (id order).
    std::vector<bool> seen(n, false);
    for (int s = 0; s < n; ++s) {
      if (alive[s] || seen[s]) continue;
      std::vector<int> boundary;
      std::queue<int> q;
      q.push(s);
      seen[s] = true;
      while (!q.empty()) {
        const int v = q.front();
        q.pop();
        for (int w : g.neighbors(v)) {
          if (alive[w]) {
            boundary.push_back(w);
          } else if (!seen[w]) {
            seen[w] = true;
            q.push(w);
          }
        }
      }
      std::sort(boundary.begin(), boundary.end());
      boundary.erase(std::unique(boundary.begin(), boundary.end()), boundary.end());
      for (size_t k = 1; k < boundary.size(); ++k) edges.emplace_back(boundary[k - 1], boundary[k]);
    }
  }
  topology::Graph out = topology::Graph::fromEdges(n, edges);
  // Per-round schedules (matchings, dropout) are not connected in every round by design; a
  // graph that was connected must stay connected over its survivors.
  if (topology::isConnected(g)) {
    const auto comps = survivorComponents(out, alive);
    if (comps.size() > 1) {
      return core::failedPrecondition(
          "the loss disconnects the graph: its " + std::to_string(comps.size()) +
          " parts are " + describeComponents(comps) +
          " (faults.repair is \"none\"; \"reconnect\" joins the neighbours of lost nodes)");
    }
  }
  return out;
}

core::Result<std::shared_ptr<const topology::RoundTopology>> repairTopology(
    const topology::RoundTopology& base, const std::vector<bool>& alive, RepairKind repair,
    topology::WeightRule rule) {
  auto g = repairGraph(base.graph, alive, repair);
  if (!g) return g.status();
  auto w = topology::mixingWeights(*g, rule);
  if (!w && rule == topology::WeightRule::kUniform) {
    w = topology::mixingWeights(*g, topology::WeightRule::kMetropolis);
  }
  if (!w) return w.status();
  auto rt = std::make_shared<topology::RoundTopology>();
  rt->round = base.round;
  rt->graph = std::move(*g);
  rt->weights = std::move(*w);
  return std::shared_ptr<const topology::RoundTopology>(std::move(rt));
}

core::Result<std::shared_ptr<const topology::RoundTopology>> SurvivorSchedule::at(
    uint64_t round, const Membership& m) {
  auto base = schedule_.at(round);
  if (!m.changed()) return base;
  if (schedule_.isStatic() && cachedEpoch_ == m.epoch()) return cached_;
  auto repaired = repairTopology(*base, m.aliveMask(), repair_, schedule_.spec().base.weights);
  if (!repaired) return repaired.status();
  if (schedule_.isStatic()) {
    cached_ = *repaired;
    cachedEpoch_ = m.epoch();
  }
  return repaired;
}

core::Result<const topology::Graph*> SurvivorSchedule::support(const Membership& m) {
  if (!m.changed()) return &schedule_.support();
  if (supportEpoch_ != m.epoch()) {
    auto g = repairGraph(schedule_.support(), m.aliveMask(), RepairKind::kReconnect);
    if (!g) return g.status();
    support_ = std::move(*g);
    supportEpoch_ = m.epoch();
  }
  return &support_;
}

std::string membershipLostLine(uint64_t round, int rank, const std::string& why) {
  nlohmann::ordered_json j;
  j["round"] = round;
  j["rank"] = rank;
  j["why"] = why;
  return nlohmann::ordered_json{{"lost", j}}.dump(-1, ' ', false,
                                                  nlohmann::json::error_handler_t::replace);
}

std::string membershipChangeLine(const MembershipChange& c) {
  nlohmann::ordered_json j;
  j["round"] = c.round;
  j["epoch"] = c.epoch;
  j["left"] = c.left;
  if (!c.joined.empty()) j["joined"] = c.joined;
  j["why"] = c.why;
  return nlohmann::ordered_json{{"membership", j}}.dump(-1, ' ', false,
                                                        nlohmann::json::error_handler_t::replace);
}

uint64_t agreementRounds(uint64_t configured, const topology::Graph& support,
                         const std::vector<int>& lost) {
  if (configured > 0) return configured;
  // The survivors' part of the support graph, relabelled 0..k-1.
  const int n = support.nodes();
  std::vector<int> index(n, -1);
  int k = 0;
  for (int v = 0; v < n; ++v) {
    if (std::find(lost.begin(), lost.end(), v) == lost.end()) index[v] = k++;
  }
  std::vector<std::pair<int, int>> edges;
  for (const auto& [a, b] : support.edges()) {
    if (index[a] >= 0 && index[b] >= 0) edges.emplace_back(index[a], index[b]);
  }
  const int diam = k > 0 ? topology::diameter(topology::Graph::fromEdges(k, edges)) : 0;
  if (diam < 0) return static_cast<uint64_t>(n) + 2;
  return static_cast<uint64_t>(std::max(diam, 1)) + 2;
}

}  // namespace starling::engine
