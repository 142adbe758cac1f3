// Node over the in-process transport against a neighbour that misbehaves: corrupt frames (not a
// frame, cut short, a flipped bit, the wrong length or precision, empty) are counted, logged and
// skipped for the genuine message behind them, or time the round out naming the sender; a
// neighbour that never sends times the round out (node_test.cc has the rest).
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "compression/frame.h"
#include "engine/node.h"
#include "tests/runtime/node_testing.h"
#include "topology/schedule.h"
#include "transport/inproc/inproc_transport.h"

namespace starling::runtime {
namespace {

using namespace node_testing;
using Catch::Matchers::Contains;
using core::StatusCode;

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
  engine::Node<double>& victim = *c.nodes[0];
  const transport::Tag tag{0, engine::kModelChannel};
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
  engine::Node<double>& victim = *c.nodes[0];

  manual.send(0, transport::Tag{0, engine::kModelChannel}, garbage(kind), [](const Status&) {});
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
  manual.send(0, transport::Tag{1, engine::kModelChannel}, goodFrame(1), [](const Status&) {});
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
  engine::Node<double>& victim = *c.nodes[0];
  const transport::Tag tag{0, engine::kModelChannel};
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
  engine::Node<double>& victim = *c.nodes[0];
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

}  // namespace
}  // namespace starling::runtime
