#include "optim/device_gossip.h"

#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "compression/codecs/elementwise.h"
#include "core/rng.h"

namespace starling::optim {
namespace {

using Address = DeviceVectors::Address;

class DeviceGossipImpl final : public DeviceGossip {
 public:
  DeviceGossipImpl(DeviceVectors& device, double gamma, size_t dim, uint64_t codecSeed,
                   uint64_t sharedSeed, Rounds rounds)
      : device_(device), gamma_(static_cast<float>(gamma)), dim_(dim), rng_(codecSeed),
        sharedSeed_(sharedSeed), chocoSgd_(rounds == Rounds::kChocoSgd),
        exactDiffusion_(rounds == Rounds::kExactDiffusion),
        choco_(chocoSgd_ || (device.lossy() && !exactDiffusion_)) {}

  core::Status init() {
    for (Address* a : {&x_, &own_, &zero_}) STARLING_RETURN_IF_ERROR(allocate(*a));
    if (exactDiffusion_) {
      for (Address* a : {&q_, &prev_}) STARLING_RETURN_IF_ERROR(allocate(*a));
    }
    if (!choco_) return core::Status::ok();
    for (Address* a : {&hat_, &s_, &q_}) STARLING_RETURN_IF_ERROR(allocate(*a));
    return core::Status::ok();
  }

  // Algorithm<float>
  size_t messageSize() const override { return dim_; }
  void prepare(const RoundInfo&, std::span<float>) override { assert(false); }
  void absorb(const RoundInfo&, std::span<const float>,
              std::span<const NeighborMessage<float>>) override {
    assert(false);
  }
  std::span<const float> model() const override {
    // Best effort: a device error leaves the last copy (and the next round reports it).
    mirror_.resize(dim_);
    (void)device_.toHost(mirror_, x_);
    return mirror_;
  }
  AlgorithmCapabilities<float> capabilities() override { return {.frames = this}; }

  // DeviceGossip
  core::Status setDeviceModel(Address from) override { return device_.copy(x_, from, dim_); }
  core::Status copyModelTo(Address to) override { return device_.copy(to, x_, dim_); }
  void setGradient(Address g) override { gradient_ = g; }
  core::Status setModel(std::span<const float> x) override {
    if (x.size() != dim_) return core::invalidArgument("device gossip: a model of another size");
    return device_.fromHost(x_, x);
  }

  // Exact diffusion's message into own_: psi = x - eta g (into q_), phi = (psi + x) - psi_prev,
  // psi_prev <- psi; psi_prev starts as the first round's x (the host's x0).
  core::Status exactDiffusionMessage(Address g, double stepSize) {
    if (!started_) STARLING_RETURN_IF_ERROR(device_.copy(prev_, x_, dim_));
    started_ = true;
    const Address grad[] = {g};
    const float step[] = {-static_cast<float>(stepSize)};
    STARLING_RETURN_IF_ERROR(device_.combine(q_, x_, zero_, grad, step, dim_));
    const Address terms[] = {x_, prev_};
    const float signs[] = {1.0f, -1.0f};
    STARLING_RETURN_IF_ERROR(device_.combine(own_, q_, zero_, terms, signs, dim_));
    return device_.copy(prev_, q_, dim_);
  }

  // FrameMessages
  size_t maxFrameBytes() const override { return device_.maxFrameBytes(dim_); }

  core::Result<size_t> writeFrame(const RoundInfo& info, std::span<std::byte> frame) override {
    const DeviceVectors::FrameSeeds seed{rng_.nextU64(), sharedSeed_, info.round};
    if (exactDiffusion_) {
      const Address g = std::exchange(gradient_, 0);
      if (g == 0) return core::failedPrecondition("exact diffusion: a round without a gradient");
      STARLING_RETURN_IF_ERROR(exactDiffusionMessage(g, info.stepSize));
      return device_.encode(own_, dim_, seed, frame);
    }
    if (const Address g = std::exchange(gradient_, 0); g != 0) {
      // psi = x - eta g, as x + (-eta)(g - 0): the same bits as DSGD's x - eta g.
      const Address grad[] = {g};
      const float step[] = {-static_cast<float>(info.stepSize)};
      STARLING_RETURN_IF_ERROR(device_.combine(x_, x_, zero_, grad, step, dim_));
    }
    if (chocoSgd_) {
      // CHOCO-SGD's consensus step joins the local step (optim/elementwise.h's chocoStep):
      // x <- x + gamma (s - x-hat), from the reference points of the rounds before.
      const Address sum[] = {s_};
      const float gamma[] = {gamma_};
      STARLING_RETURN_IF_ERROR(device_.combine(x_, x_, hat_, sum, gamma, dim_));
    }
    if (!choco_) {
      // The message is x itself; own_ keeps it for the combine, which writes x (a device's
      // combine of many neighbours runs in several passes, each reading `self`).
      STARLING_RETURN_IF_ERROR(device_.copy(own_, x_, dim_));
      return device_.encode(own_, dim_, seed, frame);
    }
    // q = x - x-hat, as x + (-1)(x-hat - 0): the same bits as the subtraction.
    const Address hat[] = {hat_};
    const float minusOne[] = {-1.0f};
    STARLING_RETURN_IF_ERROR(device_.combine(q_, x_, zero_, hat, minusOne, dim_));
    auto length = device_.encode(q_, dim_, seed, frame);
    if (!length) return length.status();
    // The message as the neighbours decode it.
    STARLING_RETURN_IF_ERROR(device_.decode(frame.first(*length), own_, dim_));
    return length;
  }

  core::Status checkFrame(std::span<const std::byte> frame) const override {
    return device_.check(frame, dim_);
  }

  core::Result<bool> absorbFrames(const RoundInfo& info, std::span<const std::byte> own,
                                  std::span<const NeighborFrame> nbrs, double limit) override {
    // Each neighbour's frame decoded into a device vector of its own (a lost neighbour's
    // stand-in, this node's own frame, is the own message already decoded).
    while (received_.size() < nbrs.size()) {
      STARLING_RETURN_IF_ERROR(allocate(received_.emplace_back()));
    }
    const Address self = own_;
    std::vector<Address> m;
    std::vector<float> c;
    m.reserve(nbrs.size() + 1);
    c.reserve(nbrs.size() + 1);
    for (size_t j = 0; j < nbrs.size(); ++j) {
      if (nbrs[j].frame.data() == own.data() && nbrs[j].frame.size() == own.size()) {
        m.push_back(self);
      } else {
        STARLING_RETURN_IF_ERROR(device_.decode(nbrs[j].frame, received_[j], dim_));
        m.push_back(received_[j]);
      }
    }
    if (!choco_) {
      // x <- x + sum_j (w_ij gamma) (x_j - x), the weight rounded as optim/combine.h does.
      for (const auto& n : nbrs) c.push_back(static_cast<float>(n.weight) * gamma_);
      STARLING_RETURN_IF_ERROR(device_.combine(x_, own_, own_, m, c, dim_));
    } else {
      // x-hat <- x-hat + q; s <- s + w_ii q + sum_j w_ij q_j; x <- x + gamma (s - x-hat).
      const Address ownOnly[] = {own_};
      const float one[] = {1.0f};
      STARLING_RETURN_IF_ERROR(device_.combine(hat_, hat_, zero_, ownOnly, one, dim_));
      m.insert(m.begin(), own_);
      c.push_back(static_cast<float>(info.selfWeight));
      for (const auto& n : nbrs) c.push_back(static_cast<float>(n.weight));
      STARLING_RETURN_IF_ERROR(device_.combine(s_, s_, zero_, m, c, dim_));
      if (!chocoSgd_) {  // (CHOCO-SGD takes this step with the next round's local step)
        const Address sum[] = {s_};
        const float gamma[] = {gamma_};
        STARLING_RETURN_IF_ERROR(device_.combine(x_, x_, hat_, sum, gamma, dim_));
      }
    }
    const float bound =
        limit >= static_cast<double>(std::numeric_limits<float>::max())
            ? std::numeric_limits<float>::max()
            : static_cast<float>(limit);
    auto beyond = device_.anyBeyond(x_, dim_, bound);
    if (!beyond) return beyond.status();
    return !*beyond;
  }

 private:
  core::Status allocate(Address& a) {
    auto got = device_.allocate(dim_);
    if (!got) return got.status();
    a = *got;
    return core::Status::ok();
  }

  DeviceVectors& device_;
  const float gamma_;
  const size_t dim_;
  core::Rng rng_;
  const uint64_t sharedSeed_;
  const bool chocoSgd_;  // CHOCO-SGD (step()): the consensus step with the next local step
  const bool exactDiffusion_;
  const bool choco_;     // reference points: a lossy codec (not under exact diffusion), CHOCO-SGD
  Address prev_ = 0;     // exact diffusion's psi_prev
  bool started_ = false;  // ... set from x at the first round
  Address x_ = 0, hat_ = 0, s_ = 0, zero_ = 0, q_ = 0, own_ = 0;
  Address gradient_ = 0;  // setGradient's, until the next writeFrame
  std::vector<Address> received_;
  mutable std::vector<float> mirror_;
};

// The device in host memory: addresses are host pointers; the codec is the CPU one.
class HostVectors final : public DeviceVectors {
 public:
  HostVectors(const compression::CompressorSpec& spec,
              std::unique_ptr<compression::Compressor<float>> codec)
      : lossy_(spec.kind != compression::CompressorSpec::Kind::kIdentity),
        codec_(std::move(codec)) {}

  std::string where() const override { return "host memory"; }
  core::Result<Address> allocate(size_t n) override {
    buffers_.push_back(std::make_unique<float[]>(n));
    std::fill_n(buffers_.back().get(), n, 0.0f);
    return reinterpret_cast<Address>(buffers_.back().get());
  }
  core::Status copy(Address to, Address from, size_t n) override {
    std::memmove(at(to), at(from), n * sizeof(float));
    return core::Status::ok();
  }
  core::Status toHost(std::span<float> to, Address from) override {
    std::memcpy(to.data(), at(from), to.size_bytes());
    return core::Status::ok();
  }
  core::Status fromHost(Address to, std::span<const float> from) override {
    std::memcpy(at(to), from.data(), from.size_bytes());
    return core::Status::ok();
  }
  core::Status combine(Address out, Address start, Address self, std::span<const Address> m,
                       std::span<const float> c, size_t n) override {
    for (size_t k = 0; k < n; ++k) {
      float acc = at(start)[k];
      const float s = at(self)[k];
      for (size_t j = 0; j < m.size(); ++j) {
        acc = compression::elementwise::combineTerm(acc, c[j], at(m[j])[k], s);
      }
      at(out)[k] = acc;
    }
    return core::Status::ok();
  }
  core::Result<bool> anyBeyond(Address x, size_t n, float limit) override {
    for (size_t k = 0; k < n; ++k) {
      if (!(std::abs(at(x)[k]) <= limit)) return true;
    }
    return false;
  }
  bool lossy() const override { return lossy_; }
  size_t maxFrameBytes(size_t n) const override { return codec_->maxEncodedBytes(n); }
  core::Result<size_t> encode(Address x, size_t n, const FrameSeeds& seeds,
                              std::span<std::byte> frame) override {
    core::Rng rng(seeds.draw);
    std::vector<std::byte> out;
    const compression::StreamContext ctx{seeds.round, seeds.shared};
    codec_->encodeStream(std::span<const float>(at(x), n), rng, ctx, out);
    if (out.size() > frame.size()) return core::internalError("a frame beyond its bound");
    std::memcpy(frame.data(), out.data(), out.size());
    return out.size();
  }
  core::Status check(std::span<const std::byte> frame, size_t n) const override {
    std::vector<float> scratch(n);
    return codec_->decode(frame, scratch);
  }
  core::Status decode(std::span<const std::byte> frame, Address out, size_t n) override {
    return codec_->decode(frame, std::span<float>(at(out), n));
  }

 private:
  static float* at(Address a) { return reinterpret_cast<float*>(a); }
  bool lossy_;
  std::unique_ptr<compression::Compressor<float>> codec_;
  std::vector<std::unique_ptr<float[]>> buffers_;
};

}  // namespace

core::Result<std::unique_ptr<DeviceVectors>> hostDeviceVectors(
    const compression::CompressorSpec& spec) {
  auto codec = compression::createCompressor<float>(spec);
  if (!codec) return codec.status();
  return std::unique_ptr<DeviceVectors>(std::make_unique<HostVectors>(spec, std::move(*codec)));
}

core::Result<std::unique_ptr<DeviceGossip>> DeviceGossip::create(DeviceVectors& device,
                                                                 double gamma, size_t dim,
                                                                 uint64_t codecSeed,
                                                                 uint64_t sharedSeed,
                                                                 Rounds rounds) {
  if (dim == 0) return core::invalidArgument("device gossip: an empty model");
  if (rounds == Rounds::kExactDiffusion && device.lossy()) {
    return core::invalidArgument("device gossip: exact diffusion sends its message uncompressed");
  }
  auto g = std::make_unique<DeviceGossipImpl>(device, gamma, dim, codecSeed, sharedSeed, rounds);
  STARLING_RETURN_IF_ERROR(g->init());
  return std::unique_ptr<DeviceGossip>(std::move(g));
}

}  // namespace starling::optim
