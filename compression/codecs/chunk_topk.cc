// Chunked top-k codecs for pseudo-gradients (docs/wire_format.md, codecs 17 and 18;
// docs/compression.md "topk_2bit" and "dct_sign"). Both cut the vector into chunks of C values
// (the last one may be shorter), keep the k largest magnitudes of each chunk (ties to the lower
// index, sent in increasing index order, so a frame has one canonical form) and send a float32
// scale per chunk plus, per kept value, its index in the chunk (ceil(log2 C) bits, at least 1)
// and a few bits of value:
//
//   topk_2bit (SparseLoCo's): the chunk's values themselves; scale s = the largest kept
//     magnitude, and 2 bits per value: a sign and a level, |v| >= 3s/4 -> s, else s/2.
//   dct_sign (DeMo's): the chunk's orthonormal DCT-II coefficients; scale s = the mean kept
//     magnitude, and 1 bit per coefficient, its sign. The receiver puts +-s at the kept indices
//     and takes the inverse transform (DCT-III) of the chunk.
//
// Both are deterministic and biased: meant for error feedback or for differences against a
// reference point (DiLoCo's, docs/algorithms.md §29). The DCT is written out as a C x C table of
// cosines (std::cos in double, rows summed in index order) rather than taken from FFTW: its
// planner picks different kernels on different machines, so two peers could decode different
// bits from one frame, and at C = 64 the table costs 64 multiply-adds per value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

constexpr size_t kChunkTopKParamsBytes = 8;  // chunk, per_chunk: uint32 LE each

size_t chunkTopKChunks(size_t d, uint32_t chunk) { return d / chunk + (d % chunk != 0); }

// Bits of an index within a chunk of C values: enough for C - 1, at least 1.
int chunkIndexBits(uint32_t chunk) {
  int b = 1;
  while ((uint64_t{1} << b) < chunk) ++b;
  return b;
}

// The orthonormal DCT-II of length n as a row-major n x n table: X_k = sum_i t[k n + i] x_i, and
// its inverse x_i = sum_k t[k n + i] X_k.
std::vector<double> dctTable(size_t n) {
  std::vector<double> t(n * n);
  const double pi = std::numbers::pi;
  for (size_t k = 0; k < n; ++k) {
    const double norm = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(n));
    for (size_t i = 0; i < n; ++i) {
      t[k * n + i] = norm * std::cos(pi * (static_cast<double>(i) + 0.5) *
                                     static_cast<double>(k) / static_cast<double>(n));
    }
  }
  return t;
}

enum class Variant { kTwoBit, kDctSign };

template <typename T>
class ChunkTopK final : public Compressor<T> {
 public:
  ChunkTopK(Variant variant, uint32_t chunk, uint32_t perChunk)
      : variant_(variant), chunk_(chunk), perChunk_(perChunk), indexBits_(chunkIndexBits(chunk)),
        valueBits_(variant == Variant::kTwoBit ? 2 : 1) {
    if (variant_ == Variant::kDctSign) table_ = dctTable(chunk_);
  }

  CodecId id() const override {
    return variant_ == Variant::kTwoBit ? CodecId::kTopK2Bit : CodecId::kDctSign;
  }
  bool unbiased() const override { return false; }
  size_t maxEncodedBytes(size_t d) const override {
    return frameBytesFor(kChunkTopKParamsBytes, payloadBytes(d));
  }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    write(x, frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng&, const StreamContext&,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    return writeAndSee(
        out, [&](FrameOut& frame) { write(x, frame); },
        [&](FrameOut& frame) { return expand(frame.payload(), seen); });
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, id(), out.size(), kChunkTopKParamsBytes);
    if (!v) return v.status();
    const uint32_t chunk = loadLe<uint32_t>(v->params.data());
    const uint32_t perChunk = loadLe<uint32_t>(v->params.data() + 4);
    if (chunk != chunk_ || perChunk != perChunk_) {
      return core::corruption(std::string(name()) + " chunk " + std::to_string(chunk) +
                              ", per_chunk " + std::to_string(perChunk) + "; expected " +
                              std::to_string(chunk_) + ", " + std::to_string(perChunk_));
    }
    if (v->payload.size() != payloadBytes(out.size())) {
      return core::corruption(std::string(name()) + " payload of " +
                              std::to_string(v->payload.size()) + " bytes for " +
                              std::to_string(out.size()) + " elements");
    }
    return expand(v->payload, out);
  }

 private:
  const char* name() const { return variant_ == Variant::kTwoBit ? "topk_2bit" : "dct_sign"; }

  size_t chunkLength(size_t d, size_t c) const {
    return std::min<size_t>(chunk_, d - c * chunk_);
  }
  size_t keptIn(size_t n) const { return std::min<size_t>(perChunk_, n); }
  // Entries of every chunk together (all chunks full but perhaps the last).
  size_t entries(size_t d) const {
    const size_t chunks = chunkTopKChunks(d, chunk_);
    if (chunks == 0) return 0;
    return (chunks - 1) * keptIn(chunk_) + keptIn(chunkLength(d, chunks - 1));
  }
  size_t payloadBytes(size_t d) const {
    const size_t bits = entries(d) * static_cast<size_t>(indexBits_ + valueBits_);
    return 4 * chunkTopKChunks(d, chunk_) + (bits + 7) / 8;
  }

  void write(std::span<const T> x, FrameOut& out) const {
    const size_t d = x.size();
    std::byte params[kChunkTopKParamsBytes];
    storeLe<uint32_t>(params, chunk_);
    storeLe<uint32_t>(params + 4, perChunk_);
    std::byte* payload = out.begin(id(), elementTypeOf<T>(), d, params, payloadBytes(d));
    if (payload == nullptr) return;
    const size_t chunks = chunkTopKChunks(d, chunk_);
    BitWriter bits(payload + 4 * chunks);
    std::vector<double> v(chunk_);
    std::vector<uint32_t> order(chunk_);
    for (size_t c = 0; c < chunks; ++c) {
      const size_t n = chunkLength(d, c);
      const T* xc = x.data() + c * chunk_;
      if (variant_ == Variant::kTwoBit) {
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(xc[i]);
      } else {
        const std::vector<double> own = n == chunk_ ? std::vector<double>() : dctTable(n);
        const double* t = n == chunk_ ? table_.data() : own.data();
        for (size_t k = 0; k < n; ++k) {
          double s = 0;
          for (size_t i = 0; i < n; ++i) s += t[k * n + i] * static_cast<double>(xc[i]);
          v[k] = s;
        }
      }
      // The kept entries: the largest magnitudes, ties to the lower index, then index order.
      // NaN sorts first (as the largest), so a diverging vector reaches the scale and the frame
      // is refused by every decoder, the sender's own included.
      const size_t kept = keptIn(n);
      for (uint32_t i = 0; i < n; ++i) order[i] = i;
      const auto larger = [&](uint32_t a, uint32_t b) {
        const double ma = std::fabs(v[a]), mb = std::fabs(v[b]);
        if (std::isnan(ma) != std::isnan(mb)) return std::isnan(ma);
        return ma > mb || (ma == mb && a < b);
      };
      std::partial_sort(order.begin(), order.begin() + static_cast<long>(kept),
                        order.begin() + static_cast<long>(n), larger);
      std::sort(order.begin(), order.begin() + static_cast<long>(kept));
      double scale = 0;
      bool finite = true;
      for (size_t e = 0; e < kept; ++e) {
        const double m = std::fabs(v[order[e]]);
        finite &= std::isfinite(m);
        scale = variant_ == Variant::kTwoBit ? std::max(scale, m) : scale + m;
      }
      if (variant_ == Variant::kDctSign && kept > 0) scale /= static_cast<double>(kept);
      const float s = finite ? static_cast<float>(scale) : std::numeric_limits<float>::quiet_NaN();
      storeValue<float>(payload + 4 * c, s);
      for (size_t e = 0; e < kept; ++e) {
        const double value = v[order[e]];
        uint32_t code = value < 0 ? 1u : 0u;
        if (variant_ == Variant::kTwoBit && std::isfinite(s) &&
            std::fabs(value) >= 0.75 * static_cast<double>(s)) {
          code |= 2u;
        }
        bits.put(order[e], indexBits_);
        bits.put(code, valueBits_);
      }
    }
    bits.flush();
    out.seal();
  }

  // Checks every scale, index and padding bit before writing `out`.
  core::Status expand(std::span<const std::byte> payload, std::span<T> out) const {
    const size_t d = out.size();
    const size_t chunks = chunkTopKChunks(d, chunk_);
    for (size_t c = 0; c < chunks; ++c) {
      if (!validScale(loadValue<float>(payload.data() + 4 * c))) {
        return core::corruption(std::string(name()) + " scale of chunk " + std::to_string(c) +
                                " is negative, NaN or infinite");
      }
    }
    const std::byte* stream = payload.data() + 4 * chunks;
    {
      BitReader bits(stream);
      for (size_t c = 0; c < chunks; ++c) {
        const size_t n = chunkLength(d, c);
        int64_t last = -1;
        for (size_t e = 0, kept = keptIn(n); e < kept; ++e) {
          const int64_t index = bits.get(indexBits_);
          (void)bits.get(valueBits_);
          if (index <= last || index >= static_cast<int64_t>(n)) {
            return core::corruption(std::string(name()) + " index " + std::to_string(index) +
                                    " in chunk " + std::to_string(c) + " of " +
                                    std::to_string(n) + " values after index " +
                                    std::to_string(last) + " (indices increase within a chunk)");
          }
          last = index;
        }
      }
      if (bits.leftover() != 0) {
        return core::corruption(std::string(name()) + " padding bits are not zero");
      }
    }
    BitReader bits(stream);
    std::vector<double> coef(variant_ == Variant::kDctSign ? chunk_ : 0);
    for (size_t c = 0; c < chunks; ++c) {
      const size_t n = chunkLength(d, c);
      const double s = static_cast<double>(loadValue<float>(payload.data() + 4 * c));
      T* oc = out.data() + c * chunk_;
      const size_t kept = keptIn(n);
      if (variant_ == Variant::kTwoBit) {
        std::fill(oc, oc + n, T(0));
        for (size_t e = 0; e < kept; ++e) {
          const uint32_t index = bits.get(indexBits_);
          const uint32_t code = bits.get(valueBits_);
          const double m = (code & 2u) != 0 ? s : 0.5 * s;
          oc[index] = static_cast<T>((code & 1u) != 0 ? -m : m);
        }
        continue;
      }
      std::fill(coef.begin(), coef.begin() + static_cast<long>(n), 0.0);
      for (size_t e = 0; e < kept; ++e) {
        const uint32_t index = bits.get(indexBits_);
        coef[index] = (bits.get(valueBits_) & 1u) != 0 ? -s : s;
      }
      const std::vector<double> own = n == chunk_ ? std::vector<double>() : dctTable(n);
      const double* t = n == chunk_ ? table_.data() : own.data();
      for (size_t i = 0; i < n; ++i) {
        double acc = 0;
        for (size_t k = 0; k < n; ++k) acc += t[k * n + i] * coef[k];
        oc[i] = static_cast<T>(acc);
      }
    }
    return core::Status::ok();
  }

  Variant variant_;
  uint32_t chunk_, perChunk_;
  int indexBits_, valueBits_;
  std::vector<double> table_;  // dct_sign: the transform of a full chunk
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeTopK2Bit(uint32_t chunk, uint32_t perChunk) {
  return std::make_unique<ChunkTopK<T>>(Variant::kTwoBit, chunk, perChunk);
}
template <typename T>
std::unique_ptr<Compressor<T>> makeDctSign(uint32_t chunk, uint32_t perChunk) {
  return std::make_unique<ChunkTopK<T>>(Variant::kDctSign, chunk, perChunk);
}

template std::unique_ptr<Compressor<float>> makeTopK2Bit<float>(uint32_t, uint32_t);
template std::unique_ptr<Compressor<double>> makeTopK2Bit<double>(uint32_t, uint32_t);
template std::unique_ptr<Compressor<float>> makeDctSign<float>(uint32_t, uint32_t);
template std::unique_ptr<Compressor<double>> makeDctSign<double>(uint32_t, uint32_t);

}  // namespace starling::compression::codecs
