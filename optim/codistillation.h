// Codistillation: the distillation term a node adds to its loss so that its predictions follow
// its neighbours' on its own batch (docs/algorithms.md §25).
//
// For a softmax classifier with own logits z (m samples x C classes, row-major) and a neighbour's
// predictions q (the softmax of its logits on the same samples, or its probabilities), with
// p = softmax(z) row by row:
//   cross_entropy:  D = (1/m) sum_j  - sum_c q_jc log p_jc
//   kl:             D = (1/m) sum_j    sum_c q_jc (log q_jc - log p_jc)     (0 log 0 = 0)
// The node minimises L_task + alpha D. Both choices have the same gradient with respect to z,
//   d(alpha D)/dz_jc = alpha (p_jc - q_jc) / m,
// because they differ by the neighbours' entropy, a constant for the node: cross_entropy is what
// online distillation trains with, kl is 0 when the predictions agree (the better number to log).
// The neighbour's predictions are a constant (no gradient flows into the neighbour's model).
// With K neighbours the term is the mean of the K terms, alpha (1/K) sum_t D(z, q_t), whose
// gradient is alpha (p - qbar) / m with qbar the mean of the q_t. Sums are in double, each
// softmax with its row's maximum subtracted; temperature 1.
//
// How it is meant to be driven: a node keeps possibly stale copies of its neighbours' models
// (refreshed every tau rounds), evaluates them and itself on its own batch, calls one of these
// functions with the logits, adds the returned value to its loss and back-propagates the logit
// gradient they add into `grad` through its own network together with the task loss's
// ((p - onehot)/m for mean cross-entropy). Lower the explicit weight decay when codistilling: the
// term regularises (docs/algorithms.md §25).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <span>

#include "core/status.h"

namespace starling::optim {

struct CodistillationSpec {
  enum class Distance { kCrossEntropy, kKl };
  double alpha = 1.0;  // >= 0, finite
  Distance distance = Distance::kCrossEntropy;
};

core::Status checkCodistillationSpec(const CodistillationSpec& spec);

// How a run codistils (the scenario's `algorithm.codistillation`, docs/algorithms.md §25): the
// term, how often the neighbours' models are refreshed, and when the term is switched on.
struct CodistillationConfig {
  CodistillationSpec loss;
  // tau >= 1: a peer sends its model in round r (0-based) when r % tau == 0, and nothing in the
  // other rounds, so one model per tau rounds travels instead of one message every round.
  uint64_t period = 1;
  // The term is off in rounds r < burnIn (each peer trains alone, as in Anil et al.'s burn-in).
  // No model is sent for copies that would be replaced before they are used: the exchange of
  // round r happens only when r + period >= burnIn.
  uint64_t burnIn = 0;

  // True when round r exchanges models (a pure function of the round: every peer agrees).
  bool exchangesIn(uint64_t round) const {
    return round % period == 0 && round + period >= burnIn;
  }
  // True when round r's gradient carries the term (given copies of the neighbours exist).
  bool activeIn(uint64_t round) const { return round >= burnIn; }
};

// alpha D(z, softmax(neighborLogits)); adds alpha (p - q) / m into `grad` unless it is empty.
// ownLogits, neighborLogits and grad (when given) hold m * classes values, m >= 1, classes >= 1.
template <typename T>
double codistillationLoss(const CodistillationSpec& spec, size_t classes,
                          std::span<const T> ownLogits, std::span<const T> neighborLogits,
                          std::span<T> grad);

// The same against probabilities q given directly (each row non-negative, summing to 1).
template <typename T>
double codistillationLossFromProbabilities(const CodistillationSpec& spec, size_t classes,
                                           std::span<const T> ownLogits,
                                           std::span<const T> neighborProbabilities,
                                           std::span<T> grad);

// alpha (1/K) sum_t D(z, softmax(neighborLogits[t])) over K >= 1 neighbours; adds
// alpha (p - qbar) / m into `grad` unless it is empty.
template <typename T>
double codistillationLossAveraged(const CodistillationSpec& spec, size_t classes,
                                  std::span<const T> ownLogits,
                                  std::span<const std::span<const T>> neighborLogits,
                                  std::span<T> grad);

}  // namespace starling::optim
