// The parameters of sketched gossip (docs/algorithms.md §27, optim/sketch_gossip.h).
#pragma once

#include <cstdint>

namespace starling::optim {

struct SketchGossipSpec {
  uint32_t rows = 5;     // r, 1..64
  uint32_t cols = 0;     // c, 1..d
  uint64_t k = 0;        // coordinates applied per round; 0: ceil(ratio d)
  double ratio = 0.0;    // used when k == 0
  double momentum = 0.9; // rho, in [0, 1)
  // The hashes' seed: the same at every node and fixed for the run (the scenario parser derives
  // it from the scenario's seed).
  uint64_t seed = 0;
};

}  // namespace starling::optim
