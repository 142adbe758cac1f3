#include "compression/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>

#include "compression/codecs/codecs.h"

namespace starling::compression {

namespace {

using Kind = CompressorSpec::Kind;

}  // namespace

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

// A count that travels as a uint32: 1..2^32-1.
core::Status checkCount32(const std::string& what, uint64_t v) {
  if (v >= 1 && v <= UINT32_MAX) return core::Status::ok();
  return core::invalidArgument(what + " must be in 1..2^32-1, got " + std::to_string(v));
}

core::Status checkBucket(const CompressorSpec& spec) {
  return checkCount32(std::string(compressorKindName(spec.kind)) + ": bucket", spec.bucket);
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

// Each codec's builder: its ranges beyond the key table's (a spec built in code, not parsed, is
// checked here too), then its construction point in codecs.h.
template <typename T>
using Built = core::Result<std::unique_ptr<Compressor<T>>>;

template <typename T>
Built<T> buildIdentity(const CompressorSpec&) { return codecs::makeIdentity<T>(); }
template <typename T>
Built<T> buildFp16(const CompressorSpec&) { return codecs::makeFp16<T>(); }
template <typename T>
Built<T> buildBf16(const CompressorSpec&) { return codecs::makeBf16<T>(); }
template <typename T>
Built<T> buildTopK(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkSparse(spec));
  return codecs::makeTopK<T>(spec.k, spec.ratio);
}
template <typename T>
Built<T> buildRandK(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkSparse(spec));
  return codecs::makeRandK<T>(spec.k, spec.ratio, spec.scaled);
}
template <typename T>
Built<T> buildSign(const CompressorSpec&) { return codecs::makeSign<T>(); }
template <typename T>
Built<T> buildQsgd(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkRange("qsgd: bits", spec.bits, 2, 8));
  STARLING_RETURN_IF_ERROR(checkBucket(spec));
  return codecs::makeQsgd<T>(spec.bits, static_cast<uint32_t>(spec.bucket), spec.linf);
}
template <typename T>
Built<T> buildNuqsgd(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkRange("nuqsgd: bits", spec.bits, 2, 8));
  STARLING_RETURN_IF_ERROR(checkBucket(spec));
  return codecs::makeNuqsgd<T>(spec.bits, static_cast<uint32_t>(spec.bucket));
}
template <typename T>
Built<T> buildNatural(const CompressorSpec&) { return codecs::makeNatural<T>(); }
template <typename T>
Built<T> buildNaturalDithering(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkRange("natural_dithering: levels", spec.levels, 1, 30));
  return codecs::makeNaturalDithering<T>(spec.levels, spec.linf);
}
template <typename T>
Built<T> buildTopKDithering(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkRange("topk_dithering: levels", spec.levels, 1, 30));
  STARLING_RETURN_IF_ERROR(checkSparse(spec));
  return codecs::makeTopKDithering<T>(spec.k, spec.ratio, spec.levels);
}
template <typename T>
Built<T> buildCountSketch(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkCountSketch(spec));
  return codecs::makeCountSketch<T>(spec);
}
template <typename T>
Built<T> buildAdaComp(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkCount32("adacomp: bin", spec.bin));
  return codecs::makeAdaComp<T>(spec.bin);
}
template <typename T>
Built<T> buildDqsgd(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkRange("dqsgd: min_bits", spec.minBits, 2, 8));
  STARLING_RETURN_IF_ERROR(checkRange("dqsgd: max_bits", spec.maxBits, spec.minBits, 8));
  if (!(spec.target > 0.0) || !std::isfinite(spec.target)) {
    return core::invalidArgument("dqsgd: target must be a finite number > 0");
  }
  STARLING_RETURN_IF_ERROR(checkBucket(spec));
  return codecs::makeDqsgd<T>(spec.minBits, spec.maxBits, spec.target,
                              static_cast<uint32_t>(spec.bucket));
}
template <typename T>
Built<T> buildLgc(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkSparse(spec));
  STARLING_RETURN_IF_ERROR(checkRange("lgc: chunk", spec.chunk, 2, 4096));
  STARLING_RETURN_IF_ERROR(checkRange("lgc: hidden", spec.hidden, 1, 4096));
  STARLING_RETURN_IF_ERROR(checkRange("lgc: latent", spec.latent, 1, spec.chunk - 1));
  if (!(spec.learningRate > 0.0) || !std::isfinite(spec.learningRate)) {
    return core::invalidArgument("lgc: learning_rate must be a finite number > 0");
  }
  return codecs::makeLgc<T>(spec);
}
template <typename T>
Built<T> buildInt8(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(
      checkRange("int8: chunk", static_cast<int64_t>(spec.scaleChunk), 1, UINT32_MAX));
  return codecs::makeInt8<T>(spec.scaleChunk);
}

core::Status checkChunkTopK(const char* name, const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkRange((std::string(name) + ": chunk").c_str(),
                                      static_cast<int64_t>(spec.scaleChunk), 2, 65536));
  return checkRange((std::string(name) + ": per_chunk").c_str(),
                    static_cast<int64_t>(spec.perChunk), 1,
                    static_cast<int64_t>(spec.scaleChunk) - 1);
}
template <typename T>
Built<T> buildTopK2Bit(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkChunkTopK("topk_2bit", spec));
  return codecs::makeTopK2Bit<T>(spec.scaleChunk, spec.perChunk);
}
template <typename T>
Built<T> buildDctSign(const CompressorSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkChunkTopK("dct_sign", spec));
  return codecs::makeDctSign<T>(spec.scaleChunk, spec.perChunk);
}

#define STARLING_CODEC(K, NAME, BUILD, SUMMARY) \
  CodecInfo { Kind::K, NAME, CodecId::K, SUMMARY, &BUILD<float>, &BUILD<double> }

// The codecs: one row each, in Kind order. A new codec is its file in codecs/, its row here and
// its keys' rows in codec_keys.cc (docs/architecture.md, "Adding a codec").
constexpr CodecInfo kCodecs[] = {
    STARLING_CODEC(kIdentity, "identity", buildIdentity, "the vector as it is"),
    STARLING_CODEC(kFp16, "fp16", buildFp16, "IEEE half precision, round to nearest even"),
    STARLING_CODEC(kBf16, "bf16", buildBf16, "bfloat16, round to nearest even"),
    STARLING_CODEC(kTopK, "topk", buildTopK, "the k largest magnitudes and their indices"),
    STARLING_CODEC(kRandK, "randk", buildRandK, "k random elements, scaled by d/k (unbiased)"),
    STARLING_CODEC(kSign, "sign", buildSign, "signs times the mean magnitude"),
    STARLING_CODEC(kQsgd, "qsgd", buildQsgd, "bucket norms and stochastic uniform levels"),
    STARLING_CODEC(kNuqsgd, "nuqsgd", buildNuqsgd,
                   "bucket norms and stochastic exponential levels"),
    STARLING_CODEC(kNatural, "natural", buildNatural,
                   "each value rounded stochastically to a power of two"),
    STARLING_CODEC(kNaturalDithering, "natural_dithering", buildNaturalDithering,
                   "the norm and stochastic levels 2^-j"),
    STARLING_CODEC(kTopKDithering, "topk_dithering", buildTopKDithering,
                   "top-k, then natural dithering of the kept values"),
    STARLING_CODEC(kCountSketch, "countsketch", buildCountSketch,
                   "a rows x cols Count-Sketch table (linear: summed before decoding)"),
    STARLING_CODEC(kAdaComp, "adacomp", buildAdaComp,
                   "per-bin self-adaptive thresholds with its own residue"),
    STARLING_CODEC(kDqsgd, "dqsgd", buildDqsgd, "qsgd whose bits follow a variance budget"),
    STARLING_CODEC(kLgc, "lgc", buildLgc, "top-k whose values a learned autoencoder codes"),
    STARLING_CODEC(kInt8, "int8", buildInt8,
                   "a float32 scale per chunk and a signed byte per value"),
    STARLING_CODEC(kTopK2Bit, "topk_2bit", buildTopK2Bit,
                   "the top k of each chunk, a scale per chunk and 2 bits per value"),
    STARLING_CODEC(kDctSign, "dct_sign", buildDctSign,
                   "the top k DCT coefficients of each chunk: their signs and mean magnitude"),
};

#undef STARLING_CODEC

constexpr bool inKindOrder() {
  for (size_t i = 0; i < std::size(kCodecs); ++i) {
    if (static_cast<size_t>(kCodecs[i].kind) != i) return false;
  }
  return true;
}
static_assert(inKindOrder(), "kCodecs must list every CompressorSpec::Kind, in order");

template <typename T>
core::Result<std::unique_ptr<Compressor<T>>> createInner(const CompressorSpec& spec) {
  const auto i = static_cast<size_t>(spec.kind);
  if (i >= std::size(kCodecs)) {
    return core::invalidArgument("unknown compressor kind " +
                                 std::to_string(static_cast<int>(spec.kind)));
  }
  if constexpr (std::is_same_v<T, float>) {
    return kCodecs[i].makeFloat(spec);
  } else {
    return kCodecs[i].makeDouble(spec);
  }
}

}  // namespace

std::span<const CodecInfo> compressorKinds() { return kCodecs; }

std::optional<CompressorSpec::Kind> compressorKindFromName(std::string_view name) {
  for (const auto& k : kCodecs) {
    if (name == k.name) return k.kind;
  }
  return std::nullopt;
}

const char* compressorKindName(CompressorSpec::Kind kind) {
  const auto i = static_cast<size_t>(kind);
  return i < std::size(kCodecs) ? kCodecs[i].name : "unknown";
}

namespace {

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
