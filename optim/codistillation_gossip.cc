#include "optim/codistillation_gossip.h"

#include <algorithm>
#include <cassert>
#include <map>

namespace starling::optim {
namespace {

template <typename T>
class CodistillationGossip final : public Algorithm<T> {
 public:
  CodistillationGossip(const CodistillationConfig& config, std::span<const T> x0,
                       GradientOracle<T>& oracle, NeighborModels<T>& neighbors)
      : config_(config),
        x_(x0.begin(), x0.end()),
        grad_(x0.size()),
        oracle_(oracle),
        neighbors_(neighbors) {
    assert(config_.period >= 1);
  }

  size_t messageSize() const override { return x_.size(); }
  bool exchangesIn(uint64_t round) const override { return config_.exchangesIn(round); }

  void prepare(const RoundInfo& info, std::span<T> out) override {
    neighbors_.active = config_.activeIn(info.round) && !neighbors_.models.empty();
    oracle_.gradient(x_, grad_);
    const T eta = static_cast<T>(info.stepSize);
    for (size_t k = 0; k < x_.size(); ++k) x_[k] -= eta * grad_[k];
    if (!out.empty()) std::copy(x_.begin(), x_.end(), out.begin());
  }

  // The model stays the node's own (never averaged); an exchange round only refreshes the
  // copies. With a lossy codec they are the decoded models, as the neighbours' predictions
  // would be from what travelled.
  void absorb(const RoundInfo& info, std::span<const T> /*own*/,
              std::span<const NeighborMessage<T>> nbrs) override {
    if (!config_.exchangesIn(info.round)) return;
    neighbors_.peers.clear();
    neighbors_.models.resize(nbrs.size());
    for (size_t k = 0; k < nbrs.size(); ++k) {
      neighbors_.peers.push_back(nbrs[k].peer);
      neighbors_.models[k].assign(nbrs[k].message.begin(), nbrs[k].message.end());
    }
    neighbors_.refreshed = info.round;
  }

  std::span<const T> model() const override { return x_; }

  // The model and the copies (the next rounds' teachers); grad_ is rewritten before it is read
  // and `active` is set by every prepare().
  void visitState(core::StateVisitor& v) override {
    v.fixed("x", x_);
    v.scalar("refreshed", neighbors_.refreshed);
    std::map<int, std::vector<T>> copies;
    if (!v.loading()) {
      for (size_t k = 0; k < neighbors_.peers.size(); ++k) {
        copies[neighbors_.peers[k]] = neighbors_.models[k];
      }
    }
    v.perPeer("neighbors", copies);
    if (!v.loading() || v.failed()) return;
    neighbors_.peers.clear();
    neighbors_.models.clear();
    for (auto& [peer, model] : copies) {
      if (model.size() != x_.size()) {
        return v.fail("checkpoint: the copy of rank " + std::to_string(peer) + "'s model has " +
                      std::to_string(model.size()) + " values, expected " +
                      std::to_string(x_.size()));
      }
      neighbors_.peers.push_back(peer);
      neighbors_.models.push_back(std::move(model));
    }
  }

 private:
  const CodistillationConfig config_;
  std::vector<T> x_, grad_;
  GradientOracle<T>& oracle_;
  NeighborModels<T>& neighbors_;
};

}  // namespace

template <typename T>
std::unique_ptr<Algorithm<T>> createCodistillationGossip(const AlgorithmSpec& spec,
                                                         std::span<const T> x0,
                                                         GradientOracle<T>& oracle,
                                                         NeighborModels<T>& neighbors) {
  assert(spec.codistillation.has_value());
  return std::make_unique<CodistillationGossip<T>>(*spec.codistillation, x0, oracle, neighbors);
}

template std::unique_ptr<Algorithm<float>> createCodistillationGossip<float>(
    const AlgorithmSpec&, std::span<const float>, GradientOracle<float>&, NeighborModels<float>&);
template std::unique_ptr<Algorithm<double>> createCodistillationGossip<double>(
    const AlgorithmSpec&, std::span<const double>, GradientOracle<double>&,
    NeighborModels<double>&);

}  // namespace starling::optim
