#include "optim/adascale.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>
#include <vector>

namespace starling::optim {

template <typename T>
AdaScaleSample adascaleSample(std::span<const std::span<const T>> gradients) {
  const size_t k = gradients.size();
  assert(k >= 2);
  const size_t d = gradients[0].size();
  // Welford's update, coordinate by coordinate, over the gradients in turn: the running mean and
  // the sum of squared deviations from it, summed over the coordinates (exactly 0 when every
  // gradient is the same).
  std::vector<double> mean(d, 0.0);
  double spread = 0.0;
  for (size_t c = 0; c < k; ++c) {
    const auto& g = gradients[c];
    assert(g.size() == d);
    const double n = static_cast<double>(c + 1);
    for (size_t j = 0; j < d; ++j) {
      const double x = static_cast<double>(g[j]);
      const double delta = x - mean[j];
      mean[j] += delta / n;
      spread += delta * (x - mean[j]);
    }
  }
  const double kk = static_cast<double>(k);
  double meanSq = 0.0;
  for (double m : mean) meanSq += m * m;
  AdaScaleSample s;
  s.variance = spread / (kk - 1.0);
  s.squaredMean = meanSq - s.variance / kk;
  return s;
}

template AdaScaleSample adascaleSample<float>(std::span<const std::span<const float>>);
template AdaScaleSample adascaleSample<double>(std::span<const std::span<const double>>);

AdaScaleSample adascaleSampleFromMoments(double meanSquaredNorm, double squaredNormOfMean,
                                         double k) {
  assert(k >= 2.0);
  AdaScaleSample s;
  s.variance = k * (meanSquaredNorm - squaredNormOfMean) / (k - 1.0);
  s.squaredMean = (k * squaredNormOfMean - meanSquaredNorm) / (k - 1.0);
  return s;
}

double adascaleGain(const AdaScaleSample& estimate, double scale) {
  const double v = std::max(estimate.variance, 0.0);
  const double m = std::max(estimate.squaredMean, 0.0);
  if (!(v > 0.0) || !(scale > 1.0)) return 1.0;
  const double r = (v + m) / (v / scale + m);
  if (!(r >= 1.0)) return 1.0;  // also a NaN from an infinite estimate
  return std::min(r, scale);
}

core::Status checkAdaScaleSpec(const AdaScaleSpec& spec) {
  if (!(spec.scale >= 1.0 && std::isfinite(spec.scale))) {
    return core::invalidArgument("adascale: scale must be finite and >= 1, got " +
                                 std::to_string(spec.scale));
  }
  if (spec.smoothing && !(*spec.smoothing >= 0.0 && *spec.smoothing < 1.0)) {
    return core::invalidArgument("adascale: smoothing must be in [0, 1), got " +
                                 std::to_string(*spec.smoothing));
  }
  return core::Status::ok();
}

core::Result<AdaScale> AdaScale::create(const AdaScaleSpec& spec) {
  STARLING_RETURN_IF_ERROR(checkAdaScaleSpec(spec));
  const double theta = spec.smoothing ? *spec.smoothing : std::max(1.0 - spec.scale / 1000.0, 0.0);
  return AdaScale(spec.scale, theta);
}

AdaScale::Step AdaScale::step(const AdaScaleSample& sample, const StepSizeSchedule& schedule) {
  if (std::isfinite(sample.variance) && std::isfinite(sample.squaredMean)) {
    emaVariance_ = theta_ * emaVariance_ + (1.0 - theta_) * sample.variance;
    emaSquaredMean_ = theta_ * emaSquaredMean_ + (1.0 - theta_) * sample.squaredMean;
    emaWeight_ = theta_ * emaWeight_ + (1.0 - theta_);
  }
  Step out;
  out.gain = adascaleGain(smoothed(), scale_);
  out.tau = tau_;
  // floor(tau) as a round; tau grows by at most S per step, far from 2^64.
  out.stepSize = out.gain * schedule.at(static_cast<uint64_t>(std::floor(tau_)));
  gain_ = out.gain;
  tau_ += out.gain;
  ++steps_;
  return out;
}

AdaScaleSample AdaScale::smoothed() const {
  AdaScaleSample s;
  if (emaWeight_ > 0.0) {
    s.variance = emaVariance_ / emaWeight_;
    s.squaredMean = emaSquaredMean_ / emaWeight_;
  }
  return s;
}

void AdaScale::reset() {
  emaVariance_ = emaSquaredMean_ = emaWeight_ = 0.0;
  tau_ = 0.0;
  gain_ = 1.0;
  steps_ = 0;
}

void AdaScale::visitState(core::StateVisitor& v) {
  v.scalar("ema_variance", emaVariance_);
  v.scalar("ema_squared_mean", emaSquaredMean_);
  v.scalar("ema_weight", emaWeight_);
  v.scalar("tau", tau_);
  v.scalar("gain", gain_);
  v.scalar("steps", steps_);
}

}  // namespace starling::optim
