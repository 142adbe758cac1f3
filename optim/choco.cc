#include "optim/choco.h"

#include <vector>

namespace starling::optim {
namespace {

template <typename T>
class Choco final : public Algorithm<T> {
 public:
  Choco(double gamma, std::span<const T> x0, GradientOracle<T>& oracle)
      : gamma_(static_cast<T>(gamma)), x_(x0.begin(), x0.end()), hat_(x0.size(), T(0)),
        s_(x0.size(), T(0)), grad_(x0.size()), oracle_(oracle) {}

  size_t messageSize() const override { return x_.size(); }

  void prepare(const RoundInfo& info, std::span<T> out) override {
    oracle_.gradient(x_, grad_);
    const T eta = static_cast<T>(info.stepSize);
    for (size_t k = 0; k < x_.size(); ++k) {
      T x = x_[k] - eta * grad_[k];
      x += gamma_ * (s_[k] - hat_[k]);
      x_[k] = x;
      out[k] = x - hat_[k];
    }
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const T self = static_cast<T>(info.selfWeight);
    for (size_t k = 0; k < x_.size(); ++k) {
      hat_[k] += own[k];
      s_[k] += self * own[k];
    }
    for (const auto& n : nbrs) {
      const T w = static_cast<T>(n.weight);
      for (size_t k = 0; k < x_.size(); ++k) s_[k] += w * n.message[k];
    }
  }

  std::span<const T> model() const override { return x_; }

 private:
  const T gamma_;
  std::vector<T> x_, hat_, s_, grad_;
  GradientOracle<T>& oracle_;
};

}  // namespace

template <typename T>
std::unique_ptr<Algorithm<T>> createChoco(const AlgorithmSpec& spec, std::span<const T> x0,
                                          GradientOracle<T>& oracle) {
  return std::make_unique<Choco<T>>(spec.gamma, x0, oracle);
}

template std::unique_ptr<Algorithm<float>> createChoco<float>(const AlgorithmSpec&,
                                                              std::span<const float>,
                                                              GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createChoco<double>(const AlgorithmSpec&,
                                                                std::span<const double>,
                                                                GradientOracle<double>&);

}  // namespace starling::optim
