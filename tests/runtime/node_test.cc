// Node over the in-process transport: what a round absorbs (its neighbours' messages, sorted,
// with the round's weights) on static and time-varying schedules, what it sends, rounds called
// out of order, and linear codecs summed in sketch space. Corrupt frames and timeouts are in
// node_fault_test.cc, the divergence check in node_divergence_test.cc (helpers: node_testing.h).
#include "engine/node.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "compression/frame.h"
#include "optim/algorithm.h"
#include "tests/runtime/node_testing.h"
#include "topology/schedule.h"
#include "transport/inproc/inproc_transport.h"

namespace starling::runtime {
namespace {

using namespace node_testing;
using core::StatusCode;

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
  manual.recv(0, transport::Tag{0, engine::kModelChannel}, Clock::now() + 5s,
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

TEST_CASE("codec streams: error feedback keeps a residual per stream, round r's in stream r mod n",
          "[runtime][unit]") {
  // Two nodes on a line, top-1 with error feedback; each node's message is FakeAlgorithm's. The
  // frame a node absorbs as its own is p = top-1(e + v) of its stream's residual e, which then
  // keeps e + v - p: written out here for 2 streams (Streaming DiLoCo's 2 fragments) and for 1.
  compression::CompressorSpec spec;
  spec.kind = compression::CompressorSpec::Kind::kTopK;
  spec.k = 1;
  spec.errorFeedback = true;
  auto codec = compression::createCompressor<double>(spec);
  REQUIRE(codec.isOk());
  const auto schedule = mustSchedule(staticSpec(2, topology::GraphKind::kLine));
  const auto reference = [](int rank, size_t streams, uint64_t rounds) {
    std::vector<std::vector<double>> residual(streams, std::vector<double>(kMessageSize, 0.0));
    std::vector<std::vector<double>> sent;
    for (uint64_t round = 0; round < rounds; ++round) {
      std::vector<double>& e = residual[round % streams];
      std::vector<double> v = expectedMessage(rank, round), p(kMessageSize, 0.0);
      for (size_t k = 0; k < kMessageSize; ++k) v[k] += e[k];
      const size_t top = static_cast<size_t>(
          std::max_element(v.begin(), v.end(),
                           [](double a, double b) { return std::abs(a) < std::abs(b); }) -
          v.begin());
      p[top] = v[top];
      for (size_t k = 0; k < kMessageSize; ++k) e[k] = v[k] - p[k];
      sent.push_back(p);
    }
    return sent;
  };
  constexpr uint64_t kRounds = 5;
  for (const size_t streams : {size_t{2}, size_t{1}}) {
    CAPTURE(streams);
    auto hub = transport::inproc::createHub(2);
    std::vector<std::unique_ptr<transport::Transport>> transports;
    std::vector<std::unique_ptr<engine::Node<double>>> nodes;
    std::vector<FakeAlgorithm*> fakes;
    for (int r = 0; r < 2; ++r) {
      transports.push_back(transport::inproc::createTransport(*hub, r));
      auto algo = std::make_unique<FakeAlgorithm>(r);
      fakes.push_back(algo.get());
      nodes.push_back(std::make_unique<engine::Node<double>>(
          r, std::move(algo), *transports[r], engine::Node<double>::LogFn{}, codec->get(), 5, 6));
      REQUIRE(nodes.back()->setCodecStreams(streams).isOk());
    }
    runRounds(nodes, transports, *schedule, kRounds);
    for (int r = 0; r < 2; ++r) {
      const auto want = reference(r, streams, kRounds);
      REQUIRE(fakes[r]->absorbed.size() == kRounds);
      for (uint64_t round = 0; round < kRounds; ++round) {
        CAPTURE(r, round);
        CHECK(fakes[r]->absorbed[round].own == want[round]);
        CHECK(fakes[1 - r]->absorbed[round].messages[0] == want[round]);
      }
    }
  }
  // The two references differ (so the check above tells the streams apart).
  CHECK(reference(0, 2, kRounds) != reference(0, 1, kRounds));
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
class SumAlgorithm final : public optim::Algorithm<double>,
                           public optim::CombinedAbsorption<double> {
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
  optim::AlgorithmCapabilities<double> capabilities() override {
    return {.combined = combined_ ? this : nullptr};
  }
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
    std::vector<std::unique_ptr<engine::Node<double>>> nodes;
    std::vector<SumAlgorithm*> algos;
    for (int r = 0; r < n; ++r) {
      transports.push_back(transport::inproc::createTransport(*hub, r));
      auto algo = std::make_unique<SumAlgorithm>(r, combined);
      algos.push_back(algo.get());
      nodes.push_back(std::make_unique<engine::Node<double>>(
          r, std::move(algo), *transports[r], engine::Node<double>::LogFn{}, codec->get(),
          /*codecSeed=*/100 + r,
          /*codecSharedSeed=*/77));
    }
    runRounds(nodes, transports, *schedule, 3);
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

// The in-process transport without its frames to lend (Transport::allocate), as the UCX
// transport over TCP: the node then writes every frame into a buffer of its own.
class NonLendingTransport final : public transport::Transport {
 public:
  explicit NonLendingTransport(std::unique_ptr<transport::Transport> inner)
      : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  void send(int to, transport::Tag tag, transport::SharedBytes bytes,
            transport::SendCallback done) override {
    inner_->send(to, tag, std::move(bytes), std::move(done));
  }
  void recv(int from, transport::Tag tag, Clock::time_point deadline,
            transport::RecvCallback done) override {
    inner_->recv(from, tag, deadline, std::move(done));
  }
  core::Result<int> progress(Clock::time_point until) override { return inner_->progress(until); }
  transport::TransportStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<transport::Transport> inner_;
};

// RoundInfo::messageLent tells an algorithm that it writes into memory the neighbours read in
// place (the in-process transport's frames, a shared-memory segment; DSGD and plain gossip then
// stream a large message there). With a lossy codec the algorithm writes the node's own buffer,
// which the codec then reads: never lent.
// An algorithm that carries a state across a restart (optim::CarriedState): a counter vector.
class CarryingAlgorithm final : public optim::Algorithm<double>, public optim::CarriedState {
 public:
  explicit CarryingAlgorithm(std::vector<double> kept) : kept_(std::move(kept)), x_(3, 0.0) {}
  size_t messageSize() const override { return x_.size(); }
  void prepare(const optim::RoundInfo&, std::span<double> out) override {
    std::copy(x_.begin(), x_.end(), out.begin());
  }
  void absorb(const optim::RoundInfo&, std::span<const double>,
              std::span<const optim::NeighborMessage<double>>) override {}
  std::span<const double> model() const override { return x_; }
  optim::AlgorithmCapabilities<double> capabilities() override { return {.carry = this}; }
  std::vector<double> carried() const override { return kept_; }
  core::Status carry(std::span<const double> values) override {
    if (values.size() != kept_.size()) return core::invalidArgument("does not fit");
    kept_.assign(values.begin(), values.end());
    return core::Status::ok();
  }
  std::vector<double> kept_;

 private:
  std::vector<double> x_;
};

TEST_CASE("a restart hands the replaced algorithm's carried state to its successor",
          "[runtime][unit]") {
  auto hub = transport::inproc::createHub(1);
  auto net = transport::inproc::createTransport(*hub, 0);
  auto first = std::make_unique<CarryingAlgorithm>(std::vector<double>{1.5, -2, 7});
  engine::Node<double> node(0, std::move(first), *net, engine::Node<double>::LogFn{});
  CHECK(node.carriedState() == std::vector<double>{1.5, -2, 7});
  // The successor starts with its own (zero) state and ends with its predecessor's.
  auto second = std::make_unique<CarryingAlgorithm>(std::vector<double>{0, 0, 0});
  const CarryingAlgorithm* successor = second.get();
  node.restartAlgorithm(std::move(second));
  CHECK(successor->kept_ == std::vector<double>{1.5, -2, 7});
  // A returning peer's join state: loaded when it fits, refused (nothing changed) otherwise.
  REQUIRE(node.carryState(std::vector<double>{4, 5, 6}).isOk());
  CHECK(node.carriedState() == std::vector<double>{4, 5, 6});
  CHECK_FALSE(node.carryState(std::vector<double>{1, 2}).isOk());
  CHECK(node.carriedState() == std::vector<double>{4, 5, 6});
  CHECK(node.carryState({}).isOk());  // nothing to load
  // An algorithm that keeps nothing across a restart refuses carried values.
  node.restartAlgorithm(std::make_unique<SumAlgorithm>(0, false));
  CHECK(node.carriedState().empty());
  CHECK(node.carryState(std::vector<double>{1}).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("an algorithm is told its message is lent only where it writes the lent frame",
          "[runtime][unit]") {
  compression::CompressorSpec qsgd;
  qsgd.kind = compression::CompressorSpec::Kind::kQsgd;
  auto lossy = compression::createCompressor<double>(qsgd);
  REQUIRE(lossy.isOk());
  const int n = 3;
  const auto schedule = mustSchedule(staticSpec(n, topology::GraphKind::kRing));
  for (const bool lending : {false, true}) {
    const std::vector<const compression::Compressor<double>*> codecs = {nullptr, lossy->get()};
    for (const compression::Compressor<double>* codec : codecs) {
      CAPTURE(lending, codec != nullptr);
      auto hub = transport::inproc::createHub(n);
      std::vector<std::unique_ptr<transport::Transport>> transports;
      std::vector<std::unique_ptr<engine::Node<double>>> nodes;
      std::vector<FakeAlgorithm*> algos;
      for (int r = 0; r < n; ++r) {
        auto inner = transport::inproc::createTransport(*hub, r);
        transports.push_back(lending ? std::move(inner)
                                     : std::make_unique<NonLendingTransport>(std::move(inner)));
        auto algo = std::make_unique<FakeAlgorithm>(r);
        algos.push_back(algo.get());
        nodes.push_back(std::make_unique<engine::Node<double>>(
            r, std::move(algo), *transports[r], engine::Node<double>::LogFn{}, codec, 100 + r));
      }
      const auto topo = schedule->at(0);
      for (auto& node : nodes) REQUIRE(node->startRound(0, *topo, 0.1, Clock::now() + 10s).isOk());
      const auto stop = Clock::now() + 5s;
      for (bool all = false; !all;) {
        all = true;
        for (const auto& node : nodes) all = all && node->roundComplete();
        REQUIRE(Clock::now() < stop);
        for (const auto& t : transports) REQUIRE(t->progress(Clock::now() + 1ms).isOk());
      }
      for (auto& node : nodes) REQUIRE(node->finishRound().isOk());
      for (const FakeAlgorithm* a : algos) {
        REQUIRE(a->prepared.size() == 1);
        CHECK(a->prepared[0].messageLent == (lending && codec == nullptr));
        REQUIRE(a->absorbed.size() == 1);
        CHECK_FALSE(a->absorbed[0].info.messageLent);
      }
    }
  }
}

}  // namespace
}  // namespace starling::runtime
