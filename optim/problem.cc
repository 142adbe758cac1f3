#include "optim/problem.h"

#include <Eigen/Core>
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace starling::optim {
namespace {

// log(1 + exp(-t)) without overflow for large |t|.
template <typename T>
T logisticLoss(T t) {
  return t > T(0) ? std::log1p(std::exp(-t)) : -t + std::log1p(std::exp(t));
}

// 1 / (1 + exp(-u)) without overflow for large |u|.
template <typename T>
T sigmoid(T u) {
  if (u >= T(0)) return T(1) / (T(1) + std::exp(-u));
  const T e = std::exp(u);
  return e / (T(1) + e);
}

template <typename T>
T lossOf(LossKind loss, T z, T b) {
  if (loss == LossKind::kLeastSquares) return T(0.5) * (z - b) * (z - b);
  return logisticLoss(b * z);
}

// d loss / dz at z = a^T x.
template <typename T>
T lossSlope(LossKind loss, T z, T b) {
  if (loss == LossKind::kLeastSquares) return z - b;
  return -b * sigmoid(-b * z);
}

double mappedLabel(LossKind loss, double label) {
  if (loss == LossKind::kLeastSquares) return label;
  return label > 0.0 ? 1.0 : -1.0;
}

}  // namespace

// The shard's two layouts and their kernels. Every sum is added in the order a walk over the CSR
// rows adds it, which is the order Eigen's sparse products used before these kernels existed:
//   z_j = ((0 + a_j0 x_0) + a_j1 x_1) + ...        (columns increasing)
//   out_k = ((l2 x_k + a_0k c_0) + a_1k c_1) + ...  (rows increasing)
// so the dense and CSR layouts, in float and double, give what the sparse product gave, bit for
// bit (IEEE arithmetic: no -ffast-math, and no FMA contraction in the default x86-64 build).
// A dense shard is held twice, row-major for out += c_j a_j and column-major for z = A x: each
// pass is then a loop over contiguous memory whose iterations are independent (z_j for many j at
// once, out_k for many k at once), which the compiler vectorises, where one dot product a_j^T x
// at a time would wait an add's latency per term. Two copies of T per entry take no more memory
// than the CSR entry they replace did (a T and a 64-bit column index).
constexpr size_t kRowChunk = 256;  // rows whose z_j are computed at once (z stays in L1)

template <typename T>
struct LocalObjective<T>::Impl {
  LossKind loss;
  T l2;
  T scale;  // n / m
  size_t rows = 0;
  size_t cols = 0;
  bool dense = false;
  // Dense: rows x cols, row-major. CSR: the stored entries, row after row.
  std::vector<T> values;
  std::vector<T> columns;       // dense only: the same matrix, column-major (cols x rows)
  std::vector<int32_t> colIdx;  // CSR only: column of each entry (< cols <= kMaxFeatures)
  std::vector<size_t> rowPtr;   // CSR only: rows + 1 offsets into values/colIdx
  std::vector<T> b;             // mapped labels

  const T* denseRow(size_t j) const { return values.data() + j * cols; }

  // a_j^T x, terms added in column order from +0.
  T rowDot(size_t j, const T* x) const {
    T z = 0;
    if (dense) {
      const T* a = denseRow(j);
      for (size_t k = 0; k < cols; ++k) z += a[k] * x[k];
    } else {
      for (size_t p = rowPtr[j]; p < rowPtr[j + 1]; ++p) z += values[p] * x[colIdx[p]];
    }
    return z;
  }

  // out += c * a_j.
  void addRow(size_t j, T c, T* __restrict out) const {
    if (dense) {
      const T* __restrict a = denseRow(j);
      for (size_t k = 0; k < cols; ++k) out[k] += a[k] * c;
    } else {
      for (size_t p = rowPtr[j]; p < rowPtr[j + 1]; ++p) out[colIdx[p]] += values[p] * c;
    }
  }

  // Dense: z[q] = a_{j0+q}^T x for q < n, from the column-major copy, four columns per pass over z.
  void denseDots(size_t j0, size_t n, const T* __restrict x, T* __restrict z) const {
    for (size_t q = 0; q < n; ++q) z[q] = 0;
    size_t k = 0;
    for (; k + 4 <= cols; k += 4) {
      const T* __restrict c0 = columns.data() + k * rows + j0;
      const T* __restrict c1 = c0 + rows;
      const T* __restrict c2 = c1 + rows;
      const T* __restrict c3 = c2 + rows;
      const T x0 = x[k], x1 = x[k + 1], x2 = x[k + 2], x3 = x[k + 3];
      for (size_t q = 0; q < n; ++q) {
        z[q] = (((z[q] + c0[q] * x0) + c1[q] * x1) + c2[q] * x2) + c3[q] * x3;
      }
    }
    for (; k < cols; ++k) {
      const T* __restrict c0 = columns.data() + k * rows + j0;
      const T x0 = x[k];
      for (size_t q = 0; q < n; ++q) z[q] += c0[q] * x0;
    }
  }

  // Dense: out += sum_q c[q] a_{j0+q}, rows in order, four rows per pass over out; over columns
  // [k0, k0 + len) of the rows, into out[0, len) (the whole rows by default).
  void denseAddRows(size_t j0, size_t n, const T* c, T* __restrict out, size_t k0 = 0,
                    size_t len = SIZE_MAX) const {
    if (len == SIZE_MAX) len = cols;
    size_t q = 0;
    for (; q + 4 <= n; q += 4) {
      const T* __restrict a0 = denseRow(j0 + q) + k0;
      const T* __restrict a1 = a0 + cols;
      const T* __restrict a2 = a1 + cols;
      const T* __restrict a3 = a2 + cols;
      const T c0 = c[q], c1 = c[q + 1], c2 = c[q + 2], c3 = c[q + 3];
      for (size_t k = 0; k < len; ++k) {
        out[k] = (((out[k] + a0[k] * c0) + a1[k] * c1) + a2[k] * c2) + a3[k] * c3;
      }
    }
    for (; q < n; ++q) {
      const T* __restrict a = denseRow(j0 + q) + k0;
      for (size_t k = 0; k < len; ++k) out[k] += a[k] * c[q];
    }
  }

  // c_j = scale * loss'(a_j^T x, b_j) for every row: the coefficients of the data term.
  void dataCoefficients(const T* x, T* c) const {
    if (!dense) {
      for (size_t j = 0; j < rows; ++j) {
        c[j] = lossSlope(loss, rowDot(j, x), b[j]);
        c[j] *= scale;
      }
      return;
    }
    for (size_t j0 = 0; j0 < rows; j0 += kRowChunk) {
      const size_t n = std::min(kRowChunk, rows - j0);
      denseDots(j0, n, x, c + j0);
      for (size_t q = 0; q < n; ++q) {
        c[j0 + q] = lossSlope(loss, c[j0 + q], b[j0 + q]);
        c[j0 + q] *= scale;
      }
    }
  }

  // out += sum_j c_j a_j over every row (in row order), c_j = scale * loss'(a_j^T x, b_j): the
  // data term of the gradient. x and out must not overlap.
  void addDataGradient(const T* __restrict x, T* __restrict out) const {
    if (!dense) {
      for (size_t j = 0; j < rows; ++j) {
        T c = lossSlope(loss, rowDot(j, x), b[j]);
        c *= scale;
        addRow(j, c, out);
      }
      return;
    }
    T z[kRowChunk];
    for (size_t j0 = 0; j0 < rows; j0 += kRowChunk) {
      const size_t n = std::min(kRowChunk, rows - j0);
      denseDots(j0, n, x, z);
      for (size_t q = 0; q < n; ++q) {
        z[q] = lossSlope(loss, z[q], b[j0 + q]);
        z[q] *= scale;
      }
      denseAddRows(j0, n, z, out);
    }
  }

  // sum_j loss(a_j^T x, b_j), added in row order.
  T lossSum(const T* x) const {
    T sum = 0;
    if (!dense) {
      for (size_t j = 0; j < rows; ++j) sum += lossOf(loss, rowDot(j, x), b[j]);
      return sum;
    }
    T z[kRowChunk];
    for (size_t j0 = 0; j0 < rows; j0 += kRowChunk) {
      const size_t n = std::min(kRowChunk, rows - j0);
      denseDots(j0, n, x, z);
      for (size_t q = 0; q < n; ++q) sum += lossOf(loss, z[q], b[j0 + q]);
    }
    return sum;
  }
};

template <typename T>
std::unique_ptr<LocalObjective<T>> LocalObjective<T>::create(const ProblemSpec& spec,
                                                             const Dataset& shard,
                                                             size_t totalSamples, int nodes) {
  assert(totalSamples > 0 && nodes > 0);
  auto impl = std::make_unique<Impl>();
  impl->loss = spec.loss;
  impl->l2 = static_cast<T>(spec.l2);
  impl->scale = static_cast<T>(static_cast<double>(nodes) / static_cast<double>(totalSamples));
  const size_t rows = shard.samples();
  const auto cols = static_cast<size_t>(shard.features);
  impl->rows = rows;
  impl->cols = cols;
  // Dense only when every row stores all d entries (columns strictly increasing and < d make such
  // a row exactly 0..d-1): then the dense matrix holds the same entries in the same order and no
  // zero is ever added that the CSR walk would skip. (Zero-filling sparser data could turn a -0
  // gradient coordinate into +0, so it stays CSR, which is at most 1.5x dense's bytes there.)
  impl->dense = cols > 0 && shard.nonZeros() == rows * cols;
  impl->values.resize(shard.nonZeros());
  for (size_t p = 0; p < shard.nonZeros(); ++p) impl->values[p] = static_cast<T>(shard.values[p]);
  if (impl->dense) {
    impl->columns.resize(rows * cols);
    for (size_t j = 0; j < rows; ++j) {
      for (size_t k = 0; k < cols; ++k) impl->columns[k * rows + j] = impl->values[j * cols + k];
    }
  } else {
    impl->colIdx.assign(shard.colIdx.begin(), shard.colIdx.end());
    impl->rowPtr.resize(rows + 1);
    for (size_t j = 0; j <= rows; ++j) impl->rowPtr[j] = static_cast<size_t>(shard.rowPtr[j]);
  }
  impl->b.resize(rows);
  for (size_t j = 0; j < rows; ++j) {
    impl->b[j] = static_cast<T>(mappedLabel(spec.loss, shard.labels[j]));
  }
  return std::unique_ptr<LocalObjective<T>>(new LocalObjective<T>(std::move(impl)));
}

template <typename T>
LocalObjective<T>::LocalObjective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

template <typename T>
LocalObjective<T>::~LocalObjective() = default;

template <typename T>
int LocalObjective<T>::dim() const {
  return static_cast<int>(impl_->cols);
}

template <typename T>
size_t LocalObjective<T>::samples() const {
  return impl_->rows;
}

template <typename T>
bool LocalObjective<T>::dense() const {
  return impl_->dense;
}

template <typename T>
void LocalObjective<T>::gradient(std::span<const T> x, std::span<T> out) const {
  const Impl& p = *impl_;
  assert(x.size() == p.cols && out.size() == p.cols);
  // l2 x first, then the data term added in place; the data term reads x throughout, so an
  // overlapping out (x itself) gets its x copied first.
  const auto xb = reinterpret_cast<uintptr_t>(x.data());
  const auto ob = reinterpret_cast<uintptr_t>(out.data());
  const bool overlap = xb < ob + out.size_bytes() && ob < xb + x.size_bytes();
  std::vector<T> copy;
  if (overlap) copy.assign(x.begin(), x.end());
  const T* xs = overlap ? copy.data() : x.data();
  T* o = out.data();
  for (size_t k = 0; k < p.cols; ++k) o[k] = p.l2 * xs[k];
  p.addDataGradient(xs, o);
}

namespace {

// LocalObjective::gradient a block at a time: start() computes every row's coefficient c_j (a
// pass over the shard's entries, not over d), fill() writes l2 x_k and then adds the rows'
// terms in row order, as gradient() does for each coordinate. A sparse row keeps a cursor at its
// first entry not yet added, so each entry is visited once per round.
template <typename T, typename Impl>
class LinearGradientBlocks final : public GradientBlocks<T> {
 public:
  explicit LinearGradientBlocks(const Impl& p) : p_(p), coef_(p.rows), cursor_(p.rows) {}

  void start(std::span<const T> x) override {
    assert(x.size() == p_.cols);
    x_ = x.data();
    p_.dataCoefficients(x_, coef_.data());
    if (!p_.dense) {
      for (size_t j = 0; j < p_.rows; ++j) cursor_[j] = p_.rowPtr[j];
    }
  }

  void fill(size_t offset, std::span<T> out) override {
    const size_t n = out.size();
    assert(offset + n <= p_.cols);
    T* __restrict o = out.data();
    const T* __restrict x = x_ + offset;
    for (size_t k = 0; k < n; ++k) o[k] = p_.l2 * x[k];
    if (p_.dense) {
      for (size_t j0 = 0; j0 < p_.rows; j0 += kRowChunk) {
        p_.denseAddRows(j0, std::min(kRowChunk, p_.rows - j0), coef_.data() + j0, o, offset, n);
      }
      return;
    }
    const auto end = static_cast<int64_t>(offset + n);
    for (size_t j = 0; j < p_.rows; ++j) {
      size_t q = cursor_[j];
      const size_t last = p_.rowPtr[j + 1];
      const T c = coef_[j];
      for (; q < last && p_.colIdx[q] < end; ++q) o[p_.colIdx[q] - offset] += p_.values[q] * c;
      cursor_[j] = q;
    }
  }

 private:
  const Impl& p_;
  const T* x_ = nullptr;
  std::vector<T> coef_;
  std::vector<size_t> cursor_;
};

}  // namespace

template <typename T>
std::unique_ptr<GradientBlocks<T>> LocalObjective<T>::gradientBlocks() const {
  const Impl& p = *impl_;
  // A sparse shard costs a pass over its rows per block (4,096 coordinates from the node);
  // beyond its entries and d, the whole-vector gradient is cheaper.
  const size_t blocks = (p.cols + 4095) / 4096;
  if (!p.dense && p.rows * blocks > p.values.size() + p.cols) return nullptr;
  return std::make_unique<LinearGradientBlocks<T, Impl>>(p);
}

template <typename T>
void LocalObjective<T>::stochasticGradient(std::span<const T> x, std::span<T> out, size_t batch,
                                           core::Rng& rng) const {
  stochasticGradientWithLoss(x, out, batch, rng);
}

template <typename T>
double LocalObjective<T>::stochasticGradientWithLoss(std::span<const T> x, std::span<T> out,
                                                     size_t batch, core::Rng& rng) const {
  const Impl& p = *impl_;
  assert(batch > 0);
  assert(x.size() == p.cols && out.size() == p.cols);
  for (size_t k = 0; k < p.cols; ++k) out[k] = p.l2 * x[k];
  const uint64_t rows = samples();
  // The local gradient is then exactly l2 x, and there is no sample to have a loss.
  if (rows == 0) return std::numeric_limits<double>::quiet_NaN();
  // scale * m_i / batch makes the mean over draws equal the full local sum's gradient.
  const T weight = p.scale * static_cast<T>(static_cast<double>(rows) / static_cast<double>(batch));
  double loss = 0.0;
  for (size_t s = 0; s < batch; ++s) {
    const auto j = static_cast<size_t>(rng.below(rows));
    const T z = p.rowDot(j, x.data());
    loss += static_cast<double>(lossOf(p.loss, z, p.b[j]));
    const T c = weight * lossSlope(p.loss, z, p.b[j]);
    p.addRow(j, c, out.data());
  }
  return loss / static_cast<double>(batch);
}

template <typename T>
double LocalObjective<T>::value(std::span<const T> x) const {
  const Impl& p = *impl_;
  assert(x.size() == p.cols);
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  const Eigen::Map<const Vec> xv(x.data(), static_cast<Eigen::Index>(x.size()));
  const T sum = p.lossSum(x.data());
  return static_cast<double>(p.scale * sum + T(0.5) * p.l2 * xv.squaredNorm());
}

template <typename T>
T LocalObjective<T>::scale() const {
  return impl_->scale;
}

template <typename T>
T LocalObjective<T>::l2() const {
  return impl_->l2;
}

template <typename T>
T LocalObjective<T>::lossDerivative(size_t j, std::span<const T> x) const {
  const Impl& p = *impl_;
  assert(j < samples() && x.size() == p.cols);
  return lossSlope(p.loss, p.rowDot(j, x.data()), p.b[j]);
}

template <typename T>
void LocalObjective<T>::addSample(size_t j, T coefficient, std::span<T> out) const {
  const Impl& p = *impl_;
  assert(j < samples() && out.size() == p.cols);
  p.addRow(j, coefficient, out.data());
}

template <typename T>
void LocalObjective<T>::accumulateSample(size_t j, double coefficient,
                                         std::span<double> out) const {
  const Impl& p = *impl_;
  assert(j < samples() && out.size() == p.cols);
  if (p.dense) {
    const T* a = p.denseRow(j);
    for (size_t k = 0; k < p.cols; ++k) out[k] += coefficient * static_cast<double>(a[k]);
  } else {
    for (size_t q = p.rowPtr[j]; q < p.rowPtr[j + 1]; ++q) {
      out[static_cast<size_t>(p.colIdx[q])] += coefficient * static_cast<double>(p.values[q]);
    }
  }
}

template class LocalObjective<float>;
template class LocalObjective<double>;

// GlobalObjective walks the Dataset's CSR arrays by hand: it is the reference LocalObjective's
// kernels are checked against, so it shares no code with them beyond the scalar loss functions.
GlobalObjective::GlobalObjective(const ProblemSpec& spec, const Dataset& all)
    : spec_(spec), data_(all) {}

double GlobalObjective::value(std::span<const double> x) const {
  const double r = spec_.regularizer.none() ? 0.0 : regularizerValue(spec_.regularizer, x);
  if (std::isinf(r)) return r;  // outside the box; F need not even be evaluated
  return smoothValue(x) + r;
}

double GlobalObjective::smoothValue(std::span<const double> x) const {
  assert(static_cast<int>(x.size()) == data_.features && data_.samples() > 0);
  double sum = 0.0;
  for (size_t j = 0; j < data_.samples(); ++j) {
    double z = 0.0;
    for (int64_t k = data_.rowPtr[j]; k < data_.rowPtr[j + 1]; ++k) {
      z += data_.values[k] * x[data_.colIdx[k]];
    }
    sum += lossOf(spec_.loss, z, mappedLabel(spec_.loss, data_.labels[j]));
  }
  double sq = 0.0;
  for (double v : x) sq += v * v;
  return sum / static_cast<double>(data_.samples()) + 0.5 * spec_.l2 * sq;
}

void GlobalObjective::gradient(std::span<const double> x, std::span<double> out) const {
  assert(static_cast<int>(x.size()) == data_.features && out.size() == x.size());
  assert(data_.samples() > 0);
  for (double& v : out) v = 0.0;
  for (size_t j = 0; j < data_.samples(); ++j) {
    double z = 0.0;
    for (int64_t k = data_.rowPtr[j]; k < data_.rowPtr[j + 1]; ++k) {
      z += data_.values[k] * x[data_.colIdx[k]];
    }
    const double r = lossSlope(spec_.loss, z, mappedLabel(spec_.loss, data_.labels[j]));
    for (int64_t k = data_.rowPtr[j]; k < data_.rowPtr[j + 1]; ++k) {
      out[data_.colIdx[k]] += r * data_.values[k];
    }
  }
  const double inv = 1.0 / static_cast<double>(data_.samples());
  for (size_t i = 0; i < out.size(); ++i) out[i] = out[i] * inv + spec_.l2 * x[i];
}

}  // namespace starling::optim
