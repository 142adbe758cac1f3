#include "optim/gossip.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "core/within.h"

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
    if (user_.data() == nullptr) return false;
    if (!combined_) std::copy(user_.begin(), user_.end(), x_.begin());  // as setModel(user) would
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
    // x = own + sum_j gamma w_ij (m_j - own), each element's terms added in neighbour order, so
    // that every way of walking it below gives the same bits. `own` is this round's message,
    // i.e. the model itself (the identity codec), read from the frame; a lent buffer is written
    // next to x_. The model is checked a block at a time while the block is in L1.
    constexpr size_t kBlock = 1024;
    bool within = true;
    const size_t d = x_.size();
    T* x = x_.data();
    T* user = user_.data();
    const T* self = own.data();
    const size_t count = nbrs.size();
    const T* m[kFused];
    T w[kFused];
    for (size_t j = 0; j < std::min(count, kFused); ++j) {
      m[j] = nbrs[j].message.data();
      w[j] = gamma_ * static_cast<T>(nbrs[j].weight);
    }
    for (size_t b = 0; b < d; b += kBlock) {
      const size_t e = std::min(d, b + kBlock);
      switch (count) {
        // Up to kFused neighbours (a ring, a torus, most graphs): one loop reading every input
        // as a steady stream, which the hardware prefetchers keep ahead of, and writing each
        // output once.
        case 0: fused<0>(x, user, self, m, w, b, e); break;
        case 1: fused<1>(x, user, self, m, w, b, e); break;
        case 2: fused<2>(x, user, self, m, w, b, e); break;
        case 3: fused<3>(x, user, self, m, w, b, e); break;
        case 4: fused<4>(x, user, self, m, w, b, e); break;
        default:
          // More: a pass per neighbour over a block that stays in L1.
          for (size_t k = b; k < e; ++k) x[k] = self[k];
          for (const auto& n : nbrs) {
            const T wn = gamma_ * static_cast<T>(n.weight);
            const T* __restrict mn = n.message.data();
            for (size_t k = b; k < e; ++k) x[k] += wn * (mn[k] - self[k]);
          }
          if (user != nullptr) std::copy(x + b, x + e, user + b);
      }
      if (limit != nullptr) within &= core::allWithin(std::span<const T>(x + b, e - b), *limit);
    }
    if (user != nullptr) {
      // A model that left the limit is an error, and the trainer keeps the parameters it lent
      // (its message holds them exactly); x_ keeps the result for the error to name.
      if (!within) std::copy(own.begin(), own.end(), user_.begin());
      combined_ = true;
      mixed_ = within;
    }
    return within;
  }

  static constexpr size_t kFused = 4;

  template <size_t N>
  static void fused(T* __restrict x, T* __restrict user, const T* __restrict self,
                    const T* const* m, const T* w, size_t b, size_t e) {
    const T* __restrict mj[N > 0 ? N : 1];
    T wj[N > 0 ? N : 1];
    for (size_t j = 0; j < N; ++j) {
      mj[j] = m[j];
      wj[j] = w[j];
    }
    if (user == nullptr) {
      for (size_t k = b; k < e; ++k) {
        const T s = self[k];
        T acc = s;
        for (size_t j = 0; j < N; ++j) acc += wj[j] * (mj[j][k] - s);
        x[k] = acc;
      }
      return;
    }
    for (size_t k = b; k < e; ++k) {
      const T s = self[k];
      T acc = s;
      for (size_t j = 0; j < N; ++j) acc += wj[j] * (mj[j][k] - s);
      x[k] = acc;
      user[k] = acc;
    }
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
