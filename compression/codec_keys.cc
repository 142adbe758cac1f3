#include "compression/codec_keys.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace starling::compression {
namespace {

using Kind = CompressorSpec::Kind;
using Type = CodecKey::Type;

// A key stored in the CompressorSpec field F.
#define STARLING_FIELD(F)                                                   \
  [](const CompressorSpec& c) { return static_cast<double>(c.F); },         \
      [](CompressorSpec& c, double v) { c.F = static_cast<decltype(c.F)>(v); }

constexpr double kMaxUint32 = 4294967295.0;  // 2^32 - 1
constexpr double kMaxRounds = 1099511627776.0;  // 2^40, scenario::kMaxRounds

CodecKey integer(const char* name, double lo, double hi, std::optional<double> def,
                 double (*get)(const CompressorSpec&), void (*set)(CompressorSpec&, double)) {
  return {name, Type::kInteger, lo, hi, false, def, {}, nullptr, nullptr, get, set};
}
CodecKey norm() {
  return {"norm", Type::kChoice, 0, 0, false, 0, {"l2", "linf"}, nullptr, nullptr,
          STARLING_FIELD(linf)};
}
const CodecKey kKeep{"keep", Type::kKeep};
const CodecKey kBucket = integer("bucket", 1, kMaxUint32, 512, STARLING_FIELD(bucket));

const std::vector<CodecKey>& table(Kind kind) {
  static const std::vector<CodecKey> kNone;
  static const std::vector<CodecKey> kTopK{kKeep};
  static const std::vector<CodecKey> kRandK{
      kKeep, {"scaled", Type::kBoolean, 0, 0, false, 1, {}, nullptr, nullptr,
              STARLING_FIELD(scaled)}};
  static const std::vector<CodecKey> kQsgd{integer("bits", 2, 8, 4, STARLING_FIELD(bits)), norm(),
                                           kBucket};
  static const std::vector<CodecKey> kNuqsgd{integer("bits", 2, 8, 4, STARLING_FIELD(bits)),
                                             kBucket};
  static const std::vector<CodecKey> kNaturalDithering{
      integer("levels", 1, 30, 4, STARLING_FIELD(levels)), norm()};
  static const std::vector<CodecKey> kTopKDithering{
      kKeep, integer("levels", 1, 30, 4, STARLING_FIELD(levels))};
  static const std::vector<CodecKey> kCountSketch{
      integer("rows", 1, 64, 5, STARLING_FIELD(rows)),
      integer("cols", 1, 2147483648.0, std::nullopt, STARLING_FIELD(cols)),
      {"estimate", Type::kChoice, 0, 0, false, 0, {"median", "mean"}, nullptr, nullptr,
       STARLING_FIELD(meanEstimate)},
      {"threshold", Type::kSketchKeep}};
  static const std::vector<CodecKey> kAdaComp{
      integer("bin", 1, kMaxUint32, 500, STARLING_FIELD(bin))};
  static const std::vector<CodecKey> kDqsgd{
      integer("min_bits", 2, 8, 2, STARLING_FIELD(minBits)),
      {"max_bits", Type::kInteger, 2, 8, false, 8, {}, "min_bits", nullptr,
       STARLING_FIELD(maxBits)},
      {"target", Type::kNumber, 0, 1e6, true, 1.0, {}, nullptr, nullptr, STARLING_FIELD(target)},
      kBucket};
  static const std::vector<CodecKey> kLgc{
      kKeep,
      integer("chunk", 2, 4096, 32, STARLING_FIELD(chunk)),
      integer("hidden", 1, 4096, 64, STARLING_FIELD(hidden)),
      {"latent", Type::kInteger, 1, 4095, false, 4, {}, nullptr, "chunk", STARLING_FIELD(latent)},
      integer("warmup", 0, kMaxRounds, 100, STARLING_FIELD(warmup)),
      integer("refresh", 0, kMaxRounds, 50, STARLING_FIELD(refresh)),
      integer("share_every", 1, kMaxRounds, 10, STARLING_FIELD(shareEvery)),
      {"learning_rate", Type::kNumber, 0, 1, true, 1e-3, {}, nullptr, nullptr,
       STARLING_FIELD(learningRate)}};
  static const std::vector<CodecKey> kInt8{
      integer("chunk", 1, kMaxUint32, 256, STARLING_FIELD(scaleChunk))};
  static const std::vector<CodecKey> kChunkTopK{
      integer("chunk", 2, 65536, 64, STARLING_FIELD(scaleChunk)),
      {"per_chunk", Type::kInteger, 1, 65535, false, 2, {}, nullptr, "chunk",
       STARLING_FIELD(perChunk)}};
  switch (kind) {
    case Kind::kTopK: return kTopK;
    case Kind::kRandK: return kRandK;
    case Kind::kQsgd: return kQsgd;
    case Kind::kNuqsgd: return kNuqsgd;
    case Kind::kNaturalDithering: return kNaturalDithering;
    case Kind::kTopKDithering: return kTopKDithering;
    case Kind::kCountSketch: return kCountSketch;
    case Kind::kAdaComp: return kAdaComp;
    case Kind::kDqsgd: return kDqsgd;
    case Kind::kLgc: return kLgc;
    case Kind::kInt8: return kInt8;
    case Kind::kTopK2Bit:
    case Kind::kDctSign: return kChunkTopK;
    default: return kNone;  // identity, fp16, bf16, sign, natural: no keys
  }
}

#undef STARLING_FIELD

}  // namespace

std::span<const CodecKey> codecKeys(CompressorSpec::Kind kind) { return table(kind); }

std::optional<double> codecKeyValue(const CompressorSpec& c, const char* name) {
  for (const CodecKey& key : table(c.kind)) {
    if (key.get != nullptr && std::strcmp(key.name, name) == 0) return key.get(c);
  }
  return std::nullopt;
}

}  // namespace starling::compression
