#include "scenario/partition.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/rng.h"

namespace starling::scenario {
namespace {

// Stream salts for deriveSeed: never change them, or seeded runs stop reproducing.
constexpr uint64_t kDirichletSalt = 0x444952'494348ULL;  // "DIRICH"
constexpr uint64_t kShardSalt = 0x534841'524453ULL;      // "SHARDS"

void shuffle(std::vector<size_t>& v, core::Rng& rng) {
  for (size_t j = v.size(); j > 1; --j) std::swap(v[j - 1], v[rng.below(j)]);
}

core::Status checkNodes(size_t samples, int nodes, size_t needed) {
  if (nodes < 1) return core::invalidArgument("nodes: must be >= 1, got " + std::to_string(nodes));
  if (samples < needed) {
    return core::invalidArgument("cannot partition " + std::to_string(samples) + " samples over " +
                                 std::to_string(nodes) + " nodes: need at least " +
                                 std::to_string(needed));
  }
  return core::Status::ok();
}

}  // namespace

double gammaDraw(double shape, core::Rng& rng) {
  if (shape < 1.0) {
    const double u = 1.0 - rng.uniform();  // (0, 1]
    return gammaDraw(shape + 1.0, rng) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = rng.normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = rng.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0.0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

core::Result<std::vector<std::vector<size_t>>> partitionDirichlet(std::span<const uint8_t> labels,
                                                                  int nodes, double alpha,
                                                                  uint64_t seed) {
  STARLING_RETURN_IF_ERROR(checkNodes(labels.size(), nodes, static_cast<size_t>(std::max(nodes, 1))));
  if (!(alpha > 0.0) || !std::isfinite(alpha)) {
    return core::invalidArgument("alpha: must be a finite number > 0, got " + std::to_string(alpha));
  }
  const auto n = static_cast<size_t>(nodes);
  std::vector<std::vector<size_t>> byClass(256);
  for (size_t j = 0; j < labels.size(); ++j) byClass[labels[j]].push_back(j);
  core::Rng rng(core::deriveSeed(seed, kDirichletSalt));
  std::vector<std::vector<size_t>> parts(n);
  std::vector<double> p(n);
  for (auto& members : byClass) {
    if (members.empty()) continue;
    shuffle(members, rng);
    double sum = 0;
    for (double& v : p) sum += (v = gammaDraw(alpha, rng));
    // Cut points at the rounded cumulative proportions: the runs cover the class exactly.
    double cum = 0;
    size_t start = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += p[i];
      const size_t end = i + 1 == n ? members.size()
                                    : std::min(members.size(), static_cast<size_t>(std::llround(
                                                                   cum / sum * members.size())));
      for (size_t k = start; k < std::max(start, end); ++k) parts[i].push_back(members[k]);
      start = std::max(start, end);
    }
  }
  // A node left empty takes the last sample of the largest node.
  for (auto& part : parts) {
    if (!part.empty()) continue;
    auto& big = *std::max_element(parts.begin(), parts.end(),
                                  [](const auto& a, const auto& b) { return a.size() < b.size(); });
    part.push_back(big.back());
    big.pop_back();
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

core::Result<std::vector<std::vector<size_t>>> partitionShards(std::span<const uint8_t> labels,
                                                               int nodes, int shardsPerNode,
                                                               uint64_t seed) {
  if (shardsPerNode < 1) {
    return core::invalidArgument("shards_per_node: must be >= 1, got " +
                                 std::to_string(shardsPerNode));
  }
  const size_t count = static_cast<size_t>(std::max(nodes, 1)) * static_cast<size_t>(shardsPerNode);
  STARLING_RETURN_IF_ERROR(checkNodes(labels.size(), nodes, count));
  std::vector<size_t> order(labels.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return labels[a] < labels[b]; });
  std::vector<size_t> shardIds(count);
  for (size_t k = 0; k < count; ++k) shardIds[k] = k;
  core::Rng rng(core::deriveSeed(seed, kShardSalt));
  shuffle(shardIds, rng);
  const size_t m = labels.size();
  std::vector<std::vector<size_t>> parts(static_cast<size_t>(nodes));
  for (size_t k = 0; k < count; ++k) {
    const size_t s = shardIds[k];
    // Shard s covers [s m / count, (s + 1) m / count) of the sorted order.
    const size_t begin = s * m / count, end = (s + 1) * m / count;
    auto& part = parts[k / static_cast<size_t>(shardsPerNode)];
    part.insert(part.end(), order.begin() + static_cast<std::ptrdiff_t>(begin),
                order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

}  // namespace starling::scenario
