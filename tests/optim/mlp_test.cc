#include "optim/mlp.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <vector>

#include "optim/oracle.h"
#include "core/rng.h"

namespace starling::optim {
namespace {

ImageDataset randomImages(size_t m, int features, int classes, uint64_t seed) {
  core::Rng rng(seed);
  ImageDataset d;
  d.features = features;
  d.classes = classes;
  for (size_t j = 0; j < m * static_cast<size_t>(features); ++j) {
    d.pixels.push_back(static_cast<uint8_t>(rng.below(256)));
  }
  for (size_t j = 0; j < m; ++j) d.labels.push_back(static_cast<uint8_t>(rng.below(classes)));
  return d;
}

// The network written out with plain loops, independently of mlp.cc: the per-sample loss
// logsumexp(z_L) - z_L[y] at x (flat layout: W row-major then b, layer after layer).
double referenceLoss(const std::vector<int>& layers, const std::vector<double>& x,
                     const ImageDataset& data, size_t j, std::vector<double>* logits = nullptr) {
  std::vector<double> a(data.features);
  for (int k = 0; k < data.features; ++k) a[k] = data.sample(j)[k] / 255.0;
  size_t off = 0;
  for (size_t l = 1; l < layers.size(); ++l) {
    const int in = layers[l - 1], out = layers[l];
    std::vector<double> z(out);
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int i = 0; i < in; ++i) s += x[off + static_cast<size_t>(o) * in + i] * a[i];
      z[o] = s + x[off + static_cast<size_t>(out) * in + o];
    }
    off += static_cast<size_t>(out) * (in + 1);
    if (l + 1 < layers.size()) {
      for (double& v : z) v = std::max(v, 0.0);
    }
    a = z;
  }
  if (logits) *logits = a;
  const double top = *std::max_element(a.begin(), a.end());
  double sum = 0;
  for (double v : a) sum += std::exp(v - top);
  return std::log(sum) + top - a[data.labels[j]];
}

double referenceValue(const std::vector<int>& layers, const std::vector<double>& x,
                      const ImageDataset& data, double scale, double l2) {
  double loss = 0;
  for (size_t j = 0; j < data.samples(); ++j) loss += referenceLoss(layers, x, data, j);
  double sq = 0;
  for (double v : x) sq += v * v;
  return scale * loss + 0.5 * l2 * sq;
}

// Central differences of the reference value.
std::vector<double> finiteDifferences(const std::vector<int>& layers, std::vector<double> x,
                                      const ImageDataset& data, double scale, double l2) {
  const double h = 1e-6;
  std::vector<double> g(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    const double keep = x[k];
    x[k] = keep + h;
    const double up = referenceValue(layers, x, data, scale, l2);
    x[k] = keep - h;
    const double down = referenceValue(layers, x, data, scale, l2);
    x[k] = keep;
    g[k] = (up - down) / (2 * h);
  }
  return g;
}

double maxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t k = 0; k < a.size(); ++k) m = std::max(m, std::abs(a[k] - b[k]));
  return m;
}

TEST_CASE("MLP layout: parameter count, layer checks, He initialisation", "[optim][mlp]") {
  CHECK(mlpParameterCount({784, 256, 10}) == 784u * 256 + 256 + 256 * 10 + 10);
  CHECK(mlpParameterCount({3, 2}) == 8u);
  CHECK(checkMlpLayers({784, 64, 10}).isOk());
  CHECK_FALSE(checkMlpLayers({784}).isOk());
  CHECK_FALSE(checkMlpLayers({784, 0, 10}).isOk());
  CHECK_FALSE(checkMlpLayers({784, 64, 1}).isOk());
  CHECK_FALSE(checkMlpLayers({65536, 65536, 10}).isOk());  // 2^32 parameters

  const std::vector<int> layers{400, 300, 10};
  const auto x = mlpInitialModel(layers, 7);
  REQUIRE(x.size() == mlpParameterCount(layers));
  CHECK(x == mlpInitialModel(layers, 7));
  CHECK(x != mlpInitialModel(layers, 8));
  // W_1 entries have variance 2/400, b_1 is zero, W_2 variance 2/300.
  double sq = 0;
  for (size_t k = 0; k < 120000; ++k) sq += x[k] * x[k];
  CHECK(sq / 120000 == Approx(2.0 / 400).epsilon(0.02));
  for (size_t k = 120000; k < 120300; ++k) CHECK(x[k] == 0.0);
  sq = 0;
  for (size_t k = 120300; k < 123300; ++k) sq += x[k] * x[k];
  CHECK(sq / 3000 == Approx(2.0 / 300).epsilon(0.1));
}

TEST_CASE("MLP value and full gradient match an independent loop implementation and finite "
          "differences",
          "[optim][mlp]") {
  // Deep enough for two ReLU layers; a single-layer net checks softmax cross-entropy alone.
  for (const std::vector<int>& layers :
       {std::vector<int>{6, 5, 4, 3}, std::vector<int>{6, 4}, std::vector<int>{6, 7, 3}}) {
    const ImageDataset data = randomImages(300, 6, layers.back(), 11);  // > one 256-sample chunk
    const double l2 = 0.01;
    const int nodes = 4;
    const size_t total = 1000;
    const double scale = static_cast<double>(nodes) / total;
    const auto f = MlpObjective<double>::create({layers, l2}, data, total, nodes);
    REQUIRE(f->dim() == static_cast<int>(mlpParameterCount(layers)));
    REQUIRE(f->samples() == 300);
    auto x = mlpInitialModel(layers, 3);
    core::Rng rng(5);
    for (double& v : x) v += 0.1 * rng.normal();  // non-zero biases too

    CHECK(f->value(x) == Approx(referenceValue(layers, x, data, scale, l2)).epsilon(1e-12));
    std::vector<double> g(x.size());
    f->gradient(x, g);
    const auto fd = finiteDifferences(layers, x, data, scale, l2);
    double gmax = 0;
    for (double v : fd) gmax = std::max(gmax, std::abs(v));
    INFO("layers " << layers.size() << ", max |grad| " << gmax);
    CHECK(maxAbsDiff(g, fd) < 1e-7 * std::max(1.0, gmax));

    // float32 follows the same math to float rounding.
    const auto ff = MlpObjective<float>::create({layers, l2}, data, total, nodes);
    std::vector<float> xf(x.begin(), x.end()), gf(x.size());
    ff->gradient(xf, gf);
    CHECK(maxAbsDiff(std::vector<double>(gf.begin(), gf.end()), g) < 1e-4 * std::max(1.0, gmax));
    CHECK(ff->value(xf) == Approx(f->value(x)).epsilon(1e-5));
  }
}

TEST_CASE("MLP softmax cross-entropy gradient of a single layer is (p - e_y) a^T in closed form",
          "[optim][mlp]") {
  const std::vector<int> layers{3, 4};
  const ImageDataset data = randomImages(1, 3, 4, 19);
  const auto f = MlpObjective<double>::create({layers, 0.0}, data, 1, 1);
  std::vector<double> x(16);
  core::Rng rng(2);
  for (double& v : x) v = rng.normal();
  std::vector<double> logits;
  referenceLoss(layers, x, data, 0, &logits);
  double sum = 0;
  for (double z : logits) sum += std::exp(z);
  std::vector<double> expect(16);
  for (int o = 0; o < 4; ++o) {
    const double r = std::exp(logits[o]) / sum - (o == data.labels[0] ? 1.0 : 0.0);
    for (int i = 0; i < 3; ++i) expect[o * 3 + i] = r * data.sample(0)[i] / 255.0;
    expect[12 + o] = r;
  }
  std::vector<double> g(16);
  f->gradient(x, g);
  CHECK(maxAbsDiff(g, expect) < 1e-14);
}

TEST_CASE("MLP minibatch gradient is the gradient of the drawn samples, scaled m_i / B",
          "[optim][mlp]") {
  const std::vector<int> layers{5, 6, 3};
  const ImageDataset data = randomImages(40, 5, 3, 23);
  const double l2 = 0.05;
  const size_t total = 160, batch = 7;
  const int nodes = 4;
  const auto f = MlpObjective<double>::create({layers, l2}, data, total, nodes);
  auto x = mlpInitialModel(layers, 1);
  std::vector<double> g(x.size());
  core::Rng rng(99);
  f->stochasticGradient(x, g, batch, rng);

  // The same draws, made here: their gradient through finite differences.
  core::Rng replay(99);
  std::vector<size_t> drawn(batch);
  for (size_t& j : drawn) j = replay.below(data.samples());
  const ImageDataset picked = data.subset(drawn);
  const double scale = static_cast<double>(nodes) / total * data.samples() / batch;
  const auto fd = finiteDifferences(layers, x, picked, scale, l2);
  CHECK(maxAbsDiff(g, fd) < 1e-7);

  // Through the estimator machinery: sgd is unbiased, full equals gradient().
  std::vector<double> full(x.size()), mean(x.size(), 0.0), one(x.size());
  f->gradient(x, full);
  auto sgd = createOracle<double>({EstimatorSpec::Kind::kSgd, 8, 0.0}, *f, 4);
  const int draws = 4000;
  for (int t = 0; t < draws; ++t) {
    sgd->gradient(x, one);
    for (size_t k = 0; k < x.size(); ++k) mean[k] += one[k] / draws;
  }
  double fmax = 0;
  for (double v : full) fmax = std::max(fmax, std::abs(v));
  CHECK(maxAbsDiff(mean, full) < 0.05 * fmax);
  auto exact = createOracle<double>({EstimatorSpec::Kind::kFull, 1, 0.0}, *f, 4);
  exact->gradient(x, one);
  CHECK(one == full);
}

TEST_CASE("evaluateMlp: loss and accuracy against the loop implementation", "[optim][mlp]") {
  const std::vector<int> layers{8, 5, 4};
  const ImageDataset data = randomImages(700, 8, 4, 31);
  auto x = mlpInitialModel(layers, 12);
  const MlpEvaluation ev = evaluateMlp(layers, x, data);
  double loss = 0;
  size_t correct = 0;
  for (size_t j = 0; j < data.samples(); ++j) {
    std::vector<double> z;
    loss += referenceLoss(layers, x, data, j, &z);
    const auto best = std::max_element(z.begin(), z.end()) - z.begin();
    if (best == data.labels[j]) ++correct;
  }
  CHECK(ev.loss == Approx(loss / 700).epsilon(1e-5));
  // Float32 may break a near-tie differently from double: allow one sample.
  CHECK(std::abs(ev.accuracy - static_cast<double>(correct) / 700) <= 1.0 / 700 + 1e-12);
  CHECK(ev.accuracy > 0.0);
  CHECK(ev.accuracy < 1.0);
}

// The codistillation term of one sample against K teachers, from the loop implementation's
// logits: (1/K) sum_t D(z, softmax(z_t)) (docs/algorithms.md §25).
double referenceDistance(const std::vector<double>& z, const std::vector<std::vector<double>>& zt,
                         bool kl) {
  const auto logSoftmax = [](std::vector<double> v) {
    const double top = *std::max_element(v.begin(), v.end());
    double sum = 0;
    for (double a : v) sum += std::exp(a - top);
    for (double& a : v) a -= top + std::log(sum);
    return v;
  };
  const auto logp = logSoftmax(z);
  double total = 0;
  for (const auto& t : zt) {
    const auto logq = logSoftmax(t);
    for (size_t c = 0; c < z.size(); ++c) {
      total += std::exp(logq[c]) * ((kl ? logq[c] : 0.0) - logp[c]);
    }
  }
  return total / static_cast<double>(zt.size());
}

// scale sum_j (loss_j + alpha D_j) + (l2/2)||x||^2 over the samples of `data`.
double referenceDistilledValue(const std::vector<int>& layers, const std::vector<double>& x,
                               const std::vector<std::vector<double>>& teachers,
                               const ImageDataset& data, double scale, double l2, double alpha,
                               bool kl) {
  double total = 0;
  for (size_t j = 0; j < data.samples(); ++j) {
    std::vector<double> z;
    total += referenceLoss(layers, x, data, j, &z);
    std::vector<std::vector<double>> zt(teachers.size());
    for (size_t t = 0; t < teachers.size(); ++t) {
      referenceLoss(layers, teachers[t], data, j, &zt[t]);
    }
    total += alpha * referenceDistance(z, zt, kl);
  }
  double sq = 0;
  for (double v : x) sq += v * v;
  return scale * total + 0.5 * l2 * sq;
}

TEST_CASE("MLP gradient with the codistillation term matches finite differences of the loop "
          "implementation", "[optim][mlp][codistillation]") {
  const std::vector<int> layers{5, 6, 3};
  const ImageDataset data = randomImages(40, 5, 3, 41);
  const double l2 = 0.05, alpha = 0.7;
  const size_t total = 160, batch = 7;
  const int nodes = 4;
  const auto f = MlpObjective<double>::create({layers, l2}, data, total, nodes);
  const auto x = mlpInitialModel(layers, 1);
  // Two neighbours whose models differ from x (other starts): their predictions differ.
  const std::vector<std::vector<double>> teachers{mlpInitialModel(layers, 2),
                                                  mlpInitialModel(layers, 3)};
  const std::vector<std::span<const double>> views(teachers.begin(), teachers.end());
  for (const bool kl : {false, true}) {
    INFO((kl ? "kl" : "cross_entropy"));
    const CodistillationSpec spec{alpha, kl ? CodistillationSpec::Distance::kKl
                                            : CodistillationSpec::Distance::kCrossEntropy};
    std::vector<double> g(x.size());
    core::Rng rng(99);
    f->stochasticGradientWithDistillation(x, views, spec, g, batch, rng);

    core::Rng replay(99);
    std::vector<size_t> drawn(batch);
    for (size_t& j : drawn) j = replay.below(data.samples());
    const ImageDataset picked = data.subset(drawn);
    const double scale = static_cast<double>(nodes) / total * data.samples() / batch;
    const double h = 1e-6;
    std::vector<double> fd(x.size()), xh = x;
    for (size_t k = 0; k < x.size(); ++k) {
      xh[k] = x[k] + h;
      const double up = referenceDistilledValue(layers, xh, teachers, picked, scale, l2, alpha, kl);
      xh[k] = x[k] - h;
      const double down =
          referenceDistilledValue(layers, xh, teachers, picked, scale, l2, alpha, kl);
      xh[k] = x[k];
      fd[k] = (up - down) / (2 * h);
    }
    CHECK(maxAbsDiff(g, fd) < 1e-7);
    // The term changes the gradient: it is not the task's alone.
    std::vector<double> plain(x.size());
    core::Rng again(99);
    f->stochasticGradient(x, plain, batch, again);
    CHECK(maxAbsDiff(g, plain) > 1e-3);
  }
}

TEST_CASE("MLP gradient with codistillation at alpha 0 is the plain minibatch gradient, bit for "
          "bit, from the same stream", "[optim][mlp][codistillation]") {
  const std::vector<int> layers{6, 5, 4};
  const ImageDataset data = randomImages(50, 6, 4, 43);
  const auto f = MlpObjective<float>::create({layers, 0.01}, data, 200, 4);
  const auto x0 = mlpInitialModel(layers, 5);
  const std::vector<float> x(x0.begin(), x0.end());
  const auto t0 = mlpInitialModel(layers, 6);
  const std::vector<float> teacher(t0.begin(), t0.end());
  const std::span<const float> views[1] = {teacher};
  std::vector<float> a(x.size()), b(x.size());
  core::Rng ra(7), rb(7);
  for (int call = 0; call < 3; ++call) {
    f->stochasticGradientWithDistillation(x, views, {0.0, CodistillationSpec::Distance::kKl}, a,
                                          8, ra);
    f->stochasticGradient(x, b, 8, rb);
    CHECK(a == b);
    // No teachers: the plain gradient too.
    f->stochasticGradientWithDistillation(x, {}, {1.0, CodistillationSpec::Distance::kKl}, a, 8,
                                          ra);
    f->stochasticGradient(x, b, 8, rb);
    CHECK(a == b);
  }
  CHECK(ra.below(1000000) == rb.below(1000000));  // both streams drew the same
}

}  // namespace
}  // namespace starling::optim
