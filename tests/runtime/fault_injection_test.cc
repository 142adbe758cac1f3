// FaultInjector over the in-process transport: what the wrapped transport is handed (drop,
// duplicate, reorder), what a receiver gets, and that nothing is left queued behind.
#include "engine/fault_injection.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <memory>
#include <set>
#include <vector>

#include "engine/node.h"
#include "transport/inproc/inproc_transport.h"

namespace starling::runtime {
namespace {

using namespace std::chrono_literals;
using transport::Clock;
using transport::SharedBytes;
using transport::Tag;

// Forwards to an in-process endpoint and writes down every send it is handed.
class Recording final : public transport::Transport {
 public:
  struct Send {
    int to;
    Tag tag;
    const void* owner;
    size_t size;
  };
  explicit Recording(std::unique_ptr<transport::Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  void send(int to, Tag tag, SharedBytes bytes, transport::SendCallback done) override {
    sent.push_back(Send{to, tag, bytes.owner(), bytes->size()});
    inner_->send(to, tag, std::move(bytes), std::move(done));
  }
  void recv(int from, Tag tag, Clock::time_point deadline, transport::RecvCallback done) override {
    inner_->recv(from, tag, deadline, std::move(done));
  }
  core::Result<int> progress(Clock::time_point until) override { return inner_->progress(until); }
  transport::TransportStats stats() const override { return inner_->stats(); }

  std::vector<Send> sent;

 private:
  std::unique_ptr<transport::Transport> inner_;
};

engine::FaultEvent chance(engine::FaultEvent::Kind kind, double p, uint64_t from = 0,
                          uint64_t to = 1000000) {
  engine::FaultEvent e;
  e.kind = kind;
  e.probability = p;
  e.fromRound = from;
  e.toRound = to;
  return e;
}

// A send whose completion nobody waits for.
const transport::SendCallback ignore = [](const core::Status&) {};

SharedBytes message(uint64_t round) {
  auto b = std::make_shared<transport::Bytes>(16, std::byte{0});
  (*b)[0] = static_cast<std::byte>(round & 0xff);
  (*b)[1] = static_cast<std::byte>((round >> 8) & 0xff);
  return b;
}

// Ranks 0..n-1 on one hub; rank r's node sends through injector[r], which wraps recording[r].
struct Net {
  Net(int n, std::vector<engine::FaultEvent> events, bool realTime, uint64_t seed = 7)
      : hub(transport::inproc::createHub(n)) {
    for (int r = 0; r < n; ++r) {
      recording.push_back(
          std::make_unique<Recording>(transport::inproc::createTransport(*hub, r)));
      injector.push_back(std::make_unique<engine::FaultInjector>(*recording.back(), events, seed,
                                                                 engine::kModelChannel, realTime));
    }
  }
  // Drives every endpoint once without waiting.
  void pump() {
    for (auto& i : injector) REQUIRE(i->progress(Clock::now()).isOk());
  }
  std::unique_ptr<transport::inproc::InprocHub> hub;
  std::vector<std::unique_ptr<Recording>> recording;
  std::vector<std::unique_ptr<engine::FaultInjector>> injector;
};

// Whatever is still queued at `rank` from `from` for `tag`: receives with a deadline already
// past until one times out.
int leftQueued(transport::Transport& t, int from, Tag tag) {
  int left = 0;
  for (;;) {
    bool done = false, ok = false;
    t.recv(from, tag, Clock::now() - 1ms, [&](const core::Status& st, SharedBytes) {
      done = true;
      ok = st.isOk();
    });
    while (!done) REQUIRE(t.progress(Clock::now()).isOk());
    if (!ok) return left;
    ++left;
  }
}

TEST_CASE("drop: about P of the messages never reach the wrapped transport", "[runtime][unit]") {
  constexpr int kMessages = 10000;
  Net net(2, {chance(engine::FaultEvent::Kind::kDrop, 0.3)}, /*realTime=*/true);
  int completed = 0;
  for (int k = 0; k < kMessages; ++k) {
    net.injector[0]->send(1, Tag{static_cast<uint64_t>(k), engine::kModelChannel}, message(k),
                          [&](const core::Status& st) { completed += st.isOk(); });
  }
  net.pump();
  // Every send completes, dropped or not: a sender cannot see a loss.
  CHECK(completed == kMessages);
  const auto seen = static_cast<int>(net.recording[0]->sent.size());
  const auto drops = net.injector[0]->takeDropped();
  CHECK(seen + static_cast<int>(drops.size()) == kMessages);
  CHECK(net.injector[0]->counts().dropped == drops.size());
  // 3,000 expected, sd 46.
  CHECK(std::abs(static_cast<int>(drops.size()) - 3000) < 250);
  std::set<uint64_t> dropped;
  for (const auto& d : drops) {
    CHECK(d.to == 1);
    dropped.insert(d.tag.round);
  }
  for (const auto& s : net.recording[0]->sent) CHECK(dropped.count(s.tag.round) == 0);
  CHECK(net.injector[0]->takeDropped().empty());  // taken once

  // The same seed drops the same messages (simulate and run draw alike); another seed others.
  Net again(2, {chance(engine::FaultEvent::Kind::kDrop, 0.3)}, true);
  Net other(2, {chance(engine::FaultEvent::Kind::kDrop, 0.3)}, true, /*seed=*/8);
  for (int k = 0; k < kMessages; ++k) {
    again.injector[0]->send(1, Tag{static_cast<uint64_t>(k), engine::kModelChannel}, message(k),
                            ignore);
    other.injector[0]->send(1, Tag{static_cast<uint64_t>(k), engine::kModelChannel}, message(k),
                            ignore);
  }
  std::set<uint64_t> droppedAgain, droppedOther;
  for (const auto& d : again.injector[0]->takeDropped()) droppedAgain.insert(d.tag.round);
  for (const auto& d : other.injector[0]->takeDropped()) droppedOther.insert(d.tag.round);
  CHECK(droppedAgain == dropped);
  CHECK(droppedOther != dropped);
}

TEST_CASE("drop: only the scripted rounds, link and channel", "[runtime][unit]") {
  engine::FaultEvent e = chance(engine::FaultEvent::Kind::kDrop, 1.0, 5, 8);
  e.linkA = 1;
  e.linkB = 0;
  Net net(3, {e}, true);
  for (uint64_t r = 0; r < 12; ++r) {
    for (int to : {1, 2})
      net.injector[0]->send(to, Tag{r, engine::kModelChannel}, message(r), ignore);
    net.injector[0]->send(1, Tag{r, engine::kModelChannel + 2}, message(r),
                          ignore);  // another channel
  }
  std::vector<uint64_t> rounds;
  for (const auto& d : net.injector[0]->takeDropped()) {
    CHECK(d.to == 1);
    rounds.push_back(d.tag.round);
  }
  CHECK(rounds == std::vector<uint64_t>{5, 6, 7});
  CHECK(net.recording[0]->sent.size() == 3 * 12 - 3);
}

TEST_CASE("drop: the receive fails at once in simulate, waits its deadline over a network",
          "[runtime][unit]") {
  engine::FaultEvent e = chance(engine::FaultEvent::Kind::kDrop, 1.0, 3, 4);
  for (const bool realTime : {false, true}) {
    DYNAMIC_SECTION("realTime " << realTime) {
      Net net(2, {e}, realTime);
      for (uint64_t r = 2; r < 5; ++r) net.injector[0]->send(1, Tag{r, 0}, message(r), ignore);
      std::vector<core::Status> got(5);
      std::vector<bool> done(5, false);
      const auto start = Clock::now();
      for (uint64_t r = 2; r < 5; ++r) {
        net.injector[1]->recv(0, Tag{r, 0}, Clock::now() + 300ms,
                              [&, r](const core::Status& st, SharedBytes) {
                                got[r] = st;
                                done[r] = true;
                              });
      }
      while (!(done[2] && done[3] && done[4])) {
        REQUIRE(net.injector[1]->progress(Clock::now() + 10ms).isOk());
      }
      CHECK(got[2].isOk());
      CHECK(got[4].isOk());
      if (realTime) {
        CHECK(got[3].code() == core::StatusCode::kTimeout);
        CHECK(Clock::now() - start >= 300ms);
      } else {
        CHECK(got[3].code() == core::StatusCode::kUnavailable);
        CHECK_THAT(got[3].message(),
                   Catch::Contains("the fault script dropped rank 0's model message to rank 1 "
                                   "in round 3 (link 0-1)"));
        CHECK(Clock::now() - start < 300ms);
      }
    }
  }
}

TEST_CASE("duplicate: two copies go out; the receiver uses one and collects the other",
          "[runtime][unit]") {
  constexpr uint64_t kRounds = 1000;
  Net net(2, {chance(engine::FaultEvent::Kind::kDuplicate, 0.5)}, false);
  std::vector<int> received(kRounds, 0);
  for (uint64_t r = 0; r < kRounds; ++r) {
    net.injector[0]->send(1, Tag{r, engine::kModelChannel}, message(r), ignore);
    net.injector[1]->recv(0, Tag{r, engine::kModelChannel}, Clock::now() + 10s,
                          [&, r](const core::Status& st, SharedBytes b) {
                            REQUIRE(st.isOk());
                            CHECK(static_cast<uint64_t>((*b)[0]) == (r & 0xff));
                            ++received[r];
                          });
    net.pump();
  }
  net.pump();
  for (uint64_t r = 0; r < kRounds; ++r) CHECK(received[r] == 1);  // one copy each
  const auto& c0 = net.injector[0]->counts();
  const auto& c1 = net.injector[1]->counts();
  // The wrapped transport was handed each duplicated message twice, the same buffer both times.
  const auto& sent = net.recording[0]->sent;
  CHECK(sent.size() == kRounds + c0.duplicated);
  CHECK(std::abs(static_cast<double>(c0.duplicated) - 500.0) < 80);  // sd 16
  size_t pairs = 0;
  for (size_t k = 0; k + 1 < sent.size(); ++k) {
    if (sent[k].tag == sent[k + 1].tag) {
      CHECK(sent[k].owner == sent[k + 1].owner);
      ++pairs;
    }
  }
  CHECK(pairs == c0.duplicated);
  // Every spare copy was collected; nothing is left queued at the receiver.
  CHECK(c1.collected == c0.duplicated);
  size_t left = 0;
  for (uint64_t r = 0; r < kRounds; ++r) {
    left += leftQueued(*net.recording[1], 0, Tag{r, engine::kModelChannel});
  }
  CHECK(left == 0);
  CHECK(net.recording[1]->stats().corruptMessages == 0);
}

TEST_CASE("duplicate after a corrupted copy: rejected, genuine, then the spare collected",
          "[runtime][unit]") {
  Net net(2,
          {chance(engine::FaultEvent::Kind::kCorrupt, 1.0),
           chance(engine::FaultEvent::Kind::kDuplicate, 1.0)},
          false);
  const SharedBytes genuine = message(9);
  net.injector[0]->send(1, Tag{9, 0}, genuine, ignore);
  CHECK(net.recording[0]->sent.size() == 3);  // corrupted copy, genuine, spare
  // The receiver (as a Node does) rejects what is not the genuine frame and asks again.
  int calls = 0;
  bool gotGenuine = false;
  std::function<void()> ask = [&] {
    net.injector[1]->recv(0, Tag{9, 0}, Clock::now() + 10s, [&](const core::Status& st,
                                                                 SharedBytes b) {
      REQUIRE(st.isOk());
      ++calls;
      if (b.owner() != genuine.owner()) {
        ask();
      } else {
        gotGenuine = true;
      }
    });
  };
  ask();
  while (!gotGenuine) REQUIRE(net.injector[1]->progress(Clock::now() + 10ms).isOk());
  net.pump();
  CHECK(calls == 2);
  CHECK(net.injector[1]->counts().collected == 1);
  CHECK(leftQueued(*net.recording[1], 0, Tag{9, 0}) == 0);
}

TEST_CASE("reorder: a held message leaves after the next one, or when the sender waits",
          "[runtime][unit]") {
  SECTION("every message: pairs swap") {
    Net net(4, {chance(engine::FaultEvent::Kind::kReorder, 1.0)}, true);
    for (int to : {1, 2, 3})
      net.injector[0]->send(to, Tag{0, engine::kModelChannel}, message(to), ignore);
    // 1 held, 2 goes (the next), then 1; 3 held until the sender waits.
    const auto& sent = net.recording[0]->sent;
    REQUIRE(sent.size() == 2);
    CHECK(sent[0].to == 2);
    CHECK(sent[1].to == 1);
    REQUIRE(net.injector[0]->progress(Clock::now()).isOk());
    REQUIRE(sent.size() == 3);
    CHECK(sent[2].to == 3);
    CHECK(net.injector[0]->counts().reordered == 2);
    // A message on another channel (the membership gossip) releases one too, to the same
    // neighbour: reordered on that link.
    net.injector[0]->send(1, Tag{1, engine::kModelChannel}, message(1), ignore);
    net.injector[0]->send(1, Tag{1, 2}, message(1), ignore);
    REQUIRE(sent.size() == 5);
    CHECK(sent[3].tag == Tag{1, 2});
    CHECK(sent[4].tag == Tag{1, engine::kModelChannel});
    // releaseHeld (the simulator, once every node has sent).
    net.injector[0]->send(2, Tag{2, engine::kModelChannel}, message(2), ignore);
    CHECK(sent.size() == 5);
    net.injector[0]->releaseHeld();
    CHECK(sent.size() == 6);
  }
  SECTION("half of them: each delivered once, not in send order") {
    Net net(3, {chance(engine::FaultEvent::Kind::kReorder, 0.5)}, false);
    constexpr uint64_t kRounds = 200;
    for (uint64_t r = 0; r < kRounds; ++r) {
      for (int to : {1, 2})
        net.injector[0]->send(to, Tag{r, engine::kModelChannel}, message(r), ignore);
    }
    net.injector[0]->releaseHeld();
    const auto& sent = net.recording[0]->sent;
    REQUIRE(sent.size() == 2 * kRounds);
    std::set<std::pair<uint64_t, int>> keys;
    size_t outOfOrder = 0;
    for (size_t k = 0; k < sent.size(); ++k) {
      keys.insert({sent[k].tag.round, sent[k].to});
      const uint64_t round = k / 2;
      const int to = 1 + static_cast<int>(k % 2);
      outOfOrder += sent[k].tag.round != round || sent[k].to != to;
    }
    CHECK(keys.size() == 2 * kRounds);
    CHECK(outOfOrder > 50);
    // The receivers get every message all the same.
    for (int to : {1, 2}) {
      for (uint64_t r = 0; r < kRounds; ++r) {
        CHECK(leftQueued(*net.recording[to], 0, Tag{r, engine::kModelChannel}) == 1);
      }
    }
  }
}

TEST_CASE("corrupt: on a damaged link the receiver is told to check every frame's CRC",
          "[runtime][unit]") {
  // The injector damages frames before the sender's transport, which then vouches for them
  // like for any others; the receiving injector must take that back on the links and rounds
  // its script damages, and only there.
  auto hub = transport::inproc::createHub(2);
  auto sender = transport::inproc::createTransport(*hub, 0, /*vouch=*/true);  // as the simulator's
  auto receiver = transport::inproc::createTransport(*hub, 1);
  engine::FaultInjector injector(*receiver, {chance(engine::FaultEvent::Kind::kCorrupt, 1.0, 0, 5)},
                                 7, engine::kModelChannel, false);
  const auto intactAt = [&](uint64_t round, uint32_t channel) {
    sender->send(1, Tag{round, channel}, message(round), ignore);
    bool done = false, intact = false;
    injector.recv(0, Tag{round, channel}, Clock::now() + 10s,
                  [&](const core::Status& st, SharedBytes b) {
                    REQUIRE(st.isOk());
                    done = true;
                    intact = b.intact();
                  });
    while (!done) {
      REQUIRE(sender->progress(Clock::now()).isOk());
      REQUIRE(injector.progress(Clock::now() + 1ms).isOk());
    }
    return intact;
  };
  CHECK_FALSE(intactAt(3, engine::kModelChannel));  // a damaged round on the model channel
  CHECK(intactAt(9, engine::kModelChannel));        // past the script's rounds
  CHECK(intactAt(3, engine::kModelChannel + 1));    // another channel: never damaged
}

}  // namespace
}  // namespace starling::runtime
