#include "optim/choco.h"

#include <cassert>
#include <map>
#include <vector>

#include "optim/elementwise.h"

namespace starling::optim {
namespace {

// Static W: the memory-efficient form with s = sum_j w_ij x_hat_j kept as a running sum.
template <typename T>
class Choco final : public Algorithm<T>, public CombinedAbsorption<T> {
 public:
  Choco(double gamma, std::span<const T> x0, GradientOracle<T>& oracle)
      : gamma_(static_cast<T>(gamma)), x_(x0.begin(), x0.end()), hat_(x0.size(), T(0)),
        s_(x0.size(), T(0)), grad_(x0.size()), oracle_(oracle) {}

  size_t messageSize() const override { return x_.size(); }

  void prepare(const RoundInfo& info, std::span<T> out) override {
    oracle_.gradient(x_, grad_);
    const T eta = static_cast<T>(info.stepSize);
    for (size_t k = 0; k < x_.size(); ++k) {
      const T x = elementwise::chocoStep(x_[k], grad_[k], s_[k], hat_[k], eta, gamma_);
      x_[k] = x;
      out[k] = x - hat_[k];
    }
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const T self = static_cast<T>(info.selfWeight);
    for (size_t k = 0; k < x_.size(); ++k)
      elementwise::chocoAbsorbOwn(hat_[k], s_[k], own[k], self);
    for (const auto& n : nbrs) {
      const T w = static_cast<T>(n.weight);
      for (size_t k = 0; k < x_.size(); ++k) {
        s_[k] = elementwise::chocoAbsorbNeighbour(s_[k], w, n.message[k]);
      }
    }
  }

  AlgorithmCapabilities<T> capabilities() override { return {.combined = this}; }
  void absorbCombined(const RoundInfo&, std::span<const T> own,
                      std::span<const T> combined) override {
    for (size_t k = 0; k < x_.size(); ++k) {
      hat_[k] += own[k];
      s_[k] += combined[k];
    }
  }

  std::span<const T> model() const override { return x_; }

  void visitState(core::StateVisitor& v) override {
    v.fixed("x", x_);
    v.fixed("x_hat", hat_);
    v.fixed("s", s_);
  }

 private:
  const T gamma_;
  std::vector<T> x_, hat_, s_, grad_;
  GradientOracle<T>& oracle_;
};

// Time-varying W: every neighbour's x_hat_j is tracked (the engine delivers each of its
// messages, with weight 0 in rounds without the edge), and the gossip step uses this round's W:
//   x <- x - eta g(x);  send q = C(x - x_hat);  x_hat_j <- x_hat_j + q_j for j = i and all j;
//   x <- x + gamma sum_j w_ij(t) (x_hat_j - x_hat_i)
template <typename T>
class TrackingChoco final : public Algorithm<T> {
 public:
  TrackingChoco(double gamma, std::span<const T> x0, GradientOracle<T>& oracle)
      : gamma_(static_cast<T>(gamma)), x_(x0.begin(), x0.end()), hat_(x0.size(), T(0)),
        grad_(x0.size()), oracle_(oracle) {}

  size_t messageSize() const override { return x_.size(); }

  void prepare(const RoundInfo& info, std::span<T> out) override {
    oracle_.gradient(x_, grad_);
    const T eta = static_cast<T>(info.stepSize);
    for (size_t k = 0; k < x_.size(); ++k) {
      x_[k] -= eta * grad_[k];
      out[k] = x_[k] - hat_[k];
    }
  }

  void absorb(const RoundInfo&, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t d = x_.size();
    for (size_t k = 0; k < d; ++k) hat_[k] += own[k];
    for (const auto& n : nbrs) {
      std::vector<T>& h = peers_.try_emplace(n.peer, d, T(0)).first->second;
      for (size_t k = 0; k < d; ++k) h[k] += n.message[k];
    }
    for (const auto& n : nbrs) {
      if (n.weight == 0.0) continue;
      const T w = gamma_ * static_cast<T>(n.weight);
      const std::vector<T>& h = peers_.at(n.peer);
      for (size_t k = 0; k < d; ++k) x_[k] += w * (h[k] - hat_[k]);
    }
  }

  bool tracksNeighbors() const override { return true; }
  std::span<const T> model() const override { return x_; }

  void visitState(core::StateVisitor& v) override {
    v.fixed("x", x_);
    v.fixed("x_hat", hat_);
    v.perPeer("x_hat_peers", peers_);
  }

 private:
  const T gamma_;
  std::vector<T> x_, hat_, grad_;
  std::map<int, std::vector<T>> peers_;  // x_hat_j of every neighbour heard from
  GradientOracle<T>& oracle_;
};

}  // namespace

template <typename T>
std::unique_ptr<Algorithm<T>> createChoco(const AlgorithmSpec& spec, std::span<const T> x0,
                                          GradientOracle<T>& oracle) {
  if (spec.timeVarying) return std::make_unique<TrackingChoco<T>>(spec.gamma, x0, oracle);
  return std::make_unique<Choco<T>>(spec.gamma, x0, oracle);
}

template std::unique_ptr<Algorithm<float>> createChoco<float>(const AlgorithmSpec&,
                                                              std::span<const float>,
                                                              GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createChoco<double>(const AlgorithmSpec&,
                                                                std::span<const double>,
                                                                GradientOracle<double>&);

}  // namespace starling::optim
