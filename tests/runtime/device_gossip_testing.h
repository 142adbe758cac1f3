// Shared by the device gossip tests (tests/runtime/device_gossip_test.cc with the device in
// host memory, tests/cuda/gpu_mix_test.cc on a GPU): the round written out, and a
// ring of Nodes over the in-process transport whose device ranks run optim::DeviceGossip.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compression/codecs/elementwise.h"
#include "compression/compressor.h"
#include "core/rng.h"
#include "optim/device_gossip.h"
#include "optim/gossip.h"
#include "tests/runtime/node_testing.h"

namespace starling::runtime::device_testing {

using namespace node_testing;
using optim::DeviceVectors;
using Address = DeviceVectors::Address;

inline compression::CompressorSpec specOf(compression::CompressorSpec::Kind kind) {
  compression::CompressorSpec spec;
  spec.kind = kind;
  spec.k = 3;
  spec.bits = 3;
  spec.bucket = 4;
  spec.rows = 3;  // countsketch: a 3 x 5 table
  spec.cols = 5;
  return spec;
}

constexpr size_t kDim = 9;
constexpr double kGamma = 0.8;

// What the trainer's buffer holds before round t on rank i (a local step's worth of change).
inline std::vector<float> trainerModel(int rank, uint64_t round, const std::vector<float>& mixed) {
  std::vector<float> x = mixed;
  for (size_t k = 0; k < x.size(); ++k) {
    x[k] += static_cast<float>(std::sin(1.7 * rank + 0.3 * static_cast<double>(round) + k));
  }
  return x;
}

// Gossip (identity) and CHOCO-gossip written out, value by value in float, with the CPU codec
// and each rank's frame seeds drawn as the algorithm draws them.
inline std::vector<std::vector<float>> reference(const compression::CompressorSpec& spec,
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
      // (encodeStream, as the Node encodes: Count-Sketch's hashes from the round's shared seed.)
      codec->encodeStream(v, rng, compression::StreamContext{t, 0}, frame);
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
  std::unique_ptr<DeviceVectors> device;
  optim::DeviceGossip* gossip = nullptr;
  Address trainer = 0;  // the trainer's buffer, in the device's memory
};

// Makes the device of a rank for a codec: host memory (optim::hostDeviceVectors) or a GPU.
using DeviceFactory =
    std::function<std::unique_ptr<DeviceVectors>(const compression::CompressorSpec&)>;

inline std::unique_ptr<DeviceVectors> hostDevice(const compression::CompressorSpec& spec) {
  auto got = optim::hostDeviceVectors(spec);
  REQUIRE(got.isOk());
  return std::move(*got);
}

// `nodes` ranks on a ring; those with device[i] run DeviceGossip on makeDevice's device, the
// others the host gossip (optim::createGossip with the CPU codec). Returns every rank's model
// after `rounds` rounds.
inline std::vector<std::vector<float>> runRing(const compression::CompressorSpec& spec,
                                               const topology::Schedule& schedule, int nodes,
                                               uint64_t rounds, const std::vector<bool>& device,
                                               const DeviceFactory& makeDevice = hostDevice) {
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
      peers[i].device = makeDevice(spec);
      REQUIRE(peers[i].device != nullptr);
      auto trainer = peers[i].device->allocate(kDim);
      REQUIRE(trainer.isOk());
      peers[i].trainer = *trainer;
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
        REQUIRE(peers[i].device->fromHost(peers[i].trainer, x).isOk());
        REQUIRE(peers[i].gossip->setDeviceModel(peers[i].trainer).isOk());
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
        REQUIRE(peers[i].gossip->copyModelTo(peers[i].trainer).isOk());
        REQUIRE(peers[i].device->toHost(mixed[i], peers[i].trainer).isOk());
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

}  // namespace starling::runtime::device_testing
