#include "optim/gossip.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <utility>
#include <vector>

#include "optim/combine.h"

namespace starling::optim {
namespace {

template <typename T>
class PlainGossip final : public GossipAlgorithm<T>, public BlockPreparation<T> {
 public:
  PlainGossip(double gamma, size_t dim) : gamma_(static_cast<T>(gamma)), x_(dim, T(0)) {}

  void setModel(std::span<const T> x) override {
    std::copy(x.begin(), x.end(), x_.begin());
    stale_ = false;
    keptOwn_ = {};
    keptNbrs_.clear();
  }
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
  AlgorithmCapabilities<T> capabilities() override { return {.blocks = this}; }
  // The message is the model. Copied into memory the transport lends (a shared-memory segment
  // the neighbours read from other cores), a message of kStreamBytes or more goes past this
  // core's cache (non-temporal stores, no read for ownership), and the node checks and checksums
  // the block it was copied from, still in L1: Peer::mix on a ring of 4 about 6% faster at
  // d = 1e6 and 4% at 1e7 (docs/bench_gossip.md). Smaller messages, and frames a transport sends
  // from (TCP, which reads them back at once), are copied as usual.
  std::span<const T> prepareBlock(const RoundInfo& info, size_t offset,
                                  std::span<T> out) override {
    const std::span<const T> from = current().subspan(offset, out.size());
    if (info.messageLent && x_.size() * sizeof(T) >= detail::kStreamBytes) {
      detail::streamCopy(from.data(), out.data(), out.size_bytes());
      if (offset + out.size() == x_.size()) detail::streamFence();
      return from;
    }
    std::copy(from.begin(), from.end(), out.begin());
    return out;
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
  bool holdsMessages() const override { return stale_; }
  std::span<const T> model() const override { return current(); }

 private:
  // The model: the lent buffer until this round's combine; after it, the lent buffer while the
  // loan lasts if x_ was left unwritten, x_ otherwise (recomputed first where it was).
  std::span<const T> current() const {
    if (user_.data() != nullptr && (!combined_ || (stale_ && mixed_))) return user_;
    if (stale_) recompute();
    return x_;
  }

  // x_ from the messages the last combine read, which the node keeps (holdsMessages): the same
  // function on the same inputs, so the same bits.
  void recompute() const {
    detail::combine<T>(x_.data(), nullptr, keptOwn_.data(), keptOwn_.data(), keptNbrs_, gamma_,
                       0, x_.size(), nullptr);
    stale_ = false;
    keptOwn_ = {};
    keptNbrs_.clear();
  }

  bool combine(const RoundInfo& info, std::span<const T> own,
               std::span<const NeighborMessage<T>> nbrs, const T* limit) {
    // x = own + sum_j gamma w_ij (m_j - own) (optim/combine.h). `own` is this round's message,
    // i.e. the model itself (the identity codec), read from the frame. On a lent buffer the
    // mixed model goes into it. Where the node keeps this round's frames after it
    // (info.messagesKept) that is the only write: x_, which model() reads once the loan has
    // ended, is recomputed from the kept messages where something asks for it (the log line
    // at close(), a rejoining neighbour's answer), and never in the steady state of a trainer
    // that calls mix() round after round, whose next loan supersedes it. That saves a write
    // stream of d values per round (Peer::mix 26% faster at d = 1e7, docs/bench_gossip.md).
    // Otherwise x_ is written in the same loop, each value once.
    T* user = user_.data();
    const bool userOnly = user != nullptr && info.messagesKept;
    stale_ = false;
    keptOwn_ = {};
    keptNbrs_.clear();
    const bool within =
        detail::combine<T>(userOnly ? user : x_.data(), userOnly ? nullptr : user, own.data(),
                           own.data(), nbrs, gamma_, 0, x_.size(), limit);
    if (user != nullptr) {
      if (userOnly && !within) {
        // The error names the diverged model: x_ gets it, computed again before the buffer is
        // restored below.
        detail::combine<T>(x_.data(), nullptr, own.data(), own.data(), nbrs, gamma_, 0, x_.size(),
                           nullptr);
      } else if (userOnly) {
        stale_ = true;
        keptOwn_ = own;
        keptNbrs_.assign(nbrs.begin(), nbrs.end());
      }
      // A model that left the limit is an error, and the trainer keeps the parameters it lent
      // (its message holds them exactly); x_ keeps the result for the error to name.
      if (!within) std::copy(own.begin(), own.end(), user_.begin());
      combined_ = true;
      mixed_ = within;
    }
    return within;
  }

  const T gamma_;
  mutable std::vector<T> x_;
  std::span<T> user_;      // the trainer's buffer, lent for one round (lend/release)
  bool combined_ = false;  // this loan's combine has run
  bool mixed_ = false;     // ... and user_ holds the mixed model
  // x_ lags the last combine, whose inputs the node keeps (holdsMessages) until its next absorb.
  mutable bool stale_ = false;
  mutable std::span<const T> keptOwn_;
  mutable std::vector<NeighborMessage<T>> keptNbrs_;
};

template <typename T>
class ChocoGossip final : public GossipAlgorithm<T>, public CombinedAbsorption<T> {
 public:
  ChocoGossip(double gamma, size_t dim, bool tracking, const GossipReference<T>& ref)
      : gamma_(static_cast<T>(gamma)), tracking_(tracking), averages_(ref.averageReferences),
        fragments_(std::max<size_t>(1, ref.fragments)), x_(dim, T(0)),
        hat_(dim * fragments_, T(0)), s_(dim * fragments_, T(0)) {
    assert(!tracking_ || fragments_ == 1);
    // Every node agrees on every reference point without an exchange: the common start given
    // (s_i = sum_j w_ij start = start), zero otherwise; in fragments, the model's piece f at
    // [f dim, (f + 1) dim), padded with zeros.
    if (!ref.start.empty()) {
      assert(ref.start.size() <= hat_.size());
      start_.assign(hat_.size(), T(0));
      std::copy(ref.start.begin(), ref.start.end(), start_.begin());
      hat_ = start_;
      s_ = start_;
    }
  }

  void setModel(std::span<const T> x) override { std::copy(x.begin(), x.end(), x_.begin()); }
  size_t messageSize() const override { return x_.size(); }
  void prepare(const RoundInfo& info, std::span<T> out) override {
    const T* hat = hat_.data() + piece(info);
    for (size_t k = 0; k < x_.size(); ++k) out[k] = x_[k] - hat[k];
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t d = x_.size();
    if (!tracking_) {
      const T self = static_cast<T>(info.selfWeight);
      T* hat = hat_.data() + piece(info);
      T* s = s_.data() + piece(info);
      for (size_t k = 0; k < d; ++k) {
        hat[k] += own[k];
        s[k] += self * own[k];
      }
      for (const auto& n : nbrs) {
        const T w = static_cast<T>(n.weight);
        for (size_t k = 0; k < d; ++k) s[k] += w * n.message[k];
      }
      step(info);
      return;
    }
    for (size_t k = 0; k < d; ++k) hat_[k] += own[k];
    for (const auto& n : nbrs) {
      auto [at, added] = peers_.try_emplace(n.peer, d, T(0));
      if (added && !start_.empty()) at->second = start_;
      std::vector<T>& h = at->second;
      for (size_t k = 0; k < d; ++k) h[k] += n.message[k];
    }
    // averageReferences: x_i <- x-hat_i + sum_j w_ij (x-hat_j - x-hat_i), from the reference.
    if (averages_) x_ = hat_;
    for (const auto& n : nbrs) {
      if (n.weight == 0.0) continue;
      const T w = (averages_ ? T(1) : gamma_) * static_cast<T>(n.weight);
      const std::vector<T>& h = peers_.at(n.peer);
      for (size_t k = 0; k < d; ++k) x_[k] += w * (h[k] - hat_[k]);
    }
  }

  bool tracksNeighbors() const override { return tracking_; }
  // Combined on a static graph; a time-varying one tracks each neighbour's reference point.
  AlgorithmCapabilities<T> capabilities() override {
    return {.combined = tracking_ ? nullptr : this};
  }
  void absorbCombined(const RoundInfo& info, std::span<const T> own,
                      std::span<const T> combined) override {
    T* hat = hat_.data() + piece(info);
    T* s = s_.data() + piece(info);
    for (size_t k = 0; k < x_.size(); ++k) {
      hat[k] += own[k];
      s[k] += combined[k];
    }
    step(info);
  }
  std::span<const T> model() const override { return x_; }

 private:
  // Where the round's piece of the reference points starts (0 without fragments).
  size_t piece(const RoundInfo& info) const {
    return static_cast<size_t>(info.round % fragments_) * x_.size();
  }

  // x <- x + gamma (s - x-hat) = x + gamma sum_j w_ij (x-hat_j - x-hat_i); averageReferences:
  // x <- s = sum_j w_ij x-hat_j (what the reference points say the mixed models are).
  void step(const RoundInfo& info) {
    const T* hat = hat_.data() + piece(info);
    const T* s = s_.data() + piece(info);
    if (averages_) {
      std::copy_n(s, x_.size(), x_.begin());
      return;
    }
    for (size_t k = 0; k < x_.size(); ++k) x_[k] += gamma_ * (s[k] - hat[k]);
  }

  const T gamma_;
  const bool tracking_;
  const bool averages_;
  const size_t fragments_;
  std::vector<T> x_, hat_, s_;
  std::vector<T> start_;                 // the common reference start (empty: zero)
  std::map<int, std::vector<T>> peers_;  // time-varying: x-hat_j of every neighbour heard from
};

}  // namespace

template <typename T>
std::unique_ptr<GossipAlgorithm<T>> createGossip(double gamma, size_t dim, bool compressed,
                                                 bool timeVarying,
                                                 const GossipReference<T>& reference) {
  if (!compressed) return std::make_unique<PlainGossip<T>>(gamma, dim);
  return std::make_unique<ChocoGossip<T>>(gamma, dim, timeVarying, reference);
}

template std::unique_ptr<GossipAlgorithm<float>> createGossip<float>(
    double, size_t, bool, bool, const GossipReference<float>&);
template std::unique_ptr<GossipAlgorithm<double>> createGossip<double>(
    double, size_t, bool, bool, const GossipReference<double>&);

}  // namespace starling::optim
