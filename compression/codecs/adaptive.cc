// Stateful codecs that adapt to the stream they encode: AdaComp (docs/algorithms.md §12.12), whose
// residue decides what is sent, and DQ-SGD (§12.13), whose norm history decides the bit width.
// Their state lives in a CodecState the sender owns (newState); encode() is the first frame of a
// fresh stream. Decoding needs no state: everything a receiver needs is in the frame.
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

// ---------------------------------------------------------------------------------------------
// AdaComp: error feedback whose selection is a bin-local threshold on the residue.

class AdaCompState final : public CodecState {
 public:
  explicit AdaCompState(size_t d) : residue(d, 0.0) {}
  void visitState(core::StateVisitor& v) override { v.values("residue", std::span<double>(residue)); }
  // G: everything added and not sent yet. Float64 so that sent + residue stays equal to the sum
  // of the inputs to float64 rounding over many rounds.
  std::vector<double> residue;
};

template <typename T>
class AdaCompCompressor final : public Compressor<T> {
 public:
  explicit AdaCompCompressor(uint64_t bin) : bin_(bin) {}

  CodecId id() const override { return CodecId::kAdaComp; }
  bool unbiased() const override { return false; }

  std::unique_ptr<CodecState> newState(size_t d) const override {
    return std::make_unique<AdaCompState>(d);
  }

  // Every element sent: d index gaps below d, the scale and d sign bits.
  size_t maxEncodedBytes(size_t d) const override {
    return frameBytesFor(0, 4 + d * varintLength(d == 0 ? 0 : d - 1) + sizeof(T) + (d + 7) / 8);
  }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    AdaCompState fresh(x.size());
    FrameOut frame(out);
    encodeWith(x, fresh.residue, frame);
  }

  void encodeStream(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                    std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    streamInto(x, rng, ctx, frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    return writeAndSee(
        out, [&](FrameOut& f) { streamInto(x, rng, ctx, f); },
        [&](const FrameOut& f) { return decode(f.frame(), seen); });
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kAdaComp, out.size(), 0);
    if (!v) return v.status();
    const uint64_t d = out.size();
    Reader r(v->payload);
    uint32_t n;
    if (!r.readLe(n)) return core::corruption("adacomp payload shorter than its count");
    if (n > d) {
      return core::corruption("adacomp frame sends " + std::to_string(n) + " of " +
                              std::to_string(d) + " elements");
    }
    std::vector<uint32_t> indices;
    STARLING_RETURN_IF_ERROR(readIndexGaps(r, n, d, indices));
    const uint64_t signBytes = (uint64_t{n} + 7) / 8;
    if (r.remaining() != sizeof(T) + signBytes) {
      return core::corruption("adacomp payload has " + std::to_string(r.remaining()) +
                              " bytes after its indices, expected " +
                              std::to_string(sizeof(T) + signBytes));
    }
    const std::byte* p = v->payload.data() + r.position();
    const T scale = loadValue<T>(p);
    if (!validScale(scale)) return core::corruption("adacomp scale is negative, NaN or infinite");
    if (n == 0 && scale != T{0}) return core::corruption("adacomp scale without any element");
    const std::byte* signs = p + sizeof(T);
    if (n % 8 != 0 && (std::to_integer<uint8_t>(signs[n / 8]) >> (n % 8)) != 0) {
      return core::corruption("adacomp padding bits are not zero");
    }
    // Validated: now write.
    std::fill(out.begin(), out.end(), T{0});
    for (uint32_t j = 0; j < n; ++j) {
      const bool negative = ((std::to_integer<uint8_t>(signs[j / 8]) >> (j % 8)) & 1) != 0;
      out[indices[j]] = negative ? -scale : scale;
    }
    return core::Status::ok();
  }

 private:
  void streamInto(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                  FrameOut& out) const {
    auto* state = dynamic_cast<AdaCompState*>(ctx.state);
    assert((ctx.state == nullptr || state != nullptr) && "adacomp given another codec's state");
    if (state == nullptr) {
      AdaCompState fresh(x.size());
      return encodeWith(x, fresh.residue, out);
    }
    (void)rng;
    assert(state->residue.size() == x.size() && "adacomp state made for another size");
    if (state->residue.size() != x.size()) state->residue.assign(x.size(), 0.0);
    encodeWith(x, state->residue, out);
  }

  void encodeWith(std::span<const T> x, std::vector<double>& g, FrameOut& out) const {
    const uint64_t d = x.size();
    bool finite = true;
    for (uint64_t i = 0; i < d; ++i) {
      g[i] += static_cast<double>(x[i]);
      finite = finite && std::isfinite(g[i]);
    }
    std::vector<uint32_t> selected;
    double sum = 0.0;
    if (finite) {
      for (uint64_t lo = 0; lo < d; lo += bin_) {
        const uint64_t hi = std::min<uint64_t>(d, lo + bin_);
        double gMax = 0.0;
        for (uint64_t i = lo; i < hi; ++i) gMax = std::max(gMax, std::abs(g[i]));
        for (uint64_t i = lo; i < hi; ++i) {
          // H = G + v counts the latest vector twice, for the selection only.
          const double h = g[i] + static_cast<double>(x[i]);
          if (g[i] != 0.0 && std::abs(h) >= gMax) {
            selected.push_back(static_cast<uint32_t>(i));
            sum += std::abs(g[i]);
          }
        }
      }
    }
    // A NaN or infinite residue gives a NaN scale: the frame fails to decode everywhere, the
    // sender's own decode included, as with sign and qsgd.
    const double mean = selected.empty() ? 0.0 : sum / static_cast<double>(selected.size());
    // A mean beyond float32's range becomes infinity (converting it would be undefined).
    const T scale = !finite ? std::numeric_limits<T>::quiet_NaN()
                    : mean > static_cast<double>(std::numeric_limits<T>::max())
                        ? std::numeric_limits<T>::infinity()
                        : static_cast<T>(mean);
    const size_t n = selected.size();
    std::vector<std::byte> payload;
    payload.reserve(4 + 2 * n + sizeof(T) + (n + 7) / 8);
    appendLe<uint32_t>(payload, static_cast<uint32_t>(n));
    appendIndexGaps(payload, selected);
    appendValue<T>(payload, scale);
    const size_t signsAt = payload.size();
    payload.resize(signsAt + (n + 7) / 8);
    // G <- G - sign(G) scale at the sent indices, with the very value the receivers decode (an
    // overflowing float32 scale is not subtracted: that frame is rejected anyway).
    const double sent = std::isfinite(scale) ? static_cast<double>(scale) : 0.0;
    for (size_t j = 0; j < n; ++j) {
      const uint32_t i = selected[j];
      if (g[i] < 0) {
        payload[signsAt + j / 8] |= std::byte{static_cast<uint8_t>(1u << (j % 8))};
        g[i] += sent;
      } else {
        g[i] -= sent;
      }
    }
    out.write(CodecId::kAdaComp, elementTypeOf<T>(), d, {}, payload);
  }

  uint64_t bin_;
};

// ---------------------------------------------------------------------------------------------
// DQ-SGD: QSGD (l2, bucketed, qsgd's payload) with the fewest bits b in [minBits, maxBits] such
// that eps(s_b) ||x||^2 <= target * m_t, m_t the stream's mean ||x||^2 including this frame
// (docs/compression_rules.md).

class DqsgdState final : public CodecState {
 public:
  double sumSquares = 0.0;  // sum of ||x||^2 over the stream's frames with a finite norm
  uint64_t frames = 0;      // how many of them
  void visitState(core::StateVisitor& v) override {
    v.scalar("sum_squares", sumSquares);
    v.scalar("frames", frames);
  }
};

constexpr size_t kDqsgdParamsBytes = 6;

ScaledCodes dqsgdCodes(int bits, uint32_t bucket) {
  ScaledCodes q;
  q.levels = LevelSet::kUniform;
  q.levelBits = bits - 1;
  q.s = (1u << (bits - 1)) - 1;
  q.bucket = bucket;
  return q;
}

template <typename T>
class DqsgdCompressor final : public Compressor<T> {
 public:
  DqsgdCompressor(int minBits, int maxBits, double target, uint32_t bucket)
      : minBits_(minBits), maxBits_(maxBits), target_(target), bucket_(bucket) {}

  CodecId id() const override { return CodecId::kDqsgd; }
  bool unbiased() const override { return true; }

  std::unique_ptr<CodecState> newState(size_t) const override {
    return std::make_unique<DqsgdState>();
  }

  // The widest codes the round may choose.
  size_t maxEncodedBytes(size_t d) const override {
    return frameBytesFor(kDqsgdParamsBytes, dqsgdCodes(maxBits_, bucket_).payloadBytes(d));
  }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    DqsgdState fresh;
    FrameOut frame(out);
    encodeWith(x, rng, fresh, frame);
  }

  void encodeStream(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                    std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    streamInto(x, rng, ctx, frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    FrameOut frame(out);
    const int bits = streamInto(x, rng, ctx, frame);
    if (!frame.ok()) return frame.status();
    STARLING_RETURN_IF_ERROR(
        seenFromScaledCodes<T>(frame.payload(), dqsgdCodes(bits, bucket_), seen, "dqsgd"));
    return frame.frame().size();
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kDqsgd, out.size(), kDqsgdParamsBytes);
    if (!v) return v.status();
    const int bits = std::to_integer<int>(v->params[0]);
    const int norm = std::to_integer<int>(v->params[1]);
    const uint32_t bucket = loadLe<uint32_t>(v->params.data() + 2);
    if (bits < 2 || bits > 8) return core::corruption("dqsgd bits " + std::to_string(bits));
    if (norm != 0) return core::corruption("dqsgd norm flag " + std::to_string(norm));
    if (bucket == 0) return core::corruption("dqsgd bucket size 0");
    const ScaledCodes q = dqsgdCodes(bits, bucket);
    STARLING_RETURN_IF_ERROR(checkScaledCodes(v->payload, q, out.size(), "dqsgd"));
    decodeScaledCodes<T>(v->payload, q, out.size(), 1.0, out.data());
    return core::Status::ok();
  }

 private:
  // Returns the width chosen.
  int streamInto(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                 FrameOut& out) const {
    auto* state = dynamic_cast<DqsgdState*>(ctx.state);
    assert((ctx.state == nullptr || state != nullptr) && "dqsgd given another codec's state");
    if (state == nullptr) {
      DqsgdState fresh;
      return encodeWith(x, rng, fresh, out);
    }
    return encodeWith(x, rng, *state, out);
  }

  int encodeWith(std::span<const T> x, core::Rng& rng, DqsgdState& state, FrameOut& out) const {
    // ||x||^2 only chooses the width and feeds the stream's mean: float32 states add it in the
    // fixed lane order of laneSumSquares (bits.h), not one term at a time.
    double norm2 = 0.0;
    if constexpr (std::is_same_v<T, float>) {
      norm2 = laneSumSquares(x.data(), x.size()).sum;
    } else {
      for (T v : x) norm2 += v * v;
    }
    // A non-finite norm means a NaN, an infinity or a bucket norm beyond float32: the frame fails
    // to decode whatever its width, and it stays out of the stream's history.
    const bool finite = std::isfinite(norm2);
    const double mean = (state.sumSquares + norm2) / static_cast<double>(state.frames + 1);
    const int bits =
        finite ? chooseBits(norm2, mean, std::min<uint64_t>(bucket_, x.size())) : maxBits_;
    if (finite) {
      state.sumSquares += norm2;
      ++state.frames;
    }
    const ScaledCodes q = dqsgdCodes(bits, bucket_);
    std::byte params[kDqsgdParamsBytes];
    params[0] = static_cast<std::byte>(bits);
    params[1] = std::byte{0};  // l2, as qsgd's norm field
    storeLe<uint32_t>(params + 2, bucket_);
    std::byte* payload =
        out.begin(CodecId::kDqsgd, elementTypeOf<T>(), x.size(), params, q.payloadBytes(x.size()));
    if (payload == nullptr) return bits;
    encodeScaledCodes<T>(x, q, rng, payload);
    out.seal();
    return bits;
  }

  // The fewest bits whose QSGD variance bound eps(s) = min(B/s^2, sqrt(B)/s) keeps
  // eps * norm2 <= target * mean; maxBits when none does.
  int chooseBits(double norm2, double mean, uint64_t bucket) const {
    const double b = static_cast<double>(bucket);
    for (int bits = minBits_; bits <= maxBits_; ++bits) {
      const double s = static_cast<double>((1u << (bits - 1)) - 1);
      const double eps = std::min(b / (s * s), std::sqrt(b) / s);
      if (eps * norm2 <= target_ * mean) return bits;
    }
    return maxBits_;
  }

  int minBits_;
  int maxBits_;
  double target_;
  uint32_t bucket_;
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeAdaComp(uint64_t bin) {
  assert(bin >= 1);
  return std::make_unique<AdaCompCompressor<T>>(bin);
}
template <typename T>
std::unique_ptr<Compressor<T>> makeDqsgd(int minBits, int maxBits, double target, uint32_t bucket) {
  assert(minBits >= 2 && minBits <= maxBits && maxBits <= 8 && target > 0 && bucket >= 1);
  return std::make_unique<DqsgdCompressor<T>>(minBits, maxBits, target, bucket);
}

template std::unique_ptr<Compressor<float>> makeAdaComp<float>(uint64_t);
template std::unique_ptr<Compressor<double>> makeAdaComp<double>(uint64_t);
template std::unique_ptr<Compressor<float>> makeDqsgd<float>(int, int, double, uint32_t);
template std::unique_ptr<Compressor<double>> makeDqsgd<double>(int, int, double, uint32_t);

}  // namespace starling::compression::codecs
