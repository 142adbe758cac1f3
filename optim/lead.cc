#include "optim/lead.h"

#include <map>
#include <vector>

#include "optim/elementwise.h"

namespace starling::optim {
namespace {

// sum_j w_ij (m_j - own_k) for one coordinate: the neighbours' part of a combine written in
// difference form, so the rounded self weight never enters (see algorithms.cc, combine()).
template <typename T>
T neighbourPull(std::span<const NeighborMessage<T>> nbrs, std::span<const T> own, size_t k) {
  T acc = 0;
  for (const auto& n : nbrs)
    acc = elementwise::pullTerm(acc, static_cast<T>(n.weight), n.message[k], own[k]);
  return acc;
}

using elementwise::addCompensated;  // Kahan summation of the dual variables (elementwise.h)

template <typename T>
class Nids final : public Algorithm<T>, public LocalStart<T> {
 public:
  Nids(const RegularizerSpec& r, std::span<const T> x0, GradientOracle<T>& oracle)
      : r_(r), x_(x0.begin(), x0.end()), xPrev_(x0.size()), z_(x0.size()), g_(x0.size()),
        gPrev_(x0.size()), delta_(x0.size()), zLost_(x0.size(), T(0)), oracle_(oracle) {}

  size_t messageSize() const override { return x_.size(); }

  void prepare(const RoundInfo& info, std::span<T> out) override {
    const size_t d = x_.size();
    const T eta = static_cast<T>(info.stepSize);
    if (!started_) start(info);
    oracle_.gradient(x_, g_);
    // xbar = x + delta with delta = (x - x_prev) - eta (g - g_prev), which vanishes at the fixed
    // point. z is updated with delta, never with xbar - x: the rounding error of a quantity of
    // the size of x, added to z every round, would accumulate in z's conserved sum and move the
    // fixed point by about k eps / (eta mu) (measured: rel_error 5e-12 -> 1.8e-10 over 30,000
    // rounds at eta = 0.05 before this change).
    for (size_t k = 0; k < d; ++k) {
      delta_[k] = (x_[k] - xPrev_[k]) - eta * (g_[k] - gPrev_[k]);
      out[k] = x_[k] + delta_[k];
    }
    gPrev_.swap(g_);
  }

  AlgorithmCapabilities<T> capabilities() override { return {.start = this}; }
  bool needsStart() const override { return !started_; }
  // z^1 = x^0 - eta grad(x^0);  x^1 = prox(z^1).
  void start(const RoundInfo& info) override {
    started_ = true;
    const T eta = static_cast<T>(info.stepSize);
    oracle_.gradient(x_, gPrev_);
    for (size_t k = 0; k < x_.size(); ++k) z_[k] = x_[k] - eta * gPrev_[k];
    xPrev_ = x_;
    proximal<T>(r_, info.stepSize, z_, x_);
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t d = x_.size();
    // z <- z - x + W~ xbar = z + delta + (1/2) sum_j w_ij (xbar_j - xbar_i), with Kahan
    // compensation: near the fixed point the increments fall below half an ulp of z, and
    // dropping them round after round breaks the invariant sum_i (z_i + eta g_i - ...) that pins
    // the fixed point to x* (measured without it: rel_error 2.7e-12 at round 2,000 growing to
    // 9e-11 at round 30,000 for eta = 0.05).
    for (size_t k = 0; k < d; ++k) {
      addCompensated(z_[k], zLost_[k], delta_[k] + T(0.5) * neighbourPull(nbrs, own, k));
    }
    xPrev_ = x_;
    proximal<T>(r_, info.stepSize, z_, x_);
  }

  std::span<const T> model() const override { return x_; }

  // g_ and delta_ are rewritten by every prepare before they are read.
  void visitState(core::StateVisitor& v) override {
    v.flag("started", started_);
    v.fixed("x", x_);
    v.fixed("x_prev", xPrev_);
    v.fixed("z", z_);
    v.fixed("g_prev", gPrev_);
    v.fixed("z_lost", zLost_);
  }

 private:
  const RegularizerSpec r_;
  bool started_ = false;
  std::vector<T> x_, xPrev_, z_, g_, gPrev_, delta_, zLost_;
  GradientOracle<T>& oracle_;
};

template <typename T>
class ProxLead final : public Algorithm<T>, public LocalStart<T>, public CombinedAbsorption<T> {
 public:
  ProxLead(const AlgorithmSpec& spec, std::span<const T> x0, GradientOracle<T>& oracle)
      : r_(spec.regularizer), alpha_(static_cast<T>(spec.alpha)), gamma_(spec.gamma),
        tracking_(spec.timeVarying), x_(x0.begin(), x0.end()), z_(x0.size()),
        d_(x0.size(), T(0)), dLost_(x0.size(), T(0)), h_(x0.size(), T(0)), e_(x0.size(), T(0)),
        g_(x0.size()),
        yhat_(x0.size()), oracle_(oracle) {}

  size_t messageSize() const override { return x_.size(); }

  void prepare(const RoundInfo& info, std::span<T> out) override {
    const size_t dim = x_.size();
    const T eta = static_cast<T>(info.stepSize);
    if (!started_) start(info);
    oracle_.gradient(x_, g_);
    for (size_t k = 0; k < dim; ++k)
      out[k] = elementwise::leadSend(x_[k], z_[k], g_[k], d_[k], h_[k], eta);
  }

  // Static W: needs only own q and w_ii q_i + sum_j w_ij q_j.
  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t dim = x_.size();
    if (!tracking_) {
      // (W q)_i = q_i + sum_j w_ij (q_j - q_i).
      for (size_t k = 0; k < dim; ++k) yhat_[k] = own[k] + neighbourPull(nbrs, own, k);
      finish(info, own, yhat_);
      return;
    }
    // Time-varying W: every neighbour's h_j is tracked; yhat_j = h_j + q_j, and
    // yhat_i - Yhat_w,i = -sum_j w_ij(t) (yhat_j - yhat_i).
    std::vector<T*> h(nbrs.size());
    for (size_t j = 0; j < nbrs.size(); ++j) {
      h[j] = peers_.try_emplace(nbrs[j].peer, dim, T(0)).first->second.data();
    }
    const T a = alpha_;
    const T step = static_cast<T>(gamma_ / (2.0 * info.stepSize));
    for (size_t k = 0; k < dim; ++k) {
      const T yi = h_[k] + own[k];
      T pull = 0;
      for (size_t j = 0; j < nbrs.size(); ++j) {
        pull += static_cast<T>(nbrs[j].weight) * (h[j][k] + nbrs[j].message[k] - yi);
      }
      addCompensated(d_[k], dLost_[k], -step * pull);
      h_[k] += a * own[k];
      for (size_t j = 0; j < nbrs.size(); ++j) h[j][k] += a * nbrs[j].message[k];
    }
    step2(info);
  }

  // Combined on a static graph; a time-varying one tracks each neighbour's reference point.
  AlgorithmCapabilities<T> capabilities() override {
    return {.combined = tracking_ ? nullptr : this, .start = this};
  }
  bool needsStart() const override { return !started_; }
  // Z^1 = X^0 - eta G^0;  X^1 = prox(Z^1).
  void start(const RoundInfo& info) override {
    started_ = true;
    const T eta = static_cast<T>(info.stepSize);
    oracle_.gradient(x_, g_);
    for (size_t k = 0; k < x_.size(); ++k) z_[k] = elementwise::leadStart(x_[k], g_[k], eta);
    proximal<T>(r_, info.stepSize, z_, x_);
  }

  bool tracksNeighbors() const override { return tracking_; }
  void absorbCombined(const RoundInfo& info, std::span<const T> own,
                      std::span<const T> combined) override {
    finish(info, own, combined);
  }

  std::span<const T> model() const override { return x_; }

  // yhat_ is scratch within absorb. g_ is rewritten by every prepare; it is kept anyway (start()
  // writes it before the first prepare, and it costs one vector).
  void visitState(core::StateVisitor& v) override {
    v.flag("started", started_);
    v.fixed("x", x_);
    v.fixed("z", z_);
    v.fixed("d", d_);
    v.fixed("d_lost", dLost_);
    v.fixed("h", h_);
    v.fixed("e", e_);
    v.fixed("g", g_);
    v.perPeer("h_peers", peers_);
  }

 private:
  // Static form, given q_i and (W q)_i. H_w is never stored: e = H - H_w is, and
  // Yhat - Yhat_w = e + (q - W q), then e <- (1 - a) e + a (Yhat - Yhat_w) = e + a (q - W q).
  // Both increments vanish at the fixed point; keeping H and H_w (each of the size of x) and
  // subtracting them every round would feed their rounding errors into D, whose sum over the
  // nodes must stay zero, and move the fixed point by about k eps / (eta mu).
  void finish(const RoundInfo& info, std::span<const T> q, std::span<const T> wq) {
    const size_t dim = x_.size();
    const T a = alpha_;
    const T step = static_cast<T>(gamma_ / (2.0 * info.stepSize));
    for (size_t k = 0; k < dim; ++k) {
      elementwise::leadFinish(q[k], wq[k], d_[k], dLost_[k], e_[k], h_[k], step, a);
    }
    step2(info);
  }

  // Z <- X - eta G - eta D;  X <- prox(Z).
  void step2(const RoundInfo& info) {
    const T eta = static_cast<T>(info.stepSize);
    for (size_t k = 0; k < x_.size(); ++k) z_[k] = elementwise::leadStep(x_[k], g_[k], d_[k], eta);
    proximal<T>(r_, info.stepSize, z_, x_);
  }

  const RegularizerSpec r_;
  const T alpha_;
  const double gamma_;
  const bool tracking_;
  bool started_ = false;
  std::vector<T> x_, z_, d_, dLost_, h_, e_, g_, yhat_;
  std::map<int, std::vector<T>> peers_;  // time-varying: h_j of every neighbour heard from
  GradientOracle<T>& oracle_;
};

}  // namespace

template <typename T>
std::unique_ptr<Algorithm<T>> createNids(const AlgorithmSpec& spec, std::span<const T> x0,
                                         GradientOracle<T>& oracle) {
  return std::make_unique<Nids<T>>(spec.regularizer, x0, oracle);
}

template <typename T>
std::unique_ptr<Algorithm<T>> createLead(const AlgorithmSpec& spec, std::span<const T> x0,
                                         GradientOracle<T>& oracle) {
  return std::make_unique<ProxLead<T>>(spec, x0, oracle);
}

template std::unique_ptr<Algorithm<float>> createNids<float>(const AlgorithmSpec&,
                                                             std::span<const float>,
                                                             GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createNids<double>(const AlgorithmSpec&,
                                                               std::span<const double>,
                                                               GradientOracle<double>&);
template std::unique_ptr<Algorithm<float>> createLead<float>(const AlgorithmSpec&,
                                                             std::span<const float>,
                                                             GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createLead<double>(const AlgorithmSpec&,
                                                               std::span<const double>,
                                                               GradientOracle<double>&);

}  // namespace starling::optim
