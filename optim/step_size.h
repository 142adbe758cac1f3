// Step-size schedules: eta_t as a pure function of the round t.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace starling::optim {

struct StepSizeSchedule {
  enum class Kind {
    kConstant,     // eta_t = value
    kInverseTime,  // eta_t = value * tau / (t + tau)
    kStep,         // eta_t = value * factor^floor(t / every)
    // LEGW, linear-epoch gradual warm-up with square-root scaling (docs/algorithms.md §21).
    // With k = batch / baseBatch, peak = baseLr * sqrt(k) and W = legwWarmupRounds()
    // (warmupEpochs * k epochs of roundsPerEpoch rounds, rounded to the nearest round):
    //   eta_t = peak * (t + 1) / W                 for t < W   (linear ramp, peak at t = W - 1)
    //   eta_t = decay schedule at t - W            for t >= W
    // where the decay schedule is `decay` (kConstant, kInverseTime or kStep) with value = peak and
    // this schedule's tau, every and factor: it starts at the end of warm-up, and its tau and every
    // are in rounds (converting the base run's decay epochs to rounds is the caller's).
    kLegw,
  };
  Kind kind = Kind::kConstant;
  double value = 0.1;
  double tau = 1.0;     // kInverseTime (and kLegw's decay), > 0
  uint64_t every = 1;   // kStep (and kLegw's decay), > 0
  double factor = 0.5;  // kStep (and kLegw's decay), in (0, 1]

  // kLegw only (`value` is then unused).
  double baseLr = 0.1;           // eta of the base run, at batch baseBatch; > 0
  double baseBatch = 1.0;        // the base run's (total) batch; > 0
  double batch = 1.0;            // this run's (total) batch; > 0
  double warmupEpochs = 0.0;     // the base run's warm-up, in epochs; >= 0 (0: no warm-up)
  double roundsPerEpoch = 1.0;   // rounds per epoch at `batch`; > 0
  Kind decay = Kind::kConstant;  // the base schedule after warm-up; not kLegw
  // Whether the scenario gave batch / roundsPerEpoch, or they are defaults the runtime derived
  // from the data (a scenario written back keeps them out, so that its hash does not change).
  bool batchGiven = true;
  bool roundsPerEpochGiven = true;

  double at(uint64_t round) const;

  // kLegw: baseLr * sqrt(batch / baseBatch).
  double legwPeak() const;
  // kLegw: round(warmupEpochs * (batch / baseBatch) * roundsPerEpoch), the rounds of warm-up.
  uint64_t legwWarmupRounds() const;

  // kInvalidArgument naming the field when a parameter of this kind is out of its range.
  core::Status check() const;
};

}  // namespace starling::optim
