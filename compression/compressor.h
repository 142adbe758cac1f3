// Compressor: turns a vector into one wire frame and back.
//
// A Compressor is const and stateless: anything that persists between rounds (error-feedback
// residuals, reference points) belongs to the caller. encode() writes exactly one frame
// (docs/wire_format.md) for the vector; decode() reads exactly one frame and reconstructs the
// vector the receiver sees. Every sender and receiver of a frame reconstructs the same values, so
// algorithms that track reference points (CHOCO's x-hat) stay in agreement.
//
// decode() is hostile-input safe: truncation, lengths that disagree with the element count, an
// unknown codec, codec parameters out of range, NaN or infinity where the codec forbids them — each
// returns kCorruption and never reads out of bounds.
//
// Thread-safety: const methods only; safe to share between threads. The Rng passed to encode()
// (stochastic rounding, random sparsification) is the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compression/frame.h"
#include "runtime/core/rng.h"
#include "runtime/core/status.h"

namespace starling::compression {

// What a scenario's "compression" object selects. Unused fields keep their defaults.
struct CompressorSpec {
  enum class Kind { kIdentity, kFp16, kBf16, kTopK, kRandK, kSign, kQsgd };
  Kind kind = Kind::kIdentity;
  // topk / randk: keep k elements, or ratio * d (rounded up, at least 1) when k == 0.
  uint64_t k = 0;
  double ratio = 0.0;
  bool scaled = true;  // randk: multiply the kept values by d / k (unbiased); false: plain rand-k
  // qsgd: `bits` per element including the sign, so s = 2^(bits-1) - 1 magnitude levels; each
  // bucket of `bucket` elements is scaled by its own norm (l2, or linf for QSGDinf / LEAD's
  // b-bit quantizer).
  int bits = 4;
  uint64_t bucket = 512;
  bool linf = false;
};

const char* compressorKindName(CompressorSpec::Kind kind);

template <typename T>
class Compressor {
 public:
  virtual ~Compressor() = default;

  virtual CodecId id() const = 0;
  // True when E[decode(encode(x))] = x.
  virtual bool unbiased() const = 0;

  // Writes one frame for x into `out` (resized; previous contents replaced).
  virtual void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const = 0;

  // Reconstructs the vector of one frame into `out`, whose size is the expected element count.
  virtual core::Status decode(std::span<const std::byte> frame, std::span<T> out) const = 0;
};

// kInvalidArgument for parameters out of range (k = 0 and ratio <= 0, bits outside 2..8, ...).
template <typename T>
core::Result<std::unique_ptr<Compressor<T>>> createCompressor(const CompressorSpec& spec);

}  // namespace starling::compression
