#include "optim/adasum_gossip.h"

#include <algorithm>
#include <vector>

#include "optim/adasum.h"

namespace starling::optim {
namespace {

template <typename T>
class AdasumGossip final : public Algorithm<T> {
 public:
  AdasumGossip(std::span<const T> x0, GradientOracle<T>& oracle, ParameterLayout layout)
      : x_(x0.begin(), x0.end()), grad_(x0.size()), delta_(x0.size()), oracle_(oracle),
        layout_(std::move(layout)) {}

  size_t messageSize() const override { return 2 * x_.size(); }

  void prepare(const RoundInfo& info, std::span<T> out) override {
    const size_t d = x_.size();
    oracle_.gradient(x_, grad_);
    const T eta = static_cast<T>(info.stepSize);
    std::copy(x_.begin(), x_.end(), out.begin());
    for (size_t k = 0; k < d; ++k) out[d + k] = -eta * grad_[k];
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t d = x_.size();
    // The updates in peer-id order, this node's at its own place (neighbours come sorted).
    std::vector<std::span<const T>> updates;
    updates.reserve(nbrs.size() + 1);
    bool placed = false;
    for (const auto& n : nbrs) {
      if (!placed && info.self >= 0 && info.self < n.peer) {
        updates.push_back(own.subspan(d, d));
        placed = true;
      }
      updates.push_back(n.message.subspan(d, d));
    }
    if (!placed) updates.push_back(own.subspan(d, d));
    adasumCombine<T>(updates, layout_, delta_);
    // x_i <- w_ii x_i + Σ_j w_ij x_j + Δ̃_i, accumulated in the order DSGD uses.
    for (size_t k = 0; k < d; ++k) {
      T acc = static_cast<T>(info.selfWeight) * own[k];
      for (const auto& n : nbrs) acc += static_cast<T>(n.weight) * n.message[k];
      x_[k] = acc + delta_[k];
    }
  }

  std::span<const T> model() const override { return x_; }

  // grad_ and delta_ are rewritten every round before they are read.
  void visitState(core::StateVisitor& v) override { v.fixed("x", x_); }

 private:
  std::vector<T> x_, grad_, delta_;
  GradientOracle<T>& oracle_;
  ParameterLayout layout_;
};

}  // namespace

template <typename T>
std::unique_ptr<Algorithm<T>> createAdasumGossip(const AlgorithmSpec& spec, std::span<const T> x0,
                                                 GradientOracle<T>& oracle) {
  ParameterLayout layout = spec.layout.empty() ? ParameterLayout::single(x0.size())
                                               : ParameterLayout{spec.layout};
  return std::make_unique<AdasumGossip<T>>(x0, oracle, std::move(layout));
}

template std::unique_ptr<Algorithm<float>> createAdasumGossip<float>(const AlgorithmSpec&,
                                                                     std::span<const float>,
                                                                     GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createAdasumGossip<double>(const AlgorithmSpec&,
                                                                       std::span<const double>,
                                                                       GradientOracle<double>&);

}  // namespace starling::optim
