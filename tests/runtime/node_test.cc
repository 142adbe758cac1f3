#include "runtime/node.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "compression/frame.h"
#include "optim/algorithm.h"
#include "runtime/transport/inproc/inproc_transport.h"
#include "topology/schedule.h"

namespace starling::runtime {
namespace {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using core::Status;
using core::StatusCode;
using transport::Clock;

constexpr size_t kMessageSize = 3;

// What rank `rank` sends in `round`: distinct per (rank, round, element), exact in double.
double sentValue(int rank, uint64_t round, size_t k) {
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

std::unique_ptr<topology::Schedule> mustSchedule(const topology::TopologySpec& spec) {
  auto s = topology::Schedule::create(spec);
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  return std::move(s).value();
}

topology::TopologySpec staticSpec(int nodes, topology::GraphKind kind) {
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
      Node<double>::LogFn logFn;
      if (logging) logFn = [this](const std::string& line) { log.push_back(line); };
      this->nodes.push_back(
          std::make_unique<Node<double>>(r, std::move(algo), *transports[r], std::move(logFn)));
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
  std::vector<std::unique_ptr<Node<double>>> nodes;
  std::vector<FakeAlgorithm*> fakes;
  std::vector<std::string> log;
};

// Runs one round on every node, starting them in `order`; requires every call to succeed.
void runRound(Cluster& c, const topology::RoundTopology& topo, uint64_t round, double step,
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

std::vector<double> expectedMessage(int rank, uint64_t round) {
  std::vector<double> v(kMessageSize);
  for (size_t k = 0; k < kMessageSize; ++k) v[k] = sentValue(rank, round, k);
  return v;
}

// What absorb must have been given by node i in `round` on `topo`.
void checkAbsorbed(const Absorbed& a, int i, uint64_t round, double step,
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

TEST_CASE("nodes on a ring absorb their neighbours' messages sorted, with the round's weights",
          "[runtime][unit]") {
  const int n = GENERATE(3, 4, 5);
  CAPTURE(n);
  const auto schedule = mustSchedule(staticSpec(n, topology::GraphKind::kRing));
  Cluster c(n, n);
  std::vector<int> reverse(n);
  std::iota(reverse.rbegin(), reverse.rend(), 0);  // n-1, ..., 0
  constexpr int kRounds = 3;
  const double step = 0.125;
  for (uint64_t r = 0; r < kRounds; ++r) runRound(c, *schedule->at(r), r, step, reverse);

  const auto topo = schedule->at(0);
  for (int i = 0; i < n; ++i) {
    const auto& log = c.fakes[i]->absorbed;
    REQUIRE(log.size() == kRounds);
    for (uint64_t r = 0; r < kRounds; ++r) {
      checkAbsorbed(log[r], i, r, step, *topo);
      // Independent of the topology module: a ring's neighbours and Metropolis weights.
      std::vector<int> expectPeers = {(i + 1) % n, (i + n - 1) % n};
      std::sort(expectPeers.begin(), expectPeers.end());
      CHECK(log[r].peers == expectPeers);
      for (double w : log[r].weights) CHECK(w == Approx(1.0 / 3.0).epsilon(1e-12));
      CHECK(log[r].info.selfWeight == Approx(1.0 / 3.0).epsilon(1e-12));
    }
    CHECK(c.fakes[i]->prepared.size() == kRounds);
  }
}

TEST_CASE("nodes follow a time-varying schedule round by round", "[runtime][unit]") {
  topology::TopologySpec spec = staticSpec(5, topology::GraphKind::kComplete);
  spec.seed = 11;
  spec.schedule.kind = topology::ScheduleKind::kEdgeDropout;
  spec.schedule.p = 0.5;
  const auto schedule = mustSchedule(spec);
  Cluster c(5, 5);
  constexpr int kRounds = 8;
  std::vector<std::shared_ptr<const topology::RoundTopology>> topos;
  bool degreesVaried = false;
  for (uint64_t r = 0; r < kRounds; ++r) {
    topos.push_back(schedule->at(r));
    const std::vector<int> order =
        (r % 2) ? std::vector<int>{4, 1, 3, 0, 2} : std::vector<int>{2, 0, 4, 3, 1};
    runRound(c, *topos.back(), r, 0.5 / static_cast<double>(r + 1), order);
    for (int i = 0; i < 5; ++i) {
      if (topos.back()->graph.degree(i) != topos[0]->graph.degree(i)) degreesVaried = true;
    }
  }
  CHECK(degreesVaried);  // otherwise this test would not exercise changing weights
  for (int i = 0; i < 5; ++i) {
    const auto& log = c.fakes[i]->absorbed;
    REQUIRE(log.size() == kRounds);
    for (uint64_t r = 0; r < kRounds; ++r) {
      checkAbsorbed(log[r], i, r, 0.5 / static_cast<double>(r + 1), *topos[r]);
    }
  }
}

TEST_CASE("bytesSent counts one dense frame per neighbour per round", "[runtime][unit]") {
  const auto schedule = mustSchedule(staticSpec(5, topology::GraphKind::kRing));
  Cluster c(5, 5);
  REQUIRE(compression::denseFrameBytes<double>(kMessageSize) == 60);  // 32 + 3 * 8 + 4
  for (uint64_t r = 0; r < 4; ++r) runRound(c, *schedule->at(r), r, 0.1, {0, 1, 2, 3, 4});
  for (int i = 0; i < 5; ++i) {
    CAPTURE(i);
    CHECK(c.nodes[i]->bytesSent() == 4 * 2 * 60);
    CHECK(c.transports[i]->stats().bytesSent == 4 * 2 * 60);
    CHECK(c.transports[i]->stats().messagesSent == 4 * 2);
    CHECK(c.nodes[i]->corruptMessages() == 0);
  }
  CHECK(c.log.empty());
}

TEST_CASE("the frame a node sends decodes to what its algorithm prepared", "[runtime][unit]") {
  // Two nodes on a line; rank 1 is driven by hand and reads rank 0's frame itself.
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  Cluster c(1, 2);
  transport::Transport& manual = *c.transports[1];
  const auto topo = schedule->at(0);
  REQUIRE(c.nodes[0]->startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
  transport::SharedBytes frame;
  manual.recv(0, transport::Tag{0, kModelChannel}, Clock::now() + 5s,
              [&](const Status& st, transport::SharedBytes b) {
                CHECK(st.isOk());
                frame = std::move(b);
              });
  const auto stop = Clock::now() + 5s;
  while (frame == nullptr && Clock::now() < stop) {
    (void)c.transports[0]->progress(Clock::now() + 1ms);
    (void)manual.progress(Clock::now() + 1ms);
  }
  REQUIRE(frame != nullptr);
  CHECK(frame->size() == compression::denseFrameBytes<double>(kMessageSize));
  std::vector<double> scratch;
  auto values = compression::decodeDense<double>(*frame, kMessageSize, scratch);
  REQUIRE(values.isOk());
  CHECK(std::vector<double>(values->begin(), values->end()) == expectedMessage(0, 0));
}

// A frame a hand-driven rank 1 sends to node 0 for (round 0, model channel), by kind.
transport::SharedBytes garbage(int kind) {
  std::vector<std::byte> good;
  compression::encodeDense<double>(expectedMessage(1, 0), good);
  auto out = std::make_shared<transport::Bytes>();
  switch (kind) {
    case 0:  // not a frame at all
      for (size_t i = 0; i < good.size(); ++i) out->push_back(static_cast<std::byte>(i * 37 + 1));
      break;
    case 1:  // a good frame cut short by one byte
      out->assign(good.begin(), good.end() - 1);
      break;
    case 2:  // a good frame with one bit flipped in the payload
      *out = good;
      (*out)[40] ^= std::byte{0x10};
      break;
    case 3: {  // a good frame of the wrong length
      std::vector<double> two = {1.0, 2.0};
      compression::encodeDense<double>(two, *out);
      break;
    }
    case 4: {  // a good frame of the wrong precision
      std::vector<float> three = {1.0f, 2.0f, 3.0f};
      compression::encodeDense<float>(three, *out);
      break;
    }
    case 5:  // empty
      break;
  }
  return out;
}

transport::SharedBytes goodFrame(uint64_t round) {
  auto good = std::make_shared<transport::Bytes>();
  compression::encodeDense<double>(expectedMessage(1, round), *good);
  return good;
}

// node.h: a malformed message is counted, logged, and the neighbour's message is asked for again
// with the same deadline, so the genuine message behind it is still absorbed.
TEST_CASE("a corrupt frame is rejected and the genuine one behind it absorbed", "[runtime][unit]") {
  const int kind = GENERATE(0, 1, 2, 3, 4, 5);
  CAPTURE(kind);
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  const auto topo = schedule->at(0);
  Cluster c(1, 2);
  transport::Transport& manual = *c.transports[1];
  Node<double>& victim = *c.nodes[0];
  const transport::Tag tag{0, kModelChannel};
  uint64_t garbageSent = 0;
  // How the forgeries and the genuine message reach the node: 0 forgeries queued in front of it
  // before the round starts, 1 as many as fit in front of it, 2 one at a time while it waits.
  const int how = GENERATE(0, 1, 2);
  CAPTURE(how);
  if (how < 2) {
    garbageSent = how == 0 ? 1 : transport::kMaxQueuedPerKey - 1;
    for (uint64_t g = 0; g < garbageSent; ++g)
      manual.send(0, tag, garbage(kind), [](const Status&) {});
    manual.send(0, tag, goodFrame(0), [](const Status&) {});
    REQUIRE(victim.startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
  } else {
    garbageSent = 1;
    REQUIRE(victim.startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
    manual.send(0, tag, garbage(kind), [](const Status&) {});
    const auto stop = Clock::now() + 5s;
    while (victim.corruptMessages() == 0 && Clock::now() < stop) {
      REQUIRE(c.transports[0]->progress(Clock::now() + 1ms).isOk());
    }
    REQUIRE(victim.corruptMessages() == 1);
    // The forgery does not complete the round; the node is waiting for the genuine message.
    REQUIRE(c.transports[0]->progress(Clock::now() + 20ms).isOk());
    CHECK_FALSE(victim.roundComplete());
    manual.send(0, tag, goodFrame(0), [](const Status&) {});
  }
  CAPTURE(garbageSent);
  REQUIRE(c.driveUntilComplete());
  const Status st = victim.finishRound();
  INFO(st.toString());
  REQUIRE(st.isOk());
  CHECK(victim.corruptMessages() == garbageSent);
  REQUIRE(c.fakes[0]->absorbed.size() == 1);
  checkAbsorbed(c.fakes[0]->absorbed[0], 0, 0, 0.1, *topo);
  CHECK(c.fakes[0]->absorbed[0].messages ==
        std::vector<std::vector<double>>{expectedMessage(1, 0)});
  REQUIRE(c.log.size() == garbageSent);
  for (const std::string& line : c.log) {
    CHECK_THAT(line, Contains("rank 1"));
    CHECK_THAT(line, Contains("round 0"));
  }
  CHECK(c.transports[0]->stats().timeouts == 0);
  CHECK(c.transports[0]->stats().messagesReceived == garbageSent + 1);
}

TEST_CASE("a corrupt frame with nothing behind it times the round out naming the sender",
          "[runtime][unit]") {
  const int kind = GENERATE(0, 1, 2, 3, 4, 5);
  CAPTURE(kind);
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  Cluster c(1, 2);
  transport::Transport& manual = *c.transports[1];
  Node<double>& victim = *c.nodes[0];

  manual.send(0, transport::Tag{0, kModelChannel}, garbage(kind), [](const Status&) {});
  const auto deadline = Clock::now() + 300ms;
  REQUIRE(victim.startRound(0, *schedule->at(0), 0.1, deadline).isOk());
  REQUIRE(c.driveUntilComplete());
  // The receive asked for again keeps the round's deadline: the round ends there, not later.
  CHECK(Clock::now() >= deadline);
  CHECK(Clock::now() < deadline + 3s);
  const Status st = victim.finishRound();
  INFO(st.toString());
  CHECK(st.code() == StatusCode::kTimeout);
  CHECK_THAT(st.message(), Contains("rank 1"));
  CHECK(victim.corruptMessages() == 1);
  CHECK(c.fakes[0]->absorbed.empty());
  CHECK(c.transports[0]->stats().timeouts == 1);
  REQUIRE(c.log.size() == 1);
  CHECK_THAT(c.log[0], Contains("rank 1"));

  // The node recovers: the next round with a good frame is absorbed normally.
  manual.send(0, transport::Tag{1, kModelChannel}, goodFrame(1), [](const Status&) {});
  REQUIRE(victim.startRound(1, *schedule->at(1), 0.1, Clock::now() + 10s).isOk());
  REQUIRE(c.driveUntilComplete());
  const Status next = victim.finishRound();
  INFO(next.toString());
  REQUIRE(next.isOk());
  REQUIRE(c.fakes[0]->absorbed.size() == 1);
  checkAbsorbed(c.fakes[0]->absorbed[0], 0, 1, 0.1, *schedule->at(1));
  CHECK(c.fakes[0]->absorbed[0].weights == std::vector<double>{0.5});  // line of 2: 1/(1+1)
  CHECK(victim.corruptMessages() == 1);
  CHECK(c.log.size() == 1);
}

TEST_CASE("a node without a log callback still rejects a corrupt frame", "[runtime][unit]") {
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  Cluster c(1, 2, /*logging=*/false);
  transport::Transport& manual = *c.transports[1];
  Node<double>& victim = *c.nodes[0];
  const transport::Tag tag{0, kModelChannel};
  manual.send(0, tag, garbage(2), [](const Status&) {});
  manual.send(0, tag, goodFrame(0), [](const Status&) {});
  REQUIRE(victim.startRound(0, *schedule->at(0), 0.1, Clock::now() + 10s).isOk());
  REQUIRE(c.driveUntilComplete());
  const Status st = victim.finishRound();
  INFO(st.toString());
  REQUIRE(st.isOk());
  CHECK(victim.corruptMessages() == 1);
  REQUIRE(c.fakes[0]->absorbed.size() == 1);
  checkAbsorbed(c.fakes[0]->absorbed[0], 0, 0, 0.1, *schedule->at(0));
  CHECK(c.log.empty());
}

TEST_CASE("a neighbour that never sends times the round out", "[runtime][unit]") {
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  Cluster c(1, 2);
  Node<double>& victim = *c.nodes[0];
  const auto deadline = Clock::now() + 100ms;
  REQUIRE(victim.startRound(0, *schedule->at(0), 0.1, deadline).isOk());
  CHECK_FALSE(victim.roundComplete());
  REQUIRE(c.driveUntilComplete());
  CHECK(Clock::now() >= deadline);
  const Status st = victim.finishRound();
  INFO(st.toString());
  CHECK(st.code() == StatusCode::kTimeout);
  CHECK_THAT(st.message(), Contains("rank 1"));
  CHECK(c.fakes[0]->absorbed.empty());
  CHECK(victim.corruptMessages() == 0);
  CHECK(c.transports[0]->stats().timeouts == 1);
  CHECK(c.log.empty());
}

TEST_CASE("round calls out of order are kFailedPrecondition", "[runtime][unit]") {
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  Cluster c(2, 2);
  const auto topo = schedule->at(0);

  SECTION("finishRound before startRound") {
    const Status st = c.nodes[0]->finishRound();
    CHECK(st.code() == StatusCode::kFailedPrecondition);
    CHECK(c.fakes[0]->absorbed.empty());
  }
  SECTION("finishRound before the round completed, then after") {
    REQUIRE(c.nodes[0]->startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
    REQUIRE_FALSE(c.nodes[0]->roundComplete());
    CHECK(c.nodes[0]->finishRound().code() == StatusCode::kFailedPrecondition);
    REQUIRE(c.nodes[1]->startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
    REQUIRE(c.driveUntilComplete());
    CHECK(c.nodes[0]->finishRound().isOk());
    CHECK(c.nodes[1]->finishRound().isOk());
    CHECK(c.fakes[0]->absorbed.size() == 1);
  }
  SECTION("startRound twice") {
    REQUIRE(c.nodes[0]->startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
    CHECK(c.nodes[0]->startRound(1, *topo, 0.1, Clock::now() + 10s).code() ==
          StatusCode::kFailedPrecondition);
    CHECK(c.fakes[0]->prepared.size() == 1);  // the refused call did no work
  }
  SECTION("finishRound twice") {
    runRound(c, *topo, 0, 0.1, {0, 1});
    CHECK(c.nodes[0]->finishRound().code() == StatusCode::kFailedPrecondition);
    CHECK(c.fakes[0]->absorbed.size() == 1);
  }
}


// Records w_ii own + sum_j w_ij m_j, computed from the individual messages or handed over by the
// engine from a sketch-space sum.
class SumAlgorithm final : public optim::Algorithm<double> {
 public:
  SumAlgorithm(int rank, bool combined) : rank_(rank), combined_(combined), x_(40, 0.0) {}
  size_t messageSize() const override { return x_.size(); }
  void prepare(const optim::RoundInfo& info, std::span<double> out) override {
    core::Rng rng(core::deriveSeed(99, static_cast<uint64_t>(rank_), info.round));
    for (double& v : out) v = rng.normal();
  }
  void absorb(const optim::RoundInfo& info, std::span<const double> own,
              std::span<const optim::NeighborMessage<double>> nbrs) override {
    std::vector<double> sum(own.size());
    for (size_t k = 0; k < own.size(); ++k) sum[k] = info.selfWeight * own[k];
    for (const auto& n : nbrs) {
      for (size_t k = 0; k < own.size(); ++k) sum[k] += n.weight * n.message[k];
    }
    sums.push_back(std::move(sum));
  }
  bool absorbsCombined() const override { return combined_; }
  void absorbCombined(const optim::RoundInfo&, std::span<const double>,
                      std::span<const double> combined) override {
    sums.emplace_back(combined.begin(), combined.end());
  }
  std::span<const double> model() const override { return x_; }

  std::vector<std::vector<double>> sums;

 private:
  int rank_;
  bool combined_;
  std::vector<double> x_;
};

TEST_CASE("with a linear codec, nodes sum their neighbours' frames in sketch space and decode "
          "once, to the same result", "[runtime][unit]") {
  compression::CompressorSpec spec;
  spec.kind = compression::CompressorSpec::Kind::kCountSketch;
  spec.rows = 3;
  spec.cols = 16;
  spec.meanEstimate = true;
  auto codec = compression::createCompressor<double>(spec);
  REQUIRE(codec.isOk());
  const int n = 5;
  const auto schedule = mustSchedule(staticSpec(n, topology::GraphKind::kRing));
  std::vector<std::vector<std::vector<double>>> results;
  for (bool combined : {true, false}) {
    auto hub = transport::inproc::createHub(n);
    std::vector<std::unique_ptr<transport::Transport>> transports;
    std::vector<std::unique_ptr<Node<double>>> nodes;
    std::vector<SumAlgorithm*> algos;
    for (int r = 0; r < n; ++r) {
      transports.push_back(transport::inproc::createTransport(*hub, r));
      auto algo = std::make_unique<SumAlgorithm>(r, combined);
      algos.push_back(algo.get());
      nodes.push_back(std::make_unique<Node<double>>(r, std::move(algo), *transports[r],
                                                     Node<double>::LogFn{}, codec->get(),
                                                     /*codecSeed=*/100 + r,
                                                     /*codecSharedSeed=*/77));
    }
    for (uint64_t round = 0; round < 3; ++round) {
      const auto topo = schedule->at(round);
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
    std::vector<std::vector<double>> all;
    for (const SumAlgorithm* a : algos) all.insert(all.end(), a->sums.begin(), a->sums.end());
    results.push_back(std::move(all));
  }
  REQUIRE(results[0].size() == 15);
  REQUIRE(results[1].size() == 15);
  for (size_t s = 0; s < results[0].size(); ++s) {
    for (size_t k = 0; k < results[0][s].size(); ++k) {
      INFO("node-round " << s << ", coordinate " << k);
      CHECK(results[0][s][k] == Approx(results[1][s][k]).epsilon(1e-12).margin(1e-12));
    }
  }
}

// The model's divergence check runs inside the algorithms' own combine where they have one
// (Algorithm::absorbWithin; optim/algorithms.cc): a neighbour's message that makes the model
// non-finite or larger than divergence.max_abs anywhere, in any block, still fails the round with
// the message checkFinite writes, naming the first such coordinate.
class ZeroOracle final : public optim::GradientOracle<double> {
 public:
  void gradient(std::span<const double>, std::span<double> out) override {
    std::fill(out.begin(), out.end(), 0.0);
  }
};

TEST_CASE("a model a neighbour's message makes non-finite or too large fails the round",
          "[runtime][unit]") {
  const auto kind = GENERATE(optim::AlgorithmKind::kExactDiffusion, optim::AlgorithmKind::kDsgd,
                             optim::AlgorithmKind::kGradientTracking);
  const size_t at = GENERATE(size_t{0}, size_t{1500}, size_t{2562});  // blocks 0, 1 and 2 (the tail)
  const int poison = GENERATE(0, 1, 2, 3);
  CAPTURE(optim::algorithmKindName(kind), at, poison);
  constexpr size_t kDim = 2563;
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  const auto topo = schedule->at(0);
  auto hub = transport::inproc::createHub(2);
  auto t0 = transport::inproc::createTransport(*hub, 0);
  auto t1 = transport::inproc::createTransport(*hub, 1);
  ZeroOracle oracle;
  optim::AlgorithmSpec spec;
  spec.kind = kind;
  const std::vector<double> x0(kDim, 0.0);
  auto algo = optim::createAlgorithm<double>(spec, x0, oracle);
  const size_t size = algo->messageSize();
  Node<double> node(0, std::move(algo), *t0, {});
  node.setDivergenceLimit(1e6);
  // Every coordinate 1, one poisoned: NaN, +inf, -inf, or 1e9, which every one of these
  // algorithms puts into the model times a weight of at least 1/4 (> 1e6).
  std::vector<double> message(size, 1.0);
  const double values[] = {std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(), 1e9};
  message[at] = values[poison];
  auto frame = std::make_shared<transport::Bytes>();
  compression::encodeDense<double>(message, *frame);
  t1->send(0, transport::Tag{0, kModelChannel}, transport::SharedBytes(frame), [](const Status&) {});
  REQUIRE(node.startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
  const auto stop = Clock::now() + 5s;
  while (!node.roundComplete()) {
    REQUIRE(Clock::now() < stop);
    REQUIRE(t0->progress(Clock::now() + 1ms).isOk());
    REQUIRE(t1->progress(Clock::now() + 1ms).isOk());
  }
  const Status st = node.finishRound();
  CHECK(st.code() == StatusCode::kDiverged);
  const std::string prefix =
      "diverged at round 0 (rank 0): its model coordinate " + std::to_string(at) + " is ";
  const char* expected[] = {"nan", "+inf", "-inf", nullptr};
  if (expected[poison] != nullptr) {
    CHECK(st.message() == prefix + expected[poison]);
  } else {
    CHECK_THAT(st.message(), Catch::Matchers::StartsWith(prefix));
    CHECK_THAT(st.message(), Catch::Matchers::EndsWith(", beyond divergence.max_abs 1e+06"));
  }
}

TEST_CASE("a model within divergence.max_abs everywhere passes the check", "[runtime][unit]") {
  const auto kind = GENERATE(optim::AlgorithmKind::kExactDiffusion, optim::AlgorithmKind::kDsgd);
  CAPTURE(optim::algorithmKindName(kind));
  constexpr size_t kDim = 2563;
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  const auto topo = schedule->at(0);
  auto hub = transport::inproc::createHub(2);
  auto t0 = transport::inproc::createTransport(*hub, 0);
  auto t1 = transport::inproc::createTransport(*hub, 1);
  ZeroOracle oracle;
  optim::AlgorithmSpec spec;
  spec.kind = kind;
  auto algo = optim::createAlgorithm<double>(spec, std::vector<double>(kDim, 0.0), oracle);
  Node<double> node(0, std::move(algo), *t0, {});
  // The limit itself is within (|x| <= max_abs): the model is w_01 = 1/2 of the neighbour's
  // message (DSGD), or half that (exact diffusion's (I + W) / 2), everywhere.
  const double model = kind == optim::AlgorithmKind::kDsgd ? 5e5 : 2.5e5;
  node.setDivergenceLimit(model);
  std::vector<double> message(kDim, 1e6);
  auto frame = std::make_shared<transport::Bytes>();
  compression::encodeDense<double>(message, *frame);
  t1->send(0, transport::Tag{0, kModelChannel}, transport::SharedBytes(frame), [](const Status&) {});
  REQUIRE(node.startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
  const auto stop = Clock::now() + 5s;
  while (!node.roundComplete()) {
    REQUIRE(Clock::now() < stop);
    REQUIRE(t0->progress(Clock::now() + 1ms).isOk());
    REQUIRE(t1->progress(Clock::now() + 1ms).isOk());
  }
  const Status st = node.finishRound();
  INFO(st.toString());
  CHECK(st.isOk());
  for (double v : node.model()) REQUIRE(v == model);
}

}  // namespace
}  // namespace starling::runtime
