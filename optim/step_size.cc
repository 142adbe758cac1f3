#include "optim/step_size.h"

#include <cmath>

namespace starling::optim {

double StepSizeSchedule::at(uint64_t round) const {
  switch (kind) {
    case Kind::kConstant: return value;
    case Kind::kInverseTime: return value * tau / (static_cast<double>(round) + tau);
    case Kind::kStep: return value * std::pow(factor, static_cast<double>(round / every));
  }
  return value;
}

}  // namespace starling::optim
