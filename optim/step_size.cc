#include "optim/step_size.h"

#include <cmath>
#include <limits>
#include <string>

namespace starling::optim {
namespace {

// The three base schedules, from a given peak value.
double baseSchedule(StepSizeSchedule::Kind kind, double value, double tau, uint64_t every,
                    double factor, uint64_t round) {
  using K = StepSizeSchedule::Kind;
  switch (kind) {
    case K::kConstant:
      return value;
    case K::kInverseTime:
      return value * tau / (static_cast<double>(round) + tau);
    case K::kStep:
      return value * std::pow(factor, static_cast<double>(round / every));
    case K::kLegw:
      break;
  }
  return value;
}

bool positive(double v) { return v > 0.0 && std::isfinite(v); }

core::Status mustBe(const char* field, const char* what, double v) {
  return core::invalidArgument(std::string("step size: ") + field + " must be " + what + ", got " +
                               std::to_string(v));
}

}  // namespace

double StepSizeSchedule::legwPeak() const { return baseLr * std::sqrt(batch / baseBatch); }

uint64_t StepSizeSchedule::legwWarmupRounds() const {
  const double rounds = warmupEpochs * (batch / baseBatch) * roundsPerEpoch;
  if (!(rounds > 0.0)) return 0;
  if (rounds >= 9.0e18) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(std::llround(rounds));
}

double StepSizeSchedule::at(uint64_t round) const {
  if (kind != Kind::kLegw) return baseSchedule(kind, value, tau, every, factor, round);
  const double peak = legwPeak();
  const uint64_t w = legwWarmupRounds();
  if (round < w) return peak * (static_cast<double>(round) + 1.0) / static_cast<double>(w);
  return baseSchedule(decay, peak, tau, every, factor, round - w);
}

core::Status StepSizeSchedule::check() const {
  const Kind rule = kind == Kind::kLegw ? decay : kind;
  if (kind == Kind::kLegw) {
    if (decay == Kind::kLegw) {
      return core::invalidArgument(
          "step size: legw's decay must be constant, inverse_time or step");
    }
    if (!positive(baseLr)) return mustBe("base_lr", "finite and > 0", baseLr);
    if (!positive(baseBatch)) return mustBe("base_batch", "finite and > 0", baseBatch);
    if (!positive(batch)) return mustBe("batch", "finite and > 0", batch);
    if (!(warmupEpochs >= 0.0 && std::isfinite(warmupEpochs))) {
      return mustBe("warmup_epochs", "finite and >= 0", warmupEpochs);
    }
    if (!positive(roundsPerEpoch))
      return mustBe("rounds_per_epoch", "finite and > 0", roundsPerEpoch);
    if (!(warmupEpochs * (batch / baseBatch) * roundsPerEpoch < 9.0e18)) {
      return core::invalidArgument("step size: legw's warm-up is longer than 9e18 rounds");
    }
  } else if (!std::isfinite(value)) {
    return mustBe("value", "finite", value);
  }
  if (rule == Kind::kInverseTime && !positive(tau)) return mustBe("tau", "finite and > 0", tau);
  if (rule == Kind::kStep) {
    if (every == 0) return core::invalidArgument("step size: every must be > 0");
    if (!(factor > 0.0 && factor <= 1.0)) return mustBe("factor", "in (0, 1]", factor);
  }
  return core::Status::ok();
}

}  // namespace starling::optim
