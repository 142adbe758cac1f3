#include "compression/compressor.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "compression/codecs/codecs.h"

namespace starling::compression {

const char* compressorKindName(CompressorSpec::Kind kind) {
  switch (kind) {
    case CompressorSpec::Kind::kIdentity:
      return "identity";
    case CompressorSpec::Kind::kFp16:
      return "fp16";
    case CompressorSpec::Kind::kBf16:
      return "bf16";
    case CompressorSpec::Kind::kTopK:
      return "topk";
    case CompressorSpec::Kind::kRandK:
      return "randk";
    case CompressorSpec::Kind::kSign:
      return "sign";
    case CompressorSpec::Kind::kQsgd:
      return "qsgd";
  }
  return "unknown";
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

}  // namespace

template <typename T>
core::Result<std::unique_ptr<Compressor<T>>> createCompressor(const CompressorSpec& spec) {
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
  }
  return core::invalidArgument("unknown compressor kind " +
                               std::to_string(static_cast<int>(spec.kind)));
}

template core::Result<std::unique_ptr<Compressor<float>>> createCompressor<float>(
    const CompressorSpec&);
template core::Result<std::unique_ptr<Compressor<double>>> createCompressor<double>(
    const CompressorSpec&);

}  // namespace starling::compression
