#include "optim/local_optimizer.h"

#include <cassert>
#include <cmath>
#include <numeric>

namespace starling::optim {

size_t ParameterLayout::dim() const {
  return std::accumulate(sizes.begin(), sizes.end(), size_t{0});
}

ParameterLayout ParameterLayout::single(size_t d) { return ParameterLayout{{d}}; }

ParameterLayout mlpLayout(const std::vector<int>& layers) {
  ParameterLayout layout;
  for (size_t l = 1; l < layers.size(); ++l) {
    layout.sizes.push_back(static_cast<size_t>(layers[l]) * static_cast<size_t>(layers[l - 1]));
    layout.sizes.push_back(static_cast<size_t>(layers[l]));
  }
  return layout;
}

core::Status checkParameterLayout(const ParameterLayout& layout, size_t dim) {
  if (layout.sizes.empty()) return core::invalidArgument("the parameter layout has no tensor");
  for (size_t l = 0; l < layout.sizes.size(); ++l) {
    if (layout.sizes[l] == 0) {
      return core::invalidArgument("tensor " + std::to_string(l) +
                                   " of the parameter layout is empty");
    }
  }
  if (layout.dim() != dim) {
    return core::invalidArgument("the parameter layout's tensors hold " +
                                 std::to_string(layout.dim()) + " parameters, the model " +
                                 std::to_string(dim));
  }
  return core::Status::ok();
}

const char* localOptimizerKindName(LocalOptimizerSpec::Kind kind) {
  switch (kind) {
    case LocalOptimizerSpec::Kind::kSgd:
      return "sgd";
    case LocalOptimizerSpec::Kind::kMomentum:
      return "momentum";
    case LocalOptimizerSpec::Kind::kAdam:
      return "adam";
    case LocalOptimizerSpec::Kind::kLamb:
      return "lamb";
  }
  return "unknown";
}

namespace {

core::Status inUnitInterval(const char* name, double v) {
  if (!(v >= 0.0 && v < 1.0)) {
    return core::invalidArgument(std::string("local optimizer: ") + name +
                                 " must be in [0, 1), got " + std::to_string(v));
  }
  return core::Status::ok();
}

}  // namespace

core::Status checkLocalOptimizerSpec(const LocalOptimizerSpec& spec) {
  using K = LocalOptimizerSpec::Kind;
  if (spec.kind != K::kSgd && spec.kind != K::kMomentum && spec.kind != K::kAdam &&
      spec.kind != K::kLamb) {
    return core::invalidArgument("local optimizer: unknown kind");
  }
  if (!(spec.weightDecay >= 0.0 && std::isfinite(spec.weightDecay))) {
    return core::invalidArgument("local optimizer: weight_decay must be finite and >= 0, got " +
                                 std::to_string(spec.weightDecay));
  }
  if (spec.kind == K::kMomentum) {
    STARLING_RETURN_IF_ERROR(inUnitInterval("momentum", spec.momentum));
  }
  if (spec.kind == K::kAdam || spec.kind == K::kLamb) {
    STARLING_RETURN_IF_ERROR(inUnitInterval("beta1", spec.beta1));
    STARLING_RETURN_IF_ERROR(inUnitInterval("beta2", spec.beta2));
    if (!(spec.eps > 0.0 && std::isfinite(spec.eps))) {
      return core::invalidArgument("local optimizer: eps must be finite and > 0, got " +
                                   std::to_string(spec.eps));
    }
  }
  return core::Status::ok();
}

template <typename T>
core::Result<LocalOptimizer<T>> LocalOptimizer<T>::create(const LocalOptimizerSpec& spec,
                                                          ParameterLayout layout, size_t dim) {
  STARLING_RETURN_IF_ERROR(checkLocalOptimizerSpec(spec));
  STARLING_RETURN_IF_ERROR(checkParameterLayout(layout, dim));
  return LocalOptimizer<T>(spec, std::move(layout));
}

template <typename T>
LocalOptimizer<T>::LocalOptimizer(const LocalOptimizerSpec& spec, ParameterLayout layout)
    : spec_(spec), layout_(std::move(layout)), dim_(layout_.dim()) {
  reset();
}

template <typename T>
void LocalOptimizer<T>::reset() {
  using K = LocalOptimizerSpec::Kind;
  step_ = 0;
  m_.assign(spec_.kind == K::kSgd ? 0 : dim_, T(0));
  v_.assign(spec_.kind == K::kAdam || spec_.kind == K::kLamb ? dim_ : 0, T(0));
  trust_.assign(layout_.sizes.size(), 1.0);
}

template <typename T>
void LocalOptimizer<T>::direction(std::span<const T> x, std::span<const T> grad, std::span<T> out) {
  using K = LocalOptimizerSpec::Kind;
  assert(x.size() == dim_ && grad.size() == dim_ && out.size() == dim_);
  assert(out.data() == grad.data() || out.data() + dim_ <= grad.data() ||
         grad.data() + dim_ <= out.data());
  ++step_;
  const double wd = spec_.weightDecay;
  switch (spec_.kind) {
    case K::kSgd:
      for (size_t k = 0; k < dim_; ++k) {
        out[k] = static_cast<T>(static_cast<double>(grad[k]) + wd * static_cast<double>(x[k]));
      }
      return;
    case K::kMomentum: {
      const double mu = spec_.momentum;
      for (size_t k = 0; k < dim_; ++k) {
        const double g = grad[k];
        const double b = mu * static_cast<double>(m_[k]) + g;
        m_[k] = static_cast<T>(b);
        const double u = spec_.nesterov ? g + mu * b : b;
        out[k] = static_cast<T>(u + wd * static_cast<double>(x[k]));
      }
      return;
    }
    case K::kAdam:
    case K::kLamb: {
      const double b1 = spec_.beta1, b2 = spec_.beta2, eps = spec_.eps;
      const double t = static_cast<double>(step_);
      const double c1 = spec_.biasCorrection ? 1.0 / (1.0 - std::pow(b1, t)) : 1.0;
      const double c2 = spec_.biasCorrection ? 1.0 / (1.0 - std::pow(b2, t)) : 1.0;
      for (size_t k = 0; k < dim_; ++k) {
        const double g = grad[k];
        const double m = b1 * static_cast<double>(m_[k]) + (1.0 - b1) * g;
        const double v = b2 * static_cast<double>(v_[k]) + (1.0 - b2) * g * g;
        m_[k] = static_cast<T>(m);
        v_[k] = static_cast<T>(v);
        out[k] =
            static_cast<T>((m * c1) / (std::sqrt(v * c2) + eps) + wd * static_cast<double>(x[k]));
      }
      if (spec_.kind == K::kAdam) return;
      // LAMB: rescale each tensor by its trust ratio ||x_l|| / ||r_l||.
      size_t begin = 0;
      for (size_t l = 0; l < layout_.sizes.size(); ++l) {
        const size_t end = begin + layout_.sizes[l];
        double xx = 0.0, rr = 0.0;
        for (size_t k = begin; k < end; ++k) {
          xx += static_cast<double>(x[k]) * static_cast<double>(x[k]);
          rr += static_cast<double>(out[k]) * static_cast<double>(out[k]);
        }
        const double ratio = xx > 0.0 && rr > 0.0 ? std::sqrt(xx) / std::sqrt(rr) : 1.0;
        trust_[l] = ratio;
        if (ratio != 1.0) {
          for (size_t k = begin; k < end; ++k) {
            out[k] = static_cast<T>(ratio * static_cast<double>(out[k]));
          }
        }
        begin = end;
      }
      return;
    }
  }
}

template <typename T>
void LocalOptimizer<T>::visitState(core::StateVisitor& v) {
  using K = LocalOptimizerSpec::Kind;
  std::string kind = localOptimizerKindName(spec_.kind);
  v.text("kind", kind);
  if (v.failed()) return;
  if (v.loading() && kind != localOptimizerKindName(spec_.kind)) {
    return v.fail("checkpoint holds the state of a " + kind + " local optimizer, this one is " +
                  localOptimizerKindName(spec_.kind));
  }
  v.scalar("step", step_);
  if (spec_.kind == K::kMomentum) v.fixed("momentum", m_);
  if (spec_.kind == K::kAdam || spec_.kind == K::kLamb) {
    v.fixed("m", m_);
    v.fixed("v", v_);
  }
}

template class LocalOptimizer<float>;
template class LocalOptimizer<double>;

}  // namespace starling::optim
