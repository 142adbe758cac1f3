// DiLoCo-class training over gossip (docs/algorithms.md §29; the equations are in diloco.h).
#include "optim/diloco.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <utility>
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
class Diloco final : public Algorithm<T>, public ExchangeOverlap, public CarriedState {
 public:
  Diloco(const DilocoSpec& spec, std::span<const T> x0, GradientOracle<T>& oracle)
      : spec_(spec), theta_(x0.begin(), x0.end()), x_(x0.begin(), x0.end()), grad_(x0.size()),
        oracle_(oracle) {
    const size_t d = x0.size();
    const size_t f = std::max<uint64_t>(1, spec_.fragments);
    fragment_ = (d + f - 1) / f;
    mixed_.assign(messageSize(), T(0));
    exact_.assign(messageSize(), T(0));
    if (spec_.outer == DilocoSpec::Outer::kNesterov || noloco()) momentum_.assign(d, T(0));
    if (spec_.outer == DilocoSpec::Outer::kExactDiffusion) dual_.assign(d, T(0));
    if (byTime()) since_.assign(f, 0);
    if (spec_.compressedDifferences) {
      // Every node must agree on every reference point without an exchange: x0 where all start
      // from it (sharedStart), 0 otherwise (the first message is then the whole local model).
      if (spec_.sharedStart) {
        reference_.assign(x0.begin(), x0.end());
        referenceMix_.assign(x0.begin(), x0.end());
      } else {
        reference_.assign(d, T(0));
        referenceMix_.assign(d, T(0));
      }
    }
  }

  // One fragment a round (the whole model without fragments): noloco sends [theta, x] of it, the
  // others x (or its compressed difference), each block padded with zeros to the longest
  // fragment's length; by_time's step-weighted mix sends [h x, h] for x.
  size_t messageSize() const override { return blocks() * fragment_ + (weighted() ? 1 : 0); }

  // The round's inner steps (H / fragments) on the local model, unless they ran during the last
  // exchange (overlap), and the round's fragment of it.
  void prepare(const RoundInfo& info, std::span<T> out) override {
    alpha_ = static_cast<T>(info.stepSize);
    if (!primed_) innerSteps({});
    primed_ = false;
    const auto [lo, n] = fragmentOf(info.round);
    if (spec_.overlap) {
      // The sent local model: the outer step lands on the inner steps taken since (absorb).
      sent_.assign(x_.begin() + static_cast<std::ptrdiff_t>(lo),
                   x_.begin() + static_cast<std::ptrdiff_t>(lo + n));
    }
    double sq = 0;
    for (size_t k = lo; k < lo + n; ++k) {
      const double delta = static_cast<double>(theta_[k]) - static_cast<double>(x_[k]);
      sq += delta * delta;
    }
    pseudoGradientNorm_ = std::sqrt(sq);
    std::fill(out.begin(), out.end(), T(0));
    if (weighted()) {
      // [h x, h] (noloco: [theta, h x, h]), h the inner steps the fragment's local model took
      // since its last exchange: mixed with W, the ratio is the step-weighted average of the
      // local models.
      const T h = static_cast<T>(since_[fragmentIndex(info.round)]);
      const size_t at = noloco() ? fragment_ : 0;
      if (noloco()) std::copy_n(theta_.begin() + static_cast<std::ptrdiff_t>(lo), n, out.begin());
      for (size_t k = 0; k < n; ++k) out[at + k] = h * x_[lo + k];
      out[blocks() * fragment_] = h;
    } else if (spec_.compressedDifferences) {
      for (size_t k = 0; k < n; ++k) out[k] = x_[lo + k] - reference_[lo + k];
    } else if (noloco()) {
      std::copy_n(theta_.begin() + static_cast<std::ptrdiff_t>(lo), n, out.begin());
      std::copy_n(x_.begin() + static_cast<std::ptrdiff_t>(lo), n,
                  out.begin() + static_cast<std::ptrdiff_t>(fragment_));
    } else {
      std::copy_n(x_.begin() + static_cast<std::ptrdiff_t>(lo), n, out.begin());
    }
    if (byTime()) since_[fragmentIndex(info.round)] = 0;
    lossless_ = out.data();
  }

  // The outer momentum (nesterov, noloco) survives a membership change: the survivors keep
  // theirs, a returning peer takes its neighbour's (exact_diffusion's y restarts at zero, which
  // keeps sum_i y_i = 0 over the new membership).
  AlgorithmCapabilities<T> capabilities() override {
    return {.overlap = spec_.overlap ? this : nullptr,
            .carry = momentum_.empty() ? nullptr : this};
  }
  std::vector<double> carried() const override {
    return std::vector<double>(momentum_.begin(), momentum_.end());
  }
  core::Status carry(std::span<const double> values) override {
    if (values.empty()) return core::Status::ok();
    if (values.size() != momentum_.size()) {
      return core::invalidArgument("diloco: an outer momentum of " +
                                   std::to_string(values.size()) + " values for a model of " +
                                   std::to_string(momentum_.size()));
    }
    for (double v : values) {
      if (!std::isfinite(v)) return core::invalidArgument("diloco: a non-finite outer momentum");
    }
    std::copy(values.begin(), values.end(), momentum_.begin());
    return core::Status::ok();
  }
  // With "overlap", the next round's inner steps, while this round's messages travel.
  void computeDuringExchange(const std::function<void()>& poll) override {
    innerSteps(poll);
    primed_ = true;
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const auto [lo, n] = fragmentOf(info.round);
    // The local model as it was sent (overlap: x_ has moved on since).
    const T* sentX = spec_.overlap ? sent_.data() : x_.data() + lo;
    // xbar = x + sum_j w_ij (m_j - m_i), in DSGD's difference form; under a lossy codec the sum
    // starts from the exact local model (m_i is then the decoded frame the neighbours see).
    // Indexed from the fragment's start: xbar[k] is element lo + k.
    const T* xbar = mixed_.data();
    if (spec_.compressedDifferences) {
      // q_j = C(x_j - x-hat_j) as decoded: x-hat_i += q_i, and s_i = sum_j w_ij x-hat_j follows
      // with w_ii q_i + sum_j w_ij q_j (a static W). s_i stands for the mixed local models.
      T* ref = reference_.data() + lo;
      T* s = referenceMix_.data() + lo;
      const T self = static_cast<T>(info.selfWeight);
      for (size_t k = 0; k < n; ++k) {
        ref[k] += own[k];
        s[k] += self * own[k];
      }
      for (const auto& nb : nbrs) {
        const T w = static_cast<T>(nb.weight);
        const T* q = nb.message.data();
        for (size_t k = 0; k < n; ++k) s[k] += w * q[k];
      }
      xbar = referenceMix_.data() + lo;
    } else {
      // [theta-bar, x-bar] (noloco) or x-bar over the message; under error feedback the sum
      // starts from the exact values, laid out as the message.
      const T* start = own.data();
      if (own.data() != lossless_) {
        if (noloco()) {
          std::copy_n(theta_.begin() + static_cast<std::ptrdiff_t>(lo), n, exact_.begin());
        }
        std::copy_n(sentX, n, exact_.begin() + static_cast<std::ptrdiff_t>(noloco() ? fragment_ : 0));
        start = exact_.data();
      }
      detail::combine<T>(mixed_.data(), nullptr, start, own.data(), nbrs, T(1), 0,
                         mixed_.size(), nullptr);
      if (weighted()) {
        // x-bar = sum_j w_ij h_j x_j / sum_j w_ij h_j (DyLU-style step weighting).
        const T total = mixed_[blocks() * fragment_];
        T* x = mixed_.data() + (noloco() ? fragment_ : 0);
        for (size_t k = 0; k < n; ++k) x[k] /= total;
      }
    }
    const T lr = static_cast<T>(spec_.outerLr);
    T* theta = theta_.data() + lo;
    switch (spec_.outer) {
      case DilocoSpec::Outer::kSgd:
        for (size_t k = 0; k < n; ++k) {
          const T delta = theta[k] - xbar[k];
          theta[k] = xbar[k] + (delta - lr * delta);
        }
        break;
      case DilocoSpec::Outer::kNesterov: {
        const T mu = static_cast<T>(spec_.outerMomentum);
        T* m = momentum_.data() + lo;
        for (size_t k = 0; k < n; ++k) {
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
        const T* xBar = mixed_.data() + fragment_;
        T* m = momentum_.data() + lo;
        for (size_t k = 0; k < n; ++k) {
          m[k] = mu * m[k] - lr * (thetaBar[k] - xBar[k]) - pull * (theta[k] - thetaBar[k]);
          theta[k] += m[k];
        }
        break;
      }
      case DilocoSpec::Outer::kExactDiffusion: {
        // Half of (x - xbar) per round, as exact diffusion's (I + W) / 2 (docs/algorithms.md §29),
        // over the inner steps the fragment's local model took since its last exchange (H).
        const T scale = T(1) / (T(2) * static_cast<T>(info.stepSize) *
                                static_cast<T>(spec_.innerSteps));
        // With compressed differences the reference points stand for the local models, so that
        // sum_i (x-hat_i - s_i) = 0 keeps sum_i y_i = 0 exactly as the messages are decoded.
        T* y = dual_.data() + lo;
        const T* x = spec_.compressedDifferences ? reference_.data() + lo : sentX;
        for (size_t k = 0; k < n; ++k) {
          y[k] += scale * (x[k] - xbar[k]);
          const T delta = theta[k] - xbar[k];
          theta[k] = xbar[k] + (delta - lr * delta);
        }
        break;
      }
    }
    // The fragment's local model starts again from its new outer model, plus (overlap) the inner
    // steps it took while the messages travelled.
    if (spec_.overlap) {
      T* x = x_.data() + lo;
      for (size_t k = 0; k < n; ++k) x[k] = theta[k] + (x[k] - sentX[k]);
    } else {
      std::copy_n(theta, n, x_.begin() + static_cast<std::ptrdiff_t>(lo));
    }
    // Counted from the engine's round, so a membership change (which starts the algorithm
    // afresh from its model) keeps the counts.
    outerRounds_ = info.round + 1;
    innerSteps_ = byTime() ? innerSteps_ : outerRounds_ * stepsPerRound();
  }

  std::span<const T> model() const override { return theta_; }

  // mixed_, exact_ and grad_ are rewritten every round before they are read; x_ equals theta_
  // between rounds unless the model is in fragments.
  void visitState(core::StateVisitor& v) override {
    v.fixed("theta", theta_);
    if (spec_.fragments > 1 || spec_.overlap) v.fixed("local", x_);
    if (spec_.overlap) v.flag("primed", primed_);
    if (!momentum_.empty()) v.fixed("outer_momentum", momentum_);
    if (!dual_.empty()) v.fixed("dual", dual_);
    if (!reference_.empty()) {
      v.fixed("reference", reference_);
      v.fixed("reference_mix", referenceMix_);
    }
    if (byTime() && (spec_.fragments > 1 || spec_.overlap)) v.sized("steps_since_exchange", since_);
    v.scalar("outer_rounds", outerRounds_);
    v.scalar("inner_steps", innerSteps_);
    if (v.loading() && spec_.fragments <= 1 && !spec_.overlap) x_ = theta_;
  }

  void methodMetrics(std::vector<MethodMetric>& out) const override {
    out.push_back({"outer_round", static_cast<double>(outerRounds_)});
    out.push_back({"inner_steps", static_cast<double>(innerSteps_)});
    out.push_back({"pseudo_gradient_norm", pseudoGradientNorm_});
  }

 private:
  // One round's inner steps on the local model (H / fragments), moving the transport between
  // them (overlap).
  void innerSteps(const std::function<void()>& poll) {
    const size_t d = theta_.size();
    const T alpha = alpha_;
    // by_time: until the round's time is up (seconds / fragments: each fragment's local model
    // computes `seconds` between its exchanges; at least one step, at most max_steps /
    // fragments), or the node's emulated count.
    const auto begin = std::chrono::steady_clock::now();
    const auto budget = std::chrono::duration<double>(
        spec_.seconds / static_cast<double>(std::max<uint64_t>(1, spec_.fragments)));
    const uint64_t limit = byTime() && spec_.emulatedSteps > 0 ? spec_.emulatedSteps
                                                               : stepsPerRound();
    uint64_t h = 0;
    for (; h < limit; ++h) {
      if (byTime() && spec_.emulatedSteps == 0 && h > 0 &&
          std::chrono::steady_clock::now() - begin >= budget) {
        break;
      }
      if (poll) poll();
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
    if (byTime()) {
      innerSteps_ += h;
      for (uint64_t& since : since_) since += h;
    }
    if (poll) poll();
  }

  bool byTime() const { return spec_.seconds > 0; }
  // by_time weights each local model by its inner steps, except under exact_diffusion: its
  // correction keeps sum_i y_i = 0 only through a symmetric W, and its fixed point (every node at
  // the optimum) does not depend on how many steps each node takes (docs/algorithms.md §29).
  bool weighted() const {
    return byTime() && spec_.outer != DilocoSpec::Outer::kExactDiffusion;
  }

  bool noloco() const { return spec_.outer == DilocoSpec::Outer::kNoloco; }
  size_t blocks() const { return noloco() ? 2 : 1; }
  uint64_t stepsPerRound() const {
    return spec_.innerSteps / std::max<uint64_t>(1, spec_.fragments);
  }
  // The round's fragment: its first element and its length (Streaming DiLoCo's schedule, one
  // fragment after the other).
  size_t fragmentIndex(uint64_t round) const {
    return static_cast<size_t>(round % std::max<uint64_t>(1, spec_.fragments));
  }
  std::pair<size_t, size_t> fragmentOf(uint64_t round) const {
    const size_t f = fragmentIndex(round);
    const size_t lo = std::min(theta_.size(), f * fragment_);
    return {lo, std::min(theta_.size(), lo + fragment_) - lo};
  }

  const DilocoSpec spec_;
  std::vector<T> theta_, x_, grad_;
  size_t fragment_ = 0;     // elements per fragment (the last may be shorter)
  std::vector<T> mixed_;    // the round's mixed message
  std::vector<T> exact_;    // the exact message, under error feedback
  std::vector<T> momentum_;  // nesterov, noloco
  std::vector<T> dual_;      // exact_diffusion
  std::vector<T> reference_, referenceMix_;  // compressedDifferences: x-hat_i, sum_j w_ij x-hat_j
  uint64_t outerRounds_ = 0, innerSteps_ = 0;
  double pseudoGradientNorm_ = 0.0;
  const T* lossless_ = nullptr;
  T alpha_ = T(0);        // the round's inner step size
  bool primed_ = false;   // overlap: x_ already holds the next round's inner steps
  // by_time: the inner steps each fragment's local model took since its last exchange
  std::vector<uint64_t> since_;
  std::vector<T> sent_;   // overlap: the round's fragment of the local model as it was sent
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
