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
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compression/frame.h"
#include "core/rng.h"
#include "core/state.h"
#include "core/status.h"

namespace starling::compression {

// What a scenario's "compression" object selects. Unused fields keep their defaults.
struct CompressorSpec {
  enum class Kind {
    kIdentity,
    kFp16,
    kBf16,
    kTopK,
    kRandK,
    kSign,
    kQsgd,
    kNuqsgd,
    kNatural,
    kNaturalDithering,
    kTopKDithering,
    kCountSketch,
    kAdaComp,
    kDqsgd,
  };
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
  // natural_dithering / topk_dithering: s exponential levels {0, 2^(1-s), ..., 1/2, 1} of the
  // (l2 or linf, see `linf`) norm; topk_dithering keeps k (or ratio * d) elements first.
  int levels = 4;
  // countsketch: rows x cols table; "median" estimate plus top-k heavy hitters (k / ratio) or,
  // with threshold > 0, every coordinate whose estimate is >= threshold * (estimated ||x||_2);
  // "mean" is the linear, unbiased estimate (sketch-space mixing). hash_seed 0: fresh hashes
  // every round from the stream's shared seed.
  uint64_t rows = 5;
  uint64_t cols = 0;
  double threshold = 0.0;
  bool meanEstimate = false;
  // adacomp: bin length L_T.
  uint64_t bin = 500;
  // dqsgd: bits chosen per round within [minBits, maxBits] (docs/compression_rules.md);
  // `target` is the relative variance budget per round.
  int minBits = 2;
  int maxBits = 8;
  double target = 1.0;
  // Wraps the codec: p = C(e + v), e <- e + v - p (docs/algorithms.md §13).
  bool errorFeedback = false;
};

const char* compressorKindName(CompressorSpec::Kind kind);

// The one table of codec names, in CompressorSpec::Kind order: the name a scenario writes in
// "compression": {"kind": ...} (and compressorKindName prints), and the codec id its frames carry
// (the wire format, docs/wire_format.md). The scenario parser and the tools read it; nothing
// else lists the names.
struct CompressorKindInfo {
  CompressorSpec::Kind kind;
  const char* name;
  CodecId codec;
};
std::span<const CompressorKindInfo> compressorKinds();
// The kind a name selects, or nullopt.
std::optional<CompressorSpec::Kind> compressorKindFromName(std::string_view name);

// What a codec remembers between the frames of one stream (one sender's messages over the
// rounds): error-feedback residuals, AdaComp's residue, DQSGD's norm history. Created by the
// codec, owned by the sender.
class CodecState {
 public:
  virtual ~CodecState() = default;
  // Saves or loads the state for a checkpoint (core/state.h).
  virtual void visitState(core::StateVisitor& v) { v.fail("this codec's state cannot be saved"); }
};

// Everything a stateful or round-aware encode needs besides the vector.
struct StreamContext {
  uint64_t round = 0;
  // Equal at every sender of a run (derived from the scenario's seed): codecs whose frames must
  // be summable across senders (countsketch hashes) derive their per-round choices from it.
  uint64_t sharedSeed = 0;
  CodecState* state = nullptr;  // from newState(); may be null for stateless codecs
};

// Sum of weighted frames in a linear codec's own domain (a Count-Sketch table), decoded once.
// decode(sum_j w_j f_j) equals sum_j w_j decode(f_j) up to rounding.
template <typename T>
class LinearAccumulator {
 public:
  virtual ~LinearAccumulator() = default;
  // Starts a new sum; frames added after this must agree with each other (same hashes).
  virtual void reset() = 0;
  // kOk when add(frame) would succeed: the frame decodes and agrees with the frames added
  // since reset(). Adds nothing.
  virtual core::Status check(std::span<const std::byte> frame) = 0;
  // kCorruption for a frame that does not decode, or whose hashes or shape differ from the
  // frames already added; the sum is then unchanged.
  virtual core::Status add(std::span<const std::byte> frame, double weight) = 0;
  // Writes decode of the sum (zeros when nothing was added).
  virtual void finish(std::span<T> out) = 0;
};

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

  // Per-stream state for a vector of d elements; null for codecs that keep none.
  virtual std::unique_ptr<CodecState> newState(size_t /*d*/) const { return nullptr; }

  // The encode the engine calls: stateful and round-aware codecs override it. The default
  // ignores the context. encode() above behaves as the first frame of a fresh stream.
  virtual void encodeStream(std::span<const T> x, core::Rng& rng, const StreamContext& /*ctx*/,
                            std::vector<std::byte>& out) const {
    encode(x, rng, out);
  }

  // encodeStream, and into `seen` (as many elements as x) exactly what decode(out) returns:
  // what every receiver of the frame reconstructs, which the sender needs too (its own message as
  // the neighbours see it; error feedback's residual). The default decodes the frame it has just
  // written; a codec that knows those values as it writes them may override it to save that
  // pass. Returns decode's status (kCorruption for a non-finite input the codec refuses).
  virtual core::Status encodeSeen(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                                  std::vector<std::byte>& out, std::span<T> seen) const {
    encodeStream(x, rng, ctx, out);
    return decode(out, seen);
  }

  // Non-null when decode is linear in the frame (see LinearAccumulator) for vectors of d
  // elements, so a receiver may sum its neighbours' weighted frames and decode once.
  virtual std::unique_ptr<LinearAccumulator<T>> newAccumulator(size_t /*d*/) const {
    return nullptr;
  }
};

// kInvalidArgument for parameters out of range (k = 0 and ratio <= 0, bits outside 2..8, ...).
template <typename T>
core::Result<std::unique_ptr<Compressor<T>>> createCompressor(const CompressorSpec& spec);

}  // namespace starling::compression
