// Step-size schedules: eta_t as a pure function of the round t.
#pragma once

#include <cstdint>

namespace starling::optim {

struct StepSizeSchedule {
  enum class Kind {
    kConstant,     // eta_t = value
    kInverseTime,  // eta_t = value * tau / (t + tau)
    kStep,         // eta_t = value * factor^floor(t / every)
  };
  Kind kind = Kind::kConstant;
  double value = 0.1;
  double tau = 1.0;      // kInverseTime, > 0
  uint64_t every = 1;    // kStep, > 0
  double factor = 0.5;   // kStep, in (0, 1]

  double at(uint64_t round) const;
};

}  // namespace starling::optim
