// Node's asynchronous mode (docs/algorithms.md §26) over the in-process transport: which message
// of each neighbour a round mixes, when a round waits, the staleness bound, and DSGD's mixing
// with stale messages against a hand computation.
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/node.h"
#include "optim/algorithm.h"
#include "topology/schedule.h"
#include "transport/inproc/inproc_transport.h"

namespace starling::runtime {
namespace {

using namespace std::chrono_literals;
using core::Status;
using transport::Clock;

// What rank `rank` sends in `round`: one value, distinct per (rank, round).
double sentValue(int rank, uint64_t round) { return 100.0 * rank + static_cast<double>(round); }

struct Absorbed {
  uint64_t round;
  std::vector<int> peers;
  std::vector<double> values;  // each neighbour's message (one value each)
};

class FakeAlgorithm final : public optim::Algorithm<double> {
 public:
  explicit FakeAlgorithm(int rank) : rank_(rank), x_(1, 0.0) {}
  size_t messageSize() const override { return 1; }
  void prepare(const optim::RoundInfo& info, std::span<double> out) override {
    out[0] = sentValue(rank_, info.round);
  }
  void absorb(const optim::RoundInfo& info, std::span<const double>,
              std::span<const optim::NeighborMessage<double>> nbrs) override {
    Absorbed a{info.round, {}, {}};
    for (const auto& m : nbrs) {
      a.peers.push_back(m.peer);
      a.values.push_back(m.message[0]);
    }
    absorbed.push_back(a);
  }
  std::span<const double> model() const override { return x_; }
  std::vector<Absorbed> absorbed;

 private:
  int rank_;
  std::vector<double> x_;
};

std::unique_ptr<topology::Schedule> ringSchedule(int n) {
  topology::TopologySpec spec;
  spec.nodes = n;
  spec.seed = 1;
  spec.base.kind = topology::GraphKind::kRing;
  auto s = topology::Schedule::create(spec);
  REQUIRE(s.isOk());
  return std::move(s).value();
}

struct AsyncCluster {
  AsyncCluster(int n, uint64_t staleness,
               std::function<std::unique_ptr<optim::Algorithm<double>>(int)> make)
      : hub(transport::inproc::createHub(n)) {
    for (int r = 0; r < n; ++r) transports.push_back(transport::inproc::createTransport(*hub, r));
    for (int r = 0; r < n; ++r) {
      nodes.push_back(std::make_unique<engine::Node<double>>(r, make(r), *transports[r]));
      nodes.back()->setAsynchronous(staleness);
    }
  }
  // Runs every completion that is ready on every transport, without waiting.
  void drain() {
    for (int pass = 0; pass < 4; ++pass) {
      for (auto& t : transports) {
        auto ran = t->progress(Clock::now());
        REQUIRE(ran.isOk());
      }
    }
  }
  void start(int i, uint64_t round, const topology::RoundTopology& topo, double step = 0.0) {
    const Status st = nodes[i]->startRound(round, topo, step, Clock::now() + 10s);
    INFO(st.toString());
    REQUIRE(st.isOk());
  }
  void finish(int i) {
    REQUIRE(nodes[i]->roundComplete());
    const Status st = nodes[i]->finishRound();
    INFO(st.toString());
    REQUIRE(st.isOk());
  }

  std::unique_ptr<transport::inproc::InprocHub> hub;
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<std::unique_ptr<engine::Node<double>>> nodes;
};

TEST_CASE(
    "an asynchronous node mixes each neighbour's newest message and waits only beyond the "
    "staleness bound",
    "[runtime][unit]") {
  // A ring of 3 (everyone neighbours everyone), s = 2. Node 2 stalls after round 0.
  std::vector<FakeAlgorithm*> fakes;
  AsyncCluster c(3, 2, [&](int r) {
    auto a = std::make_unique<FakeAlgorithm>(r);
    fakes.push_back(a.get());
    return a;
  });
  const auto schedule = ringSchedule(3);
  const auto topo = schedule->at(0);

  // Round 0 is always awaited: nobody has anything older to mix.
  c.start(0, 0, *topo);
  c.drain();
  CHECK_FALSE(c.nodes[0]->roundComplete());
  c.start(1, 0, *topo);
  c.start(2, 0, *topo);
  c.drain();
  for (int i = 0; i < 3; ++i) c.finish(i);

  // Rounds 1 and 2 of nodes 0 and 1: node 2's round-0 message is within the bound.
  for (uint64_t r = 1; r <= 2; ++r) {
    c.start(0, r, *topo);
    c.start(1, r, *topo);
    c.drain();
    c.finish(0);
    c.finish(1);
    CHECK(c.nodes[0]->lastStaleness() == r);
    CHECK(c.nodes[0]->newestRound(1) == static_cast<int64_t>(r));
    CHECK(c.nodes[0]->newestRound(2) == 0);
  }
  // Round 3 needs node 2's round 1 or later: it waits.
  c.start(0, 3, *topo);
  c.start(1, 3, *topo);
  c.drain();
  CHECK_FALSE(c.nodes[0]->roundComplete());
  CHECK_FALSE(c.nodes[1]->roundComplete());
  // Node 2's round 1 mixes the newest the others sent (round 3): they are ahead, not stale.
  c.start(2, 1, *topo);
  c.drain();
  c.finish(2);
  c.finish(0);
  c.finish(1);
  CHECK(c.nodes[2]->lastStaleness() == 0);
  CHECK(c.nodes[0]->lastStaleness() == 2);
  CHECK(c.nodes[0]->maxStalenessSeen() == 2);
  CHECK(c.nodes[1]->maxStalenessSeen() == 2);

  // What each absorb was given: sorted peers, the newest message held of each.
  REQUIRE(fakes[0]->absorbed.size() == 4);
  const std::vector<std::vector<double>> node0 = {
      {sentValue(1, 0), sentValue(2, 0)},
      {sentValue(1, 1), sentValue(2, 0)},
      {sentValue(1, 2), sentValue(2, 0)},
      {sentValue(1, 3), sentValue(2, 1)},
  };
  for (size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(fakes[0]->absorbed[r].peers == std::vector<int>{1, 2});
    CHECK(fakes[0]->absorbed[r].values == node0[r]);
  }
  REQUIRE(fakes[2]->absorbed.size() == 2);
  CHECK(fakes[2]->absorbed[1].values == std::vector<double>{sentValue(0, 3), sentValue(1, 3)});
  CHECK(c.nodes[2]->newestRound(0) == 3);
}

TEST_CASE("max_staleness 0 mixes exactly each round's messages, as the synchronous round",
          "[runtime][unit]") {
  std::vector<FakeAlgorithm*> fakes;
  AsyncCluster c(4, 0, [&](int r) {
    auto a = std::make_unique<FakeAlgorithm>(r);
    fakes.push_back(a.get());
    return a;
  });
  const auto schedule = ringSchedule(4);
  const auto topo = schedule->at(0);
  // Node 3 starts each round as soon as its last one finished, before the others finish theirs:
  // they already hold its newer message and must still mix its round-r one.
  c.start(3, 0, *topo);
  for (uint64_t r = 0; r < 5; ++r) {
    for (int i = 0; i < 3; ++i) c.start(i, r, *topo);
    c.drain();
    c.finish(3);
    if (r + 1 < 5) {
      c.start(3, r + 1, *topo);
      c.drain();
      CHECK_FALSE(c.nodes[3]->roundComplete());  // it waits for the others' round r + 1
    }
    for (int i = 0; i < 3; ++i) c.finish(i);
  }
  for (int i = 0; i < 4; ++i) {
    CHECK(c.nodes[i]->maxStalenessSeen() == 0);
    for (const Absorbed& a : fakes[i]->absorbed) {
      for (size_t k = 0; k < a.peers.size(); ++k)
        CHECK(a.values[k] == sentValue(a.peers[k], a.round));
    }
  }
}

// g_i(x) = x - c_i: the gradient of (x - c_i)^2 / 2.
class Quadratic final : public optim::GradientOracle<double> {
 public:
  explicit Quadratic(double c) : c_(c) {}
  void gradient(std::span<const double> x, std::span<double> out) override { out[0] = x[0] - c_; }

 private:
  double c_;
};

TEST_CASE("asynchronous DSGD mixes stale models as a hand computation does", "[runtime][unit]") {
  // 3 nodes (a ring of 3: Metropolis weights 1/3 everywhere), x0 = 0, c = (3, 6, 9), eta = 0.5,
  // s = 1. Rounds: all do round 0; nodes 0 and 1 do round 1 while node 2 stalls.
  //   psi_i^0 = 0 - 0.5 (0 - c_i) = c_i / 2 = (1.5, 3, 4.5);  x_i^1 = mean = 3 for everyone.
  //   psi_0^1 = 3 - 0.5 (3 - 3) = 3;  psi_1^1 = 3 - 0.5 (3 - 6) = 4.5;  node 2's newest is
  //   psi_2^0 = 4.5 (staleness 1): x_0^2 = (3 + 4.5 + 4.5) / 3 = 4 = x_1^2.
  std::vector<std::unique_ptr<Quadratic>> oracles;
  const std::vector<double> c = {3, 6, 9};
  optim::AlgorithmSpec spec;
  spec.kind = optim::AlgorithmKind::kDsgd;
  const std::vector<double> x0 = {0.0};
  AsyncCluster cl(3, 1, [&](int r) {
    oracles.push_back(std::make_unique<Quadratic>(c[r]));
    return optim::createAlgorithm<double>(spec, x0, *oracles.back());
  });
  const auto schedule = ringSchedule(3);
  const auto topo = schedule->at(0);
  for (int i = 0; i < 3; ++i) cl.start(i, 0, *topo, 0.5);
  cl.drain();
  for (int i = 0; i < 3; ++i) cl.finish(i);
  for (int i = 0; i < 3; ++i) CHECK(cl.nodes[i]->model()[0] == Approx(3.0).epsilon(1e-14));
  cl.start(0, 1, *topo, 0.5);
  cl.start(1, 1, *topo, 0.5);
  cl.drain();
  cl.finish(0);
  cl.finish(1);
  CHECK(cl.nodes[0]->model()[0] == Approx(4.0).epsilon(1e-14));
  CHECK(cl.nodes[1]->model()[0] == Approx(4.0).epsilon(1e-14));
  CHECK(cl.nodes[0]->lastStaleness() == 1);
  // Round 2 needs node 2's round 1: it waits until node 2 sends psi_2^1 = 3 - 0.5 (3 - 9) = 6.
  cl.start(0, 2, *topo, 0.5);
  cl.drain();
  CHECK_FALSE(cl.nodes[0]->roundComplete());
  cl.start(2, 1, *topo, 0.5);
  cl.drain();
  // Node 2's round 1 mixes the newest it holds: psi_0^2 = 4 - 0.5 (4 - 3) = 3.5 (node 0 is a
  // round ahead) and psi_1^1 = 4.5: x_2^2 = (6 + 3.5 + 4.5) / 3 = 14 / 3.
  cl.finish(2);
  CHECK(cl.nodes[2]->model()[0] == Approx(14.0 / 3.0).epsilon(1e-14));
  CHECK(cl.nodes[2]->lastStaleness() == 0);
  // Node 0's round 2: psi_0^2 = 3.5, node 1's newest is psi_1^1 = 4.5 (node 1 has not started
  // round 2), node 2's is psi_2^1 = 6: x_0^3 = (3.5 + 4.5 + 6) / 3 = 14 / 3.
  cl.finish(0);
  CHECK(cl.nodes[0]->model()[0] == Approx(14.0 / 3.0).epsilon(1e-14));
  CHECK(cl.nodes[0]->maxStalenessSeen() == 1);
}

TEST_CASE("an asynchronous round times out only on a neighbour beyond the bound",
          "[runtime][unit]") {
  std::vector<FakeAlgorithm*> fakes;
  AsyncCluster c(3, 1, [&](int r) {
    auto a = std::make_unique<FakeAlgorithm>(r);
    fakes.push_back(a.get());
    return a;
  });
  const auto schedule = ringSchedule(3);
  const auto topo = schedule->at(0);
  for (int i = 0; i < 3; ++i) c.start(i, 0, *topo);
  c.drain();
  for (int i = 0; i < 3; ++i) c.finish(i);
  // Round 1 with a short deadline: within the bound, node 0 completes at once.
  REQUIRE(c.nodes[0]->startRound(1, *topo, 0.0, Clock::now() + 50ms).isOk());
  c.drain();
  c.finish(0);
  // Round 2 needs round 1 of nodes 1 and 2, which never come: a timeout naming one of them.
  REQUIRE(c.nodes[0]->startRound(2, *topo, 0.0, Clock::now() + 50ms).isOk());
  const auto stop = Clock::now() + 5s;
  while (!c.nodes[0]->roundComplete() && Clock::now() < stop) {
    REQUIRE(c.transports[0]->progress(Clock::now() + 10ms).isOk());
  }
  REQUIRE(c.nodes[0]->roundComplete());
  const Status st = c.nodes[0]->finishRound();
  CHECK(st.code() == core::StatusCode::kTimeout);
  CHECK_THAT(st.message(), Catch::Matchers::Contains("needs round 1 or later; has round 0"));
}

}  // namespace
}  // namespace starling::runtime
