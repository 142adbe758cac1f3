// Node's divergence check (Node::setDivergenceLimit) with the algorithms' own combine: a
// neighbour's message that makes the model non-finite or too large fails the round, naming the
// coordinate; a model within the limit passes (node_test.cc has the rest).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compression/frame.h"
#include "engine/node.h"
#include "optim/algorithm.h"
#include "tests/runtime/node_testing.h"
#include "topology/schedule.h"
#include "transport/inproc/inproc_transport.h"

namespace starling::runtime {
namespace {

using namespace node_testing;
using core::StatusCode;

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
  engine::Node<double> node(0, std::move(algo), *t0, {});
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
  t1->send(0, transport::Tag{0, engine::kModelChannel}, transport::SharedBytes(frame),
           [](const Status&) {});
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
  engine::Node<double> node(0, std::move(algo), *t0, {});
  // The limit itself is within (|x| <= max_abs): the model is w_01 = 1/2 of the neighbour's
  // message (DSGD), or half that (exact diffusion's (I + W) / 2), everywhere.
  const double model = kind == optim::AlgorithmKind::kDsgd ? 5e5 : 2.5e5;
  node.setDivergenceLimit(model);
  std::vector<double> message(kDim, 1e6);
  auto frame = std::make_shared<transport::Bytes>();
  compression::encodeDense<double>(message, *frame);
  t1->send(0, transport::Tag{0, engine::kModelChannel}, transport::SharedBytes(frame),
           [](const Status&) {});
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
