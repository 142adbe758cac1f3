#include "compression/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>

#include "compression/codecs/codecs.h"

namespace starling::compression {

namespace {

using Kind = CompressorSpec::Kind;

constexpr CompressorKindInfo kKinds[] = {
    {Kind::kIdentity, "identity", CodecId::kIdentity},
    {Kind::kFp16, "fp16", CodecId::kFp16},
    {Kind::kBf16, "bf16", CodecId::kBf16},
    {Kind::kTopK, "topk", CodecId::kTopK},
    {Kind::kRandK, "randk", CodecId::kRandK},
    {Kind::kSign, "sign", CodecId::kSign},
    {Kind::kQsgd, "qsgd", CodecId::kQsgd},
    {Kind::kNuqsgd, "nuqsgd", CodecId::kNuqsgd},
    {Kind::kNatural, "natural", CodecId::kNatural},
    {Kind::kNaturalDithering, "natural_dithering", CodecId::kNaturalDithering},
    {Kind::kTopKDithering, "topk_dithering", CodecId::kTopKDithering},
    {Kind::kCountSketch, "countsketch", CodecId::kCountSketch},
    {Kind::kAdaComp, "adacomp", CodecId::kAdaComp},
    {Kind::kDqsgd, "dqsgd", CodecId::kDqsgd},
    {Kind::kLgc, "lgc", CodecId::kLgc},
};

constexpr bool inKindOrder() {
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    if (static_cast<size_t>(kKinds[i].kind) != i) return false;
  }
  return true;
}
static_assert(inKindOrder(), "kKinds must list every CompressorSpec::Kind, in order");

}  // namespace

std::span<const CompressorKindInfo> compressorKinds() { return kKinds; }

std::optional<CompressorSpec::Kind> compressorKindFromName(std::string_view name) {
  for (const auto& k : kKinds) {
    if (name == k.name) return k.kind;
  }
  return std::nullopt;
}

const char* compressorKindName(CompressorSpec::Kind kind) {
  const auto i = static_cast<size_t>(kind);
  return i < std::size(kKinds) ? kKinds[i].name : "unknown";
}

namespace {

core::Status checkSparse(const CompressorSpec& spec) {
  if (spec.k > 0) return core::Status::ok();
  if (!(spec.ratio > 0.0) || !std::isfinite(spec.ratio)) {
    return core::invalidArgument(std::string(compressorKindName(spec.kind)) +
                                 ": needs k > 0 or a finite ratio > 0 (ratio " +
                                 std::to_string(spec.ratio) + ")");
  }
  return core::Status::ok();
}

core::Status checkRange(const char* what, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return core::Status::ok();
  return core::invalidArgument(std::string(what) + " must be in " + std::to_string(lo) + ".." +
                               std::to_string(hi) + ", got " + std::to_string(v));
}

core::Status checkBucket(const CompressorSpec& spec) {
  if (spec.bucket >= 1 && spec.bucket <= UINT32_MAX) return core::Status::ok();
  return core::invalidArgument(std::string(compressorKindName(spec.kind)) +
                               ": bucket must be in 1..2^32-1, got " +
                               std::to_string(spec.bucket));
}

core::Status checkCountSketch(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkRange("countsketch: rows", static_cast<int64_t>(spec.rows), 1, 64));
  if (spec.cols < 1 || spec.cols > (uint64_t{1} << 31)) {
    return core::invalidArgument("countsketch: cols must be in 1..2^31, got " +
                                 std::to_string(spec.cols));
  }
  if (spec.meanEstimate) return core::Status::ok();
  if (spec.threshold > 0.0) {
    if (!std::isfinite(spec.threshold)) return core::invalidArgument("countsketch: threshold");
    return core::Status::ok();
  }
  return checkSparse(spec);
}

template <typename T>
core::Result<std::unique_ptr<Compressor<T>>> createInner(const CompressorSpec& spec) {
  switch (spec.kind) {
    case CompressorSpec::Kind::kIdentity:
      return codecs::makeIdentity<T>();
    case CompressorSpec::Kind::kFp16:
      return codecs::makeFp16<T>();
    case CompressorSpec::Kind::kBf16:
      return codecs::makeBf16<T>();
    case CompressorSpec::Kind::kTopK:
      STARLING_RETURN_IF_ERROR(checkSparse(spec));
      return codecs::makeTopK<T>(spec.k, spec.ratio);
    case CompressorSpec::Kind::kRandK:
      STARLING_RETURN_IF_ERROR(checkSparse(spec));
      return codecs::makeRandK<T>(spec.k, spec.ratio, spec.scaled);
    case CompressorSpec::Kind::kSign:
      return codecs::makeSign<T>();
    case CompressorSpec::Kind::kQsgd:
      if (spec.bits < 2 || spec.bits > 8) {
        return core::invalidArgument("qsgd: bits must be in 2..8, got " +
                                     std::to_string(spec.bits));
      }
      if (spec.bucket < 1 || spec.bucket > UINT32_MAX) {
        return core::invalidArgument("qsgd: bucket must be in 1..2^32-1, got " +
                                     std::to_string(spec.bucket));
      }
      return codecs::makeQsgd<T>(spec.bits, static_cast<uint32_t>(spec.bucket), spec.linf);
    case CompressorSpec::Kind::kNuqsgd:
      STARLING_RETURN_IF_ERROR(checkRange("nuqsgd: bits", spec.bits, 2, 8));
      STARLING_RETURN_IF_ERROR(checkBucket(spec));
      return codecs::makeNuqsgd<T>(spec.bits, static_cast<uint32_t>(spec.bucket));
    case CompressorSpec::Kind::kNatural:
      return codecs::makeNatural<T>();
    case CompressorSpec::Kind::kNaturalDithering:
      STARLING_RETURN_IF_ERROR(checkRange("natural_dithering: levels", spec.levels, 1, 30));
      return codecs::makeNaturalDithering<T>(spec.levels, spec.linf);
    case CompressorSpec::Kind::kTopKDithering:
      STARLING_RETURN_IF_ERROR(checkRange("topk_dithering: levels", spec.levels, 1, 30));
      STARLING_RETURN_IF_ERROR(checkSparse(spec));
      return codecs::makeTopKDithering<T>(spec.k, spec.ratio, spec.levels);
    case CompressorSpec::Kind::kCountSketch:
      STARLING_RETURN_IF_ERROR(checkCountSketch(spec));
      return codecs::makeCountSketch<T>(spec);
    case CompressorSpec::Kind::kAdaComp:
      if (spec.bin < 1 || spec.bin > UINT32_MAX) {
        return core::invalidArgument("adacomp: bin must be in 1..2^32-1, got " +
                                     std::to_string(spec.bin));
      }
      return codecs::makeAdaComp<T>(spec.bin);
    case CompressorSpec::Kind::kDqsgd:
      STARLING_RETURN_IF_ERROR(checkRange("dqsgd: min_bits", spec.minBits, 2, 8));
      STARLING_RETURN_IF_ERROR(checkRange("dqsgd: max_bits", spec.maxBits, spec.minBits, 8));
      if (!(spec.target > 0.0) || !std::isfinite(spec.target)) {
        return core::invalidArgument("dqsgd: target must be a finite number > 0");
      }
      STARLING_RETURN_IF_ERROR(checkBucket(spec));
      return codecs::makeDqsgd<T>(spec.minBits, spec.maxBits, spec.target,
                                  static_cast<uint32_t>(spec.bucket));
    case CompressorSpec::Kind::kLgc:
      STARLING_RETURN_IF_ERROR(checkSparse(spec));
      STARLING_RETURN_IF_ERROR(checkRange("lgc: chunk", spec.chunk, 2, 4096));
      STARLING_RETURN_IF_ERROR(checkRange("lgc: hidden", spec.hidden, 1, 4096));
      STARLING_RETURN_IF_ERROR(checkRange("lgc: latent", spec.latent, 1, spec.chunk - 1));
      if (!(spec.learningRate > 0.0) || !std::isfinite(spec.learningRate)) {
        return core::invalidArgument("lgc: learning_rate must be a finite number > 0");
      }
      return codecs::makeLgc<T>(spec);
  }
  return core::invalidArgument("unknown compressor kind " +
                               std::to_string(static_cast<int>(spec.kind)));
}

// One codec as the spec's own keys select it (its `layers` aside).
template <typename T>
core::Result<std::unique_ptr<Compressor<T>>> createOne(const CompressorSpec& spec) {
  auto inner = createInner<T>(spec);
  if (!inner || !spec.errorFeedback) return inner;
  if (spec.kind == CompressorSpec::Kind::kAdaComp) {
    return core::invalidArgument("adacomp keeps its own residue; do not add error_feedback");
  }
  return codecs::makeErrorFeedback<T>(std::move(*inner));
}

std::string ruleFault(size_t rule, const std::string& what) {
  return "compression layers rule " + std::to_string(rule) + ": " + what;
}

}  // namespace

bool sendsIdentityOnly(const CompressorSpec& spec) {
  if (spec.kind != Kind::kIdentity) return false;
  for (const LayerRule& r : spec.layers) {
    if (r.codec.kind != Kind::kIdentity) return false;
  }
  return true;
}

core::Result<std::vector<int>> layerGroups(const CompressorSpec& spec, size_t tensorCount,
                                           LayerRuleFault* fault) {
  std::vector<int> group(tensorCount, -1);
  const auto n = static_cast<int64_t>(tensorCount);
  auto failAt = [&](size_t rule, size_t position, const std::string& what) {
    if (fault != nullptr) *fault = LayerRuleFault{rule, position};
    return core::invalidArgument(ruleFault(rule, what));
  };
  for (size_t r = 0; r < spec.layers.size(); ++r) {
    const LayerRule& rule = spec.layers[r];
    if (rule.tensors.empty()) {
      return failAt(r, LayerRuleFault::npos, "names no tensors");
    }
    if (!rule.codec.layers.empty()) {
      return failAt(r, LayerRuleFault::npos, "rules do not nest (a rule has no \"layers\")");
    }
    for (size_t p = 0; p < rule.tensors.size(); ++p) {
      const int64_t i = rule.tensors[p];
      if (i < -n || i >= n) {
        return failAt(r, p,
                      "tensor " + std::to_string(i) + " is outside the model's layout of " +
                          std::to_string(tensorCount) + (tensorCount == 1 ? " tensor" : " tensors") +
                          " (valid: " + std::to_string(-n) + ".." + std::to_string(n - 1) + ")");
      }
      for (size_t q = 0; q < p; ++q) {
        if (rule.tensors[q] == i) {
          return failAt(r, p, "tensor " + std::to_string(i) + " is named twice");
        }
      }
      const auto t = static_cast<size_t>(i < 0 ? i + n : i);
      if (group[t] >= 0 && group[t] != static_cast<int>(r)) {
        return failAt(r, p,
                      "tensor " + std::to_string(i) + " (tensor " + std::to_string(t) +
                          " of the layout) is named by rule " + std::to_string(group[t]) +
                          " as well");
      }
      group[t] = static_cast<int>(r);
    }
  }
  return group;
}

template <typename T>
core::Result<std::unique_ptr<Compressor<T>>> createCompressor(const CompressorSpec& spec,
                                                              std::span<const size_t> layout) {
  if (spec.layers.empty()) return createOne<T>(spec);
  const size_t tensors = layout.empty() ? 1 : layout.size();
  auto assigned = layerGroups(spec, tensors);
  if (!assigned) return assigned.status();
  // Groups in the order of their first tensor; -1 (the spec's own codec) is a group like any.
  std::vector<int> order;            // the group's rule (-1: the spec's own codec)
  std::vector<uint32_t> groupOf(tensors);
  for (size_t t = 0; t < tensors; ++t) {
    const int rule = (*assigned)[t];
    auto it = std::find(order.begin(), order.end(), rule);
    groupOf[t] = static_cast<uint32_t>(it - order.begin());
    if (it == order.end()) order.push_back(rule);
  }
  auto specOf = [&](int rule) -> const CompressorSpec& {
    return rule < 0 ? spec : spec.layers[static_cast<size_t>(rule)].codec;
  };
  std::vector<std::unique_ptr<Compressor<T>>> inner;
  bool identityOnly = true;
  size_t receivers = 0;
  for (size_t g = 0; g < order.size(); ++g) {
    CompressorSpec one = specOf(order[g]);
    one.layers.clear();
    // A receiver decodes a frame with one receiver state per sender, and must check the frame
    // whole before that state changes; the layered codec can promise that for one such group.
    if (one.kind == Kind::kLgc && ++receivers > 1) {
      return core::invalidArgument("compression layers: at most one group may use lgc");
    }
    auto codec = createOne<T>(one);
    if (!codec) {
      return order[g] < 0 ? codec.status()
                          : core::invalidArgument(ruleFault(static_cast<size_t>(order[g]),
                                                            codec.status().message()));
    }
    identityOnly = identityOnly && one.kind == Kind::kIdentity;
    inner.push_back(std::move(*codec));
  }
  // One codec for the whole model: its own frame, and identity keeps its zero-copy path.
  if (inner.size() == 1) return std::move(inner[0]);
  if (identityOnly) return codecs::makeIdentity<T>();
  std::vector<codecs::LayeredSegment> segments;
  for (size_t t = 0; t < tensors; ++t) {
    if (layout[t] == 0) {
      return core::invalidArgument("compression layers: tensor " + std::to_string(t) +
                                   " of the layout is empty");
    }
    if (!segments.empty() && segments.back().group == groupOf[t]) {
      segments.back().length += layout[t];
    } else {
      segments.push_back({layout[t], groupOf[t]});
    }
  }
  return codecs::makeLayered<T>(std::move(inner), std::move(segments));
}

template core::Result<std::unique_ptr<Compressor<float>>> createCompressor<float>(
    const CompressorSpec&, std::span<const size_t>);
template core::Result<std::unique_ptr<Compressor<double>>> createCompressor<double>(
    const CompressorSpec&, std::span<const size_t>);

}  // namespace starling::compression
