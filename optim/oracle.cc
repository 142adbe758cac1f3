#include "optim/oracle.h"

#include <algorithm>
#include <cassert>

namespace starling::optim {

const char* estimatorKindName(EstimatorSpec::Kind kind) {
  switch (kind) {
    case EstimatorSpec::Kind::kFull:
      return "full";
    case EstimatorSpec::Kind::kSgd:
      return "sgd";
    case EstimatorSpec::Kind::kLsvrg:
      return "lsvrg";
    case EstimatorSpec::Kind::kSaga:
      return "saga";
  }
  return "unknown";
}

namespace {

double defaultProbability(double p, size_t batch, size_t samples) {
  if (p > 0.0) return p;
  if (samples == 0) return 1.0;
  return std::min(1.0, static_cast<double>(batch) / static_cast<double>(samples));
}

}  // namespace

template <typename T>
LsvrgOracle<T>::LsvrgOracle(const LocalObjective<T>& objective, size_t batch, double p,
                            uint64_t seed)
    : objective_(objective),
      batch_(batch),
      p_(defaultProbability(p, batch, objective.samples())),
      rng_(seed) {
  assert(batch >= 1 && p >= 0.0 && p <= 1.0);
}

template <typename T>
void LsvrgOracle<T>::gradient(std::span<const T> x, std::span<T> out) {
  const LocalObjective<T>& f = objective_;
  if (w_.empty()) {
    w_.assign(x.begin(), x.end());
    gradW_.resize(x.size());
    f.gradient(w_, gradW_);
    ++refreshes_;
  }
  // G = grad f_i(w) + l2 (x - w) + s (m_i / B) sum_J (loss'(x) - loss'(w)) a_j. At x = w every
  // correction term is an exact zero, so G is then bit-for-bit the full gradient at w.
  const T l2 = f.l2();
  for (size_t k = 0; k < x.size(); ++k) out[k] = gradW_[k] + l2 * (x[k] - w_[k]);
  const uint64_t rows = f.samples();
  if (rows > 0) {
    const T weight =
        f.scale() * static_cast<T>(static_cast<double>(rows) / static_cast<double>(batch_));
    for (size_t b = 0; b < batch_; ++b) {
      const size_t j = rng_.below(rows);
      const T c = weight * (f.lossDerivative(j, x) - f.lossDerivative(j, w_));
      if (c != T(0)) f.addSample(j, c, out);
    }
  }
  if (rng_.bernoulli(p_)) {
    std::copy(x.begin(), x.end(), w_.begin());
    f.gradient(w_, gradW_);
    ++refreshes_;
  }
}

template <typename T>
void LsvrgOracle<T>::visitState(core::StateVisitor& v) {
  {
    core::StateVisitor::Scope scope(v, "rng");
    rng_.visitState(v);
  }
  v.sized("w", w_);  // empty before the first call
  v.sized("grad_w", gradW_);
  v.scalar("refreshes", refreshes_);
  if (v.loading() && !v.failed() &&
      (w_.size() != gradW_.size() || (!w_.empty() && w_.size() != static_cast<size_t>(objective_.dim())))) {
    v.fail("checkpoint: lsvrg's w and grad_w have " + std::to_string(w_.size()) + " and " +
           std::to_string(gradW_.size()) + " values for a model of " +
           std::to_string(objective_.dim()));
  }
}

template <typename T>
SagaOracle<T>::SagaOracle(const LocalObjective<T>& objective, size_t batch, uint64_t seed)
    : objective_(objective), batch_(batch), rng_(seed) {
  assert(batch >= 1);
}

template <typename T>
void SagaOracle<T>::gradient(std::span<const T> x, std::span<T> out) {
  const LocalObjective<T>& f = objective_;
  const size_t rows = f.samples();
  const double s = static_cast<double>(f.scale());
  if (average_.empty()) {
    // The table starts full at the first point: one pass over the node's samples.
    table_.resize(rows);
    average_.assign(x.size(), 0.0);
    for (size_t j = 0; j < rows; ++j) {
      table_[j] = f.lossDerivative(j, x);
      f.accumulateSample(j, s * static_cast<double>(table_[j]), average_);
    }
  }
  const T l2 = f.l2();
  for (size_t k = 0; k < x.size(); ++k) out[k] = l2 * x[k] + static_cast<T>(average_[k]);
  if (rows == 0) return;
  drawn_.resize(batch_);
  derivative_.resize(batch_);
  const T weight = static_cast<T>(s * static_cast<double>(rows) / static_cast<double>(batch_));
  for (size_t b = 0; b < batch_; ++b) {
    const size_t j = rng_.below(rows);
    drawn_[b] = j;
    derivative_[b] = f.lossDerivative(j, x);
    const T c = weight * (derivative_[b] - table_[j]);
    if (c != T(0)) f.addSample(j, c, out);
  }
  // Only now update the table: every draw of the batch used the same old table (a sample drawn
  // twice contributes twice to G but is stored once, its second update being a zero).
  for (size_t b = 0; b < batch_; ++b) {
    const size_t j = drawn_[b];
    const double change = static_cast<double>(derivative_[b]) - static_cast<double>(table_[j]);
    if (change == 0.0) continue;
    f.accumulateSample(j, s * change, average_);  // average += (s change) a_j
    table_[j] = derivative_[b];
  }
}

template <typename T>
void SagaOracle<T>::visitState(core::StateVisitor& v) {
  {
    core::StateVisitor::Scope scope(v, "rng");
    rng_.visitState(v);
  }
  // Both empty before the first call, which fills them; drawn_ and derivative_ are scratch.
  v.sized("table", table_);
  v.sized("average", average_);
  if (v.loading() && !v.failed() &&
      (average_.empty() ? !table_.empty()
                        : table_.size() != objective_.samples() ||
                              average_.size() != static_cast<size_t>(objective_.dim()))) {
    v.fail("checkpoint: saga's table and average have " + std::to_string(table_.size()) +
           " and " + std::to_string(average_.size()) + " values for " +
           std::to_string(objective_.samples()) + " local samples and a model of " +
           std::to_string(objective_.dim()));
  }
}

template <typename T>
std::unique_ptr<GradientOracle<T>> createOracle(const EstimatorSpec& spec,
                                                const Objective<T>& objective, uint64_t seed) {
  const auto* linear = dynamic_cast<const LocalObjective<T>*>(&objective);
  assert(linear || spec.kind == EstimatorSpec::Kind::kFull ||
         spec.kind == EstimatorSpec::Kind::kSgd);
  switch (spec.kind) {
    case EstimatorSpec::Kind::kFull:
      return std::make_unique<ObjectiveOracle<T>>(objective, 0, seed);
    case EstimatorSpec::Kind::kSgd:
      assert(spec.batch > 0);
      return std::make_unique<ObjectiveOracle<T>>(objective, spec.batch, seed);
    case EstimatorSpec::Kind::kLsvrg:
      if (!linear) return nullptr;
      return std::make_unique<LsvrgOracle<T>>(*linear, spec.batch, spec.p, seed);
    case EstimatorSpec::Kind::kSaga:
      if (!linear) return nullptr;
      return std::make_unique<SagaOracle<T>>(*linear, spec.batch, seed);
  }
  return nullptr;
}

template class LsvrgOracle<float>;
template class LsvrgOracle<double>;
template class SagaOracle<float>;
template class SagaOracle<double>;
template std::unique_ptr<GradientOracle<float>> createOracle(const EstimatorSpec&,
                                                             const Objective<float>&, uint64_t);
template std::unique_ptr<GradientOracle<double>> createOracle(const EstimatorSpec&,
                                                              const Objective<double>&, uint64_t);

}  // namespace starling::optim
