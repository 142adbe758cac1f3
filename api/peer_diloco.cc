// starling::Peer's DiLoCo for a trainer's own inner steps (docs/algorithms.md §29):
// dilocoStep, dilocoGradient (exact_diffusion's correction) and dilocoFinish (overlap). The
// same recursion as starling.torch.DiLoCo and as node-launcher's diloco (optim/diloco.cc).
#include <starling/peer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "api/peer_impl.h"

namespace starling {

namespace {

template <typename T>
std::vector<T>& dilocoBuffer(Peer::Impl& impl) {
  if constexpr (std::is_same_v<T, float>) {
    return impl.dilocoBuffer32;
  } else {
    return impl.dilocoBuffer64;
  }
}

// What a trainer's DiLoCo cannot take from the scenario, or kOk.
Status dilocoRefusal(const std::optional<Peer::Diloco>& keys) {
  if (!keys) {
    return core::failedPrecondition(
        "dilocoStep: the scenario's algorithm is not diloco (docs/algorithms.md §29)");
  }
  return Status::ok();
}

// The round's fragment (all of the model without fragments): fragment r mod F of the peer's
// round r, ceil(d / F) values, the last one padded with zeros in the exchange.
std::pair<size_t, size_t> fragmentOf(const Peer& peer, size_t d, size_t fragments) {
  const size_t width = (d + fragments - 1) / fragments;
  const size_t lo = std::min<size_t>(d, (peer.round() % fragments) * width);
  return {lo, std::min(d, lo + width) - lo};
}

// by_time weights each local model by its inner steps, except under exact_diffusion (whose
// fixed point does not depend on them; docs/algorithms.md §29).
bool weighted(const Peer::Diloco& keys) {
  return keys.seconds > 0 && keys.outer != "exact_diffusion";
}

// The exchange's buffer for fragment `f`, [lo, lo + n), of the local model `x`: x there (noloco:
// [theta, x]; by_time: h x and, last, h, the fragment's steps since its last exchange), zeros in
// the padding to ceil(d / F).
template <typename T>
std::vector<T>& fillBuffer(Peer::Impl& impl, const Peer::Diloco& keys, size_t width, size_t f,
                           size_t lo, size_t n, const T* x) {
  const bool noloco = keys.outer == "noloco";
  std::vector<T>& buf = dilocoBuffer<T>(impl);
  buf.assign((noloco ? 2 : 1) * width + (weighted(keys) ? 1 : 0), T(0));
  const size_t at = noloco ? width : 0;  // noloco sends [theta, x]
  const T h = weighted(keys) ? static_cast<T>(impl.dilocoSince[f]) : T(1);
  for (size_t k = 0; k < n; ++k) {
    if (noloco) buf[k] = static_cast<T>(impl.dilocoTheta[lo + k]);
    buf[at + k] = weighted(keys) ? h * x[k] : x[k];
  }
  if (weighted(keys)) buf.back() = h;
  if (keys.seconds > 0) impl.dilocoSince[f] = 0;
  return buf;
}

// x-bar in the mixed buffer (noloco: after theta-bar): by_time's
// sum_j w_ij h_j x_j / sum_j w_ij h_j divided out in place.
template <typename T>
const T* mixedLocal(const Peer::Diloco& keys, std::vector<T>& buf, size_t width, size_t n) {
  T* xbar = buf.data() + (keys.outer == "noloco" ? width : 0);
  if (weighted(keys)) {
    const T total = buf.back();
    for (size_t k = 0; k < n; ++k) xbar[k] /= total;
  }
  return xbar;
}

// Whether the inner step just counted ends a round: every innerSteps / F steps, or by_time when
// the round's seconds / F are up (or it took innerSteps / F steps, the cap).
bool roundDue(Peer::Impl& impl, const Peer::Diloco& keys, size_t fragments) {
  ++impl.dilocoSteps;
  ++impl.dilocoRoundSteps;
  if (impl.dilocoRoundSteps >= keys.innerSteps / fragments) return true;
  if (keys.seconds <= 0) return false;
  const std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - impl.dilocoRoundStart;
  return elapsed.count() >= keys.seconds / static_cast<double>(fragments);
}

// The outer step on theta's elements [lo, lo + n) from the mixed local models x-bar there
// (noloco: and the mixed outer models theta-bar), with exact_diffusion's y from the local model
// as it was sent (impl.dilocoSent). theta's new values stay in impl.dilocoTheta.
template <typename T>
void outerStep(Peer::Impl& impl, const Peer::Diloco& keys, size_t lo, size_t n, const T* xbar,
               const T* thetabar) {
  const double lr = keys.outerLr, mu = keys.outerMomentum;
  const bool noloco = keys.outer == "noloco", nesterov = keys.outer == "nesterov";
  const bool exact = keys.outer == "exact_diffusion";
  // exact_diffusion: y <- y + (x - x-bar) / (2 lr_inner H), H the inner steps a fragment takes
  // between its exchanges (docs/algorithms.md §29).
  const double scale = exact ? 1.0 / (2.0 * impl.dilocoInnerLr * keys.innerSteps) : 0.0;
  for (size_t k = 0; k < n; ++k) {
    double& theta = impl.dilocoTheta[lo + k];
    const double x = static_cast<double>(xbar[k]);
    if (noloco) {
      // m <- mu m - lr (theta-bar - x-bar) - pull (theta - theta-bar); theta += m.
      double& m = impl.dilocoMomentum[lo + k];
      const double tb = static_cast<double>(thetabar[k]);
      m = mu * m - lr * (tb - x) - keys.pull * (theta - tb);
      theta += m;
      continue;
    }
    if (exact) impl.dilocoDual[lo + k] += scale * (impl.dilocoSent[k] - x);
    const double delta = theta - x;
    double u = delta;
    if (nesterov) {
      double& m = impl.dilocoMomentum[lo + k];
      m = mu * m + delta;
      u = delta + mu * m;
    }
    theta = x + (delta - lr * u);
  }
}

// overlap: waits for the exchange in flight and lands its outer step under the inner steps
// taken since: x <- theta + (x - sent) on its fragment.
template <typename T>
Status finishPending(Peer& peer, Peer::Impl& impl, const Peer::Diloco& keys, std::span<T> params) {
  if (!impl.dilocoPending) return Status::ok();
  const auto [lo, n] = *impl.dilocoPending;
  impl.dilocoPending.reset();
  STARLING_RETURN_IF_ERROR(peer.mixWait());
  std::vector<T>& buf = dilocoBuffer<T>(impl);
  const size_t fragments = std::max<uint64_t>(1, keys.fragments);
  const size_t width = (impl.dilocoTheta.size() + fragments - 1) / fragments;
  outerStep<T>(impl, keys, lo, n, mixedLocal(keys, buf, width, n), buf.data());
  for (size_t k = 0; k < n; ++k) {
    const double moved = static_cast<double>(params[lo + k]) - impl.dilocoSent[k];
    params[lo + k] = static_cast<T>(impl.dilocoTheta[lo + k] + moved);
  }
  return Status::ok();
}

template <typename T>
Status dilocoStepOf(Peer& peer, Peer::Impl& impl, std::span<T> params, bool* outerRound) {
  if (outerRound) *outerRound = false;
  const auto keys = peer.diloco();
  STARLING_RETURN_IF_ERROR(dilocoRefusal(keys));
  const size_t fragments = std::max<uint64_t>(1, keys->fragments);
  const bool noloco = keys->outer == "noloco", exact = keys->outer == "exact_diffusion";
  if (impl.dilocoTheta.empty()) {
    // The first call, before any inner step: the outer model starts here, and so do the
    // reference points of compressed differences (every rank starts from the same model).
    impl.dilocoTheta.assign(params.begin(), params.end());
    impl.dilocoMomentum.assign(params.size(), 0.0);
    impl.dilocoDual.assign(exact ? params.size() : 0, 0.0);
    impl.dilocoSince.assign(fragments, 0);
    impl.dilocoRoundStart = std::chrono::steady_clock::now();
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
  if (!roundDue(impl, *keys, fragments)) {
    // Between rounds: move an exchange in flight along.
    return impl.dilocoPending ? peer.poll() : Status::ok();
  }
  for (uint64_t& h : impl.dilocoSince) h += impl.dilocoRoundSteps;
  impl.dilocoRoundSteps = 0;
  if (exact && impl.dilocoInnerLr <= 0) {
    return core::failedPrecondition(
        "dilocoStep: the exact_diffusion outer step corrects every inner step's gradient: call "
        "dilocoGradient(grad, lr) before each inner step (docs/algorithms.md §29)");
  }
  if (outerRound) *outerRound = true;
  const size_t d = params.size(), width = (d + fragments - 1) / fragments;
  Status s = Status::ok();
  if (keys->overlap) {
    // Eager (one round late): the round sent H / F steps ago lands now, and this round's
    // fragment of the local model leaves at once, travelling during the next inner steps.
    s = finishPending(peer, impl, *keys, params);
    if (s.isOk()) {
      const size_t f = peer.round() % fragments;
      const auto [lo, n] = fragmentOf(peer, d, fragments);
      impl.dilocoSent.assign(params.begin() + lo, params.begin() + lo + n);
      std::vector<T>& buf = fillBuffer(impl, *keys, width, f, lo, n, params.data() + lo);
      s = peer.mixStart(std::span<T>(buf));
      if (s.isOk()) impl.dilocoPending = {lo, n};
    }
  } else {
    const size_t f = peer.round() % fragments;
    const auto [lo, n] = fragmentOf(peer, d, fragments);
    if (exact) impl.dilocoSent.assign(params.begin() + lo, params.begin() + lo + n);
    const T* xbar = params.data();
    const T* thetabar = nullptr;
    if (fragments == 1 && !noloco && !weighted(*keys)) {
      if (keys->seconds > 0) impl.dilocoSince[0] = 0;
      s = peer.mix(params);  // params: the mixed local models, x-bar
    } else {
      std::vector<T>& buf = fillBuffer(impl, *keys, width, f, lo, n, params.data() + lo);
      s = peer.mix(std::span<T>(buf));
      xbar = mixedLocal(*keys, buf, width, n);
      thetabar = buf.data();
    }
    if (s.isOk()) {
      outerStep<T>(impl, *keys, lo, n, xbar, thetabar);
      for (size_t k = 0; k < n; ++k) params[lo + k] = static_cast<T>(impl.dilocoTheta[lo + k]);
    }
  }
  // by_time: the next round's time counts from here (the exchange included, unless overlapped).
  impl.dilocoRoundStart = std::chrono::steady_clock::now();
  return s;
}

template <typename T>
Status dilocoGradientOf(Peer& peer, Peer::Impl& impl, std::span<T> grad, double lr) {
  const auto keys = peer.diloco();
  STARLING_RETURN_IF_ERROR(dilocoRefusal(keys));
  if (keys->outer != "exact_diffusion") return Status::ok();  // nothing to correct
  if (!(lr > 0) || !std::isfinite(lr)) {
    return core::invalidArgument("dilocoGradient: the inner step size must be positive and "
                                 "finite; got " + std::to_string(lr));
  }
  if (impl.dilocoTheta.empty()) {
    return core::failedPrecondition("dilocoGradient: call dilocoStep(params) once before the "
                                    "first inner step (it takes the outer model)");
  }
  if (grad.size() != impl.dilocoDual.size()) {
    return core::invalidArgument("dilocoGradient: " + std::to_string(grad.size()) +
                                 " gradient values for a model of " +
                                 std::to_string(impl.dilocoDual.size()));
  }
  if (impl.dilocoInnerLr > 0 && lr != impl.dilocoInnerLr) {
    return core::invalidArgument(
        "dilocoGradient: the inner step size changed from " + std::to_string(impl.dilocoInnerLr) +
        " to " + std::to_string(lr) + "; the exact_diffusion correction's fixed point assumes one");
  }
  impl.dilocoInnerLr = lr;
  for (size_t k = 0; k < grad.size(); ++k) {
    grad[k] = static_cast<T>(static_cast<double>(grad[k]) + impl.dilocoDual[k]);
  }
  return Status::ok();
}

template <typename T>
Status dilocoFinishOf(Peer& peer, Peer::Impl& impl, std::span<T> params) {
  if (!impl.dilocoPending) return Status::ok();
  if (params.size() != impl.dilocoTheta.size()) {
    return core::invalidArgument("dilocoFinish: " + std::to_string(params.size()) +
                                 " parameters, dilocoStep had " +
                                 std::to_string(impl.dilocoTheta.size()));
  }
  const auto keys = peer.diloco();
  STARLING_RETURN_IF_ERROR(dilocoRefusal(keys));
  return finishPending(peer, impl, *keys, params);
}

}  // namespace

Status Peer::dilocoStep(std::span<float> params, bool* outerRound) {
  return dilocoStepOf(*this, *impl_, params, outerRound);
}
Status Peer::dilocoStep(std::span<double> params, bool* outerRound) {
  return dilocoStepOf(*this, *impl_, params, outerRound);
}
Status Peer::dilocoGradient(std::span<float> grad, double lr) {
  return dilocoGradientOf(*this, *impl_, grad, lr);
}
Status Peer::dilocoGradient(std::span<double> grad, double lr) {
  return dilocoGradientOf(*this, *impl_, grad, lr);
}
Status Peer::dilocoFinish(std::span<float> params) { return dilocoFinishOf(*this, *impl_, params); }
Status Peer::dilocoFinish(std::span<double> params) {
  return dilocoFinishOf(*this, *impl_, params);
}

}  // namespace starling
