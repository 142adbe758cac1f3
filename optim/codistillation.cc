#include "optim/codistillation.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>
#include <vector>

namespace starling::optim {
namespace {

// out = log softmax(row), with the row's maximum subtracted.
template <typename T>
void logSoftmax(const T* row, size_t classes, double* out) {
  double mx = static_cast<double>(row[0]);
  for (size_t c = 1; c < classes; ++c) mx = std::max(mx, static_cast<double>(row[c]));
  double sum = 0.0;
  for (size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c]) - mx);
  const double lse = mx + std::log(sum);
  for (size_t c = 0; c < classes; ++c) out[c] = static_cast<double>(row[c]) - lse;
}

// The neighbours' predictions for one sample: writes q_t and log q_t for target t.
template <typename T>
struct LogitTargets {
  std::span<const std::span<const T>> logits;
  size_t count() const { return logits.size(); }
  void row(size_t t, size_t j, size_t classes, double* q, double* logq) const {
    logSoftmax(logits[t].data() + j * classes, classes, logq);
    for (size_t c = 0; c < classes; ++c) q[c] = std::exp(logq[c]);
  }
};

template <typename T>
struct ProbabilityTargets {
  std::span<const T> probabilities;
  size_t count() const { return 1; }
  void row(size_t, size_t j, size_t classes, double* q, double* logq) const {
    for (size_t c = 0; c < classes; ++c) {
      q[c] = static_cast<double>(probabilities[j * classes + c]);
      logq[c] = q[c] > 0.0 ? std::log(q[c]) : 0.0;  // only used where q > 0
    }
  }
};

template <typename T, typename Targets>
double distill(const CodistillationSpec& spec, size_t classes, std::span<const T> own,
               const Targets& targets, std::span<T> grad) {
  assert(classes >= 1 && !own.empty() && own.size() % classes == 0);
  assert(grad.empty() || grad.size() == own.size());
  assert(targets.count() >= 1);
  const size_t m = own.size() / classes;
  const double k = static_cast<double>(targets.count());
  const bool kl = spec.distance == CodistillationSpec::Distance::kKl;
  std::vector<double> logp(classes), q(classes), logq(classes), qbar(classes);
  double total = 0.0;
  for (size_t j = 0; j < m; ++j) {
    logSoftmax(own.data() + j * classes, classes, logp.data());
    std::fill(qbar.begin(), qbar.end(), 0.0);
    double rowValue = 0.0;
    for (size_t t = 0; t < targets.count(); ++t) {
      targets.row(t, j, classes, q.data(), logq.data());
      for (size_t c = 0; c < classes; ++c) {
        if (q[c] > 0.0) rowValue += q[c] * ((kl ? logq[c] : 0.0) - logp[c]);
        qbar[c] += q[c];
      }
    }
    total += rowValue / k;
    if (!grad.empty()) {
      const double scale = spec.alpha / static_cast<double>(m);
      T* g = grad.data() + j * classes;
      for (size_t c = 0; c < classes; ++c) {
        g[c] =
            static_cast<T>(static_cast<double>(g[c]) + scale * (std::exp(logp[c]) - qbar[c] / k));
      }
    }
  }
  return spec.alpha * total / static_cast<double>(m);
}

}  // namespace

core::Status checkCodistillationSpec(const CodistillationSpec& spec) {
  if (!(spec.alpha >= 0.0 && std::isfinite(spec.alpha))) {
    return core::invalidArgument("codistillation: alpha must be finite and >= 0, got " +
                                 std::to_string(spec.alpha));
  }
  if (spec.distance != CodistillationSpec::Distance::kCrossEntropy &&
      spec.distance != CodistillationSpec::Distance::kKl) {
    return core::invalidArgument("codistillation: unknown distance");
  }
  return core::Status::ok();
}

template <typename T>
double codistillationLoss(const CodistillationSpec& spec, size_t classes,
                          std::span<const T> ownLogits, std::span<const T> neighborLogits,
                          std::span<T> grad) {
  assert(neighborLogits.size() == ownLogits.size());
  const std::span<const T> one[1] = {neighborLogits};
  return distill<T>(spec, classes, ownLogits, LogitTargets<T>{one}, grad);
}

template <typename T>
double codistillationLossFromProbabilities(const CodistillationSpec& spec, size_t classes,
                                           std::span<const T> ownLogits,
                                           std::span<const T> neighborProbabilities,
                                           std::span<T> grad) {
  assert(neighborProbabilities.size() == ownLogits.size());
  return distill<T>(spec, classes, ownLogits, ProbabilityTargets<T>{neighborProbabilities}, grad);
}

template <typename T>
double codistillationLossAveraged(const CodistillationSpec& spec, size_t classes,
                                  std::span<const T> ownLogits,
                                  std::span<const std::span<const T>> neighborLogits,
                                  std::span<T> grad) {
  for ([[maybe_unused]] const auto& n : neighborLogits) assert(n.size() == ownLogits.size());
  return distill<T>(spec, classes, ownLogits, LogitTargets<T>{neighborLogits}, grad);
}

#define STARLING_CODISTILLATION(T)                                                                \
  template double codistillationLoss<T>(const CodistillationSpec&, size_t, std::span<const T>,    \
                                        std::span<const T>, std::span<T>);                        \
  template double codistillationLossFromProbabilities<T>(                                         \
      const CodistillationSpec&, size_t, std::span<const T>, std::span<const T>, std::span<T>);   \
  template double codistillationLossAveraged<T>(                                                  \
      const CodistillationSpec&, size_t, std::span<const T>, std::span<const std::span<const T>>, \
      std::span<T>);
STARLING_CODISTILLATION(float)
STARLING_CODISTILLATION(double)
#undef STARLING_CODISTILLATION

}  // namespace starling::optim
