// Sparse codecs: top-k and rand-k. Both send k (index, value) pairs: a u32 count, the strictly
// increasing indices as LEB128 gaps, then the k values in the state's precision.
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_set>
#include <vector>

#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

// Payload of the kept elements `indices` (sorted, strictly increasing) of x.
template <typename T>
void appendSparse(std::span<const T> x, std::span<const uint32_t> indices,
                  std::vector<std::byte>& payload) {
  payload.reserve(payload.size() + 4 + indices.size() * (5 + sizeof(T)));
  appendLe<uint32_t>(payload, static_cast<uint32_t>(indices.size()));
  uint64_t previous = 0;
  for (size_t j = 0; j < indices.size(); ++j) {
    appendVarint(payload, j == 0 ? indices[j] : indices[j] - previous);
    previous = indices[j];
  }
  for (uint32_t i : indices) appendValue<T>(payload, x[i]);
}

// Checks a sparse payload against d and, only when all of it is valid, writes the vector it
// describes into out (scaled by d / k when `scaled`).
template <typename T>
core::Status decodeSparse(std::span<const std::byte> payload, std::span<T> out, bool scaled) {
  const uint64_t d = out.size();
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
  // Validated: now write. The second pass cannot fail.
  const double factor = scaled && k > 0 ? static_cast<double>(d) / static_cast<double>(k) : 1.0;
  std::fill(out.begin(), out.end(), T{0});
  Reader again(payload.first(valuesAt));
  uint32_t unused;
  (void)again.readLe(unused);
  const std::byte* values = payload.data() + valuesAt;
  for (uint32_t j = 0; j < k; ++j) {
    uint64_t gap;
    (void)again.readVarint(gap);
    index = j == 0 ? gap : index + gap;
    const T v = loadValue<T>(values + size_t{j} * sizeof(T));
    out[index] = scaled ? static_cast<T>(static_cast<double>(v) * factor) : v;
  }
  return core::Status::ok();
}

template <typename T>
class TopKCompressor final : public Compressor<T> {
 public:
  TopKCompressor(uint64_t k, double ratio) : k_(k), ratio_(ratio) {}

  CodecId id() const override { return CodecId::kTopK; }
  bool unbiased() const override { return false; }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    assert(x.size() <= kMaxFrameElements);
    const uint64_t k = std::min<uint64_t>(keptCount(k_, ratio_, x.size()), UINT32_MAX);
    std::vector<uint32_t> order(x.size());
    std::iota(order.begin(), order.end(), uint32_t{0});
    // A total order: larger magnitude first, NaN before everything (a diverging element is
    // sent, not hidden), equal magnitudes by lower index, so the selection is deterministic.
    auto before = [&x](uint32_t a, uint32_t b) {
      const T ma = std::abs(x[a]);
      const T mb = std::abs(x[b]);
      const bool na = std::isnan(ma);
      const bool nb = std::isnan(mb);
      if (na != nb) return na;
      if (!na && ma != mb) return ma > mb;
      return a < b;
    };
    if (k > 0 && k < order.size()) {
      std::nth_element(order.begin(), order.begin() + static_cast<ptrdiff_t>(k - 1), order.end(),
                       before);
    }
    order.resize(k);
    std::sort(order.begin(), order.end());
    std::vector<std::byte> payload;
    appendSparse<T>(x, order, payload);
    writeFrame(CodecId::kTopK, elementTypeOf<T>(), x.size(), {}, payload, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kTopK, out.size(), 0);
    if (!v) return v.status();
    return decodeSparse<T>(v->payload, out, false);
  }

 private:
  uint64_t k_;
  double ratio_;
};

template <typename T>
class RandKCompressor final : public Compressor<T> {
 public:
  RandKCompressor(uint64_t k, double ratio, bool scaled) : k_(k), ratio_(ratio), scaled_(scaled) {}

  CodecId id() const override { return CodecId::kRandK; }
  bool unbiased() const override { return scaled_; }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    assert(x.size() <= kMaxFrameElements);
    const uint64_t d = x.size();
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
    std::vector<std::byte> payload;
    appendSparse<T>(x, indices, payload);
    const std::byte params[1] = {std::byte{scaled_ ? uint8_t{1} : uint8_t{0}}};
    writeFrame(CodecId::kRandK, elementTypeOf<T>(), d, params, payload, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kRandK, out.size(), 1);
    if (!v) return v.status();
    const auto flag = std::to_integer<uint8_t>(v->params[0]);
    if (flag > 1) return core::corruption("rand-k scaled flag " + std::to_string(flag));
    return decodeSparse<T>(v->payload, out, flag == 1);
  }

 private:
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
