// optim::DeviceGossip (Peer::mix on CUDA tensors) driven by real Nodes over the in-process
// transport, with the device played by host memory (optim::hostDeviceVectors: the CPU codecs
// and compression::elementwise::combineTerm, the arithmetic the GPU kernels share): the frames the
// engine moves (optim::FrameMessages), the round's arithmetic against gossip and CHOCO-gossip
// written out here, a device peer between host peers, hostile frames and divergence.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "tests/runtime/device_gossip_testing.h"

namespace starling::runtime {
namespace {

using namespace device_testing;

TEST_CASE("device gossip: the round written out, each codec", "[runtime][unit]") {
  using Kind = compression::CompressorSpec::Kind;
  const auto schedule = mustSchedule(staticSpec(4, topology::GraphKind::kRing));
  constexpr uint64_t kRounds = 6;
  for (Kind kind : {Kind::kIdentity, Kind::kFp16, Kind::kBf16, Kind::kTopK, Kind::kQsgd,
                    Kind::kNuqsgd, Kind::kNaturalDithering, Kind::kCountSketch}) {
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
  // The same frames on the wire (Count-Sketch's hashes from the round's shared seed, as the
  // Node's encodeStream takes them) and the same arithmetic in the same order (the host
  // gossip's combine and CHOCO-gossip's running sum): every rank's model is the one written
  // out, whichever ranks are devices.
  using Kind = compression::CompressorSpec::Kind;
  const auto schedule = mustSchedule(staticSpec(4, topology::GraphKind::kRing));
  for (Kind kind : {Kind::kIdentity, Kind::kFp16, Kind::kCountSketch}) {
    CAPTURE(static_cast<int>(kind));
    const auto spec = specOf(kind);
    const auto want = reference(spec, *schedule, 4, 5);
    const auto got = runRing(spec, *schedule, 4, 5, {true, false, true, false});
    for (int i = 0; i < 4; ++i) CHECK(got[i] == want[i]);
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
  auto device = hostDevice(spec);
  auto g = optim::DeviceGossip::create(*device, 1.0, kDim, 7);
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
  std::vector<std::unique_ptr<DeviceVectors>> devices;
  std::vector<std::unique_ptr<engine::Node<float>>> nodes;
  std::vector<std::vector<float>> x(2, std::vector<float>(kDim, 1.0f));
  x[1][4] = 1e6f;
  for (int i = 0; i < 2; ++i) {
    transports.push_back(transport::inproc::createTransport(*hub, i));
    devices.push_back(hostDevice(spec));
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
