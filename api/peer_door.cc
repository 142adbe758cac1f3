// starling::Peer, the public door: every call forwards to Peer::Impl (api/peer.cc has the
// rounds, api/peer_factory.cc the ways to make one).
#include <starling/peer.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "api/peer_impl.h"

namespace starling {

namespace {

// A step that diverged because the trainer's own gradient was not finite says so, rather than
// suggesting a smaller step size (the check costs nothing unless the step diverged).
template <typename T>
Status explainDivergence(Status s, std::span<const T> grads) {
  if (s.code() != StatusCode::kDiverged) return s;
  for (size_t k = 0; k < grads.size(); ++k) {
    if (!std::isfinite(grads[k])) {
      return Status(StatusCode::kDiverged,
                    "step: the gradient given to step() was not finite (element " +
                        std::to_string(k) + " is " + std::to_string(grads[k]) +
                        "): check the trainer's loss and gradient before step(), not the step "
                        "size (" + s.message() + ")");
    }
  }
  return s;
}

}  // namespace

// The public door: every call forwards to Impl.
Peer::Peer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Peer::~Peer() { (void)impl_->close(/*fromDestructor=*/true); }

Status Peer::step(std::span<float> params, std::span<const float> grads, std::optional<double> lr) {
  return explainDivergence(impl_->step(params, grads, lr), grads);
}
Status Peer::step(std::span<double> params, std::span<const double> grads,
                  std::optional<double> lr) {
  return explainDivergence(impl_->step(params, grads, lr), grads);
}
Status Peer::step(std::span<float> params, std::span<const float> grads, std::optional<double> lr,
                  const StepStats& stats) {
  return explainDivergence(impl_->step(params, grads, lr, stats), grads);
}
Status Peer::step(std::span<double> params, std::span<const double> grads,
                  std::optional<double> lr, const StepStats& stats) {
  return explainDivergence(impl_->step(params, grads, lr, stats), grads);
}
Status Peer::mixStart(std::span<float> params) { return impl_->mixStart(params); }
Status Peer::mixStart(std::span<double> params) { return impl_->mixStart(params); }
Status Peer::mixWait() { return impl_->mixWait(); }
Status Peer::poll() { return impl_->poll(); }
Status Peer::restore(std::span<float> params) { return impl_->restore(params); }
Status Peer::restore(std::span<double> params) { return impl_->restore(params); }
Status Peer::setLayout(std::vector<size_t> sizes) { return impl_->setLayout(std::move(sizes)); }
const std::vector<size_t>& Peer::layout() const { return impl_->layout; }

Status Peer::mix(std::span<float> params) {
  STARLING_RETURN_IF_ERROR(impl_->mixStart(params));
  return impl_->mixWait();
}
Status Peer::mix(std::span<double> params) {
  STARLING_RETURN_IF_ERROR(impl_->mixStart(params));
  return impl_->mixWait();
}
namespace {
template <typename T>
Status mixReferenceOf(Peer::Impl& impl, std::span<const T> start) {
  if (impl.mixStarted()) {
    return core::failedPrecondition("mixReference: mix() has run; the reference points start "
                                    "before the first mix()");
  }
  impl.mixReference.assign(start.begin(), start.end());
  return Status::ok();
}
}  // namespace

Status Peer::mixReference(std::span<const float> start) { return mixReferenceOf(*impl_, start); }
Status Peer::mixReference(std::span<const double> start) { return mixReferenceOf(*impl_, start); }

namespace {
template <typename T>
std::vector<T>& dilocoBuffer(Peer::Impl& impl) {
  if constexpr (std::is_same_v<T, float>) {
    return impl.dilocoBuffer32;
  } else {
    return impl.dilocoBuffer64;
  }
}

template <typename T>
Status dilocoStepOf(Peer& peer, Peer::Impl& impl, std::span<T> params, bool* outerRound) {
  if (outerRound) *outerRound = false;
  const auto keys = peer.diloco();
  if (keys && keys->seconds > 0) {
    return core::failedPrecondition(
        "dilocoStep: the scenario's inner_steps is by_time, which node-launcher's clock decides "
        "on the scenario's problem; a trainer counts its own inner steps: give a number");
  }
  if (keys && keys->overlap) {
    return core::failedPrecondition(
        "dilocoStep: the scenario's overlap is not built for C++ trainers (starling.torch.DiLoCo "
        "and node-launcher run it; docs/algorithms.md §29)");
  }
  if (!keys || (keys->outer != "sgd" && keys->outer != "nesterov" && keys->outer != "noloco")) {
    return core::failedPrecondition(
        "dilocoStep: the scenario's algorithm must be diloco with outer sgd, nesterov or noloco (" +
        (keys ? "outer is " + keys->outer : std::string("it is not diloco")) +
        "; docs/algorithms.md §29)");
  }
  const size_t fragments = std::max<uint64_t>(1, keys->fragments);
  const bool noloco = keys->outer == "noloco";
  if (fragments > 1 && keys->compressed && !keys->compressedDifferences) {
    return core::failedPrecondition(
        "dilocoStep: fragments with error feedback: each fragment would need an error-feedback "
        "memory of its own (node-launcher runs it)");
  }
  if (impl.dilocoTheta.empty()) {
    // The first call, before any inner step: the outer model starts here, and so do the
    // reference points of compressed differences (every rank starts from the same model).
    impl.dilocoTheta.assign(params.begin(), params.end());
    impl.dilocoMomentum.assign(params.size(), 0.0);
    if (keys->compressedDifferences && !noloco) {
      STARLING_RETURN_IF_ERROR(peer.mixReference(std::span<const T>(params)));
    }
    return Status::ok();
  }
  if (impl.dilocoTheta.size() != params.size()) {
    return core::invalidArgument("dilocoStep: " + std::to_string(params.size()) +
                                 " parameters, the first call had " +
                                 std::to_string(impl.dilocoTheta.size()));
  }
  if (++impl.dilocoSteps % (keys->innerSteps / fragments) != 0) return Status::ok();
  // The round's fragment (all of the model without fragments): fragment r mod F of the peer's
  // round r, ceil(d / F) values, the last one padded with zeros in the exchange.
  const size_t d = params.size(), width = (d + fragments - 1) / fragments;
  const size_t lo = std::min<size_t>(d, (peer.round() % fragments) * width);
  const size_t n = std::min(d, lo + width) - lo;
  std::span<const T> xbar, thetabar;
  if (fragments == 1 && !noloco) {
    STARLING_RETURN_IF_ERROR(peer.mix(params));  // params: the mixed local models, x-bar
    xbar = params;
  } else {
    std::vector<T>& buf = dilocoBuffer<T>(impl);
    buf.assign((noloco ? 2 : 1) * width, T(0));
    const size_t at = noloco ? width : 0;  // noloco sends [theta, x]
    for (size_t k = 0; k < n; ++k) {
      if (noloco) buf[k] = static_cast<T>(impl.dilocoTheta[lo + k]);
      buf[at + k] = params[lo + k];
    }
    STARLING_RETURN_IF_ERROR(peer.mix(std::span<T>(buf)));
    xbar = std::span<const T>(buf).subspan(at, n);
    thetabar = std::span<const T>(buf).first(noloco ? n : 0);
  }
  const double lr = keys->outerLr, mu = keys->outerMomentum;
  for (size_t k = 0; k < n; ++k) {
    double& theta = impl.dilocoTheta[lo + k];
    double& m = impl.dilocoMomentum[lo + k];
    const double x = static_cast<double>(xbar[k]);
    if (noloco) {
      // m <- mu m - lr (theta-bar - x-bar) - pull (theta - theta-bar); theta += m.
      const double tb = static_cast<double>(thetabar[k]);
      m = mu * m - lr * (tb - x) - keys->pull * (theta - tb);
      theta += m;
    } else {
      const double delta = theta - x;
      double u = delta;
      if (keys->outer == "nesterov") {
        m = mu * m + delta;
        u = delta + mu * m;
      }
      theta = x + (delta - lr * u);
    }
    params[lo + k] = static_cast<T>(theta);
  }
  if (outerRound) *outerRound = true;
  return Status::ok();
}
}  // namespace

Status Peer::dilocoStep(std::span<float> params, bool* outerRound) {
  return dilocoStepOf(*this, *impl_, params, outerRound);
}
Status Peer::dilocoStep(std::span<double> params, bool* outerRound) {
  return dilocoStepOf(*this, *impl_, params, outerRound);
}
int Peer::rank() const { return impl_->rank; }
int Peer::nodes() const { return impl_->scenario.nodes; }
uint64_t Peer::round() const { return impl_->rounds(); }
uint64_t Peer::lastRound() const { return impl_->scenario.rounds; }
bool Peer::rejoining() const { return impl_->rejoin; }
std::optional<Peer::Codistillation> Peer::codistillation() const {
  const auto& c = impl_->scenario.algorithm.codistillation;
  if (!c) return std::nullopt;
  return Codistillation{c->loss.alpha, c->loss.distance == optim::CodistillationSpec::Distance::kKl,
                        c->period, c->burnIn};
}
std::optional<Peer::Diloco> Peer::diloco() const {
  const auto& a = impl_->scenario.algorithm;
  if (a.kind != optim::AlgorithmKind::kDiloco) return std::nullopt;
  return Diloco{a.diloco.innerSteps,
                optim::dilocoOuterName(a.diloco.outer),
                a.diloco.outerLr,
                a.diloco.outerMomentum,
                a.diloco.fragments,
                a.diloco.overlap,
                !compression::sendsIdentityOnly(impl_->scenario.compression),
                a.diloco.compressedDifferences,
                a.diloco.pull,
                a.diloco.seconds};
}
Status Peer::neighbourModels(std::vector<std::span<const float>>& out) const {
  return impl_->neighbourModels(out);
}
Status Peer::neighbourModels(std::vector<std::span<const double>>& out) const {
  return impl_->neighbourModels(out);
}
Status Peer::log(const std::map<std::string, double>& metrics) { return impl_->log(metrics); }
Status Peer::log(std::string_view name, double value) {
  return impl_->log({{std::string(name), value}});
}
Status Peer::close() { return impl_->close(); }

}  // namespace starling
