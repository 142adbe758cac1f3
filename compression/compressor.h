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
// The engine's send path (docs/compression.md, "Writing into transport memory"): encodeInto()
// writes the frame straight into a buffer the caller lends (a transport's shared memory, sized by
// maxEncodedBytes) and gives the sender what its neighbours will decode in the same call. A codec
// whose payload is the message itself (identity) has the InPlaceEncoding capability: the producer
// of the message then writes it straight into the frame's payload (beginInPlace) and seals the
// frame.
//
// Thread-safety: const methods only; safe to share between threads. The Rng passed to encode()
// (stochastic rounding, random sparsification) is the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
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

struct LayerRule;

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
    kLgc,
    kInt8,
    kTopK2Bit,
    kDctSign,
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
  // lgc (docs/compression.md "LGC"): keeps k (or ratio * d) values like topk; for `warmup`
  // rounds sends them as they are while an autoencoder over chunks of `chunk` values (hidden
  // layer `hidden`, `latent` numbers per chunk) learns from them with Adam (`learning_rate`),
  // its parameters averaged with the neighbours' through the frames (every `share_every`
  // rounds); then sends each chunk's latent code. Every `refresh` rounds after the warm-up (0: never) a new decoder version.
  uint32_t chunk = 32;
  uint32_t hidden = 64;
  uint32_t latent = 4;
  uint64_t warmup = 100;
  uint64_t refresh = 50;
  uint64_t shareEvery = 10;  // warm-up frames carry the network every shareEvery rounds
  double learningRate = 1e-3;
  // int8 (docs/compression.md "int8"): one float32 scale per `scaleChunk` values (key "chunk").
  uint32_t scaleChunk = 256;
  // topk_2bit, dct_sign (docs/compression.md): chunks of `scaleChunk` values (key "chunk", default
  // 64 there), the `perChunk` largest magnitudes of each (values, or DCT coefficients) kept.
  uint32_t perChunk = 2;
  // Wraps the codec: p = C(e + v), e <- e + v - p (docs/algorithms.md §13).
  bool errorFeedback = false;
  // Layer-aware compression (docs/compression.md): each rule's codec for the tensors it names,
  // the codec above for every tensor no rule names. Rules do not nest (a rule's own `layers` is
  // empty).
  std::vector<LayerRule> layers;
};

// One group of a layered codec: the tensors of the model's layout it covers (indices into the
// layout, negative counting from the end: -1 is the last tensor) and their codec.
struct LayerRule {
  std::vector<int64_t> tensors;
  CompressorSpec codec;
};

// True when nothing the spec selects is lossy: its codec and every rule's are identity (the
// engine then sends plain identity frames, without a codec object).
bool sendsIdentityOnly(const CompressorSpec& spec);

// Where layerGroups found a rule at fault: spec.layers[rule], and the position of the index in
// its `tensors` (npos: the rule as a whole, i.e. an empty one).
struct LayerRuleFault {
  static constexpr size_t npos = static_cast<size_t>(-1);
  size_t rule = 0;
  size_t position = npos;
};

// The codec of each tensor of a model of `tensorCount` tensors: -1 for the spec's own codec, r
// for spec.layers[r]. kInvalidArgument for a rule without tensors, an index outside
// [-tensorCount, tensorCount), an index written twice in one rule, and a tensor two rules name (a
// rule that reaches one tensor through both a positive and a negative index names it once);
// `fault` then says where. Rules with a non-empty `layers` of their own are kInvalidArgument.
core::Result<std::vector<int>> layerGroups(const CompressorSpec& spec, size_t tensorCount,
                                           LayerRuleFault* fault = nullptr);

const char* compressorKindName(CompressorSpec::Kind kind);

// The one table of codec names, in CompressorSpec::Kind order: the name a scenario writes in
// "compression": {"kind": ...} (and compressorKindName prints), and the codec id its frames carry
// (the wire format, docs/wire_format.md). The scenario parser and the tools read it; nothing
// else lists the names.
template <typename T>
class Compressor;
// One codec's descriptor: its kind, name, wire id, a one-line summary, and its factory for each
// element type (the ranges of its keys checked, then the codec built). Its keys are
// codecKeys(kind) (codec_keys.h).
struct CodecInfo {
  CompressorSpec::Kind kind;
  const char* name;
  CodecId codec;
  const char* summary;
  core::Result<std::unique_ptr<Compressor<float>>> (*makeFloat)(const CompressorSpec&);
  core::Result<std::unique_ptr<Compressor<double>>> (*makeDouble)(const CompressorSpec&);
};
using CompressorKindInfo = CodecInfo;
std::span<const CodecInfo> compressorKinds();
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

// ||seen - x||^2 and ||x||^2 of one frame (the sender's compression error), in float64.
struct SeenError {
  double errorSq = 0;
  double normSq = 0;
  bool measured = false;  // set by a codec that filled it while writing `seen`
};

// The sums of SeenError over a vector, in eight interleaved partial sums (lane k % 8), added up in
// a fixed order: the loop vectorizes (one running sum is a chain of dependent additions), the
// vector may be fed in blocks whose lengths are multiples of 8 (the last one any length) while
// they are still in cache, and the result has the same bits however it was cut into blocks.
class SquaredErrorSum {
 public:
  template <typename T>
  void add(const T* x, const T* seen, size_t n) {
    const size_t whole = n / kLanes * kLanes;
    for (size_t k = 0; k < whole; k += kLanes) {
      for (size_t l = 0; l < kLanes; ++l) {
        const double v = static_cast<double>(x[k + l]);
        const double e = static_cast<double>(seen[k + l]) - v;
        err_[l] += e * e;
        norm_[l] += v * v;
      }
    }
    for (size_t k = whole; k < n; ++k) {
      const double v = static_cast<double>(x[k]);
      const double e = static_cast<double>(seen[k]) - v;
      err_[k - whole] += e * e;
      norm_[k - whole] += v * v;
    }
  }
  SeenError result() const {
    SeenError r;
    for (size_t l = 0; l < kLanes; ++l) {
      r.errorSq += err_[l];
      r.normSq += norm_[l];
    }
    r.measured = true;
    return r;
  }

 private:
  static constexpr size_t kLanes = 8;
  double err_[kLanes] = {};
  double norm_[kLanes] = {};
};

// Everything a stateful or round-aware encode needs besides the vector.
struct StreamContext {
  uint64_t round = 0;
  // Equal at every sender of a run (derived from the scenario's seed): codecs whose frames must
  // be summable across senders (countsketch hashes) derive their per-round choices from it.
  uint64_t sharedSeed = 0;
  CodecState* state = nullptr;  // from newState(); may be null for stateless codecs
  // encodeInto only, may be null: a codec that can measure the frame's SeenError while `seen` is
  // in cache (SquaredErrorSum, with the same bits as one pass over x and seen afterwards) stores
  // it here and sets `measured`; otherwise it leaves it alone and the caller makes that pass.
  SeenError* error = nullptr;
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

// Optional capabilities. Most codecs have none of them; a codec that has one also implements its
// interface and returns itself from Compressor::capabilities(), which the engine asks once, when
// it builds a node, instead of asking every round. Compressor's non-virtual members of the same
// names (writesInPlace, beginInPlace, newAccumulator, newReceiverState, decodeFrom, endRound)
// go through capabilities() and answer as a codec without the capability would.

// In-place encoding: the frame is a header, the vector itself in the state's precision and the
// trailer (identity), so the producer of the vector may write it straight into the payload.
// beginInPlace(d, out), `out` exactly maxEncodedBytes(d) bytes and 8-byte aligned, writes the
// header and returns the payload (d elements of T, not cleared); once every element is written,
// sealFrame(out) (frame.h) writes the CRC, and the frame is encode's for those values. What the
// receivers decode is the payload itself.
template <typename T>
class InPlaceEncoding {
 public:
  virtual std::span<T> beginInPlace(size_t d, std::span<std::byte> out) const = 0;

 protected:
  ~InPlaceEncoding() = default;
};

// Linear decoding: decode is linear in the frame (see LinearAccumulator), so a receiver may sum
// its neighbours' weighted frames and decode once. newAccumulator is non-null for vectors of d
// elements.
template <typename T>
class LinearDecoding {
 public:
  virtual std::unique_ptr<LinearAccumulator<T>> newAccumulator(size_t d) const = 0;

 protected:
  ~LinearDecoding() = default;
};

// Receiver state. Every codec but one decodes a frame from the frame alone. LGC's frames name a
// decoder version that the sender shipped in an earlier frame, so a receiver keeps, per sender,
// what that sender's frames taught it. The engine then keeps one state per neighbour
// (newReceiverState, non-null) and decodes that neighbour's frames with decodeFrom, never with
// decodeView. A frame is checked whole before the state changes, so a rejected frame teaches
// nothing. endRound is called once a round, after the round's frames were decoded, with this
// node's stream state and the receiver states of the neighbours whose frames it decoded this
// round, in peer order (LGC averages its autoencoder with the ones they shipped).
template <typename T>
class ReceiverDecoding {
 public:
  virtual std::unique_ptr<CodecState> newReceiverState(size_t d) const = 0;
  virtual core::Result<std::span<const T>> decodeFrom(std::span<const std::byte> frame,
                                                      size_t count, std::vector<T>& scratch,
                                                      Checksum checksum,
                                                      CodecState* sender) const = 0;
  virtual void endRound(const StreamContext& ctx, std::span<CodecState* const> heard) const = 0;

 protected:
  ~ReceiverDecoding() = default;
};

// What capabilities() answers: each non-null when the codec has it (pointers into the codec
// itself, or into the codec it wraps; valid as long as the codec).
template <typename T>
struct CodecCapabilities {
  const InPlaceEncoding<T>* inPlace = nullptr;
  const LinearDecoding<T>* linear = nullptr;
  const ReceiverDecoding<T>* receiver = nullptr;
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

  // The most bytes one frame of this codec takes for a vector of d elements: its exact length for
  // the codecs whose frames depend on d alone (all but top-k, rand-k, top-k dithering, AdaComp
  // and DQSGD, whose lengths depend on the values or the round). A buffer of this size always
  // fits encodeInto's frame.
  virtual size_t maxEncodedBytes(size_t d) const = 0;

  // encodeSeen into a buffer the caller owns: writes the frame encodeStream would write (the
  // same bytes, drawing the same numbers from rng and moving the stream state the same way) into
  // the front of `out`, fills `seen` with what decode returns for it, and returns the frame's
  // length. An `out` too small for the frame is kInvalidArgument, and nothing is written past its
  // end (the rng and stream state may then have moved on: size `out` by maxEncodedBytes). Other
  // errors are decode's (kCorruption for a non-finite input the codec refuses); the frame is
  // then written but must not be sent. The default encodes into a vector and copies it; the
  // codecs write in place, and most of them fill `seen` without decoding the frame again.
  virtual core::Result<size_t> encodeInto(std::span<const T> x, core::Rng& rng,
                                          const StreamContext& ctx, std::span<std::byte> out,
                                          std::span<T> seen) const {
    std::vector<std::byte> frame;
    const core::Status st = encodeSeen(x, rng, ctx, frame, seen);
    if (frame.size() > out.size()) {
      return core::invalidArgument("the frame needs " + std::to_string(frame.size()) +
                                   " bytes; the buffer has " + std::to_string(out.size()));
    }
    std::memcpy(out.data(), frame.data(), frame.size());
    if (!st.isOk()) return st;
    return frame.size();
  }

  // decode into a view: the values of a frame of `count` elements, in `scratch` (resized) or, for
  // a codec that can, in the frame itself (identity reads an aligned payload in place). kSkip
  // lets a codec leave out the CRC of a frame the transport vouches for
  // (transport::SharedBytes::intact()); the default decodes, and checks the CRC, either way.
  virtual core::Result<std::span<const T>> decodeView(std::span<const std::byte> frame,
                                                      size_t count, std::vector<T>& scratch,
                                                      Checksum /*checksum*/) const {
    scratch.resize(count);
    STARLING_RETURN_IF_ERROR(decode(frame, scratch));
    return std::span<const T>(scratch);
  }

  // The optional capabilities above; none by default.
  virtual CodecCapabilities<T> capabilities() const { return {}; }

  // Through capabilities(), for callers that ask once (tests, tools): InPlaceEncoding,
  // LinearDecoding and ReceiverDecoding, or what a codec without them answers (no in-place
  // payload, no accumulator, no receiver state, decodeView, nothing at the end of a round).
  bool writesInPlace() const { return capabilities().inPlace != nullptr; }
  std::span<T> beginInPlace(size_t d, std::span<std::byte> out) const {
    const auto* c = capabilities().inPlace;
    return c ? c->beginInPlace(d, out) : std::span<T>();
  }
  std::unique_ptr<LinearAccumulator<T>> newAccumulator(size_t d) const {
    const auto* c = capabilities().linear;
    return c ? c->newAccumulator(d) : nullptr;
  }
  std::unique_ptr<CodecState> newReceiverState(size_t d) const {
    const auto* c = capabilities().receiver;
    return c ? c->newReceiverState(d) : nullptr;
  }
  core::Result<std::span<const T>> decodeFrom(std::span<const std::byte> frame, size_t count,
                                              std::vector<T>& scratch, Checksum checksum,
                                              CodecState* sender) const {
    const auto* c = capabilities().receiver;
    return c ? c->decodeFrom(frame, count, scratch, checksum, sender)
             : decodeView(frame, count, scratch, checksum);
  }
  void endRound(const StreamContext& ctx, std::span<CodecState* const> heard) const {
    if (const auto* c = capabilities().receiver) c->endRound(ctx, heard);
  }
};

// kInvalidArgument for parameters out of range (k = 0 and ratio <= 0, bits outside 2..8, ...).
// `layout` is the model's tensor sizes in the flat vector (empty: one tensor, of any size); it
// matters only with spec.layers, whose rules index it (layerGroups' errors). With rules the codec
// is built for vectors of exactly sum(layout) elements (empty layout: any): the layered codec
// (docs/wire_format.md, codec 14) when two or more groups result and not all of them identity;
// the one group's own codec when a single group covers the model.
template <typename T>
core::Result<std::unique_ptr<Compressor<T>>> createCompressor(const CompressorSpec& spec,
                                                              std::span<const size_t> layout = {});

}  // namespace starling::compression
