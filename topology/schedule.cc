#include "topology/schedule.h"

#include <cassert>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/rng.h"

namespace starling::topology {
namespace {

// Independent streams per use of the seed; changing one changes every scenario's graphs.
constexpr uint64_t kCycleSalt = 0x746f706f2d637963ULL;     // "topo-cyc"
constexpr uint64_t kMatchingSalt = 0x746f706f2d6d6174ULL;  // "topo-mat"
constexpr uint64_t kDropoutSalt = 0x746f706f2d64726fULL;   // "topo-dro"

// buildGraph/mixingWeights messages start with the field ("p: ..."); the schedule knows where
// that field lives in the scenario ("topology/base").
core::Status atField(const core::Status& st, std::string_view where) {
  return core::Status(st.code(), std::string(where) + "/" + st.message());
}


core::Status disconnected(std::string_view where, const GraphSpec& spec, int nodes) {
  return core::invalidArgument(std::string(where) + ": graph is disconnected (" +
                               graphKindName(spec.kind) + " on " + std::to_string(nodes) +
                               " nodes)");
}

// Smallest L with 2^L >= n: the number of rounds after which one-peer exponential repeats.
int ceilLog2(int n) {
  int l = 0;
  while ((int64_t{1} << l) < n) ++l;
  return l;
}

// Weights of a rule on a graph where every vertex has degree <= 1 or that was already validated.
MixingMatrix mustWeigh(const Graph& g, WeightRule rule) {
  core::Result<MixingMatrix> w = mixingWeights(g, rule);
  assert(w.isOk() && "weights of a validated graph must exist");
  return std::move(w).value();
}

std::shared_ptr<const RoundTopology> makeRound(uint64_t round, Graph g, MixingMatrix w) {
  auto rt = std::make_shared<RoundTopology>();
  rt->round = round;
  rt->graph = std::move(g);
  rt->weights = std::move(w);
  return rt;
}

Graph onePeerGraph(int n, uint64_t round) {
  std::vector<std::pair<int, int>> e;
  if (n >= 2) {
    const uint64_t k = round % static_cast<uint64_t>(ceilLog2(n));
    const int64_t bit = int64_t{1} << k;
    for (int i = 0; i < n; ++i) {
      const int64_t j = static_cast<int64_t>(i) ^ bit;
      if (j < n && i < j) e.emplace_back(i, static_cast<int>(j));
    }
  }
  return Graph::fromEdges(n, e);
}

Graph randomMatching(const Graph& base, uint64_t seed, uint64_t round) {
  std::vector<std::pair<int, int>> e = base.edges();
  core::Rng rng(core::deriveSeed(seed, kMatchingSalt, round));
  for (size_t i = e.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.below(i));
    std::swap(e[i - 1], e[j]);
  }
  std::vector<char> used(static_cast<size_t>(base.nodes()), 0);
  std::vector<std::pair<int, int>> matching;
  for (const auto& [a, b] : e) {
    if (used[a] || used[b]) continue;
    used[a] = used[b] = 1;
    matching.emplace_back(a, b);
  }
  return Graph::fromEdges(base.nodes(), matching);
}

std::shared_ptr<const RoundTopology> dropoutRound(const Graph& base, const MixingMatrix& baseW,
                                                  double p, uint64_t seed, uint64_t round) {
  core::Rng rng(core::deriveSeed(seed, kDropoutSalt, round));
  std::vector<std::pair<int, int>> kept;
  for (const auto& edge : base.edges()) {
    if (!rng.bernoulli(p)) kept.push_back(edge);
  }
  Graph g = Graph::fromEdges(base.nodes(), kept);
  // Base weights on the surviving edges; a dropped edge's weight goes back to both endpoints'
  // self weights, which is the same as recomputing self = 1 - sum of the kept peers.
  MixingMatrix w;
  w.rows.resize(baseW.rows.size());
  for (int i = 0; i < base.nodes(); ++i) {
    double sum = 0.0;
    for (const MixingEntry& entry : baseW.rows[i].peers) {
      if (!g.hasEdge(i, entry.peer)) continue;
      w.rows[i].peers.push_back(entry);
      sum += entry.weight;
    }
    w.rows[i].self = 1.0 - sum;
  }
  return makeRound(round, std::move(g), std::move(w));
}

}  // namespace

core::Result<std::unique_ptr<Schedule>> Schedule::create(const TopologySpec& spec) {
  const int n = spec.nodes;
  if (n < 1) return core::invalidArgument("topology/nodes: must be >= 1, got " + std::to_string(n));
  std::unique_ptr<Schedule> s(new Schedule(spec));
  const ScheduleKind kind = spec.schedule.kind;
  if (static_cast<int>(kind) < 0 || kind > ScheduleKind::kEdgeDropout) {
    return core::invalidArgument("topology/schedule/kind: unknown schedule kind " +
                                 std::to_string(static_cast<int>(kind)));
  }

  if (kind == ScheduleKind::kEdgeDropout && !(spec.schedule.p >= 0.0 && spec.schedule.p < 1.0)) {
    return core::invalidArgument("topology/schedule/p: must be in [0, 1), got " +
                                 formatDouble(spec.schedule.p));
  }

  switch (kind) {
    case ScheduleKind::kStatic:
    case ScheduleKind::kRandomMatching:
    case ScheduleKind::kEdgeDropout: {
      core::Result<Graph> base = buildGraph(spec.base, n, spec.seed);
      if (!base.isOk()) return atField(base.status(), "topology/base");
      if (!isConnected(*base)) return disconnected("topology/base", spec.base, n);
      s->base_ = std::move(base).value();
      // A matching's weights are valid under every rule (all degrees are 0 or 1), so only the
      // schedules that use the base graph's own weights check the rule against it.
      if (kind != ScheduleKind::kRandomMatching) {
        core::Result<MixingMatrix> w = mixingWeights(s->base_, spec.base.weights);
        if (!w.isOk()) return atField(w.status(), "topology/base");
        s->baseWeights_ = std::move(w).value();
      }
      if (kind == ScheduleKind::kStatic) {
        s->staticRound_ = makeRound(0, s->base_, s->baseWeights_);
      }
      s->support_ = s->base_;
      break;
    }
    case ScheduleKind::kCycle: {
      const auto& cycle = spec.schedule.cycle;
      if (cycle.empty()) {
        return core::invalidArgument("topology/schedule/cycle: must have at least one entry");
      }
      std::vector<std::pair<int, int>> unionEdges;
      for (size_t c = 0; c < cycle.size(); ++c) {
        const std::string where = "topology/schedule/cycle[" + std::to_string(c) + "]";
        core::Result<Graph> g = buildGraph(cycle[c], n, core::deriveSeed(spec.seed, kCycleSalt, c));
        if (!g.isOk()) return atField(g.status(), where);
        core::Result<MixingMatrix> w = mixingWeights(*g, cycle[c].weights);
        if (!w.isOk()) return atField(w.status(), where);
        for (const auto& edge : g->edges()) unionEdges.push_back(edge);
        s->cycle_.push_back(makeRound(c, std::move(g).value(), std::move(w).value()));
      }
      s->support_ = Graph::fromEdges(n, unionEdges);
      if (!isConnected(s->support_)) {
        return core::invalidArgument("topology/schedule/cycle: the union of the " +
                                     std::to_string(cycle.size()) +
                                     " graphs is disconnected; some nodes never communicate");
      }
      break;
    }
    case ScheduleKind::kOnePeerExponential:
      // The graph is fixed by the kind and always connects over ceil(log2 n) rounds; only the
      // base weight rule is used, and it is valid on every matching.
      {
        std::vector<std::pair<int, int>> unionEdges;
        for (int r = 0; n >= 2 && r < ceilLog2(n); ++r) {
          for (const auto& edge : onePeerGraph(n, static_cast<uint64_t>(r)).edges()) {
            unionEdges.push_back(edge);
          }
        }
        s->support_ = Graph::fromEdges(n, unionEdges);
      }
      break;
  }
  return s;
}

std::shared_ptr<const RoundTopology> Schedule::at(uint64_t round) const {
  switch (spec_.schedule.kind) {
    case ScheduleKind::kStatic:
      return staticRound_;
    case ScheduleKind::kCycle:
      return cycle_[round % cycle_.size()];
    case ScheduleKind::kOnePeerExponential: {
      Graph g = onePeerGraph(spec_.nodes, round);
      MixingMatrix w = mustWeigh(g, spec_.base.weights);
      return makeRound(round, std::move(g), std::move(w));
    }
    case ScheduleKind::kRandomMatching: {
      Graph g = randomMatching(base_, spec_.seed, round);
      MixingMatrix w = mustWeigh(g, spec_.base.weights);
      return makeRound(round, std::move(g), std::move(w));
    }
    case ScheduleKind::kEdgeDropout:
      return dropoutRound(base_, baseWeights_, spec_.schedule.p, spec_.seed, round);
  }
  assert(false && "unknown schedule kind");
  return staticRound_;
}

}  // namespace starling::topology
