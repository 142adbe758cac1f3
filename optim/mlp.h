// The built-in neural network: a multilayer perceptron for classification (docs/algorithms.md
// §16).
//
// layers = [d_0, d_1, ..., d_L]: d_0 inputs (pixels / 255), d_L classes. Layer l (1..L) computes
// z_l = W_l a_{l-1} + b_l with W_l of d_l x d_{l-1}; hidden layers apply ReLU, a_l = max(z_l, 0);
// the output z_L goes through softmax cross-entropy: loss_j = logsumexp(z_L) - z_L[y_j].
// The flat parameter vector is, layer after layer, W_l (row-major: row o holds the weights into
// output o) then b_l, so a saved model reads back with a few lines of numpy.
// Node i's objective follows optim/objective.h: f_i(x) = (n/m) sum_{j in S_i} loss_j(x)
// + (l2/2) ||x||^2 (the decay covers every parameter, biases included). Products go through Eigen.
// Thread-safety: const methods are safe to call concurrently; the Rng passed in is not.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "optim/codistillation.h"
#include "optim/image_dataset.h"
#include "optim/objective.h"
#include "core/status.h"

namespace starling::optim {

// Most layers and units a scenario may ask for, and most parameters in all.
inline constexpr int kMaxMlpLayers = 16;
inline constexpr int kMaxMlpWidth = 1 << 16;
inline constexpr uint64_t kMaxMlpParameters = uint64_t{1} << 28;

struct MlpSpec {
  std::vector<int> layers;  // sizes, inputs first, classes last; at least two entries
  double l2 = 0.0;
};

// kInvalidArgument unless 2 <= layers <= kMaxMlpLayers + 1, every size in [1, kMaxMlpWidth],
// the output has >= 2 classes and the parameter count is at most kMaxMlpParameters.
core::Status checkMlpLayers(const std::vector<int>& layers);

// Number of parameters: sum over layers of d_l (d_{l-1} + 1).
uint64_t mlpParameterCount(const std::vector<int>& layers);

// The common starting point of every node: He initialisation, W entries N(0, 2 / d_{l-1}) drawn
// from core::Rng(seed) layer after layer in the flat order, b = 0. Deterministic in `seed`.
std::vector<double> mlpInitialModel(const std::vector<int>& layers, uint64_t seed);

template <typename T>
class MlpObjective final : public Objective<T> {
 public:
  // `shard` is node i's samples (moved in: the node keeps only its own); shard.features must be
  // layers[0] and every label < layers.back(). `totalSamples` is m, `nodes` is n.
  static std::unique_ptr<MlpObjective<T>> create(const MlpSpec& spec, ImageDataset shard,
                                                 size_t totalSamples, int nodes);
  ~MlpObjective() override;

  int dim() const override;
  size_t samples() const override;
  void gradient(std::span<const T> x, std::span<T> out) const override;
  void stochasticGradient(std::span<const T> x, std::span<T> out, size_t batch,
                          core::Rng& rng) const override;
  double stochasticGradientWithLoss(std::span<const T> x, std::span<T> out, size_t batch,
                                    core::Rng& rng) const override;
  double value(std::span<const T> x) const override;

  // stochasticGradient plus the codistillation term's gradient on the same batch
  // (docs/algorithms.md §25): each teacher (a neighbour's model, dim() values) runs forward on
  // the drawn samples, and alpha (p - qbar) joins the output layer's delta p - onehot before
  // back-propagation, with the task's per-sample weight (n/m)(m_i/B). So the node's objective is
  // f_i + alpha (n/m) m_i D_i, D_i the mean distance over its samples (with equal shards
  // (n/m) m_i = 1: mean cross-entropy + alpha D). Draws the batch from `rng` exactly as
  // stochasticGradient does; with no teachers it is stochasticGradient.
  void stochasticGradientWithDistillation(std::span<const T> x,
                                          std::span<const std::span<const T>> teachers,
                                          const CodistillationSpec& spec, std::span<T> out,
                                          size_t batch, core::Rng& rng) const;

 private:
  struct Impl;
  explicit MlpObjective(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A model measured on a data set: mean cross-entropy (no l2 term) and the fraction of samples
// whose largest output is the label (the first largest on ties). Computed in float32 with the
// loss summed in double, in chunks of samples, deterministically.
struct MlpEvaluation {
  double loss = 0;
  double accuracy = 0;
};
MlpEvaluation evaluateMlp(const std::vector<int>& layers, std::span<const double> x,
                          const ImageDataset& data);

}  // namespace starling::optim
