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
    if (spec_.outer == DilocoSpec::Outer::kNesterov) momentum_.assign(x0.size(), T(0));
    if (spec_.outer == DilocoSpec::Outer::kExactDiffusion) dual_.assign(x0.size(), T(0));
  }

  size_t messageSize() const override { return theta_.size(); }

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
    std::copy(x_.begin(), x_.end(), out.begin());
    lossless_ = out.data();
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t d = theta_.size();
    // xbar = x + sum_j w_ij (m_j - m_i), in DSGD's difference form; under a lossy codec the sum
    // starts from the exact local model (m_i is then the decoded frame the neighbours see).
    const T* start = own.data() == lossless_ ? own.data() : x_.data();
    detail::combine<T>(mixed_.data(), nullptr, start, own.data(), nbrs, T(1), 0, d, nullptr);
    const T lr = static_cast<T>(spec_.outerLr);
    const T* xbar = mixed_.data();
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
      case DilocoSpec::Outer::kExactDiffusion: {
        // Half of (x - xbar) per round, as exact diffusion's (I + W) / 2 (docs/algorithms.md §29).
        const T scale = T(1) / (T(2) * static_cast<T>(info.stepSize) *
                                static_cast<T>(spec_.innerSteps));
        T* y = dual_.data();
        const T* x = x_.data();
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
    v.scalar("outer_rounds", outerRounds_);
    v.scalar("inner_steps", innerSteps_);
  }

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
