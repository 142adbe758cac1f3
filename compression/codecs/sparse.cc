// Sparse codecs: top-k and rand-k. Both send k (index, value) pairs: a u32 count, the strictly
// increasing indices as LEB128 gaps, then the k values in the state's precision.
#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_set>
#include <vector>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/elementwise.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

// ---------------------------------------------------------------------------------------------
// Top-k selection (bits.h: largestIndices).
//
// The order is: larger |x_i| first, every NaN above everything else and equal to the other NaNs,
// equal magnitudes by lower index. Magnitudes compare as integer keys: the bits with the sign
// cleared order like the values for non-negative IEEE numbers, and NaNs (bits above infinity's)
// are all mapped to one key. Appending the complemented index below the key makes every element's
// key distinct and the order total, so "the k largest keys" is exactly the set of that order.
//
// Instead of a selection over all d elements, a threshold tau is taken from a strided sample so
// that a little more than k keys are >= tau; one vectorized scan collects those candidates in
// index order, and the selection runs on them alone. The k largest keys of x are all >= tau as
// soon as at least k keys are (any key below tau is beaten by those k), so the result does not
// depend on the sample; a sample that misses (fewer than k candidates) falls back to selecting
// among all d.

template <typename T>
using Key = BitsOf<T>;

template <typename T>
constexpr Key<T> nanKey() {
  if constexpr (sizeof(T) == 4) {
    return elementwise::kTopkNanKey;
  } else {
    return 0x7ff0000000000001u;
  }
}

template <typename T>
[[gnu::always_inline]] inline Key<T> magnitudeKey(T v) {
  if constexpr (sizeof(T) == 4) {
    return elementwise::topkKeyOfBits(std::bit_cast<uint32_t>(v));  // the GPU's key too
  } else {
    const Key<T> a = std::bit_cast<Key<T>>(v) & (std::numeric_limits<Key<T>>::max() >> 1);
    return std::min(a, nanKey<T>());
  }
}

// An element's place in the order: its key, then its complemented index; one u64 for float32
// (key in the high half), a pair for float64.
template <typename T>
struct Ranked {
  Key<T> key;
  uint32_t notIndex;
  bool operator>(const Ranked& o) const {
    return key != o.key ? key > o.key : notIndex > o.notIndex;
  }
};

template <typename T>
auto rankOf(T v, uint32_t i) {
  if constexpr (sizeof(T) == 4) {
    return (static_cast<uint64_t>(magnitudeKey(v)) << 32) | ~i;
  } else {
    return Ranked<T>{magnitudeKey(v), ~i};
  }
}

// Appends to `out` the indices in [0, n) of x whose key is >= tau, in increasing order. Blocks of
// 64 are compared in a vectorized loop into bytes 0 / 1; each 8 of those bytes, read as a
// little-endian u64, become 8 bits of a mask with one multiply (the byte t of w, 0 or 1, lands
// on bit 56 + t of w * 0x0102040810204080 and no two partial products overlap), and only the
// set bits of the mask are walked.
template <typename T>
[[gnu::always_inline]] inline void collectAtLeastImpl(const T* x, size_t n, Key<T> tau,
                                                      std::vector<uint32_t>& out) {
  constexpr size_t kBlock = 64;
  uint8_t hit[kBlock];
  for (size_t lo = 0; lo < n; lo += kBlock) {
    const size_t m = std::min(kBlock, n - lo);
    for (size_t t = 0; t < m; ++t) hit[t] = magnitudeKey(x[lo + t]) >= tau;
    std::fill(hit + m, hit + kBlock, uint8_t{0});
    uint64_t mask = 0;
    for (size_t g = 0; g < kBlock / 8; ++g) {
      const uint64_t w = reinterpret_cast<const AliasU64*>(hit)[g];  // little-endian host
      mask |= ((w * 0x0102040810204080u) >> 56) << (8 * g);
    }
    for (; mask != 0; mask &= mask - 1) {
      out.push_back(static_cast<uint32_t>(lo + static_cast<size_t>(std::countr_zero(mask))));
    }
  }
}
STARLING_SIMD_CLONES
void collectAtLeast(const float* x, size_t n, uint32_t tau, std::vector<uint32_t>& out) {
  collectAtLeastImpl(x, n, tau, out);
}
STARLING_SIMD_CLONES
void collectAtLeast(const double* x, size_t n, uint64_t tau, std::vector<uint32_t>& out) {
  collectAtLeastImpl(x, n, tau, out);
}

// The k largest of the candidates (indices into x, increasing, at least k of them), increasing.
template <typename T>
std::vector<uint32_t> selectAmong(std::span<const T> x, const std::vector<uint32_t>& candidates,
                                  uint64_t k) {
  std::vector<decltype(rankOf(T{}, 0))> ranked(candidates.size());
  for (size_t j = 0; j < candidates.size(); ++j)
    ranked[j] = rankOf(x[candidates[j]], candidates[j]);
  const auto kth = ranked.begin() + static_cast<ptrdiff_t>(k - 1);
  std::nth_element(ranked.begin(), kth, ranked.end(), std::greater<>());
  const auto last = *kth;  // the k-th largest: keep exactly those not below it
  std::vector<uint32_t> kept;
  kept.reserve(k);
  for (size_t j = 0; j < candidates.size(); ++j) {
    if (!(last > rankOf(x[candidates[j]], candidates[j]))) kept.push_back(candidates[j]);
  }
  return kept;
}

}  // namespace

template <typename T>
std::vector<uint32_t> largestIndices(std::span<const T> x, uint64_t k) {
  const uint64_t d = x.size();
  k = std::min(k, d);
  std::vector<uint32_t> candidates;
  constexpr uint64_t kSmall = 2048;
  if (d >= kSmall) {
    // The sample's j-th largest key, j chosen so that, scaled to x, k + 4 standard deviations
    // + 4 elements are expected at or above it: a sample that misses is rare.
    const uint64_t samples = std::clamp<uint64_t>(d / 16, 128, 8192);
    const uint64_t stride = d / samples;
    std::vector<Key<T>> sample(samples);
    for (uint64_t s = 0; s < samples; ++s) sample[s] = magnitudeKey(x[s * stride]);
    const double expected = static_cast<double>(k) * samples / static_cast<double>(d);
    const auto j = static_cast<uint64_t>(std::ceil(expected + 4.0 * std::sqrt(expected) + 4.0));
    if (j < samples) {
      const auto at = sample.begin() + static_cast<ptrdiff_t>(j - 1);
      std::nth_element(sample.begin(), at, sample.end(), std::greater<>());
      candidates.reserve(static_cast<size_t>(2 * (j * stride) + 64));
      collectAtLeast(x.data(), x.size(), *at, candidates);
    }
  }
  if (candidates.size() < k) {  // small d, large k, or a sample that missed
    candidates.resize(d);
    std::iota(candidates.begin(), candidates.end(), uint32_t{0});
  }
  if (candidates.size() == k) return candidates;
  return selectAmong<T>(x, candidates, k);
}

template std::vector<uint32_t> largestIndices<float>(std::span<const float>, uint64_t);
template std::vector<uint32_t> largestIndices<double>(std::span<const double>, uint64_t);

namespace {

// Writes the frame of d elements keeping `indices` (sorted, strictly increasing) with the values
// valueAt(j) of indices[j], the payload in place: its size is known once the gaps' varint
// lengths are.
template <typename T, typename ValueAt>
void writeSparseValues(CodecId codec, std::span<const std::byte> params, uint64_t d,
                       std::span<const uint32_t> indices, const ValueAt& valueAt, FrameOut& out) {
  size_t gapBytes = 0;
  uint32_t previous = 0;
  for (size_t j = 0; j < indices.size(); ++j) {
    gapBytes += varintLength(j == 0 ? indices[j] : indices[j] - previous);
    previous = indices[j];
  }
  std::byte* p = out.begin(codec, elementTypeOf<T>(), d, params,
                           4 + gapBytes + indices.size() * sizeof(T));
  if (p == nullptr) return;
  storeLe<uint32_t>(p, static_cast<uint32_t>(indices.size()));
  p += 4;
  previous = 0;
  for (size_t j = 0; j < indices.size(); ++j) {
    uint32_t gap = j == 0 ? indices[j] : indices[j] - previous;
    previous = indices[j];
    for (; gap >= 0x80; gap >>= 7) *p++ = static_cast<std::byte>((gap & 0x7f) | 0x80);
    *p++ = static_cast<std::byte>(gap);
  }
  for (size_t j = 0; j < indices.size(); ++j) {
    storeValue<T>(p, valueAt(j));
    p += sizeof(T);
  }
  out.seal();
}

// ... of the kept elements `indices` of x.
template <typename T>
void writeSparse(CodecId codec, std::span<const std::byte> params, std::span<const T> x,
                 std::span<const uint32_t> indices, FrameOut& out) {
  writeSparseValues<T>(codec, params, x.size(), indices,
                       [&](size_t j) { return x[indices[j]]; }, out);
}

// The most bytes of a sparse frame keeping k of d elements: every gap is below d.
template <typename T>
size_t sparseFrameBound(size_t paramsBytes, uint64_t d, uint64_t k) {
  return frameBytesFor(paramsBytes, 4 + k * (varintLength(d == 0 ? 0 : d - 1) + sizeof(T)));
}

// What decodeSparse returns for the frame writeSparse wrote: the kept values (scaled by d / k
// when `scaled`, in the same float64 product) at their indices, zero elsewhere. No check of
// decodeSparse can fail on it: the indices are strictly increasing and below d, and k >= 1.
template <typename T>
void sparseSeen(std::span<const T> x, std::span<const uint32_t> indices, bool scaled,
                std::span<T> seen) {
  const uint64_t k = indices.size();
  const double factor =
      scaled && k > 0 ? static_cast<double>(x.size()) / static_cast<double>(k) : 1.0;
  std::fill(seen.begin(), seen.end(), T{0});
  for (uint32_t i : indices) {
    seen[i] = scaled ? static_cast<T>(static_cast<double>(x[i]) * factor) : x[i];
  }
}

// Checks a sparse payload against d and, only when all of it is valid, calls kept(index, value)
// for each kept element, in index order; returns k through *count.
template <typename T, typename Kept>
core::Status readSparse(std::span<const std::byte> payload, uint64_t d, const Kept& kept,
                        uint32_t* count = nullptr) {
  Reader r(payload);
  uint32_t k;
  if (!r.readLe(k)) return core::corruption("sparse payload shorter than its count");
  if (k > d) {
    return core::corruption("sparse frame keeps " + std::to_string(k) + " of " + std::to_string(d) +
                            " elements");
  }
  if (k == 0 && d > 0) return core::corruption("sparse frame keeps no element");
  // Each index takes at least one byte: reject an impossible k before walking the payload.
  if (k > r.remaining() / (1 + sizeof(T))) {
    return core::corruption("sparse payload too short for " + std::to_string(k) + " elements");
  }
  uint64_t index = 0;
  for (uint32_t j = 0; j < k; ++j) {
    uint64_t gap;
    if (!r.readVarint(gap)) return core::corruption("malformed index varint");
    if (j > 0 && gap == 0) return core::corruption("sparse indices not strictly increasing");
    if (gap >= d - (j == 0 ? 0 : index)) {
      return core::corruption("sparse index out of range for " + std::to_string(d) + " elements");
    }
    index = j == 0 ? gap : index + gap;
  }
  const size_t valuesAt = r.position();
  if (r.remaining() != uint64_t{k} * sizeof(T)) {
    return core::corruption("sparse payload has " + std::to_string(r.remaining()) +
                            " value bytes for " + std::to_string(k) + " values");
  }
  // Validated: now the kept elements. The second pass cannot fail.
  if (count != nullptr) *count = k;
  Reader again(payload.first(valuesAt));
  uint32_t unused;
  (void)again.readLe(unused);
  const std::byte* values = payload.data() + valuesAt;
  for (uint32_t j = 0; j < k; ++j) {
    uint64_t gap;
    (void)again.readVarint(gap);
    index = j == 0 ? gap : index + gap;
    kept(index, loadValue<T>(values + size_t{j} * sizeof(T)));
  }
  return core::Status::ok();
}

// Checks a sparse payload against d and, only when all of it is valid, writes the vector it
// describes into out (scaled by d / k when `scaled`).
template <typename T>
core::Status decodeSparse(std::span<const std::byte> payload, std::span<T> out, bool scaled) {
  // The count first (the factor needs it); readSparse checks it again with the rest.
  uint32_t k = 0;
  if (payload.size() >= 4) k = loadLe<uint32_t>(payload.data());
  const double factor = scaled && k > 0 ? static_cast<double>(out.size()) / static_cast<double>(k)
                                        : 1.0;
  bool cleared = false;
  return readSparse<T>(payload, out.size(), [&](uint64_t index, T v) {
    if (!cleared) {  // only once the whole payload is valid: out is untouched otherwise
      std::fill(out.begin(), out.end(), T{0});
      cleared = true;
    }
    out[index] = scaled ? static_cast<T>(static_cast<double>(v) * factor) : v;
  });
}

}  // namespace

void writeTopKFrame(uint64_t d, std::span<const uint32_t> indices, std::span<const float> values,
                    FrameOut& out) {
  assert(indices.size() == values.size());
  writeSparseValues<float>(CodecId::kTopK, {}, d, indices, [&](size_t j) { return values[j]; },
                           out);
}

size_t topkFrameBound(uint64_t d, uint64_t k) { return sparseFrameBound<float>(0, d, k); }

core::Status readTopKFrame(std::span<const std::byte> frame, uint64_t d,
                           std::vector<uint32_t>& indices, std::vector<float>& values) {
  auto v = openFrame<float>(frame, CodecId::kTopK, d, 0);
  if (!v) return v.status();
  std::vector<uint32_t> i;
  std::vector<float> x;
  STARLING_RETURN_IF_ERROR(readSparse<float>(v->payload, d, [&](uint64_t index, float value) {
    i.push_back(static_cast<uint32_t>(index));
    x.push_back(value);
  }));
  indices = std::move(i);
  values = std::move(x);
  return core::Status::ok();
}

namespace {

template <typename T>
class TopKCompressor final : public Compressor<T> {
 public:
  TopKCompressor(uint64_t k, double ratio) : k_(k), ratio_(ratio) {}

  CodecId id() const override { return CodecId::kTopK; }
  bool unbiased() const override { return false; }

  size_t maxEncodedBytes(size_t d) const override {
    return sparseFrameBound<T>(0, d, kept(d));
  }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    assert(x.size() <= kMaxFrameElements);
    FrameOut frame(out);
    writeSparse<T>(CodecId::kTopK, {}, x, largestIndices<T>(x, kept(x.size())), frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng&, const StreamContext&,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    assert(x.size() <= kMaxFrameElements);
    const std::vector<uint32_t> indices = largestIndices<T>(x, kept(x.size()));
    FrameOut frame(out);
    writeSparse<T>(CodecId::kTopK, {}, x, indices, frame);
    if (!frame.ok()) return frame.status();
    sparseSeen<T>(x, indices, false, seen);
    return frame.frame().size();
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kTopK, out.size(), 0);
    if (!v) return v.status();
    return decodeSparse<T>(v->payload, out, false);
  }

 private:
  uint64_t kept(uint64_t d) const {
    return std::min<uint64_t>(keptCount(k_, ratio_, d), UINT32_MAX);
  }

  uint64_t k_;
  double ratio_;
};

template <typename T>
class RandKCompressor final : public Compressor<T> {
 public:
  RandKCompressor(uint64_t k, double ratio, bool scaled) : k_(k), ratio_(ratio), scaled_(scaled) {}

  CodecId id() const override { return CodecId::kRandK; }
  bool unbiased() const override { return scaled_; }

  size_t maxEncodedBytes(size_t d) const override {
    return sparseFrameBound<T>(1, d, std::min<uint64_t>(keptCount(k_, ratio_, d), UINT32_MAX));
  }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    writeSparse<T>(CodecId::kRandK, params(), x, choose(x.size(), rng), frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng& rng, const StreamContext&,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    const std::vector<uint32_t> indices = choose(x.size(), rng);
    FrameOut frame(out);
    writeSparse<T>(CodecId::kRandK, params(), x, indices, frame);
    if (!frame.ok()) return frame.status();
    sparseSeen<T>(x, indices, scaled_, seen);
    return frame.frame().size();
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kRandK, out.size(), 1);
    if (!v) return v.status();
    const auto flag = std::to_integer<uint8_t>(v->params[0]);
    if (flag > 1) return core::corruption("rand-k scaled flag " + std::to_string(flag));
    return decodeSparse<T>(v->payload, out, flag == 1);
  }

 private:
  std::array<std::byte, 1> params() const {
    return {std::byte{scaled_ ? uint8_t{1} : uint8_t{0}}};
  }

  // The k kept indices of d, increasing.
  std::vector<uint32_t> choose(uint64_t d, core::Rng& rng) const {
    assert(d <= kMaxFrameElements);
    const uint64_t k = std::min<uint64_t>(keptCount(k_, ratio_, d), UINT32_MAX);
    // Floyd's algorithm: k distinct indices, each k-subset equally likely, with exactly k draws.
    // The chosen set depends only on the draws; how membership is tracked is a matter of speed.
    std::vector<uint32_t> indices;
    indices.reserve(k);
    if (k >= d / 32) {
      // A bitmap of d bits, scanned in index order: no hashing and no sort.
      std::vector<uint64_t> bitmap((d + 63) / 64, 0);
      auto insert = [&bitmap](uint64_t i) {
        const uint64_t bit = uint64_t{1} << (i % 64);
        const bool fresh = (bitmap[i / 64] & bit) == 0;
        bitmap[i / 64] |= bit;
        return fresh;
      };
      for (uint64_t j = d - k; j < d; ++j) {
        if (!insert(rng.below(j + 1))) insert(j);
      }
      for (uint64_t w = 0; w < bitmap.size(); ++w) {
        for (uint64_t bits = bitmap[w]; bits != 0; bits &= bits - 1) {
          indices.push_back(static_cast<uint32_t>(64 * w + std::countr_zero(bits)));
        }
      }
    } else {
      std::unordered_set<uint32_t> chosen;
      chosen.reserve(k);
      for (uint64_t j = d - k; j < d; ++j) {
        const auto t = static_cast<uint32_t>(rng.below(j + 1));
        if (!chosen.insert(t).second) chosen.insert(static_cast<uint32_t>(j));
      }
      indices.assign(chosen.begin(), chosen.end());
      // The set's iteration order is not portable; the sorted order is.
      std::sort(indices.begin(), indices.end());
    }
    return indices;
  }

  uint64_t k_;
  double ratio_;
  bool scaled_;
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeTopK(uint64_t k, double ratio) {
  return std::make_unique<TopKCompressor<T>>(k, ratio);
}
template <typename T>
std::unique_ptr<Compressor<T>> makeRandK(uint64_t k, double ratio, bool scaled) {
  return std::make_unique<RandKCompressor<T>>(k, ratio, scaled);
}

template std::unique_ptr<Compressor<float>> makeTopK<float>(uint64_t, double);
template std::unique_ptr<Compressor<double>> makeTopK<double>(uint64_t, double);
template std::unique_ptr<Compressor<float>> makeRandK<float>(uint64_t, double, bool);
template std::unique_ptr<Compressor<double>> makeRandK<double>(uint64_t, double, bool);

}  // namespace starling::compression::codecs
