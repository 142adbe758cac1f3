// starling::Peer, the public door: every call forwards to Peer::Impl (api/peer.cc has the
// rounds, api/peer_factory.cc the ways to make one).
#include <starling/peer.h>

#include <optional>
#include <string>
#include <utility>

#include "api/peer_impl.h"

namespace starling {

// The public door: every call forwards to Impl.
Peer::Peer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Peer::~Peer() { (void)impl_->close(/*fromDestructor=*/true); }

Status Peer::step(std::span<float> params, std::span<const float> grads, std::optional<double> lr) {
  return impl_->step(params, grads, lr);
}
Status Peer::step(std::span<double> params, std::span<const double> grads,
                  std::optional<double> lr) {
  return impl_->step(params, grads, lr);
}
Status Peer::step(std::span<float> params, std::span<const float> grads, std::optional<double> lr,
                  const StepStats& stats) {
  return impl_->step(params, grads, lr, stats);
}
Status Peer::step(std::span<double> params, std::span<const double> grads,
                  std::optional<double> lr, const StepStats& stats) {
  return impl_->step(params, grads, lr, stats);
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
int Peer::rank() const { return impl_->rank; }
int Peer::nodes() const { return impl_->scenario.nodes; }
uint64_t Peer::round() const { return impl_->rounds(); }
std::optional<Peer::Codistillation> Peer::codistillation() const {
  const auto& c = impl_->scenario.algorithm.codistillation;
  if (!c) return std::nullopt;
  return Codistillation{c->loss.alpha, c->loss.distance == optim::CodistillationSpec::Distance::kKl,
                        c->period, c->burnIn};
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
