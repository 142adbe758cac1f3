// Count-Sketch (docs/algorithms.md §12.11; docs/compression.md "Count-Sketch"): an r x c table,
// each row adding s_j(i) x_i into bucket h_j(i). Decoding estimates every coordinate from the
// table, by the median over rows (then keeps the top-k or above-threshold estimates) or by the
// mean over rows, which is linear in the table and lets a receiver sum its neighbours' weighted
// tables and decode once (LinearAccumulator).
//
// Safety: the sender decodes its own table and scales the estimate y by
// lambda = <x, y> / ||y||^2, the least-squares fit of x along y, and writes lambda into the
// frame. Then ||lambda y - x||^2 = ||x||^2 (1 - cos^2(x, y)) <= ||x||^2 for every vector: a
// small sketch can compress badly but never sends something worse than nothing, which is what
// CHOCO needs (a contraction). Scaling a table by a scalar keeps it linear.
//
// Hashes: per row, two multiply-add-shift hashes of the coordinate index (Dietzfelbinger 1996:
// ((a i + b) mod 2^64) >> 32 is strongly 2-universal for 32-bit keys with random 64-bit a, b),
// one giving the bucket (its 32 bits mapped onto c by a multiply-high) and one the sign (its top
// bit). Pairwise independence is what the variance calculation below needs. The hash
// parameters come from a 64-bit seed carried in the frame; encodeStream draws a fresh seed per
// round from the stream's shared seed, so every sender of a round uses the same hashes (tables
// add up) and the hashes change from round to round (a fixed sketch would never transmit the
// part of x in its null space, and CHOCO would stall there).
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/elementwise.h"
#include "compression/codecs/sketch_frame.h"
#include "compression/codecs/wire.h"
#include "compression/sketch_hash.h"

namespace starling::compression::codecs {
namespace {

constexpr uint64_t kSketchSalt = kSketchHashSalt;  // "SKET" (compression/sketch_hash.h)
constexpr size_t kParamsBytes = kSketchParamsBytes;  // (sketch_frame.h)
constexpr uint64_t kMaxRows = kSketchMaxRows;
constexpr uint64_t kMaxCols = kSketchMaxCols;
constexpr size_t kBlock = 512;

// The parameters of one frame (docs/wire_format.md, codec 11).
using SketchParams = CountSketchHeader;

using compression::SketchHashes;  // compression/sketch_hash.h

// ---------------------------------------------------------------------------------------------
// Kernels over a block of coordinates (STARLING_SIMD_CLONES, wire.h). Only exact steps: 64-bit
// integer hashing, multiplication by +-1, comparisons.

// Buckets and signs (+1 / -1) of coordinates [lo, lo + n) for the row with hash parameters
// coef. a i + b mod 2^64 for consecutive i is an induction: the previous value plus a, which
// vectorizes without 64-bit multiplies; the bucket's multiply-high is a 32 x 32 -> 64 product.
template <typename T>
[[gnu::always_inline]] inline void hashRowImpl(const uint64_t* coef, uint64_t cols, uint64_t lo,
                                               size_t n, uint32_t* __restrict bucket,
                                               T* __restrict sign) {
  uint64_t hb = coef[0] * lo + coef[1];
  uint64_t hs = coef[2] * lo + coef[3];
  for (size_t t = 0; t < n; ++t) {
    bucket[t] = static_cast<uint32_t>(((hb >> 32) * cols) >> 32);
    sign[t] = (hs >> 63) != 0 ? T(-1) : T(1);
    hb += coef[0];
    hs += coef[2];
  }
}
STARLING_SIMD_CLONES
void hashRow(const uint64_t* coef, uint64_t cols, uint64_t lo, size_t n, uint32_t* bucket,
             float* sign) {
  hashRowImpl(coef, cols, lo, n, bucket, sign);
}
STARLING_SIMD_CLONES
void hashRow(const uint64_t* coef, uint64_t cols, uint64_t lo, size_t n, uint32_t* bucket,
             double* sign) {
  hashRowImpl(coef, cols, lo, n, bucket, sign);
}

// v[t] = sign[t] * row[bucket[t]]: one row's estimates of the block.
template <typename T>
[[gnu::always_inline]] inline void gatherRowImpl(const T* __restrict row,
                                                 const uint32_t* __restrict bucket,
                                                 const T* __restrict sign, size_t n,
                                                 T* __restrict v) {
  for (size_t t = 0; t < n; ++t) v[t] = sign[t] * row[bucket[t]];
}
STARLING_SIMD_CLONES
void gatherRow(const float* row, const uint32_t* bucket, const float* sign, size_t n, float* v) {
  gatherRowImpl(row, bucket, sign, n, v);
}
STARLING_SIMD_CLONES
void gatherRow(const double* row, const uint32_t* bucket, const double* sign, size_t n, double* v) {
  gatherRowImpl(row, bucket, sign, n, v);
}

// Lower median of r rows of estimates (v[j * stride + t]) for r <= 7, by comparison networks,
// vectorized across the block. A network computes the same order statistic as nth_element: the
// values agree, up to which of +0 and -0 comes out when both occur (they compare equal).
// Tables are finite (decoders reject the rest), so no NaN reaches the comparisons.
constexpr uint32_t kNetworkRows = 7;

template <typename T>
[[gnu::always_inline]] inline void medianImpl(T* v, size_t stride, uint32_t r, size_t n, T* out) {
  // The networks of elementwise.h (sketchMedian, which the GPU decoder runs per coordinate), a
  // lane of the block at a time.
  namespace ew = elementwise;
  auto lane = [&](uint32_t j) { return v + static_cast<size_t>(j) * stride; };
  if (r == 1) {
    std::copy(v, v + n, out);
  } else if (r == 2) {
    const T* a = lane(0);
    const T* b = lane(1);
    for (size_t t = 0; t < n; ++t) out[t] = ew::minOf(a[t], b[t]);
  } else if (r == 3) {
    const T* a = lane(0);
    const T* b = lane(1);
    const T* c = lane(2);
    for (size_t t = 0; t < n; ++t) out[t] = ew::median3(a[t], b[t], c[t]);
  } else if (r == 5) {
    const T* a = lane(0);
    const T* b = lane(1);
    const T* c = lane(2);
    const T* d = lane(3);
    const T* e = lane(4);
    for (size_t t = 0; t < n; ++t) out[t] = ew::median5(a[t], b[t], c[t], d[t], e[t]);
  } else {
    // Odd-even transposition sort: r passes sort r values.
    for (uint32_t pass = 0; pass < r; ++pass) {
      for (uint32_t j = pass % 2; j + 1 < r; j += 2) {
        T* a = lane(j);
        T* b = lane(j + 1);
        for (size_t t = 0; t < n; ++t) ew::sortPair(a[t], b[t]);
      }
    }
    std::copy(lane((r - 1) / 2), lane((r - 1) / 2) + n, out);
  }
}
STARLING_SIMD_CLONES
void median(float* v, size_t stride, uint32_t r, size_t n, float* out) {
  medianImpl(v, stride, r, n, out);
}
STARLING_SIMD_CLONES
void median(double* v, size_t stride, uint32_t r, size_t n, double* out) {
  medianImpl(v, stride, r, n, out);
}

// table (rows x cols, row-major, zeroed by the caller) += sketch of x. Each cell receives its
// terms in index order, as in a row-by-row scatter. The scatter is the one serial part: a load,
// an add and a store per term, at random places in a row that stays in cache.
template <typename T>
void sketchInto(std::span<const T> x, const SketchHashes& h, T* table) {
  const uint32_t r = h.rows();
  const uint64_t d = x.size();
  uint32_t bucket[kBlock];
  T sign[kBlock];
  for (uint64_t lo = 0; lo < d; lo += kBlock) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, d - lo));
    T* row = table;
    for (uint32_t j = 0; j < r; ++j, row += h.cols()) {
      hashRow(h.coef(j), h.cols(), lo, n, bucket, sign);
      // The very expression of the row-by-row sketch, so that even a NaN input's (rejected)
      // table keeps its bytes: x86 returns the first operand of an addition of two NaNs, and
      // compilers put a computed term before the cell loaded from memory.
      for (size_t t = 0; t < n; ++t) row[bucket[t]] += sign[t] * x[lo + t];
    }
  }
}

// est_i = mean or (lower) median over rows of s_j(i) table[j][h_j(i)].
template <typename T>
void estimate(const T* table, const SketchHashes& h, bool mean, std::span<T> est) {
  const uint32_t r = h.rows();
  const uint64_t d = est.size();
  // Spans of coordinates longer than a hashing block: each row's gathers for a span run back to
  // back, so that row stays in L1 while they do.
  constexpr size_t kSpan = 8 * kBlock;
  uint32_t bucket[kBlock];
  T sign[kBlock];
  // vals[j * kSpan + t]: row j's estimate of coordinate lo + t.
  std::vector<T> vals(static_cast<size_t>(r) * kSpan);
  T column[kMaxRows];
  const uint32_t mid = (r - 1) / 2;  // the lower median when r is even, as torch.median
  const T inv = T(1) / static_cast<T>(r);
  for (uint64_t lo = 0; lo < d; lo += kSpan) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kSpan, d - lo));
    for (uint32_t j = 0; j < r; ++j) {
      const T* row = table + static_cast<size_t>(j) * h.cols();
      T* v = vals.data() + static_cast<size_t>(j) * kSpan;
      for (size_t b = 0; b < n; b += kBlock) {
        const size_t m = std::min(kBlock, n - b);
        hashRow(h.coef(j), h.cols(), lo + b, m, bucket, sign);
        gatherRow(row, bucket, sign, m, v + b);
      }
    }
    T* e = est.data() + lo;
    if (mean) {
      // Row by row from zero, then times 1/r: the order of the row-by-row loop.
      std::fill(e, e + n, T(0));
      for (uint32_t j = 0; j < r; ++j) {
        const T* v = vals.data() + static_cast<size_t>(j) * kSpan;
        for (size_t t = 0; t < n; ++t) e[t] += v[t];
      }
      for (size_t t = 0; t < n; ++t) e[t] *= inv;
    } else if (r <= kNetworkRows) {
      median(vals.data(), kSpan, r, n, e);
    } else {
      for (size_t t = 0; t < n; ++t) {
        for (uint32_t j = 0; j < r; ++j) column[j] = vals[static_cast<size_t>(j) * kSpan + t];
        std::nth_element(column, column + mid, column + r);
        e[t] = column[mid];
      }
    }
  }
}

// sqrt(median over rows of sum_c table[j][c]^2): the sketch's estimate of ||x||_2.
template <typename T>
double l2Estimate(const T* table, uint32_t rows, uint32_t cols) {
  double sums[kMaxRows];
  for (uint32_t j = 0; j < rows; ++j) {
    double s = 0;
    const T* row = table + static_cast<size_t>(j) * cols;
    for (uint32_t c = 0; c < cols; ++c) s += static_cast<double>(row[c]) * row[c];
    sums[j] = s;
  }
  const uint32_t mid = (rows - 1) / 2;
  std::nth_element(sums, sums + mid, sums + rows);
  return std::sqrt(sums[mid]);
}

// What unsketch leaves in its output: the estimate of every coordinate (mean, or median
// without a top-k), or the estimate at `kept` and zero elsewhere.
struct Unsketched {
  bool sparse = false;
  std::vector<uint32_t> kept;  // increasing, when sparse
};

// The estimate a frame decodes to before scaling, from a validated table, in `out`.
template <typename T>
Unsketched unsketch(const T* table, const SketchParams& p, std::span<T> out) {
  const SketchHashes h(p.seed, p.rows, p.cols);
  estimate<T>(table, h, p.mean, out);
  Unsketched u;
  if (p.mean || out.empty()) return u;
  if (p.k > 0) {
    if (p.k >= out.size()) return u;
    // The k largest |estimate|, ties to the lower index (bits.h).
    u.sparse = true;
    u.kept = largestIndices<T>(out, p.k);
    std::vector<T> values(u.kept.size());
    for (size_t j = 0; j < u.kept.size(); ++j) values[j] = out[u.kept[j]];
    std::fill(out.begin(), out.end(), T(0));
    for (size_t j = 0; j < u.kept.size(); ++j) out[u.kept[j]] = values[j];
    return u;
  }
  const double thr = static_cast<double>(p.threshold) * l2Estimate<T>(table, p.rows, p.cols);
  for (T& v : out) {
    if (!(static_cast<double>(std::abs(v)) >= thr)) v = T(0);
  }
  return u;
}

// Whether every value is finite (an exponent field below all ones).
template <typename T>
[[gnu::always_inline]] inline bool allFiniteImpl(const T* v, size_t n) {
  using U = BitsOf<T>;
  constexpr U kAbs = std::numeric_limits<U>::max() >> 1;
  constexpr U kInf = std::bit_cast<U>(std::numeric_limits<T>::infinity());
  U worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::bit_cast<U>(v[i]) & kAbs);
  return worst < kInf;
}
STARLING_SIMD_CLONES
bool allFinite(const float* v, size_t n) { return allFiniteImpl(v, n); }
STARLING_SIMD_CLONES
bool allFinite(const double* v, size_t n) { return allFiniteImpl(v, n); }

// Loads the table of a frame whose params are `p` into `table`; kCorruption on a wrong size or
// a non-finite value.
template <typename T>
core::Status loadTable(std::span<const std::byte> payload, const SketchParams& p,
                       std::vector<T>& table) {
  static_assert(std::endian::native == std::endian::little,
                "the table is copied as is; add a byte-swapping path for big-endian hosts");
  const uint64_t cells = static_cast<uint64_t>(p.rows) * p.cols;
  if (payload.size() != cells * sizeof(T)) {
    return core::corruption("countsketch payload of " + std::to_string(payload.size()) +
                            " bytes for a " + std::to_string(p.rows) + " x " +
                            std::to_string(p.cols) + " table");
  }
  table.resize(cells);
  std::memcpy(table.data(), payload.data(), payload.size());
  if (!allFinite(table.data(), table.size())) {
    return core::corruption("countsketch table value not finite");
  }
  return core::Status::ok();
}

template <typename T>
class CountSketchCompressor;

// Sums tables of one round (same seed and shape, mean estimate) scaled by weight * lambda.
template <typename T>
class SketchAccumulator final : public LinearAccumulator<T> {
 public:
  explicit SketchAccumulator(size_t d) : d_(d) {}

  void reset() override {
    started_ = false;
    sum_.clear();
  }

  core::Status check(std::span<const std::byte> frame) override {
    auto v = openFrame<T>(frame, CodecId::kCountSketch, d_, kParamsBytes);
    if (!v) return v.status();
    auto p = loadSketchParams(v->params, d_);
    if (!p) return p.status();
    if (!p->mean) return core::corruption("countsketch median frames do not add up linearly");
    if (started_ && (p->seed != first_.seed || p->rows != first_.rows || p->cols != first_.cols)) {
      return core::corruption("countsketch frame with other hashes than this round's");
    }
    return loadTable<T>(v->payload, *p, table_);
  }

  core::Status add(std::span<const std::byte> frame, double weight) override {
    STARLING_RETURN_IF_ERROR(check(frame));
    auto v = openFrame<T>(frame, CodecId::kCountSketch, d_, kParamsBytes);
    const SketchParams p = *loadSketchParams(v->params, d_);
    if (!started_) {
      started_ = true;
      first_ = p;
      sum_.assign(table_.size(), T(0));
    }
    const T w = static_cast<T>(weight * p.scale);
    for (size_t c = 0; c < sum_.size(); ++c) sum_[c] += w * table_[c];
    return core::Status::ok();
  }

  void finish(std::span<T> out) override {
    if (!started_ || out.empty()) {
      std::fill(out.begin(), out.end(), T(0));
      return;
    }
    (void)unsketch<T>(sum_.data(), first_, out);
  }

 private:
  size_t d_;
  bool started_ = false;
  SketchParams first_;
  std::vector<T> table_;  // the last checked frame's table
  std::vector<T> sum_;
};

template <typename T>
class CountSketchCompressor final : public Compressor<T>, public LinearDecoding<T> {
 public:
  explicit CountSketchCompressor(const CompressorSpec& spec) : spec_(spec) {}

  CodecId id() const override { return CodecId::kCountSketch; }
  bool unbiased() const override { return false; }

  // The table: rows x cols values, whatever d.
  size_t maxEncodedBytes(size_t) const override {
    return frameBytesFor(kParamsBytes, static_cast<size_t>(spec_.rows * spec_.cols) * sizeof(T));
  }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    encodeWithSeed(x, rng.nextU64(), frame);
  }

  void encodeStream(std::span<const T> x, core::Rng&, const StreamContext& ctx,
                    std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    encodeWithSeed(x, core::deriveSeed(ctx.sharedSeed, kSketchSalt, ctx.round), frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng&, const StreamContext& ctx,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    return writeAndSee(
        out,
        [&](FrameOut& f) {
          encodeWithSeed(x, core::deriveSeed(ctx.sharedSeed, kSketchSalt, ctx.round), f);
        },
        [&](const FrameOut& f) { return decode(f.frame(), seen); });
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kCountSketch, out.size(), kParamsBytes);
    if (!v) return v.status();
    auto p = loadSketchParams(v->params, out.size());
    if (!p) return p.status();
    // Every peer of a run shares one spec: a frame of the other estimate is not one a neighbour
    // sends, and the mean-estimate accumulator (which only sums mean frames) must refuse exactly
    // what decode() refuses.
    if (p->mean != spec_.meanEstimate) {
      return core::corruption(std::string("countsketch frame with the ") +
                              (p->mean ? "mean" : "median") + " estimate; this run's is the " +
                              (spec_.meanEstimate ? "mean" : "median"));
    }
    std::vector<T> table;
    STARLING_RETURN_IF_ERROR(loadTable<T>(v->payload, *p, table));
    // Validated: the estimate can go straight into `out`, then be scaled in place.
    const Unsketched u = unsketch<T>(table.data(), *p, out);
    const T scale = static_cast<T>(p->scale);
    if (u.sparse) {
      std::vector<T> kept(u.kept.size());
      for (size_t j = 0; j < kept.size(); ++j) kept[j] = scale * out[u.kept[j]];
      // scale * 0 everywhere else: -0 for a negative scale, as before. unsketch left +0 there,
      // so for a +0 product the d-element pass (40 MB at d = 1e7) is skipped.
      const T zero = scale * T(0);
      if (std::signbit(zero)) std::fill(out.begin(), out.end(), zero);
      for (size_t j = 0; j < kept.size(); ++j) out[u.kept[j]] = kept[j];
    } else {
      for (T& y : out) y = scale * y;
    }
    return core::Status::ok();
  }

  // The mean estimate is linear in the table; the median is not.
  CodecCapabilities<T> capabilities() const override {
    CodecCapabilities<T> c;
    if (spec_.meanEstimate) c.linear = this;
    return c;
  }
  std::unique_ptr<LinearAccumulator<T>> newAccumulator(size_t d) const override {
    return std::make_unique<SketchAccumulator<T>>(d);
  }

 private:
  void encodeWithSeed(std::span<const T> x, uint64_t seed, FrameOut& out) const {
    const uint64_t d = x.size();
    assert(d <= UINT32_MAX);
    SketchParams p = countSketchHeader(spec_, d, seed);
    const size_t cells = static_cast<size_t>(p.rows) * p.cols;
    std::vector<T> table(cells, T(0));
    sketchInto<T>(x, SketchHashes(seed, p.rows, p.cols), table.data());

    // lambda: the least-squares scale of the estimate y the receivers will compute.
    const bool finite = allFinite(table.data(), table.size());
    double xy = 0, yy = 0;
    if (finite) {
      std::vector<T> y(d);
      const Unsketched u = unsketch<T>(table.data(), p, y);
      // The sums run in index order over the y_i that can be nonzero, which gives the bits of
      // the sums over all i: a finite table means a finite x, so a zero y_i adds a zero term,
      // and adding +-0 leaves a sum that starts at +0 unchanged (it can never become -0).
      auto add = [&](uint64_t i) {
        xy += static_cast<double>(x[i]) * static_cast<double>(y[i]);
        yy += static_cast<double>(y[i]) * static_cast<double>(y[i]);
      };
      if (u.sparse) {
        for (uint32_t i : u.kept) add(i);
      } else {
        for (uint64_t i = 0; i < d; ++i) {
          if (y[i] != T(0)) add(i);
        }
      }
    }
    // A NaN or infinite input leaves a non-finite table or scale: every decoder rejects the frame,
    // the sender's own included, which is how a diverging run shows up with this codec.
    p.scale = yy > 0 ? xy / yy : (finite ? 0.0 : std::numeric_limits<double>::quiet_NaN());

    writeSketchFrame<T>(p, d, std::span<const T>(table), out);
  }

  CompressorSpec spec_;
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeCountSketch(const CompressorSpec& spec) {
  assert(spec.rows >= 1 && spec.rows <= kMaxRows && spec.cols >= 1 && spec.cols <= kMaxCols);
  return std::make_unique<CountSketchCompressor<T>>(spec);
}

template std::unique_ptr<Compressor<float>> makeCountSketch<float>(const CompressorSpec&);
template std::unique_ptr<Compressor<double>> makeCountSketch<double>(const CompressorSpec&);

double countSketchL2(std::span<const float> table, uint32_t rows, uint32_t cols) {
  return l2Estimate<float>(table.data(), rows, cols);
}

}  // namespace starling::compression::codecs

namespace starling::compression {

// The passes of compression/sketch_hash.h, for optim's sketched gossip.
template <typename T>
void sketchAdd(std::span<const T> x, const SketchHashes& h, std::span<T> table) {
  assert(table.size() == static_cast<size_t>(h.rows()) * h.cols());
  codecs::sketchInto<T>(x, h, table.data());
}

template <typename T>
void sketchEstimate(std::span<const T> table, const SketchHashes& h, bool mean, std::span<T> est) {
  assert(table.size() == static_cast<size_t>(h.rows()) * h.cols());
  codecs::estimate<T>(table.data(), h, mean, est);
}

template void sketchAdd<float>(std::span<const float>, const SketchHashes&, std::span<float>);
template void sketchAdd<double>(std::span<const double>, const SketchHashes&, std::span<double>);
template void sketchEstimate<float>(std::span<const float>, const SketchHashes&, bool,
                                    std::span<float>);
template void sketchEstimate<double>(std::span<const double>, const SketchHashes&, bool,
                                     std::span<double>);

}  // namespace starling::compression
