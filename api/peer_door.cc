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
Status Peer::mixStart(const DeviceSpan& params) { return impl_->mixStartDevice(params); }
Status Peer::step(const DeviceSpan& params, const DeviceSpan& grads, std::optional<double> lr) {
  return impl_->stepDevice(params, grads, lr);
}
Status Peer::mix(const DeviceSpan& params) {
  STARLING_RETURN_IF_ERROR(impl_->mixStartDevice(params));
  return impl_->mixWait();
}
Status Peer::deviceStream(int device, uint64_t* stream) {
  STARLING_RETURN_IF_ERROR(impl_->openDevice(device, ""));
  if (stream != nullptr) *stream = impl_->device->stream();
  return Status::ok();
}
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
