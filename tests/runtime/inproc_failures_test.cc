// How an in-process endpoint fails: receives past their deadline, ranks that do not exist, a
// rank whose process is gone (closeRank, the simulator's kill) and the simulator's virtual-time
// timeouts (expireWaiting). The rest of the transport's contract is in transport_test.cc.
#include <catch2/catch.hpp>
#include <chrono>

#include "inproc_testing.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/transport.h"

namespace starling::transport {
namespace {

using namespace inproc_testing;  // and std::chrono_literals, Status, StatusCode

TEST_CASE("a recv past its deadline completes with kTimeout from progress", "[runtime][unit]") {
  Fixture f(2);
  Received got;
  const auto deadline = GENERATE(as<std::chrono::milliseconds>{}, -10, 0, 30);
  CAPTURE(deadline.count());
  const auto start = Clock::now();
  f.t[1]->recv(0, Tag{0, 0}, start + deadline, got.callback());
  CHECK(got.calls == 0);
  // One progress call with a generous bound must return with the timeout, not sit out the bound.
  auto r = f.t[1]->progress(start + 3s);
  const auto took = Clock::now() - start;
  REQUIRE(r.isOk());
  CHECK(*r == 1);
  CHECK(took < 2s);
  CHECK(got.calls == 1);
  CHECK(got.status.code() == StatusCode::kTimeout);
  CHECK_THAT(got.status.message(), Catch::Matchers::Contains("rank 0"));
  CHECK(got.bytes == nullptr);
  CHECK(f.t[1]->stats().timeouts == 1);

  // A late message does not complete the recv a second time.
  f.t[0]->send(1, Tag{0, 0}, bytesOf({9}), [](const Status&) {});
  auto again = f.t[1]->progress(Clock::now() + 20ms);
  REQUIRE(again.isOk());
  CHECK(got.calls == 1);
}

TEST_CASE("a closed rank: what it sent arrives, every other recv from it fails, pings refused",
          "[runtime][unit]") {
  Fixture f(3);
  // Rank 2 sent round 4's message, then its process went away.
  f.t[2]->send(0, Tag{4, 0}, bytesOf({7}), [](const Status&) {});
  Received pending, sent, later5, fromLive;
  f.t[0]->recv(2, Tag{4, 1}, later(), pending.callback());  // waiting before the close
  inproc::closeRank(*f.hub, 2, "rank 2 was killed");
  f.t[0]->recv(2, Tag{4, 0}, later(), sent.callback());   // sent before: delivered
  f.t[0]->recv(2, Tag{5, 0}, later(), later5.callback());  // after the close: fails at once
  f.t[0]->recv(1, Tag{5, 0}, later(), fromLive.callback());
  Status pingDead = core::internalError("no answer"), pingLive = pingDead;
  f.t[0]->ping(2, later(), [&](const Status& st) { pingDead = st; });
  f.t[0]->ping(1, later(), [&](const Status& st) { pingLive = st; });
  // A send to the closed rank completes and goes nowhere.
  Sent toDead;
  f.t[1]->send(2, Tag{5, 0}, bytesOf({1}), toDead.callback());
  f.t[1]->send(0, Tag{5, 0}, bytesOf({3}), [](const Status&) {});
  REQUIRE(drive({f.t[0].get(), f.t[1].get()}, [&] {
    return pending.calls && sent.calls && later5.calls && fromLive.calls && toDead.calls &&
           pingDead.code() != StatusCode::kInternal && pingLive.code() != StatusCode::kInternal;
  }));
  CHECK(pending.status.code() == StatusCode::kPeerGone);
  CHECK_THAT(pending.status.message(), Catch::Matchers::Contains("rank 2 was killed"));
  CHECK(sent.status.isOk());
  REQUIRE(sent.bytes != nullptr);
  CHECK((*sent.bytes)[0] == std::byte{7});
  CHECK(later5.status.code() == StatusCode::kPeerGone);
  CHECK(fromLive.status.isOk());
  CHECK(pingDead.code() == StatusCode::kUnavailable);  // nobody listens there (refused)
  CHECK(pingLive.isOk());
  CHECK(toDead.status.isOk());
}

TEST_CASE("expireWaiting ends the chosen receives of one rank as timeouts, and no others",
          "[runtime][unit]") {
  Fixture f(3);
  Received r3, r4, notice, otherRank;
  f.t[0]->recv(1, Tag{3, 0}, later(), r3.callback());
  f.t[0]->recv(1, Tag{4, 0}, later(), r4.callback());
  f.t[0]->recv(2, Tag{0, 3}, later(), notice.callback());
  f.t[1]->recv(2, Tag{3, 0}, later(), otherRank.callback());
  const size_t n = inproc::expireWaiting(*f.hub, 0, [](int, const Tag& tag) {
    return tag.round <= 3 && tag.channel != 3;
  });
  CHECK(n == 1);
  REQUIRE(drive({f.t[0].get()}, [&] { return r3.calls > 0; }));
  CHECK(r3.status.code() == StatusCode::kTimeout);
  CHECK_THAT(r3.status.message(), Catch::Matchers::Contains("rank 1"));
  CHECK(f.t[0]->stats().timeouts == 1);
  // The others still wait, and complete when their messages come.
  f.t[1]->send(0, Tag{4, 0}, bytesOf({4}), [](const Status&) {});
  f.t[2]->send(1, Tag{3, 0}, bytesOf({5}), [](const Status&) {});
  REQUIRE(drive({f.t[0].get(), f.t[1].get(), f.t[2].get()},
                [&] { return r4.calls > 0 && otherRank.calls > 0; }));
  CHECK(r4.status.isOk());
  CHECK(otherRank.status.isOk());
  CHECK(notice.calls == 0);
}

TEST_CASE("sends to a rank that does not exist complete with kPeerGone", "[runtime][unit]") {
  Fixture f(2);
  const int to = GENERATE(2, 7, -1);
  CAPTURE(to);
  Sent sent;
  f.t[0]->send(to, Tag{0, 0}, bytesOf({1}), sent.callback());
  CHECK(sent.calls == 0);
  auto r = f.t[0]->progress(Clock::now() + 1s);
  REQUIRE(r.isOk());
  CHECK(*r == 1);
  CHECK(sent.calls == 1);
  CHECK(sent.status.code() == StatusCode::kPeerGone);
}

// transport.h: several messages with one (sender, round, channel) are handed out one per recv(),
// in arrival order; at most kMaxQueuedPerKey wait per key, later ones are dropped and counted.

}  // namespace
}  // namespace starling::transport
