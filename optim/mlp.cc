#include "optim/mlp.h"

#include <Eigen/Core>
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>

namespace starling::optim {
namespace {

// Samples per block when a pass covers the whole shard (full gradients, values, evaluation):
// large enough for efficient matrix products, small enough to keep the activations small.
constexpr size_t kChunk = 256;

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;  // column-major: a sample a column
template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// Where each layer's W and b start in the flat vector.
struct Layout {
  std::vector<int> sizes;
  std::vector<size_t> w, b;
  size_t total = 0;

  explicit Layout(const std::vector<int>& layers) : sizes(layers) {
    for (size_t l = 1; l < layers.size(); ++l) {
      w.push_back(total);
      total += static_cast<size_t>(layers[l]) * static_cast<size_t>(layers[l - 1]);
      b.push_back(total);
      total += static_cast<size_t>(layers[l]);
    }
  }
  size_t layers() const { return w.size(); }
  Eigen::Index in(size_t l) const { return sizes[l]; }
  Eigen::Index out(size_t l) const { return sizes[l + 1]; }
};

template <typename T>
Eigen::Map<const RowMat<T>> weights(const Layout& lay, size_t l, const T* x) {
  return {x + lay.w[l], lay.out(l), lay.in(l)};
}
template <typename T>
Eigen::Map<const Vec<T>> bias(const Layout& lay, size_t l, const T* x) {
  return {x + lay.b[l], lay.out(l)};
}

// The inputs of the samples `idx` as columns, pixel / 255.
template <typename T>
void gather(const ImageDataset& data, std::span<const size_t> idx, Mat<T>& xin) {
  xin.resize(data.features, static_cast<Eigen::Index>(idx.size()));
  const T inv = T(1) / T(255);
  for (size_t c = 0; c < idx.size(); ++c) {
    const auto s = data.sample(idx[c]);
    T* col = xin.col(static_cast<Eigen::Index>(c)).data();
    for (size_t k = 0; k < s.size(); ++k) col[k] = static_cast<T>(s[k]) * inv;
  }
}

// Forward pass: acts[0] = inputs, acts[l] = ReLU(z_l) for hidden layers; returns the logits.
template <typename T>
Mat<T> forward(const Layout& lay, const T* x, std::vector<Mat<T>>& acts) {
  const size_t L = lay.layers();
  acts.resize(L);
  for (size_t l = 0; l < L; ++l) {
    Mat<T> z = weights(lay, l, x) * acts[l];
    z.colwise() += bias(lay, l, x);
    if (l + 1 == L) return z;
    acts[l + 1] = z.cwiseMax(T(0));
  }
  return {};
}

// Turns logits into softmax probabilities in place; returns the sum of the columns' losses
// logsumexp(z) - z[y] (in double).
template <typename T>
double softmaxInPlace(Mat<T>& z, std::span<const uint8_t> labels) {
  double loss = 0;
  for (Eigen::Index c = 0; c < z.cols(); ++c) {
    auto col = z.col(c);
    const T top = col.maxCoeff();
    const T zy = col[labels[static_cast<size_t>(c)]];
    col.array() = (col.array() - top).exp();
    const T sum = col.sum();
    loss += static_cast<double>(std::log(sum) + top - zy);
    col /= sum;
  }
  return loss;
}

// The codistillation term of a batch: the teachers' models and the term's spec.
template <typename T>
struct Distillation {
  std::span<const std::span<const T>> teachers;
  const CodistillationSpec* spec = nullptr;
};

// out += c * grad (sum of the batch's losses) by backpropagation; returns the summed loss. With
// teachers, the output delta gets c * alpha (p - qbar) too (docs/algorithms.md §25).
template <typename T>
double backprop(const Layout& lay, const T* x, T* out, const ImageDataset& data,
                std::span<const size_t> idx, T c, std::vector<Mat<T>>& acts,
                const Distillation<T>& distill = {}) {
  acts.resize(lay.layers());
  gather(data, idx, acts[0]);
  Mat<T> dz = forward(lay, x, acts);
  Mat<T> extra;  // alpha (p - qbar) / B, sample-major like the logits
  if (!distill.teachers.empty()) {
    std::vector<Mat<T>> teacherActs(lay.layers());
    std::vector<Mat<T>> teacherLogits;
    std::vector<std::span<const T>> views;
    teacherLogits.reserve(distill.teachers.size());
    for (const auto& t : distill.teachers) {
      teacherActs[0] = acts[0];
      teacherLogits.push_back(forward(lay, t.data(), teacherActs));
      views.emplace_back(teacherLogits.back().data(), static_cast<size_t>(dz.size()));
    }
    extra = Mat<T>::Zero(dz.rows(), dz.cols());
    const auto n = static_cast<size_t>(dz.size());
    codistillationLossAveraged<T>(*distill.spec, static_cast<size_t>(dz.rows()),
                                  std::span<const T>(dz.data(), n), views,
                                  std::span<T>(extra.data(), n));
  }
  std::vector<uint8_t> labels(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) labels[k] = data.labels[idx[k]];
  const double loss = softmaxInPlace(dz, labels);
  for (size_t k = 0; k < idx.size(); ++k) dz(labels[k], static_cast<Eigen::Index>(k)) -= T(1);
  if (extra.size() != 0) dz += static_cast<T>(idx.size()) * extra;
  dz *= c;
  for (size_t l = lay.layers(); l-- > 0;) {
    Eigen::Map<RowMat<T>> gw(out + lay.w[l], lay.out(l), lay.in(l));
    Eigen::Map<Vec<T>> gb(out + lay.b[l], lay.out(l));
    gw.noalias() += dz * acts[l].transpose();
    gb += dz.rowwise().sum();
    if (l == 0) break;
    Mat<T> da = weights(lay, l, x).transpose() * dz;
    dz = da.cwiseProduct((acts[l].array() > T(0)).template cast<T>().matrix());
  }
  return loss;
}

}  // namespace

core::Status checkMlpLayers(const std::vector<int>& layers) {
  if (layers.size() < 2 || layers.size() > static_cast<size_t>(kMaxMlpLayers) + 1) {
    return core::invalidArgument("expected 2 to " + std::to_string(kMaxMlpLayers + 1) +
                                 " layer sizes (inputs first, classes last), got " +
                                 std::to_string(layers.size()));
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l] < 1 || layers[l] > kMaxMlpWidth) {
      return core::invalidArgument("layer " + std::to_string(l) + ": expected a size in [1, " +
                                   std::to_string(kMaxMlpWidth) + "], got " +
                                   std::to_string(layers[l]));
    }
  }
  if (layers.back() < 2) {
    return core::invalidArgument("the last layer is the number of classes and must be >= 2");
  }
  if (mlpParameterCount(layers) > kMaxMlpParameters) {
    return core::invalidArgument("the network has " + std::to_string(mlpParameterCount(layers)) +
                                 " parameters, more than the limit of 2^28");
  }
  return core::Status::ok();
}

uint64_t mlpParameterCount(const std::vector<int>& layers) {
  uint64_t total = 0;
  for (size_t l = 1; l < layers.size(); ++l) {
    total += static_cast<uint64_t>(layers[l]) * (static_cast<uint64_t>(layers[l - 1]) + 1);
  }
  return total;
}

std::vector<double> mlpInitialModel(const std::vector<int>& layers, uint64_t seed) {
  const Layout lay(layers);
  std::vector<double> x(lay.total, 0.0);
  core::Rng rng(seed);
  for (size_t l = 0; l < lay.layers(); ++l) {
    const double sd = std::sqrt(2.0 / static_cast<double>(lay.in(l)));
    const size_t count = static_cast<size_t>(lay.out(l) * lay.in(l));
    for (size_t k = 0; k < count; ++k) x[lay.w[l] + k] = sd * rng.normal();
  }
  return x;
}

template <typename T>
struct MlpObjective<T>::Impl {
  Layout layout;
  T l2;
  T scale;  // n / m
  ImageDataset data;
};

template <typename T>
std::unique_ptr<MlpObjective<T>> MlpObjective<T>::create(const MlpSpec& spec, ImageDataset shard,
                                                         size_t totalSamples, int nodes) {
  assert(checkMlpLayers(spec.layers).isOk() && totalSamples > 0 && nodes > 0);
  assert(shard.features == spec.layers.front());
  auto impl = std::unique_ptr<Impl>(new Impl{Layout(spec.layers), static_cast<T>(spec.l2),
                                             static_cast<T>(static_cast<double>(nodes) /
                                                            static_cast<double>(totalSamples)),
                                             std::move(shard)});
  return std::unique_ptr<MlpObjective<T>>(new MlpObjective<T>(std::move(impl)));
}

template <typename T>
MlpObjective<T>::MlpObjective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

template <typename T>
MlpObjective<T>::~MlpObjective() = default;

template <typename T>
int MlpObjective<T>::dim() const {
  return static_cast<int>(impl_->layout.total);
}

template <typename T>
size_t MlpObjective<T>::samples() const {
  return impl_->data.samples();
}

template <typename T>
void MlpObjective<T>::gradient(std::span<const T> x, std::span<T> out) const {
  const Impl& p = *impl_;
  assert(x.size() == p.layout.total && out.size() == x.size());
  for (size_t k = 0; k < x.size(); ++k) out[k] = p.l2 * x[k];
  std::vector<Mat<T>> acts;
  std::vector<size_t> idx;
  for (size_t begin = 0; begin < samples(); begin += kChunk) {
    const size_t end = std::min(samples(), begin + kChunk);
    idx.resize(end - begin);
    for (size_t k = 0; k < idx.size(); ++k) idx[k] = begin + k;
    backprop<T>(p.layout, x.data(), out.data(), p.data, idx, p.scale, acts);
  }
}

template <typename T>
void MlpObjective<T>::stochasticGradient(std::span<const T> x, std::span<T> out, size_t batch,
                                         core::Rng& rng) const {
  stochasticGradientWithLoss(x, out, batch, rng);
}

template <typename T>
double MlpObjective<T>::stochasticGradientWithLoss(std::span<const T> x, std::span<T> out,
                                                   size_t batch, core::Rng& rng) const {
  const Impl& p = *impl_;
  assert(batch > 0 && x.size() == p.layout.total && out.size() == x.size());
  for (size_t k = 0; k < x.size(); ++k) out[k] = p.l2 * x[k];
  const uint64_t rows = samples();
  if (rows == 0) return std::numeric_limits<double>::quiet_NaN();
  std::vector<size_t> idx(batch);
  for (size_t& j : idx) j = static_cast<size_t>(rng.below(rows));
  // scale * m_i / batch makes the mean over draws equal the full local sum's gradient.
  const T weight = p.scale * static_cast<T>(static_cast<double>(rows) / static_cast<double>(batch));
  std::vector<Mat<T>> acts;
  return backprop<T>(p.layout, x.data(), out.data(), p.data, idx, weight, acts) /
         static_cast<double>(batch);
}

template <typename T>
void MlpObjective<T>::stochasticGradientWithDistillation(
    std::span<const T> x, std::span<const std::span<const T>> teachers,
    const CodistillationSpec& spec, std::span<T> out, size_t batch, core::Rng& rng) const {
  const Impl& p = *impl_;
  assert(batch > 0 && x.size() == p.layout.total && out.size() == x.size());
  for ([[maybe_unused]] const auto& t : teachers) assert(t.size() == p.layout.total);
  for (size_t k = 0; k < x.size(); ++k) out[k] = p.l2 * x[k];
  const uint64_t rows = samples();
  if (rows == 0) return;
  std::vector<size_t> idx(batch);
  for (size_t& j : idx) j = static_cast<size_t>(rng.below(rows));
  const T weight = p.scale * static_cast<T>(static_cast<double>(rows) / static_cast<double>(batch));
  std::vector<Mat<T>> acts;
  backprop<T>(p.layout, x.data(), out.data(), p.data, idx, weight, acts,
              Distillation<T>{teachers, &spec});
}

template <typename T>
double MlpObjective<T>::value(std::span<const T> x) const {
  const Impl& p = *impl_;
  assert(x.size() == p.layout.total);
  std::vector<Mat<T>> acts(p.layout.layers());
  std::vector<size_t> idx;
  std::vector<uint8_t> labels;
  double loss = 0;
  for (size_t begin = 0; begin < samples(); begin += kChunk) {
    const size_t end = std::min(samples(), begin + kChunk);
    idx.resize(end - begin);
    labels.resize(end - begin);
    for (size_t k = 0; k < idx.size(); ++k) {
      idx[k] = begin + k;
      labels[k] = p.data.labels[begin + k];
    }
    gather(p.data, idx, acts[0]);
    Mat<T> z = forward(p.layout, x.data(), acts);
    loss += softmaxInPlace(z, labels);
  }
  double sq = 0;
  for (T v : x) sq += static_cast<double>(v) * static_cast<double>(v);
  return static_cast<double>(p.scale) * loss + 0.5 * static_cast<double>(p.l2) * sq;
}

template class MlpObjective<float>;
template class MlpObjective<double>;

MlpEvaluation evaluateMlp(const std::vector<int>& layers, std::span<const double> x,
                          const ImageDataset& data) {
  const Layout lay(layers);
  assert(x.size() == lay.total && data.features == layers.front());
  MlpEvaluation ev;
  if (data.samples() == 0) return ev;
  std::vector<float> xf(x.begin(), x.end());
  std::vector<Mat<float>> acts(lay.layers());
  std::vector<size_t> idx;
  std::vector<uint8_t> labels;
  double loss = 0;
  size_t correct = 0;
  for (size_t begin = 0; begin < data.samples(); begin += kChunk) {
    const size_t end = std::min(data.samples(), begin + kChunk);
    idx.resize(end - begin);
    labels.resize(end - begin);
    for (size_t k = 0; k < idx.size(); ++k) {
      idx[k] = begin + k;
      labels[k] = data.labels[begin + k];
    }
    gather(data, idx, acts[0]);
    Mat<float> z = forward(lay, xf.data(), acts);
    for (Eigen::Index c = 0; c < z.cols(); ++c) {
      Eigen::Index best = 0;
      z.col(c).maxCoeff(&best);
      if (best == labels[static_cast<size_t>(c)]) ++correct;
    }
    loss += softmaxInPlace(z, labels);
  }
  const auto m = static_cast<double>(data.samples());
  ev.loss = loss / m;
  ev.accuracy = static_cast<double>(correct) / m;
  return ev;
}

}  // namespace starling::optim
