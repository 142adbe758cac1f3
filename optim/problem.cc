#include "optim/problem.h"

#include <Eigen/Core>
#include <Eigen/SparseCore>
#include <cassert>
#include <cmath>

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

template <typename T>
struct LocalObjective<T>::Impl {
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using Sparse = Eigen::SparseMatrix<T, Eigen::RowMajor, int64_t>;

  LossKind loss;
  T l2;
  T scale;  // n / m
  Sparse a;
  Vec b;

  Eigen::Map<const Vec> mapIn(std::span<const T> x) const {
    assert(static_cast<Eigen::Index>(x.size()) == a.cols());
    return Eigen::Map<const Vec>(x.data(), static_cast<Eigen::Index>(x.size()));
  }

  // a_j^T x, reading the compressed row directly (the stochastic path touches few rows).
  T rowDot(Eigen::Index j, const T* x) const {
    const int64_t* outer = a.outerIndexPtr();
    const int64_t* inner = a.innerIndexPtr();
    const T* vals = a.valuePtr();
    T z = 0;
    for (int64_t k = outer[j]; k < outer[j + 1]; ++k) z += vals[k] * x[inner[k]];
    return z;
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
  const auto rows = static_cast<Eigen::Index>(shard.samples());
  impl->a.resize(rows, shard.features);
  impl->a.reserve(static_cast<Eigen::Index>(shard.nonZeros()));
  impl->b.resize(rows);
  for (Eigen::Index j = 0; j < rows; ++j) {
    impl->a.startVec(j);
    for (int64_t k = shard.rowPtr[j]; k < shard.rowPtr[j + 1]; ++k) {
      impl->a.insertBack(j, shard.colIdx[k]) = static_cast<T>(shard.values[k]);
    }
    impl->b[j] = static_cast<T>(mappedLabel(spec.loss, shard.labels[j]));
  }
  impl->a.finalize();
  return std::unique_ptr<LocalObjective<T>>(new LocalObjective<T>(std::move(impl)));
}

template <typename T>
LocalObjective<T>::LocalObjective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

template <typename T>
LocalObjective<T>::~LocalObjective() = default;

template <typename T>
int LocalObjective<T>::dim() const {
  return static_cast<int>(impl_->a.cols());
}

template <typename T>
size_t LocalObjective<T>::samples() const {
  return static_cast<size_t>(impl_->a.rows());
}

template <typename T>
void LocalObjective<T>::gradient(std::span<const T> x, std::span<T> out) const {
  const Impl& p = *impl_;
  auto xv = p.mapIn(x);
  Eigen::Map<typename Impl::Vec> o(out.data(), static_cast<Eigen::Index>(out.size()));
  assert(o.size() == xv.size());
  // One residual vector of m_i entries per call keeps the const methods concurrent-safe.
  typename Impl::Vec r = p.a * xv;
  for (Eigen::Index j = 0; j < r.size(); ++j) r[j] = lossSlope(p.loss, r[j], p.b[j]);
  // l2 x first, then the data term added in place: one dense pass, no d-sized temporary.
  o = p.l2 * xv;
  r *= p.scale;
  o.noalias() += p.a.transpose() * r;
}

template <typename T>
void LocalObjective<T>::stochasticGradient(std::span<const T> x, std::span<T> out, size_t batch,
                                           core::Rng& rng) const {
  const Impl& p = *impl_;
  assert(batch > 0);
  auto xv = p.mapIn(x);
  Eigen::Map<typename Impl::Vec> o(out.data(), static_cast<Eigen::Index>(out.size()));
  assert(o.size() == xv.size());
  o = p.l2 * xv;
  const uint64_t rows = samples();
  if (rows == 0) return;  // the local gradient is then exactly l2 x
  // scale * m_i / batch makes the mean over draws equal the full local sum's gradient.
  const T weight = p.scale * static_cast<T>(static_cast<double>(rows) / static_cast<double>(batch));
  const int64_t* outer = p.a.outerIndexPtr();
  const int64_t* inner = p.a.innerIndexPtr();
  const T* vals = p.a.valuePtr();
  for (size_t s = 0; s < batch; ++s) {
    const auto j = static_cast<Eigen::Index>(rng.below(rows));
    const T c = weight * lossSlope(p.loss, p.rowDot(j, x.data()), p.b[j]);
    for (int64_t k = outer[j]; k < outer[j + 1]; ++k) out[inner[k]] += c * vals[k];
  }
}

template <typename T>
double LocalObjective<T>::value(std::span<const T> x) const {
  const Impl& p = *impl_;
  auto xv = p.mapIn(x);
  const typename Impl::Vec z = p.a * xv;
  T sum = 0;
  for (Eigen::Index j = 0; j < z.size(); ++j) sum += lossOf(p.loss, z[j], p.b[j]);
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
  assert(j < samples() && static_cast<Eigen::Index>(x.size()) == p.a.cols());
  const auto row = static_cast<Eigen::Index>(j);
  return lossSlope(p.loss, p.rowDot(row, x.data()), p.b[row]);
}

template <typename T>
void LocalObjective<T>::addSample(size_t j, T coefficient, std::span<T> out) const {
  const Impl& p = *impl_;
  assert(j < samples() && static_cast<Eigen::Index>(out.size()) == p.a.cols());
  const int64_t* outer = p.a.outerIndexPtr();
  const int64_t* inner = p.a.innerIndexPtr();
  const T* vals = p.a.valuePtr();
  for (int64_t k = outer[j]; k < outer[j + 1]; ++k) out[inner[k]] += coefficient * vals[k];
}

template <typename T>
typename LocalObjective<T>::SampleRow LocalObjective<T>::row(size_t j) const {
  const Impl& p = *impl_;
  assert(j < samples());
  const int64_t begin = p.a.outerIndexPtr()[j];
  const auto count = static_cast<size_t>(p.a.outerIndexPtr()[j + 1] - begin);
  return {std::span<const int64_t>(p.a.innerIndexPtr() + begin, count),
          std::span<const T>(p.a.valuePtr() + begin, count)};
}

template class LocalObjective<float>;
template class LocalObjective<double>;

// GlobalObjective walks the CSR arrays by hand: it is the reference the Eigen paths are checked
// against, so it shares no code with them beyond the scalar loss functions.
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
