#include "optim/sketch_gossip.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "compression/sketch_hash.h"

namespace starling::optim {

uint64_t sketchKept(const SketchGossipSpec& spec, uint64_t d) {
  if (d == 0) return 0;
  uint64_t k = spec.k;
  if (k == 0) {
    const double want = std::ceil(spec.ratio * static_cast<double>(d));
    k = want >= static_cast<double>(d) ? d : static_cast<uint64_t>(want);
  }
  return std::clamp<uint64_t>(k, 1, d);
}

std::optional<SketchMisfit> sketchMisfit(const SketchGossipSpec& spec, uint64_t d) {
  if (d >= (uint64_t{1} << 32)) {
    return SketchMisfit{"", "the sketch indexes coordinates with 32 bits; the model has " +
                                std::to_string(d) + " values"};
  }
  if (spec.cols > d) {
    return SketchMisfit{"cols", std::to_string(spec.cols) + " columns for a model of " +
                                    std::to_string(d) +
                                    " values: a sketch larger than the model saves nothing"};
  }
  if (spec.k > d) {
    return SketchMisfit{"k", std::to_string(spec.k) + " is more than the model's " +
                                 std::to_string(d) + " values"};
  }
  return std::nullopt;
}

namespace {

template <typename T>
double squaredNorm(std::span<const T> v) {
  double s = 0;
  for (const T x : v) s += static_cast<double>(x) * static_cast<double>(x);
  return s;
}

template <typename T>
class SketchGossip final : public Algorithm<T>, public CombinedAbsorption<T> {
 public:
  SketchGossip(const AlgorithmSpec& spec, std::span<const T> x0, GradientOracle<T>& oracle)
      : gamma_(static_cast<T>(spec.gamma)), rho_(static_cast<T>(spec.sketch->momentum)),
        hashes_(spec.sketch->seed, spec.sketch->rows, spec.sketch->cols),
        k_(sketchKept(*spec.sketch, x0.size())), x_(x0.begin(), x0.end()), grad_(x0.size()),
        est_(x0.size()), order_(x0.size()), oracle_(oracle) {
    const size_t cells = static_cast<size_t>(hashes_.rows()) * hashes_.cols();
    sx_.assign(cells, T(0));
    su_.assign(cells, T(0));
    se_.assign(cells, T(0));
    sg_.assign(cells, T(0));
    compression::sketchAdd<T>(x_, hashes_, sx_);
  }

  size_t messageSize() const override { return sx_.size(); }

  // The message is S_x; the gradient's sketch goes into the momentum here, before the exchange,
  // as DSGD takes its gradient step before it.
  void prepare(const RoundInfo& info, std::span<T> out) override {
    oracle_.gradient(x_, grad_);
    std::fill(sg_.begin(), sg_.end(), T(0));
    compression::sketchAdd<T>(grad_, hashes_, sg_);
    const T eta = static_cast<T>(info.stepSize);
    for (size_t c = 0; c < su_.size(); ++c) su_[c] = rho_ * su_[c] + eta * sg_[c];
    std::copy(sx_.begin(), sx_.end(), out.begin());
  }

  // S_e += S_u + gamma (own - mix), with own - mix = -sum_j w_ij (m_j - own): the difference form
  // never uses the self weight, so the weights sum to exactly one whatever their rounding.
  void absorb(const RoundInfo&, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    for (size_t c = 0; c < se_.size(); ++c) sg_[c] = T(0);
    for (const auto& n : nbrs) {
      const T w = static_cast<T>(n.weight);
      for (size_t c = 0; c < se_.size(); ++c) sg_[c] += w * (n.message[c] - own[c]);
    }
    for (size_t c = 0; c < se_.size(); ++c) se_[c] += su_[c] - gamma_ * sg_[c];
    apply();
  }

  AlgorithmCapabilities<T> capabilities() override { return {.combined = this}; }
  void absorbCombined(const RoundInfo&, std::span<const T> own,
                      std::span<const T> combined) override {
    for (size_t c = 0; c < se_.size(); ++c) se_[c] += su_[c] + gamma_ * (own[c] - combined[c]);
    apply();
  }

  std::span<const T> model() const override { return x_; }

  void methodMetrics(std::vector<MethodMetric>& out) const override {
    out.push_back({"sketch_update_norm", updateNorm_});
    out.push_back({"sketch_error_left", errorLeft_});
    out.push_back({"sketch_scale", lambda_});
  }

  // grad_, est_, order_ and sg_ are rewritten every round before they are read.
  void visitState(core::StateVisitor& v) override {
    v.fixed("x", x_);
    v.fixed("sketch_x", sx_);
    v.fixed("sketch_momentum", su_);
    v.fixed("sketch_error", se_);
  }

 private:
  // Delta = top-k of U(S_e); S_e -= S(Delta), x -= Delta, S_x -= S(Delta).
  void apply() {
    const double before = squaredNorm<T>(se_);
    compression::sketchEstimate<T>(se_, hashes_, /*mean=*/false, est_);
    const size_t d = x_.size();
    const size_t k = static_cast<size_t>(k_);
    // The k largest |estimate|, ties to the lower index; a NaN counts as the largest (the
    // divergence check then finds the model it leaves).
    const auto key = [this](uint32_t i) {
      const T a = std::abs(est_[i]);
      return std::isnan(a) ? std::numeric_limits<T>::infinity() : a;
    };
    std::iota(order_.begin(), order_.end(), uint32_t{0});
    if (k < d) {
      std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k),
                       order_.end(), [&](uint32_t a, uint32_t b) {
                         const T ka = key(a), kb = key(b);
                         return ka > kb || (ka == kb && a < b);
                       });
      std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k));
    }
    // D = S(top-k of the estimate), in sg_ (free after prepare), and lambda = <S_e, D> / ||D||^2,
    // the least-squares fit of S_e along D: then ||S_e - lambda D|| <= ||S_e||, so a poor
    // estimate (colliding coordinates each read the whole bucket) can never make the error
    // sketch grow (docs/algorithms.md §27).
    const uint32_t cols = hashes_.cols();
    const size_t kept = std::min(k, d);
    std::fill(sg_.begin(), sg_.end(), T(0));
    for (size_t t = 0; t < kept; ++t) {
      const uint32_t i = order_[t];
      for (uint32_t j = 0; j < hashes_.rows(); ++j) {
        const size_t cell = static_cast<size_t>(j) * cols + hashes_.bucket(j, i);
        sg_[cell] += hashes_.negative(j, i) ? -est_[i] : est_[i];
      }
    }
    double sd = 0, dd = 0;
    for (size_t c = 0; c < sg_.size(); ++c) {
      sd += static_cast<double>(se_[c]) * static_cast<double>(sg_[c]);
      dd += static_cast<double>(sg_[c]) * static_cast<double>(sg_[c]);
    }
    const T lambda = dd > 0 ? static_cast<T>(sd / dd) : T(0);
    for (size_t c = 0; c < sg_.size(); ++c) {
      se_[c] -= lambda * sg_[c];
      sx_[c] -= lambda * sg_[c];
    }
    double applied = 0;
    for (size_t t = 0; t < kept; ++t) {
      const uint32_t i = order_[t];
      const T delta = lambda * est_[i];
      applied += static_cast<double>(delta) * static_cast<double>(delta);
      x_[i] -= delta;
    }
    lambda_ = static_cast<double>(lambda);
    updateNorm_ = std::sqrt(applied);
    errorLeft_ = before > 0 ? std::sqrt(squaredNorm<T>(se_) / before) : 0.0;
  }

  const T gamma_;
  const T rho_;
  const compression::SketchHashes hashes_;
  const uint64_t k_;
  std::vector<T> x_, grad_, est_;
  std::vector<uint32_t> order_;
  std::vector<T> sx_, su_, se_, sg_;  // sg_: S(g) in prepare, sum_j w_ij (m_j - own) in absorb
  GradientOracle<T>& oracle_;
  double updateNorm_ = 0.0;
  double errorLeft_ = 0.0;
  double lambda_ = 0.0;
};

}  // namespace

template <typename T>
std::unique_ptr<Algorithm<T>> createSketchGossip(const AlgorithmSpec& spec, std::span<const T> x0,
                                                 GradientOracle<T>& oracle) {
  assert(spec.sketch.has_value());
  assert(spec.sketch->rows >= 1 && spec.sketch->rows <= compression::kSketchMaxRows);
  assert(spec.sketch->cols >= 1);
  assert(x0.size() <= std::numeric_limits<uint32_t>::max());
  return std::make_unique<SketchGossip<T>>(spec, x0, oracle);
}

template std::unique_ptr<Algorithm<float>> createSketchGossip<float>(const AlgorithmSpec&,
                                                                     std::span<const float>,
                                                                     GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createSketchGossip<double>(const AlgorithmSpec&,
                                                                       std::span<const double>,
                                                                       GradientOracle<double>&);

}  // namespace starling::optim
