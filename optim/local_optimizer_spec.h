// What a local optimizer is asked to be (docs/algorithms.md §20), apart from the optimizer itself
// (optim/local_optimizer.h), so that AlgorithmSpec can hold one without the algorithm header and
// the optimizer header including each other.
#pragma once

#include "core/status.h"

namespace starling::optim {

struct LocalOptimizerSpec {
  enum class Kind { kSgd, kMomentum, kAdam, kLamb };
  Kind kind = Kind::kSgd;
  double momentum = 0.9;       // kMomentum: mu in [0, 1)
  bool nesterov = false;       // kMomentum
  double beta1 = 0.9;          // kAdam, kLamb: in [0, 1)
  double beta2 = 0.999;        // kAdam, kLamb: in [0, 1)
  double eps = 1e-8;           // kAdam, kLamb: > 0 (LAMB's paper uses 1e-6)
  double weightDecay = 0.0;    // every kind: lambda >= 0, decoupled (see above)
  bool biasCorrection = true;  // kAdam, kLamb
};

// "sgd", "momentum", "adam", "lamb".
const char* localOptimizerKindName(LocalOptimizerSpec::Kind kind);

// kInvalidArgument naming the field when a value is out of its range (finite values only).
core::Status checkLocalOptimizerSpec(const LocalOptimizerSpec& spec);

}  // namespace starling::optim
