#include "optim/gossip.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "optim/combine.h"

namespace starling::optim {
namespace {

template <typename T>
class PlainGossip final : public GossipAlgorithm<T> {
 public:
  PlainGossip(double gamma, size_t dim) : gamma_(static_cast<T>(gamma)), x_(dim, T(0)) {}

  void setModel(std::span<const T> x) override { std::copy(x.begin(), x.end(), x_.begin()); }
  void lend(std::span<T> user) override {
    user_ = user;
    combined_ = mixed_ = false;
  }
  bool release() override {
    // Never reads the buffer: release() also runs where the trainer may already have freed it
    // (a Peer destroyed with a mix in flight, after its round failed).
    if (user_.data() == nullptr) return false;
    user_ = {};
    combined_ = false;
    return std::exchange(mixed_, false);
  }
  size_t messageSize() const override { return x_.size(); }
  void prepare(const RoundInfo&, std::span<T> out) override {
    const std::span<const T> x = current();
    std::copy(x.begin(), x.end(), out.begin());
  }
  bool preparesInBlocks() const override { return true; }
  void prepareBlock(const RoundInfo&, size_t offset, std::span<T> out) override {
    std::copy_n(current().begin() + static_cast<std::ptrdiff_t>(offset), out.size(), out.begin());
  }
  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    combine(info, own, nbrs, nullptr);
  }
  // The same combine, checking each block of x right after writing it (Algorithm::absorbWithin).
  bool absorbWithin(const RoundInfo& info, std::span<const T> own,
                    std::span<const NeighborMessage<T>> nbrs, T limit) override {
    return combine(info, own, nbrs, &limit);
  }
  std::span<const T> model() const override { return current(); }

 private:
  // The model: the lent buffer until this round's combine has written x_, x_ otherwise.
  std::span<const T> current() const {
    if (user_.data() != nullptr && !combined_) return user_;
    return x_;
  }

  bool combine(const RoundInfo&, std::span<const T> own, std::span<const NeighborMessage<T>> nbrs,
               const T* limit) {
    // x = own + sum_j gamma w_ij (m_j - own) (optim/combine.h). `own` is this round's message,
    // i.e. the model itself (the identity codec), read from the frame; a lent buffer is written
    // next to x_, each value once.
    T* user = user_.data();
    const bool within = detail::combine<T>(x_.data(), user, own.data(), own.data(), nbrs, gamma_,
                                           0, x_.size(), limit);
    if (user != nullptr) {
      // A model that left the limit is an error, and the trainer keeps the parameters it lent
      // (its message holds them exactly); x_ keeps the result for the error to name.
      if (!within) std::copy(own.begin(), own.end(), user_.begin());
      combined_ = true;
      mixed_ = within;
    }
    return within;
  }

  const T gamma_;
  std::vector<T> x_;
  std::span<T> user_;      // the trainer's buffer, lent for one round (lend/release)
  bool combined_ = false;  // this loan's combine has written x_
  bool mixed_ = false;     // ... and user_ holds the mixed model
};

template <typename T>
class ChocoGossip final : public GossipAlgorithm<T> {
 public:
  ChocoGossip(double gamma, size_t dim, bool tracking)
      : gamma_(static_cast<T>(gamma)), tracking_(tracking), x_(dim, T(0)), hat_(dim, T(0)),
        s_(dim, T(0)) {}

  void setModel(std::span<const T> x) override { std::copy(x.begin(), x.end(), x_.begin()); }
  size_t messageSize() const override { return x_.size(); }
  void prepare(const RoundInfo&, std::span<T> out) override {
    for (size_t k = 0; k < x_.size(); ++k) out[k] = x_[k] - hat_[k];
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t d = x_.size();
    if (!tracking_) {
      const T self = static_cast<T>(info.selfWeight);
      for (size_t k = 0; k < d; ++k) {
        hat_[k] += own[k];
        s_[k] += self * own[k];
      }
      for (const auto& n : nbrs) {
        const T w = static_cast<T>(n.weight);
        for (size_t k = 0; k < d; ++k) s_[k] += w * n.message[k];
      }
      step();
      return;
    }
    for (size_t k = 0; k < d; ++k) hat_[k] += own[k];
    for (const auto& n : nbrs) {
      std::vector<T>& h = peers_.try_emplace(n.peer, d, T(0)).first->second;
      for (size_t k = 0; k < d; ++k) h[k] += n.message[k];
    }
    for (const auto& n : nbrs) {
      if (n.weight == 0.0) continue;
      const T w = gamma_ * static_cast<T>(n.weight);
      const std::vector<T>& h = peers_.at(n.peer);
      for (size_t k = 0; k < d; ++k) x_[k] += w * (h[k] - hat_[k]);
    }
  }

  bool tracksNeighbors() const override { return tracking_; }
  bool absorbsCombined() const override { return !tracking_; }
  void absorbCombined(const RoundInfo&, std::span<const T> own,
                      std::span<const T> combined) override {
    for (size_t k = 0; k < x_.size(); ++k) {
      hat_[k] += own[k];
      s_[k] += combined[k];
    }
    step();
  }
  std::span<const T> model() const override { return x_; }

 private:
  // x <- x + gamma (s - x-hat) = x + gamma sum_j w_ij (x-hat_j - x-hat_i).
  void step() {
    for (size_t k = 0; k < x_.size(); ++k) x_[k] += gamma_ * (s_[k] - hat_[k]);
  }

  const T gamma_;
  const bool tracking_;
  std::vector<T> x_, hat_, s_;
  std::map<int, std::vector<T>> peers_;  // time-varying: x-hat_j of every neighbour heard from
};

}  // namespace

template <typename T>
std::unique_ptr<GossipAlgorithm<T>> createGossip(double gamma, size_t dim, bool compressed,
                                                 bool timeVarying) {
  if (!compressed) return std::make_unique<PlainGossip<T>>(gamma, dim);
  return std::make_unique<ChocoGossip<T>>(gamma, dim, timeVarying);
}

template std::unique_ptr<GossipAlgorithm<float>> createGossip<float>(double, size_t, bool, bool);
template std::unique_ptr<GossipAlgorithm<double>> createGossip<double>(double, size_t, bool, bool);

}  // namespace starling::optim
