// What DiLoCo-class training is asked to be (docs/algorithms.md §29, optim/diloco.h), apart from
// the algorithm itself, so that AlgorithmSpec can hold one without including the algorithm.
#pragma once

#include <cstdint>
#include <vector>

namespace starling::optim {

struct DilocoSpec {
  // How the node turns the round's mixed local models into its next outer model.
  enum class Outer {
    kSgd,             // theta <- theta - lr D: lr 1 is plain averaging of the local models
    kNesterov,        // DiLoCo's outer Nesterov momentum on D
    kExactDiffusion,  // corrected inner steps and a dual variable: exact on heterogeneous data
    kNoloco,          // NoLoCo's momentum step with a pull toward the neighbours' outer models
  };
  uint64_t innerSteps = 1;  // H >= 1 inner steps per outer round (one exchange)
  // "inner_steps": {"kind": "by_time", ...}: as many inner steps as fit in `seconds` (at least
  // one, at most innerSteps), and the mix weights each local model by its steps. In simulate
  // the count is emulatedSteps (from the node's speed), so the run is reproducible.
  double seconds = 0;           // > 0: by_time
  uint64_t emulatedSteps = 0;   // > 0: this node's count per round, instead of the clock
  double stepSeconds = 1e-3;    // simulate: a speed-1 inner step's duration
  std::vector<double> speeds;   // simulate: each node's relative speed (empty: all 1)
  Outer outer = Outer::kNesterov;
  double outerLr = 0.7;        // in (0, 1] for sgd and exact_diffusion, (0, 2] for nesterov
  double outerMomentum = 0.9;  // nesterov, noloco: in [0, 1)
  // Streaming DiLoCo: the model in F contiguous fragments, one exchanged per round in turn after
  // H / F inner steps, so each fragment is exchanged every H steps; the local model of the other
  // fragments keeps training. innerSteps is a multiple of fragments.
  uint64_t fragments = 1;
  // Eager overlap (one-step delay): the inner steps of round r + 1 run while round r's messages
  // travel, from the local model that was sent; the outer step of round r lands on top of them.
  bool overlap = false;
  double pull = 0.7;           // noloco: gamma, the pull toward the mixed outer models, (0, 2]
  // Set by the scenario for a lossy codec without error feedback: the message is the change of
  // the local model against a reference point that sender and receivers both track (x_i - x-hat_i,
  // as CHOCO does for models), so the codec's error is never lost (docs/algorithms.md §29).
  bool compressedDifferences = false;
  // Set by the runtime for the first start of a run, where every node starts from the same x0:
  // the reference points then start at x0 rather than 0, so the first messages are small too.
  // A restart after a membership change starts from each node's own model and leaves it false.
  bool sharedStart = false;
};

// "sgd", "nesterov", "exact_diffusion", "noloco".
const char* dilocoOuterName(DilocoSpec::Outer outer);

}  // namespace starling::optim
