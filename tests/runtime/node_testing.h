// Helpers shared by the Node tests (node_test.cc, node_fault_test.cc, node_divergence_test.cc):
// a fake algorithm that records what its rounds are given, schedules, and a cluster of Nodes on
// the in-process transport with rounds driven from this thread.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/node.h"
#include "optim/algorithm.h"
#include "topology/schedule.h"
#include "transport/inproc/inproc_transport.h"

namespace starling::runtime::node_testing {

using namespace std::chrono_literals;
using core::Status;
using transport::Clock;

constexpr size_t kMessageSize = 3;

// What rank `rank` sends in `round`: distinct per (rank, round, element), exact in double.
inline double sentValue(int rank, uint64_t round, size_t k) {
  return 1000.0 * rank + 10.0 * static_cast<double>(round) + static_cast<double>(k) + 0.25;
}

struct Absorbed {
  optim::RoundInfo info;
  std::vector<double> own;
  std::vector<int> peers;
  std::vector<double> weights;
  std::vector<std::vector<double>> messages;
};

// Writes rank-dependent messages and records everything absorb() is given.
class FakeAlgorithm final : public optim::Algorithm<double> {
 public:
  explicit FakeAlgorithm(int rank) : rank_(rank), x_(kMessageSize, 0.0) {}
  size_t messageSize() const override { return kMessageSize; }
  void prepare(const optim::RoundInfo& info, std::span<double> outgoing) override {
    prepared.push_back(info);
    for (size_t k = 0; k < outgoing.size(); ++k) outgoing[k] = sentValue(rank_, info.round, k);
  }
  void absorb(const optim::RoundInfo& info, std::span<const double> own,
              std::span<const optim::NeighborMessage<double>> neighbors) override {
    Absorbed a;
    a.info = info;
    a.own.assign(own.begin(), own.end());
    for (const auto& m : neighbors) {
      a.peers.push_back(m.peer);
      a.weights.push_back(m.weight);
      a.messages.emplace_back(m.message.begin(), m.message.end());
    }
    absorbed.push_back(std::move(a));
  }
  std::span<const double> model() const override { return x_; }

  std::vector<optim::RoundInfo> prepared;
  std::vector<Absorbed> absorbed;

 private:
  int rank_;
  std::vector<double> x_;
};

inline std::unique_ptr<topology::Schedule> mustSchedule(const topology::TopologySpec& spec) {
  auto s = topology::Schedule::create(spec);
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  return std::move(s).value();
}

inline topology::TopologySpec staticSpec(int nodes, topology::GraphKind kind) {
  topology::TopologySpec spec;
  spec.nodes = nodes;
  spec.seed = 3;
  spec.base.kind = kind;
  return spec;
}

// `nodes` Nodes on ranks 0..nodes-1 of a hub with `ranks` ranks; the extra ranks' transports are
// driven by hand. With `logging`, every node's log lines are collected in `log`; without it the
// nodes get no log callback.
struct Cluster {
  Cluster(int nodes, int ranks, bool logging = true) : hub(transport::inproc::createHub(ranks)) {
    for (int r = 0; r < ranks; ++r)
      transports.push_back(transport::inproc::createTransport(*hub, r));
    for (int r = 0; r < nodes; ++r) {
      auto algo = std::make_unique<FakeAlgorithm>(r);
      fakes.push_back(algo.get());
      engine::Node<double>::LogFn logFn;
      if (logging) logFn = [this](const std::string& line) { log.push_back(line); };
      this->nodes.push_back(std::make_unique<engine::Node<double>>(
          r, std::move(algo), *transports[r], std::move(logFn)));
    }
  }

  // Progresses every transport until every node's round is complete; false after 5 s.
  bool driveUntilComplete() {
    const auto stop = Clock::now() + 5s;
    for (;;) {
      bool all = true;
      for (const auto& n : nodes) all = all && n->roundComplete();
      if (all) return true;
      if (Clock::now() > stop) return false;
      for (const auto& t : transports) {
        auto r = t->progress(Clock::now() + 1ms);
        if (!r.isOk()) return false;
      }
    }
  }

  std::unique_ptr<transport::inproc::InprocHub> hub;
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<std::unique_ptr<engine::Node<double>>> nodes;
  std::vector<FakeAlgorithm*> fakes;
  std::vector<std::string> log;
};

// Runs one round on every node, starting them in `order`; requires every call to succeed.
inline void runRound(Cluster& c, const topology::RoundTopology& topo, uint64_t round, double step,
              const std::vector<int>& order) {
  for (int i : order) {
    const Status st = c.nodes[i]->startRound(round, topo, step, Clock::now() + 10s);
    INFO("start " << i << ": " << st.toString());
    REQUIRE(st.isOk());
  }
  REQUIRE(c.driveUntilComplete());
  for (int i : order) {
    const Status st = c.nodes[i]->finishRound();
    INFO("finish " << i << ": " << st.toString());
    REQUIRE(st.isOk());
  }
}

// Rounds [0, rounds) of the schedule on nodes made by hand (each on transports[rank]): every node
// starts its round, the transports are progressed until all are complete, every node finishes.
inline void runRounds(std::vector<std::unique_ptr<engine::Node<double>>>& nodes,
                      std::vector<std::unique_ptr<transport::Transport>>& transports,
                      const topology::Schedule& schedule, uint64_t rounds) {
  for (uint64_t round = 0; round < rounds; ++round) {
    const auto topo = schedule.at(round);
    for (auto& node : nodes) REQUIRE(node->startRound(round, *topo, 0.1, Clock::now() + 10s).isOk());
    const auto stop = Clock::now() + 5s;
    for (;;) {
      bool all = true;
      for (const auto& node : nodes) all = all && node->roundComplete();
      if (all) break;
      REQUIRE(Clock::now() < stop);
      for (const auto& t : transports) REQUIRE(t->progress(Clock::now() + 1ms).isOk());
    }
    for (auto& node : nodes) REQUIRE(node->finishRound().isOk());
  }
}

inline std::vector<double> expectedMessage(int rank, uint64_t round) {
  std::vector<double> v(kMessageSize);
  for (size_t k = 0; k < kMessageSize; ++k) v[k] = sentValue(rank, round, k);
  return v;
}

// What absorb must have been given by node i in `round` on `topo`.
inline void checkAbsorbed(const Absorbed& a, int i, uint64_t round, double step,
                   const topology::RoundTopology& topo) {
  const topology::MixingRow& row = topo.weights.rows[i];
  const std::vector<int>& neighbours = topo.graph.neighbors(i);
  CAPTURE(i, round);
  CHECK(a.info.round == round);
  CHECK(a.info.stepSize == step);
  CHECK(a.info.selfWeight == row.self);
  CHECK(a.own == expectedMessage(i, round));
  CHECK(std::is_sorted(a.peers.begin(), a.peers.end()));
  CHECK(a.peers == neighbours);
  REQUIRE(a.weights.size() == row.peers.size());
  for (size_t j = 0; j < row.peers.size(); ++j) {
    CHECK(a.peers[j] == row.peers[j].peer);
    CHECK(a.weights[j] == row.peers[j].weight);
  }
  REQUIRE(a.messages.size() == a.peers.size());
  for (size_t j = 0; j < a.peers.size(); ++j) {
    CHECK(a.messages[j] == expectedMessage(a.peers[j], round));
  }
}

}  // namespace starling::runtime::node_testing
