// optim::DeviceGossip (Peer::mix on CUDA tensors) driven by real Nodes over the in-process
// transport, with the device played by host memory (HostVectors: the CPU codecs and
// compression::elementwise::combineTerm, the arithmetic the GPU kernels share): the frames the
// engine moves (optim::FrameMessages), the round's arithmetic against gossip and CHOCO-gossip
// written out here, a device peer between host peers, hostile frames and divergence.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "compression/codecs/elementwise.h"
#include "compression/compressor.h"
#include "core/rng.h"
#include "optim/device_gossip.h"
#include "optim/gossip.h"
#include "tests/runtime/node_testing.h"

namespace starling::runtime {
namespace {

using namespace node_testing;
using optim::DeviceVectors;
using Address = DeviceVectors::Address;

// The device in host memory: addresses are host pointers; the codec is the CPU one.
class HostVectors final : public DeviceVectors {
 public:
  explicit HostVectors(const compression::CompressorSpec& spec)
      : lossy_(spec.kind != compression::CompressorSpec::Kind::kIdentity),
        codec_(std::move(*compression::createCompressor<float>(spec))) {}

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
    ++combines;
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
  core::Result<size_t> encode(Address x, size_t n, uint64_t seed,
                              std::span<std::byte> frame) override {
    core::Rng rng(seed);
    std::vector<std::byte> out;
    codec_->encode(std::span<const float>(at(x), n), rng, out);
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

  int combines = 0;

 private:
  static float* at(Address a) { return reinterpret_cast<float*>(a); }
  bool lossy_;
  std::unique_ptr<compression::Compressor<float>> codec_;
  std::vector<std::unique_ptr<float[]>> buffers_;
};

compression::CompressorSpec specOf(compression::CompressorSpec::Kind kind) {
  compression::CompressorSpec spec;
  spec.kind = kind;
  spec.k = 3;
  spec.bits = 3;
  spec.bucket = 4;
  return spec;
}

constexpr size_t kDim = 9;
constexpr double kGamma = 0.8;

// What the trainer's buffer holds before round t on rank i (a local step's worth of change).
std::vector<float> trainerModel(int rank, uint64_t round, const std::vector<float>& mixed) {
  std::vector<float> x = mixed;
  for (size_t k = 0; k < x.size(); ++k) {
    x[k] += static_cast<float>(std::sin(1.7 * rank + 0.3 * static_cast<double>(round) + k));
  }
  return x;
}

// Gossip (identity) and CHOCO-gossip written out, value by value in float, with the CPU codec
// and each rank's frame seeds drawn as the algorithm draws them.
std::vector<std::vector<float>> reference(const compression::CompressorSpec& spec,
                                          const topology::Schedule& schedule, int nodes,
                                          uint64_t rounds) {
  auto codec = std::move(*compression::createCompressor<float>(spec));
  const bool lossy = spec.kind != compression::CompressorSpec::Kind::kIdentity;
  std::vector<std::vector<float>> x(nodes, std::vector<float>(kDim, 0.0f)), hat = x, s = x;
  std::vector<core::Rng> seeds;
  for (int i = 0; i < nodes; ++i) seeds.emplace_back(100 + i);
  for (uint64_t t = 0; t < rounds; ++t) {
    const auto topo = schedule.at(t);
    std::vector<std::vector<float>> q(nodes, std::vector<float>(kDim));
    for (int i = 0; i < nodes; ++i) {
      x[i] = trainerModel(i, t, x[i]);
      std::vector<float> v(kDim);
      for (size_t k = 0; k < kDim; ++k) v[k] = lossy ? x[i][k] - hat[i][k] : x[i][k];
      core::Rng rng(seeds[i].nextU64());
      std::vector<std::byte> frame;
      codec->encode(v, rng, frame);
      REQUIRE(codec->decode(frame, q[i]).isOk());
    }
    for (int i = 0; i < nodes; ++i) {
      const topology::MixingRow& row = topo->weights.rows[i];
      if (!lossy) {
        std::vector<float> next = x[i];
        for (const auto& e : row.peers) {
          const float c = static_cast<float>(e.weight) * static_cast<float>(kGamma);
          for (size_t k = 0; k < kDim; ++k) next[k] = next[k] + c * (q[e.peer][k] - x[i][k]);
        }
        x[i] = next;
        continue;
      }
      for (size_t k = 0; k < kDim; ++k) {
        hat[i][k] = hat[i][k] + q[i][k];
        s[i][k] = s[i][k] + static_cast<float>(row.self) * q[i][k];
      }
      for (const auto& e : row.peers) {
        for (size_t k = 0; k < kDim; ++k) {
          s[i][k] = s[i][k] + static_cast<float>(e.weight) * q[e.peer][k];
        }
      }
      for (size_t k = 0; k < kDim; ++k) {
        x[i][k] = x[i][k] + static_cast<float>(kGamma) * (s[i][k] - hat[i][k]);
      }
    }
  }
  return x;
}

struct DevicePeer {
  std::unique_ptr<HostVectors> device;
  optim::DeviceGossip* gossip = nullptr;
  std::vector<float> trainer = std::vector<float>(kDim, 0.0f);  // the trainer's "device" buffer
};

// `nodes` ranks on a ring; those with device[i] run DeviceGossip, the others the host gossip
// (optim::createGossip with the CPU codec). Returns every rank's model after `rounds` rounds.
std::vector<std::vector<float>> runRing(const compression::CompressorSpec& spec,
                                        const topology::Schedule& schedule, int nodes,
                                        uint64_t rounds, const std::vector<bool>& device) {
  const bool lossy = spec.kind != compression::CompressorSpec::Kind::kIdentity;
  auto hub = transport::inproc::createHub(nodes);
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<std::unique_ptr<engine::Node<float>>> ranks;
  std::vector<DevicePeer> peers(nodes);
  std::vector<optim::GossipAlgorithm<float>*> hosts(nodes, nullptr);
  std::vector<std::unique_ptr<compression::Compressor<float>>> codecs;
  for (int i = 0; i < nodes; ++i) {
    transports.push_back(transport::inproc::createTransport(*hub, i));
    if (device[i]) {
      peers[i].device = std::make_unique<HostVectors>(spec);
      auto g = optim::DeviceGossip::create(*peers[i].device, kGamma, kDim, 100 + i);
      REQUIRE(g.isOk());
      peers[i].gossip = g->get();
      ranks.push_back(std::make_unique<engine::Node<float>>(i, std::move(*g), *transports[i]));
    } else {
      auto g = optim::createGossip<float>(kGamma, kDim, lossy, false);
      hosts[i] = g.get();
      codecs.push_back(lossy ? std::move(*compression::createCompressor<float>(spec)) : nullptr);
      // The host node draws its frames' seeds from its codec Rng, one nextU64 a frame, as
      // DeviceGossip does from its own.
      ranks.push_back(std::make_unique<engine::Node<float>>(
          i, std::move(g), *transports[i], engine::Node<float>::LogFn{}, codecs.back().get(),
          100 + i));
    }
  }
  std::vector<std::vector<float>> mixed(nodes, std::vector<float>(kDim, 0.0f));
  for (uint64_t t = 0; t < rounds; ++t) {
    const auto topo = schedule.at(t);
    for (int i = 0; i < nodes; ++i) {
      std::vector<float> x = trainerModel(i, t, mixed[i]);
      if (device[i]) {
        peers[i].trainer = x;
        REQUIRE(peers[i].gossip->setDeviceModel(reinterpret_cast<Address>(peers[i].trainer.data()))
                    .isOk());
      } else {
        hosts[i]->setModel(x);
      }
      REQUIRE(ranks[i]->startRound(t, *topo, 0.1, Clock::now() + 10s).isOk());
    }
    const auto stop = Clock::now() + 5s;
    for (;;) {
      bool all = true;
      for (const auto& n : ranks) all = all && n->roundComplete();
      if (all) break;
      REQUIRE(Clock::now() < stop);
      for (const auto& tr : transports) REQUIRE(tr->progress(Clock::now() + 1ms).isOk());
    }
    for (int i = 0; i < nodes; ++i) {
      const core::Status st = ranks[i]->finishRound();
      INFO(st.toString());
      REQUIRE(st.isOk());
      if (device[i]) {
        REQUIRE(peers[i].gossip->copyModelTo(reinterpret_cast<Address>(peers[i].trainer.data()))
                    .isOk());
        mixed[i] = peers[i].trainer;
        // model(): the host copy the engine asks for, the same values.
        const auto host = ranks[i]->model();
        CHECK(std::vector<float>(host.begin(), host.end()) == mixed[i]);
      } else {
        const auto m = ranks[i]->model();
        mixed[i].assign(m.begin(), m.end());
      }
    }
  }
  return mixed;
}

TEST_CASE("device gossip: the round written out, each codec", "[runtime][unit]") {
  using Kind = compression::CompressorSpec::Kind;
  const auto schedule = mustSchedule(staticSpec(4, topology::GraphKind::kRing));
  constexpr uint64_t kRounds = 6;
  for (Kind kind : {Kind::kIdentity, Kind::kFp16, Kind::kBf16, Kind::kTopK, Kind::kQsgd,
                    Kind::kNuqsgd, Kind::kNaturalDithering}) {
    const auto spec = specOf(kind);
    CAPTURE(static_cast<int>(kind));
    const auto want = reference(spec, *schedule, 4, kRounds);
    const auto got = runRing(spec, *schedule, 4, kRounds, {true, true, true, true});
    for (int i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(got[i] == want[i]);
    }
    // The models moved and differ across ranks (so the equality above says something).
    CHECK(want[0] != want[1]);
  }
}

TEST_CASE("device gossip: a device rank among host ranks", "[runtime][unit]") {
  // The same frames on the wire: the uncompressed mix (whose host combine is the same sum in
  // the same order) gives every rank the values written out, whichever ranks are devices; with
  // fp16 the device ranks' models are the written-out ones and the host ranks' agree to
  // float rounding (the host sums its neighbours' frames in fp16's linear accumulator).
  using Kind = compression::CompressorSpec::Kind;
  const auto schedule = mustSchedule(staticSpec(4, topology::GraphKind::kRing));
  const std::vector<bool> mixedKinds = {true, false, true, false};
  {
    const auto spec = specOf(Kind::kIdentity);
    const auto want = reference(spec, *schedule, 4, 5);
    const auto got = runRing(spec, *schedule, 4, 5, mixedKinds);
    for (int i = 0; i < 4; ++i) CHECK(got[i] == want[i]);
  }
  {
    const auto spec = specOf(Kind::kFp16);
    const auto want = reference(spec, *schedule, 4, 5);
    const auto got = runRing(spec, *schedule, 4, 5, mixedKinds);
    for (int i = 0; i < 4; ++i) {
      CAPTURE(i);
      for (size_t k = 0; k < kDim; ++k) {
        if (mixedKinds[i]) {
          CHECK(got[i][k] == want[i][k]);
        } else {
          CHECK(got[i][k] == Approx(want[i][k]).epsilon(1e-5).margin(1e-5));
        }
      }
    }
  }
}

TEST_CASE("device gossip: a forged frame is counted and the genuine one mixed", "[runtime][unit]") {
  // Rank 0 runs DeviceGossip; rank 1's transport is driven by hand: it sends a frame with one
  // flipped bit, then the genuine frame.
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  const auto spec = specOf(compression::CompressorSpec::Kind::kFp16);
  auto hub = transport::inproc::createHub(2);
  auto t0 = transport::inproc::createTransport(*hub, 0);
  auto t1 = transport::inproc::createTransport(*hub, 1);
  HostVectors device(spec);
  auto g = optim::DeviceGossip::create(device, 1.0, kDim, 7);
  REQUIRE(g.isOk());
  optim::DeviceGossip* gossip = g->get();
  std::vector<std::string> log;
  engine::Node<float> node(0, std::move(*g), *t0,
                           [&log](const std::string& line) { log.push_back(line); });
  std::vector<float> mine(kDim, 1.0f), theirs(kDim);
  for (size_t k = 0; k < kDim; ++k) theirs[k] = 0.5f * static_cast<float>(k);
  REQUIRE(gossip->setDeviceModel(reinterpret_cast<Address>(mine.data())).isOk());
  const auto topo = schedule->at(0);
  REQUIRE(node.startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());

  auto codec = std::move(*compression::createCompressor<float>(spec));
  core::Rng rng(1);
  std::vector<std::byte> genuine;
  codec->encode(theirs, rng, genuine);
  auto forged = std::make_shared<transport::Bytes>(genuine.begin(), genuine.end());
  (*forged)[forged->size() / 2] ^= std::byte{0x10};
  const transport::Tag tag{0, engine::kModelChannel};
  t1->send(0, tag, transport::SharedBytes(forged), [](const core::Status&) {});
  t1->send(0, tag, transport::SharedBytes(std::make_shared<transport::Bytes>(genuine.begin(),
                                                                              genuine.end())),
           [](const core::Status&) {});
  t1->recv(0, tag, Clock::now() + 10s, [](const core::Status&, transport::SharedBytes) {});
  const auto stop = Clock::now() + 5s;
  while (!node.roundComplete()) {
    REQUIRE(Clock::now() < stop);
    REQUIRE(t0->progress(Clock::now() + 1ms).isOk());
    REQUIRE(t1->progress(Clock::now() + 1ms).isOk());
  }
  REQUIRE(node.finishRound().isOk());
  CHECK(node.corruptMessages() == 1);
  REQUIRE(log.size() == 1);
  CHECK(log[0].find("rejected a message claiming to be from rank 1") != std::string::npos);
  // Mixed with the genuine frame: (1 + theirs) / 2 on a line of two (weights 1/2).
  std::vector<float> decoded(kDim);
  REQUIRE(codec->decode(genuine, decoded).isOk());
  std::vector<float> out(kDim);
  REQUIRE(gossip->copyModelTo(reinterpret_cast<Address>(out.data())).isOk());
  const float w = static_cast<float>(topo->weights.rows[0].peers[0].weight);
  for (size_t k = 0; k < kDim; ++k) CHECK(out[k] == 1.0f + w * (decoded[k] - 1.0f));
}

TEST_CASE("device gossip: a diverged model names its coordinate", "[runtime][unit]") {
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  const auto spec = specOf(compression::CompressorSpec::Kind::kIdentity);
  auto hub = transport::inproc::createHub(2);
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<std::unique_ptr<HostVectors>> devices;
  std::vector<std::unique_ptr<engine::Node<float>>> nodes;
  std::vector<std::vector<float>> x(2, std::vector<float>(kDim, 1.0f));
  x[1][4] = 1e6f;
  for (int i = 0; i < 2; ++i) {
    transports.push_back(transport::inproc::createTransport(*hub, i));
    devices.push_back(std::make_unique<HostVectors>(spec));
    auto g = optim::DeviceGossip::create(*devices[i], 1.0, kDim, 1);
    REQUIRE(g.isOk());
    REQUIRE((*g)->setDeviceModel(reinterpret_cast<Address>(x[i].data())).isOk());
    nodes.push_back(std::make_unique<engine::Node<float>>(i, std::move(*g), *transports[i]));
    nodes.back()->setDivergenceLimit(1000.0);
  }
  const auto topo = schedule->at(0);
  for (auto& n : nodes) REQUIRE(n->startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
  const auto stop = Clock::now() + 5s;
  while (!nodes[0]->roundComplete() || !nodes[1]->roundComplete()) {
    REQUIRE(Clock::now() < stop);
    for (auto& t : transports) REQUIRE(t->progress(Clock::now() + 1ms).isOk());
  }
  const core::Status st = nodes[0]->finishRound();
  CHECK(st.code() == core::StatusCode::kDiverged);
  CHECK(st.message().find("its model coordinate 4 is") != std::string::npos);
}

}  // namespace
}  // namespace starling::runtime
