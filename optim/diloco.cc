// DiLoCo-class training over gossip (docs/algorithms.md §29; the equations are in diloco.h).
#include "optim/diloco.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "optim/combine.h"

namespace starling::optim {

const char* dilocoOuterName(DilocoSpec::Outer outer) {
  switch (outer) {
    case DilocoSpec::Outer::kSgd: return "sgd";
    case DilocoSpec::Outer::kNesterov: return "nesterov";
    case DilocoSpec::Outer::kExactDiffusion: return "exact_diffusion";
    case DilocoSpec::Outer::kNoloco: return "noloco";
  }
  return "unknown";
}

namespace {

template <typename T>
class Diloco final : public Algorithm<T> {
 public:
  Diloco(const DilocoSpec& spec, std::span<const T> x0, GradientOracle<T>& oracle)
      : spec_(spec), theta_(x0.begin(), x0.end()), x_(x0.size()), mixed_(x0.size()),
        grad_(x0.size()), oracle_(oracle) {
    if (spec_.outer == DilocoSpec::Outer::kNesterov || noloco()) {
      momentum_.assign(x0.size(), T(0));
    }
    if (noloco()) mixed_.resize(2 * x0.size());
    if (spec_.outer == DilocoSpec::Outer::kExactDiffusion) dual_.assign(x0.size(), T(0));
    if (spec_.compressedDifferences) {
      // Every node must agree on every reference point without an exchange: x0 where all start
      // from it (sharedStart), 0 otherwise (the first message is then the whole local model).
      if (spec_.sharedStart) {
        reference_.assign(x0.begin(), x0.end());
        referenceMix_.assign(x0.begin(), x0.end());
      } else {
        reference_.assign(x0.size(), T(0));
        referenceMix_.assign(x0.size(), T(0));
      }
    }
  }

  // noloco sends [theta_i, x_i]; the others x_i (or its compressed difference).
  size_t messageSize() const override { return (noloco() ? 2 : 1) * theta_.size(); }

  // The H inner steps from theta, and the local model they reach as the message.
  void prepare(const RoundInfo& info, std::span<T> out) override {
    const T alpha = static_cast<T>(info.stepSize);
    const size_t d = theta_.size();
    std::copy(theta_.begin(), theta_.end(), x_.begin());
    for (uint64_t h = 0; h < spec_.innerSteps; ++h) {
      oracle_.gradient(x_, grad_);
      T* x = x_.data();
      const T* g = grad_.data();
      if (dual_.empty()) {
        // The same arithmetic as DSGD's psi = x - alpha g (optim/algorithms.cc).
        for (size_t k = 0; k < d; ++k) x[k] = x[k] - alpha * g[k];
      } else {
        const T* y = dual_.data();
        for (size_t k = 0; k < d; ++k) x[k] = x[k] - alpha * (g[k] + y[k]);
      }
    }
    double sq = 0;
    for (size_t k = 0; k < d; ++k) {
      const double delta = static_cast<double>(theta_[k]) - static_cast<double>(x_[k]);
      sq += delta * delta;
    }
    pseudoGradientNorm_ = std::sqrt(sq);
    if (spec_.compressedDifferences) {
      for (size_t k = 0; k < d; ++k) out[k] = x_[k] - reference_[k];
    } else if (noloco()) {
      std::copy(theta_.begin(), theta_.end(), out.begin());
      std::copy(x_.begin(), x_.end(), out.begin() + static_cast<std::ptrdiff_t>(d));
    } else {
      std::copy(x_.begin(), x_.end(), out.begin());
    }
    lossless_ = out.data();
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t d = theta_.size();
    // xbar = x + sum_j w_ij (m_j - m_i), in DSGD's difference form; under a lossy codec the sum
    // starts from the exact local model (m_i is then the decoded frame the neighbours see).
    const T* xbar = mixed_.data();
    if (spec_.compressedDifferences) {
      // q_j = C(x_j - x-hat_j) as decoded: x-hat_i += q_i, and s_i = sum_j w_ij x-hat_j follows
      // with w_ii q_i + sum_j w_ij q_j (a static W). s_i stands for the mixed local models.
      T* ref = reference_.data();
      T* s = referenceMix_.data();
      const T self = static_cast<T>(info.selfWeight);
      for (size_t k = 0; k < d; ++k) {
        ref[k] += own[k];
        s[k] += self * own[k];
      }
      for (const auto& n : nbrs) {
        const T w = static_cast<T>(n.weight);
        const T* q = n.message.data();
        for (size_t k = 0; k < d; ++k) s[k] += w * q[k];
      }
      xbar = referenceMix_.data();
    } else if (noloco()) {
      // [theta-bar_i, x-bar_i] = sum_j w_ij [theta_j, x_j]; under error feedback the sum starts
      // from the exact [theta_i, x_i].
      if (own.data() != lossless_) {
        std::copy(theta_.begin(), theta_.end(), mixed_.begin());
        std::copy(x_.begin(), x_.end(), mixed_.begin() + static_cast<std::ptrdiff_t>(d));
      }
      const T* start = own.data() == lossless_ ? own.data() : mixed_.data();
      detail::combine<T>(mixed_.data(), nullptr, start, own.data(), nbrs, T(1), 0, 2 * d,
                         nullptr);
    } else {
      const T* start = own.data() == lossless_ ? own.data() : x_.data();
      detail::combine<T>(mixed_.data(), nullptr, start, own.data(), nbrs, T(1), 0, d, nullptr);
    }
    const T lr = static_cast<T>(spec_.outerLr);
    T* theta = theta_.data();
    switch (spec_.outer) {
      case DilocoSpec::Outer::kSgd:
        for (size_t k = 0; k < d; ++k) {
          const T delta = theta[k] - xbar[k];
          theta[k] = xbar[k] + (delta - lr * delta);
        }
        break;
      case DilocoSpec::Outer::kNesterov: {
        const T mu = static_cast<T>(spec_.outerMomentum);
        T* m = momentum_.data();
        for (size_t k = 0; k < d; ++k) {
          const T delta = theta[k] - xbar[k];
          m[k] = mu * m[k] + delta;
          theta[k] = xbar[k] + (delta - lr * (delta + mu * m[k]));
        }
        break;
      }
      case DilocoSpec::Outer::kNoloco: {
        // delta <- mu delta - lr (theta-bar - x-bar) - pull (theta - theta-bar); theta += delta.
        const T mu = static_cast<T>(spec_.outerMomentum);
        const T pull = static_cast<T>(spec_.pull);
        const T* thetaBar = mixed_.data();
        const T* xBar = mixed_.data() + d;
        T* m = momentum_.data();
        for (size_t k = 0; k < d; ++k) {
          m[k] = mu * m[k] - lr * (thetaBar[k] - xBar[k]) - pull * (theta[k] - thetaBar[k]);
          theta[k] += m[k];
        }
        break;
      }
      case DilocoSpec::Outer::kExactDiffusion: {
        // Half of (x - xbar) per round, as exact diffusion's (I + W) / 2 (docs/algorithms.md §29).
        const T scale = T(1) / (T(2) * static_cast<T>(info.stepSize) *
                                static_cast<T>(spec_.innerSteps));
        // With compressed differences the reference points stand for the local models, so that
        // sum_i (x-hat_i - s_i) = 0 keeps sum_i y_i = 0 exactly as the messages are decoded.
        T* y = dual_.data();
        const T* x = spec_.compressedDifferences ? reference_.data() : x_.data();
        for (size_t k = 0; k < d; ++k) {
          y[k] += scale * (x[k] - xbar[k]);
          const T delta = theta[k] - xbar[k];
          theta[k] = xbar[k] + (delta - lr * delta);
        }
        break;
      }
    }
    // Counted from the engine's round, so a membership change (which starts the algorithm
    // afresh from its model) keeps the counts.
    outerRounds_ = info.round + 1;
    innerSteps_ = outerRounds_ * spec_.innerSteps;
  }

  std::span<const T> model() const override { return theta_; }

  // x_, mixed_ and grad_ are rewritten every round before they are read.
  void visitState(core::StateVisitor& v) override {
    v.fixed("theta", theta_);
    if (!momentum_.empty()) v.fixed("outer_momentum", momentum_);
    if (!dual_.empty()) v.fixed("dual", dual_);
    if (!reference_.empty()) {
      v.fixed("reference", reference_);
      v.fixed("reference_mix", referenceMix_);
    }
    v.scalar("outer_rounds", outerRounds_);
    v.scalar("inner_steps", innerSteps_);
  }

  bool noloco() const { return spec_.outer == DilocoSpec::Outer::kNoloco; }

  void methodMetrics(std::vector<MethodMetric>& out) const override {
    out.push_back({"outer_round", static_cast<double>(outerRounds_)});
    out.push_back({"inner_steps", static_cast<double>(innerSteps_)});
    out.push_back({"pseudo_gradient_norm", pseudoGradientNorm_});
  }

 private:
  const DilocoSpec spec_;
  std::vector<T> theta_, x_, mixed_, grad_;
  std::vector<T> momentum_;  // nesterov
  std::vector<T> dual_;      // exact_diffusion
  std::vector<T> reference_, referenceMix_;  // compressedDifferences: x-hat_i, sum_j w_ij x-hat_j
  uint64_t outerRounds_ = 0, innerSteps_ = 0;
  double pseudoGradientNorm_ = 0.0;
  const T* lossless_ = nullptr;
  GradientOracle<T>& oracle_;
};

}  // namespace

template <typename T>
std::unique_ptr<Algorithm<T>> createDiloco(const DilocoSpec& spec, std::span<const T> x0,
                                           GradientOracle<T>& oracle) {
  return std::make_unique<Diloco<T>>(spec, x0, oracle);
}

template std::unique_ptr<Algorithm<float>> createDiloco<float>(const DilocoSpec&,
                                                               std::span<const float>,
                                                               GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createDiloco<double>(const DilocoSpec&,
                                                                 std::span<const double>,
                                                                 GradientOracle<double>&);

}  // namespace starling::optim
