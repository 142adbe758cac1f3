// Deterministic, portable random numbers.
//
// Starling needs bit-identical random streams on every machine and compiler: every node derives
// round r's graph from (seed, r) without talking, and simulate/run must agree. The standard
// library's engines are portable but its distributions are not, so the few distributions we need
// are defined here on top of std::mt19937_64 (whose output sequence the standard fixes).
// Not thread-safe: one Rng per owner.
#pragma once

#include <cstdint>
#include <random>

#include "core/hd.h"
#include "core/state.h"

namespace starling::core {

// mix64 (core/hd.h): the SplitMix64 finaliser. Used to derive independent seeds from tuples.

// Seed for a named stream: deriveSeed(seed, kTopologySalt, round) etc. Order matters.
constexpr uint64_t deriveSeed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return mix64(mix64(mix64(mix64(seed) ^ a) ^ b) ^ c);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t nextU64() { return engine_(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0. Rejection sampling: no modulo bias.
  uint64_t below(uint64_t n);
  // Standard normal (Box-Muller, both values used).
  double normal();
  bool bernoulli(double p) { return uniform() < p; }

  // The whole stream position (the engine's state in its standard text form, and the spare
  // normal value), for checkpoints: a loaded Rng continues the saved one's sequence exactly.
  void visitState(StateVisitor& v);

 private:
  std::mt19937_64 engine_;
  bool hasSpare_ = false;
  double spare_ = 0.0;
};

}  // namespace starling::core
