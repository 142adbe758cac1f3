#include "scenario/data.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "core/read_file.h"
#include "core/rng.h"
#include "scenario/scenario_limits.h"

namespace starling::scenario {
namespace {

// Stream salts for deriveSeed: never change them, or seeded runs stop reproducing.
constexpr uint64_t kModelSalt = 0x53594e'4d4f44ULL;      // "SYNMOD"
constexpr uint64_t kSampleSalt = 0x53594e'53414dULL;     // "SYNSAM"
constexpr uint64_t kPartitionSalt = 0x504152'544954ULL;  // "PARTIT"

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// Parses the whole of `s` as a finite double; from_chars rejects a leading '+', LIBSVM files
// commonly use one ("+1"), so it is allowed here.
bool parseDouble(std::string_view s, double& out) {
  if (s.size() > 1 && s[0] == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(out);
}

bool parseIndex(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

// The contiguous block (as partitionSamples cuts them) that holds sample j of m: the first m % n
// blocks hold one sample more. This equals j * n / m whenever n divides m; where it does not, the
// two differ, and matching partitionSamples is what keeps "node i holds group i" true.
size_t blockOf(size_t j, size_t m, size_t n) {
  const size_t base = m / n;
  const size_t bigEnd = (m % n) * (base + 1);
  return j < bigEnd ? j / (base + 1) : m % n + (j - bigEnd) / base;
}

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// The next whitespace-separated token of `line` from `pos`, or empty at the end.
std::string_view nextToken(std::string_view line, size_t& pos) {
  while (pos < line.size() && isSpace(line[pos])) ++pos;
  const size_t begin = pos;
  while (pos < line.size() && !isSpace(line[pos])) ++pos;
  return line.substr(begin, pos - begin);
}

}  // namespace

core::Result<optim::Dataset> parseLibsvm(std::string_view text, std::string_view name,
                                         std::optional<int> features) {
  if (features && *features < 1) {
    return core::invalidArgument(std::string(name) + ": features must be >= 1, got " +
                                 std::to_string(*features));
  }
  const int64_t limit = features ? *features : kMaxFeatures;
  const std::string limitName =
      features ? "features = " + std::to_string(*features)
               : "the limit of " + std::to_string(kMaxFeatures) + " (2^28) features";
  optim::Dataset data;
  // Every non-zero has a ':' and every sample a line: reserving for those counts keeps the parsed
  // arrays at their final size instead of up to twice it while they grow.
  {
    const auto colons = static_cast<size_t>(std::count(text.begin(), text.end(), ':'));
    const auto lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    data.colIdx.reserve(colons);
    data.values.reserve(colons);
    data.labels.reserve(lines);
    data.rowPtr.reserve(lines + 1);
  }
  std::vector<int32_t> cols;
  std::vector<double> vals;
  int64_t maxIndex = 0;
  size_t lineNo = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t eol = text.find('\n', start);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(start, eol - start);
    start = eol + 1;
    ++lineNo;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    const std::string where = std::string(name) + ":" + std::to_string(lineNo) + ": ";
    size_t pos = 0;
    const std::string_view labelTok = nextToken(line, pos);
    if (labelTok.empty()) continue;  // blank or comment-only line
    double label = 0.0;
    if (!parseDouble(labelTok, label)) {
      return core::corruption(where + "expected a finite numeric label, got " + quoted(labelTok));
    }
    cols.clear();
    vals.clear();
    for (std::string_view tok = nextToken(line, pos); !tok.empty(); tok = nextToken(line, pos)) {
      const size_t colon = tok.find(':');
      if (colon == std::string_view::npos) {
        return core::corruption(where + "expected index:value, got " + quoted(tok));
      }
      int64_t index = 0;
      if (!parseIndex(tok.substr(0, colon), index)) {
        return core::corruption(where + "expected an integer feature index in index:value, got " +
                                quoted(tok));
      }
      if (index < 1) {
        return core::corruption(
            where + "expected a feature index >= 1 (indices are 1-based), got " + quoted(tok));
      }
      if (index > limit) {
        return core::corruption(where + "feature index " + std::to_string(index) + " exceeds " +
                                limitName + " in " + quoted(tok));
      }
      if (!cols.empty() && index - 1 <= cols.back()) {
        return core::corruption(where + "expected strictly increasing feature indices, got " +
                                std::to_string(index) + " after " +
                                std::to_string(cols.back() + 1));
      }
      double value = 0.0;
      if (!parseDouble(tok.substr(colon + 1), value)) {
        return core::corruption(where + "expected a finite numeric value in index:value, got " +
                                quoted(tok));
      }
      cols.push_back(static_cast<int32_t>(index - 1));
      vals.push_back(value);
      maxIndex = std::max(maxIndex, index);
    }
    data.labels.push_back(label);
    data.colIdx.insert(data.colIdx.end(), cols.begin(), cols.end());
    data.values.insert(data.values.end(), vals.begin(), vals.end());
    data.rowPtr.push_back(static_cast<int64_t>(data.values.size()));
  }
  if (data.samples() == 0) return core::corruption(std::string(name) + ": no samples");
  if (!features && maxIndex == 0) {
    return core::corruption(std::string(name) +
                            ": no feature indices in any sample; give the feature count");
  }
  data.features = features ? *features : static_cast<int>(maxIndex);
  return data;
}

core::Result<optim::Dataset> readLibsvm(const std::string& path, std::optional<int> features) {
  auto maxBytes = maxDataFileBytes();
  if (!maxBytes) return maxBytes.status();
  auto text = core::readRegularFile(path, *maxBytes, "data file");
  if (!text) return text.status();
  return parseLibsvm(*text, path, features);
}

core::Result<optim::Dataset> makeSynthetic(const SyntheticSpec& spec, optim::LossKind loss,
                                           int nodes, uint64_t seed) {
  const auto bad = [](const std::string& field, const std::string& what, double got) {
    std::ostringstream s;
    s << "synthetic/" << field << ": must be " << what << ", got " << got;
    return core::invalidArgument(s.str());
  };
  if (spec.samples < 1) return bad("samples", ">= 1", 0);
  if (spec.features < 1) return bad("features", ">= 1", spec.features);
  if (!(spec.heterogeneity >= 0.0) || !std::isfinite(spec.heterogeneity)) {
    return bad("heterogeneity", "finite and >= 0", spec.heterogeneity);
  }
  if (loss == optim::LossKind::kLogistic) {
    if (!(spec.noise >= 0.0 && spec.noise < 0.5)) {
      return bad("noise", "in [0, 0.5) for logistic (a label flip rate)", spec.noise);
    }
  } else if (!(spec.noise >= 0.0) || !std::isfinite(spec.noise)) {
    return bad("noise", "finite and >= 0", spec.noise);
  }
  if (!(spec.density > 0.0 && spec.density <= 1.0))
    return bad("density", "in (0, 1]", spec.density);
  if (nodes < 1) return core::invalidArgument("nodes: must be >= 1, got " + std::to_string(nodes));

  const int d = spec.features;
  const size_t m = spec.samples;
  // Scaled so that a_j^T x has variance about 1: a row holds on average d * density N(0, 1)
  // entries, plus the one forced into a row that would otherwise be empty.
  const double rowNonZeros =
      d * spec.density + (spec.density >= 1.0 ? 0.0 : std::pow(1.0 - spec.density, d));
  const double coef = 1.0 / std::sqrt(rowNonZeros);
  core::Rng modelRng(core::deriveSeed(seed, kModelSalt));
  std::vector<double> xTrue(d);
  for (double& v : xTrue) v = coef * modelRng.normal();
  std::vector<std::vector<double>> models(nodes, xTrue);
  for (auto& xg : models) {
    for (double& v : xg) v += spec.heterogeneity * coef * modelRng.normal();
  }

  core::Rng rng(core::deriveSeed(seed, kSampleSalt));
  optim::Dataset data;
  data.features = d;
  data.labels.reserve(m);
  std::vector<int32_t> cols;
  std::vector<double> vals;
  for (size_t j = 0; j < m; ++j) {
    const auto& xg = models[blockOf(j, m, static_cast<size_t>(nodes))];
    cols.clear();
    vals.clear();
    if (spec.density >= 1.0) {
      for (int k = 0; k < d; ++k) {
        cols.push_back(k);
        vals.push_back(rng.normal());
      }
    } else {
      // Independent Bernoulli(density) per feature, drawn as geometric gaps between the non-zero
      // features: the same distribution at O(non-zeros) cost instead of O(d) draws per row.
      const double logKeep = std::log1p(-spec.density);
      for (double k = -1.0;;) {
        const double u = 1.0 - rng.uniform();  // in (0, 1]
        k += 1.0 + std::floor(std::log(u) / logKeep);
        if (k >= d) break;
        cols.push_back(static_cast<int32_t>(k));
        vals.push_back(rng.normal());
      }
    }
    if (cols.empty()) {
      cols.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(d))));
      vals.push_back(rng.normal());
    }
    double z = 0.0;
    for (size_t k = 0; k < cols.size(); ++k) z += vals[k] * xg[cols[k]];
    double label;
    if (loss == optim::LossKind::kLeastSquares) {
      label = z + spec.noise * rng.normal();
    } else {
      label = z >= 0.0 ? 1.0 : -1.0;
      if (rng.bernoulli(spec.noise)) label = -label;
    }
    data.addRow(label, cols, vals);
  }
  return data;
}

core::Result<std::vector<std::vector<size_t>>> partitionSamples(size_t samples, int nodes,
                                                                PartitionKind kind, uint64_t seed) {
  if (nodes < 1) return core::invalidArgument("nodes: must be >= 1, got " + std::to_string(nodes));
  if (kind == PartitionKind::kDirichlet || kind == PartitionKind::kShards) {
    return core::invalidArgument("a label partition (dirichlet, shards) needs the labels");
  }
  const auto n = static_cast<size_t>(nodes);
  if (samples < n) {
    return core::invalidArgument("cannot partition " + std::to_string(samples) + " samples over " +
                                 std::to_string(nodes) +
                                 " nodes: every node needs at least one sample");
  }
  std::vector<size_t> order(samples);
  for (size_t j = 0; j < samples; ++j) order[j] = j;
  if (kind == PartitionKind::kRandom || kind == PartitionKind::kIid) {
    core::Rng rng(core::deriveSeed(seed, kPartitionSalt));
    for (size_t j = samples; j > 1; --j) std::swap(order[j - 1], order[rng.below(j)]);
  }
  std::vector<std::vector<size_t>> parts(n);
  const size_t base = samples / n;
  const size_t extra = samples % n;
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t size = base + (i < extra ? 1 : 0);
    parts[i].assign(order.begin() + static_cast<std::ptrdiff_t>(next),
                    order.begin() + static_cast<std::ptrdiff_t>(next + size));
    next += size;
  }
  return parts;
}

}  // namespace starling::scenario
