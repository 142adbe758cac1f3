// ExternalOracle: the gradient oracle of an embedded Peer, fed with the gradient the user's
// trainer computed at its parameters.
//
// Every algorithm asks its oracle at most once per round (and once in Algorithm::start), always
// at its current model (optim/algorithm.h); the trainer's params are that model. The oracle checks
// both promises: a second request in one call, or one at another point, is recorded as an
// internal error (the algorithm broke its contract) and answered with NaN, which the node's
// divergence check stops at once.
#pragma once

#include <algorithm>
#include <limits>
#include <optional>
#include <span>
#include <string>

#include "optim/algorithm.h"

namespace starling::api {

template <typename T>
class ExternalOracle final : public optim::GradientOracle<T> {
 public:
  // The trainer's parameters and its gradient there, for the next request.
  // `loss` and `sample` (what the trainer said about the gradient, NaN / unset when nothing)
  // answer lastLoss() and lastAdaScaleSample() once the gradient is taken.
  void offer(std::span<const T> x, std::span<const T> g,
             double loss = std::numeric_limits<double>::quiet_NaN(),
             std::optional<optim::AdaScaleSample> sample = std::nullopt) {
    x_ = x;
    g_ = g;
    offered_ = true;
    offeredLoss_ = loss;
    offeredSample_ = sample;
  }
  double lastLoss() const override { return loss_; }
  std::optional<optim::AdaScaleSample> lastAdaScaleSample() const override { return sample_; }
  // Whether the offered gradient was used.
  bool used() const { return !offered_; }

  void gradient(std::span<const T> x, std::span<T> out) override {
    if (!offered_) {
      error_ = "the algorithm asked for a second gradient in one step";
    } else if (x.size() != x_.size() ||
               (x.data() != x_.data() && !std::equal(x.begin(), x.end(), x_.begin()))) {
      error_ = "the algorithm asked for a gradient at a point other than the parameters";
    }
    if (error_) {
      std::fill(out.begin(), out.end(), std::numeric_limits<T>::quiet_NaN());
      return;
    }
    std::copy(g_.begin(), g_.end(), out.begin());
    offered_ = false;
    loss_ = offeredLoss_;
    sample_ = offeredSample_;
  }

  // Set once the contract was broken (a bug in an algorithm).
  const std::optional<std::string>& error() const { return error_; }

 private:
  std::span<const T> x_, g_;
  bool offered_ = false;
  double offeredLoss_ = std::numeric_limits<double>::quiet_NaN();
  double loss_ = std::numeric_limits<double>::quiet_NaN();
  std::optional<optim::AdaScaleSample> offeredSample_, sample_;
  std::optional<std::string> error_;
};

}  // namespace starling::api
