#include "optim/adascale_gossip.h"

#include <cassert>
#include <cmath>
#include <limits>
#include <utility>

namespace starling::optim {

template <typename T>
AdaScaleOracle<T>::AdaScaleOracle(GradientOracle<T>& inner, size_t microBatches,
                                  double varianceFactor)
    : inner_(inner), varianceFactor_(varianceFactor), micro_(microBatches),
      loss_(std::numeric_limits<double>::quiet_NaN()) {
  assert(microBatches >= 2);
}

template <typename T>
void AdaScaleOracle<T>::gradient(std::span<const T> x, std::span<T> out) {
  const size_t d = x.size();
  std::vector<std::span<const T>> grads;
  grads.reserve(micro_.size());
  double loss = 0.0;
  for (auto& g : micro_) {
    g.resize(d);
    inner_.gradient(x, g);
    loss += inner_.lastLoss();
    grads.emplace_back(g);
  }
  const double k = static_cast<double>(micro_.size());
  for (size_t j = 0; j < d; ++j) {
    double sum = 0.0;
    for (const auto& g : micro_) sum += static_cast<double>(g[j]);
    out[j] = static_cast<T>(sum / k);
  }
  loss_ = loss / k;
  AdaScaleSample s = adascaleSample<T>(grads);
  s.variance *= varianceFactor_;
  sample_ = s;
}

template class AdaScaleOracle<float>;
template class AdaScaleOracle<double>;

namespace {

template <typename T>
class AdaScaleGossip final : public Algorithm<T> {
 public:
  AdaScaleGossip(const AlgorithmSpec& spec, std::span<const T> x0, GradientOracle<T>& oracle,
                 AdaScale adascale)
      : gamma_(spec.gamma), schedule_(spec.stepSize), x_(x0.begin(), x0.end()), grad_(x0.size()),
        oracle_(oracle), ada_(std::move(adascale)) {}

  size_t messageSize() const override { return x_.size() + 2; }

  void prepare(const RoundInfo&, std::span<T> out) override {
    const size_t d = x_.size();
    oracle_.gradient(x_, grad_);
    const AdaScaleSample s = oracle_.lastAdaScaleSample().value_or(AdaScaleSample{});
    if (!started_) {
      estimate_ = s;
      started_ = true;
    } else {
      estimate_.variance = mixed_.variance + s.variance - previous_.variance;
      estimate_.squaredMean = mixed_.squaredMean + s.squaredMean - previous_.squaredMean;
    }
    previous_ = s;
    const AdaScale::Step step = ada_.step(estimate_, schedule_);
    const T eta = static_cast<T>(step.stepSize);
    for (size_t k = 0; k < d; ++k) out[k] = x_[k] - eta * grad_[k];
    out[d] = static_cast<T>(estimate_.variance);
    out[d + 1] = static_cast<T>(estimate_.squaredMean);
  }

  void absorb(const RoundInfo&, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t d = x_.size();
    // x = psi_i + gamma sum_j w_ij (psi_j - psi_i), neighbour by neighbour in peer order.
    for (size_t k = 0; k < d; ++k) x_[k] = own[k];
    for (const auto& n : nbrs) {
      const T w = static_cast<T>(gamma_ * n.weight);
      for (size_t k = 0; k < d; ++k) x_[k] += w * (n.message[k] - own[k]);
    }
    // The same mixing on the estimate, in double from this node's exact e_i.
    mixed_ = estimate_;
    for (const auto& n : nbrs) {
      const double w = gamma_ * n.weight;
      mixed_.variance += w * (static_cast<double>(n.message[d]) - estimate_.variance);
      mixed_.squaredMean += w * (static_cast<double>(n.message[d + 1]) - estimate_.squaredMean);
    }
  }

  std::span<const T> model() const override { return x_; }

  void methodMetrics(std::vector<MethodMetric>& out) const override {
    out.push_back({"adascale_gain", ada_.gain()});
    out.push_back({"adascale_tau", ada_.tau()});
  }

  // grad_ is rewritten by every prepare before it is read.
  void visitState(core::StateVisitor& v) override {
    v.fixed("x", x_);
    v.flag("started", started_);
    v.scalar("estimate_variance", estimate_.variance);
    v.scalar("estimate_squared_mean", estimate_.squaredMean);
    v.scalar("previous_variance", previous_.variance);
    v.scalar("previous_squared_mean", previous_.squaredMean);
    v.scalar("mixed_variance", mixed_.variance);
    v.scalar("mixed_squared_mean", mixed_.squaredMean);
    core::StateVisitor::Scope scope(v, "adascale");
    ada_.visitState(v);
  }

 private:
  const double gamma_;
  const StepSizeSchedule schedule_;
  std::vector<T> x_, grad_;
  GradientOracle<T>& oracle_;
  AdaScale ada_;
  bool started_ = false;
  AdaScaleSample estimate_, previous_, mixed_;
};

}  // namespace

template <typename T>
std::unique_ptr<Algorithm<T>> createAdaScaleGossip(const AlgorithmSpec& spec,
                                                   std::span<const T> x0,
                                                   GradientOracle<T>& oracle) {
  assert(spec.adascale.has_value());
  auto ada = AdaScale::create(*spec.adascale);
  assert(ada);  // the scenario parser checked the spec
  return std::make_unique<AdaScaleGossip<T>>(spec, x0, oracle, std::move(*ada));
}

template std::unique_ptr<Algorithm<float>> createAdaScaleGossip<float>(const AlgorithmSpec&,
                                                                       std::span<const float>,
                                                                       GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createAdaScaleGossip<double>(const AlgorithmSpec&,
                                                                         std::span<const double>,
                                                                         GradientOracle<double>&);

}  // namespace starling::optim
