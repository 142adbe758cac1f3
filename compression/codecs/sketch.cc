// Count-Sketch (ALGORITHMS.md §6.1; docs/compression.md "Count-Sketch"): an r x c table, each row
// adding s_j(i) x_i into bucket h_j(i). Decoding estimates every coordinate from the table, by
// the median over rows (then keeps the top-k or above-threshold estimates) or by the mean over
// rows, which is linear in the table and lets a receiver sum its neighbours' weighted tables and
// decode once (LinearAccumulator).
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

#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

constexpr uint64_t kSketchSalt = 0x534b4554;  // "SKET"
constexpr size_t kParamsBytes = 34;
constexpr uint64_t kMaxRows = 64;
constexpr uint64_t kMaxCols = uint64_t{1} << 31;
constexpr size_t kBlock = 512;

// The parameters of one frame (docs/wire_format.md, codec 11).
struct SketchParams {
  bool mean = false;
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint64_t k = 0;           // median: heavy hitters kept (0 in threshold mode)
  float threshold = 0.0f;   // median: keep |estimate| >= threshold * estimated ||x||_2
  uint64_t seed = 0;        // hash seed
  double scale = 0.0;       // lambda
};

void storeParams(const SketchParams& p, std::byte* out) {
  out[0] = static_cast<std::byte>(p.mean ? 1 : 0);
  out[1] = static_cast<std::byte>(p.rows);
  storeLe<uint32_t>(out + 2, p.cols);
  storeLe<uint64_t>(out + 6, p.k);
  storeLe<uint32_t>(out + 14, std::bit_cast<uint32_t>(p.threshold));
  storeLe<uint64_t>(out + 18, p.seed);
  storeLe<uint64_t>(out + 26, std::bit_cast<uint64_t>(p.scale));
}

// Reads and range-checks the params of a frame for d elements.
core::Result<SketchParams> loadParams(std::span<const std::byte> in, uint64_t d) {
  SketchParams p;
  const int mean = std::to_integer<int>(in[0]);
  if (mean > 1) return core::corruption("countsketch estimate flag " + std::to_string(mean));
  p.mean = mean == 1;
  p.rows = std::to_integer<uint32_t>(in[1]);
  p.cols = loadLe<uint32_t>(in.data() + 2);
  p.k = loadLe<uint64_t>(in.data() + 6);
  p.threshold = std::bit_cast<float>(loadLe<uint32_t>(in.data() + 14));
  p.seed = loadLe<uint64_t>(in.data() + 18);
  p.scale = std::bit_cast<double>(loadLe<uint64_t>(in.data() + 26));
  if (p.rows < 1 || p.rows > kMaxRows) {
    return core::corruption("countsketch rows " + std::to_string(p.rows));
  }
  if (p.cols < 1 || p.cols > kMaxCols) {
    return core::corruption("countsketch cols " + std::to_string(p.cols));
  }
  if (!std::isfinite(p.scale)) return core::corruption("countsketch scale is not finite");
  if (!std::isfinite(p.threshold) || p.threshold < 0.0f || p.threshold > 1.0f) {
    return core::corruption("countsketch threshold out of [0, 1]");
  }
  if (d > UINT32_MAX) return core::corruption("countsketch frame of more than 2^32-1 elements");
  if (p.mean || d == 0) {
    if (p.k != 0 || p.threshold != 0.0f) {
      return core::corruption("countsketch: k or threshold set where none applies");
    }
  } else if ((p.k == 0) == (p.threshold == 0.0f)) {
    return core::corruption("countsketch: exactly one of k and threshold must be set");
  } else if (p.k > d) {
    return core::corruption("countsketch k " + std::to_string(p.k) + " > " + std::to_string(d));
  }
  return p;
}

// Per-row hash parameters drawn from one seed.
class SketchHashes {
 public:
  SketchHashes(uint64_t seed, uint32_t rows, uint32_t cols) : cols_(cols), rows_(rows) {
    for (uint32_t j = 0; j < rows; ++j) {
      for (uint64_t w = 0; w < 4; ++w) coef_[j][w] = core::deriveSeed(seed, kSketchSalt, j, w);
    }
  }
  uint32_t rows() const { return rows_; }
  uint32_t cols() const { return cols_; }
  // Buckets and signs (+1 / -1) of coordinates [lo, lo + n) for row j.
  template <typename T>
  void row(uint32_t j, uint64_t lo, size_t n, uint32_t* bucket, T* sign) const {
    const uint64_t a = coef_[j][0], b = coef_[j][1], c = coef_[j][2], e = coef_[j][3];
    const uint64_t cols = cols_;
    for (size_t t = 0; t < n; ++t) {
      const uint64_t i = lo + t;
      bucket[t] = static_cast<uint32_t>((((a * i + b) >> 32) * cols) >> 32);
      sign[t] = ((c * i + e) >> 63) != 0 ? T(-1) : T(1);
    }
  }

 private:
  uint32_t cols_;
  uint32_t rows_;
  uint64_t coef_[kMaxRows][4];
};

// table (rows x cols, row-major, zeroed by the caller) += sketch of x.
template <typename T>
void sketchInto(std::span<const T> x, const SketchHashes& h, T* table) {
  uint32_t bucket[kBlock];
  T sign[kBlock];
  const uint64_t d = x.size();
  for (uint32_t j = 0; j < h.rows(); ++j) {
    T* row = table + static_cast<size_t>(j) * h.cols();
    for (uint64_t lo = 0; lo < d; lo += kBlock) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, d - lo));
      h.row(j, lo, n, bucket, sign);
      for (size_t t = 0; t < n; ++t) row[bucket[t]] += sign[t] * x[lo + t];
    }
  }
}

// est_i = mean or (lower) median over rows of s_j(i) table[j][h_j(i)].
template <typename T>
void estimate(const T* table, const SketchHashes& h, bool mean, std::span<T> est) {
  const uint32_t r = h.rows();
  const uint64_t d = est.size();
  std::vector<uint32_t> bucket(kBlock);
  std::vector<T> sign(kBlock);
  if (mean) {
    std::fill(est.begin(), est.end(), T(0));
    const T inv = T(1) / static_cast<T>(r);
    for (uint32_t j = 0; j < r; ++j) {
      const T* row = table + static_cast<size_t>(j) * h.cols();
      for (uint64_t lo = 0; lo < d; lo += kBlock) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, d - lo));
        h.row(j, lo, n, bucket.data(), sign.data());
        for (size_t t = 0; t < n; ++t) est[lo + t] += sign[t] * row[bucket[t]];
      }
    }
    for (T& v : est) v *= inv;
    return;
  }
  // vals[j * kBlock + t]: row j's estimate of coordinate lo + t.
  std::vector<T> vals(static_cast<size_t>(r) * kBlock);
  T column[kMaxRows];
  const uint32_t mid = (r - 1) / 2;  // the lower median when r is even, as torch.median
  for (uint64_t lo = 0; lo < d; lo += kBlock) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, d - lo));
    for (uint32_t j = 0; j < r; ++j) {
      const T* row = table + static_cast<size_t>(j) * h.cols();
      h.row(j, lo, n, bucket.data(), sign.data());
      T* v = vals.data() + static_cast<size_t>(j) * kBlock;
      for (size_t t = 0; t < n; ++t) v[t] = sign[t] * row[bucket[t]];
    }
    for (size_t t = 0; t < n; ++t) {
      for (uint32_t j = 0; j < r; ++j) column[j] = vals[static_cast<size_t>(j) * kBlock + t];
      std::nth_element(column, column + mid, column + r);
      est[lo + t] = column[mid];
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

// Zeroes every estimate but the k largest in magnitude (ties: lower indices first).
template <typename T>
void keepTopK(std::span<T> est, uint64_t k, std::vector<T>& scratch) {
  const uint64_t d = est.size();
  if (k >= d) return;
  scratch.resize(d);
  for (uint64_t i = 0; i < d; ++i) scratch[i] = std::abs(est[i]);
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<ptrdiff_t>(d - k),
                   scratch.end());
  const T tau = scratch[d - k];  // the k-th largest magnitude
  uint64_t above = 0;
  for (uint64_t i = 0; i < d; ++i) above += std::abs(est[i]) > tau ? 1 : 0;
  uint64_t ties = k - above;  // elements equal to tau still to keep
  for (uint64_t i = 0; i < d; ++i) {
    const T a = std::abs(est[i]);
    if (a > tau) continue;
    if (a == tau && ties > 0) {
      --ties;
      continue;
    }
    est[i] = T(0);
  }
}

// The estimate a frame decodes to before scaling, from a validated table.
template <typename T>
void unsketch(const T* table, const SketchParams& p, std::span<T> out, std::vector<T>& scratch) {
  const SketchHashes h(p.seed, p.rows, p.cols);
  estimate<T>(table, h, p.mean, out);
  if (p.mean || out.empty()) return;
  if (p.k > 0) {
    keepTopK<T>(out, p.k, scratch);
    return;
  }
  const double thr = static_cast<double>(p.threshold) * l2Estimate<T>(table, p.rows, p.cols);
  for (T& v : out) {
    if (!(static_cast<double>(std::abs(v)) >= thr)) v = T(0);
  }
}

// Loads the table of a frame whose params are `p` into `table`; kCorruption on a wrong size or
// a non-finite value.
template <typename T>
core::Status loadTable(std::span<const std::byte> payload, const SketchParams& p,
                       std::vector<T>& table) {
  const uint64_t cells = static_cast<uint64_t>(p.rows) * p.cols;
  if (payload.size() != cells * sizeof(T)) {
    return core::corruption("countsketch payload of " + std::to_string(payload.size()) +
                            " bytes for a " + std::to_string(p.rows) + " x " +
                            std::to_string(p.cols) + " table");
  }
  table.resize(cells);
  for (uint64_t c = 0; c < cells; ++c) {
    table[c] = loadValue<T>(payload.data() + c * sizeof(T));
    if (!std::isfinite(table[c])) return core::corruption("countsketch table value not finite");
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
    auto p = loadParams(v->params, d_);
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
    const SketchParams p = *loadParams(v->params, d_);
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
    std::vector<T> scratch;
    SketchParams p = first_;
    unsketch<T>(sum_.data(), p, out, scratch);
  }

 private:
  size_t d_;
  bool started_ = false;
  SketchParams first_;
  std::vector<T> table_;  // the last checked frame's table
  std::vector<T> sum_;
};

template <typename T>
class CountSketchCompressor final : public Compressor<T> {
 public:
  explicit CountSketchCompressor(const CompressorSpec& spec) : spec_(spec) {}

  CodecId id() const override { return CodecId::kCountSketch; }
  bool unbiased() const override { return false; }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    encodeWithSeed(x, rng.nextU64(), out);
  }

  void encodeStream(std::span<const T> x, core::Rng&, const StreamContext& ctx,
                    std::vector<std::byte>& out) const override {
    encodeWithSeed(x, core::deriveSeed(ctx.sharedSeed, kSketchSalt, ctx.round), out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kCountSketch, out.size(), kParamsBytes);
    if (!v) return v.status();
    auto p = loadParams(v->params, out.size());
    if (!p) return p.status();
    std::vector<T> table;
    STARLING_RETURN_IF_ERROR(loadTable<T>(v->payload, *p, table));
    std::vector<T> y(out.size()), scratch;
    unsketch<T>(table.data(), *p, y, scratch);
    const T scale = static_cast<T>(p->scale);
    for (size_t i = 0; i < out.size(); ++i) out[i] = scale * y[i];
    return core::Status::ok();
  }

  std::unique_ptr<LinearAccumulator<T>> newAccumulator(size_t d) const override {
    if (!spec_.meanEstimate) return nullptr;
    return std::make_unique<SketchAccumulator<T>>(d);
  }

 private:
  void encodeWithSeed(std::span<const T> x, uint64_t seed, std::vector<std::byte>& out) const {
    const uint64_t d = x.size();
    assert(d <= UINT32_MAX);
    SketchParams p;
    p.mean = spec_.meanEstimate;
    p.rows = static_cast<uint32_t>(spec_.rows);
    p.cols = static_cast<uint32_t>(spec_.cols);
    p.seed = seed;
    if (!p.mean && d > 0) {
      if (spec_.threshold > 0.0) {
        p.threshold = static_cast<float>(spec_.threshold);
      } else {
        p.k = keptCount(spec_.k, spec_.ratio, d);
      }
    }
    const size_t cells = static_cast<size_t>(p.rows) * p.cols;
    std::vector<T> table(cells, T(0));
    sketchInto<T>(x, SketchHashes(seed, p.rows, p.cols), table.data());

    // lambda: the least-squares scale of the estimate y the receivers will compute.
    std::vector<T> y(d), scratch;
    bool finite = true;
    for (T v : table) finite = finite && std::isfinite(v);
    double xy = 0, yy = 0;
    if (finite) {
      unsketch<T>(table.data(), p, y, scratch);
      for (uint64_t i = 0; i < d; ++i) {
        xy += static_cast<double>(x[i]) * static_cast<double>(y[i]);
        yy += static_cast<double>(y[i]) * static_cast<double>(y[i]);
      }
    }
    // A NaN or infinite input leaves a non-finite table or scale: every decoder rejects the frame,
    // the sender's own included, which is how a diverging run shows up with this codec.
    p.scale = yy > 0 ? xy / yy : (finite ? 0.0 : std::numeric_limits<double>::quiet_NaN());

    std::vector<std::byte> params(kParamsBytes), payload(cells * sizeof(T));
    storeParams(p, params.data());
    for (size_t c = 0; c < cells; ++c) storeValue<T>(payload.data() + c * sizeof(T), table[c]);
    writeFrame(CodecId::kCountSketch, elementTypeOf<T>(), d, params, payload, out);
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

}  // namespace starling::compression::codecs
