// Tests of the UCX transport: real UCX peers over loopback, several transports in this one
// process, driven alternately from this one thread. Every test picks its own free ports so that
// the suite can run beside others.
#include "transport/ucx/ucx_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "tests/runtime/ucx_testing.h"

namespace starling::transport {
namespace {

using namespace std::chrono_literals;
using core::Status;
using core::StatusCode;
using namespace ucx_testing;

// ---- tests ---------------------------------------------------------------------------------

TEST_CASE("ucx: messages arrive intact both ways with recv before or after the send",
          "[runtime][unit][ucx]") {
  // 0 bytes (header only), eager, and large enough for the rendezvous protocol.
  const size_t size = GENERATE(size_t{0}, size_t{100}, size_t{8} << 20);
  CAPTURE(size);
  const auto ports = freePorts(2);
  auto log0 = std::make_shared<std::vector<std::string>>();
  auto log1 = std::make_shared<std::vector<std::string>>();
  auto t0 = make(options(0, ports, log0));
  auto t1 = make(options(1, ports, log1));
  CHECK(t0->rank() == 0);
  CHECK(t1->rank() == 1);
  LogDump dump0{log0}, dump1{log1};

  const Tag tag{3, 2};
  const SharedBytes m01 = randomBytes(size, 11);
  const SharedBytes m10 = randomBytes(size, 12);
  Received got1, got0;
  Sent sent0, sent1;

  // Rank 1's receive is posted before rank 0 sends.
  t1->recv(0, tag, in(20s), got1.callback());
  t0->send(1, tag, m01, sent0.callback());
  // Rank 0's receive is posted only after rank 1's message has arrived.
  t1->send(0, tag, m10, sent1.callback());
  CHECK(sent0.calls == 0);  // completions run from progress(), never inside send()
  CHECK(sent1.calls == 0);
  REQUIRE(pumpUntil(
      {t0.get(), t1.get()}, [&] { return t0->stats().messagesReceived == 1 && got1.calls == 1; },
      in(20s)));
  CHECK(got0.calls == 0);
  t0->recv(1, tag, in(20s), got0.callback());
  REQUIRE(pumpUntil(
      {t0.get(), t1.get()}, [&] { return got0.calls && sent0.calls && sent1.calls; }, in(20s)));
  // Nothing completes twice.
  pumpFor({t0.get(), t1.get()}, 50ms);

  CHECK(sent0.calls == 1);
  CHECK(sent1.calls == 1);
  CHECK(sent0.status.isOk());
  CHECK(sent1.status.isOk());
  CHECK(got0.calls == 1);
  CHECK(got1.calls == 1);
  REQUIRE(got1.status.isOk());
  REQUIRE(got0.status.isOk());
  REQUIRE(got1.bytes != nullptr);
  REQUIRE(got0.bytes != nullptr);
  CHECK(sameBytes(got1.bytes, m01));
  CHECK(sameBytes(got0.bytes, m10));

  for (const auto* t : {t0.get(), t1.get()}) {
    CAPTURE(t->rank());
    const TransportStats s = t->stats();
    CHECK(s.messagesSent == 1);
    CHECK(s.bytesSent == size);
    CHECK(s.messagesReceived == 1);
    CHECK(s.bytesReceived == size);
    CHECK(s.corruptMessages == 0);
    CHECK(s.timeouts == 0);
  }
}

TEST_CASE("ucx: interleaved rounds and channels never mix", "[runtime][unit][ucx]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  auto t0 = make(options(0, ports, log));
  auto t1 = make(options(1, ports, log));
  std::vector<Transport*> ts{t0.get(), t1.get()};
  LogDump dump{log};

  struct Msg {
    int from;
    Tag tag;
    SharedBytes bytes;
    Received got;
    Sent sent;
  };
  // Both directions, 4 rounds x 3 channels, sizes that differ per key (some past the eager limit).
  const size_t sizes[] = {1, 37, 4096, 300 * 1024};
  std::vector<Msg> msgs;
  msgs.reserve(2 * 4 * 3);
  uint32_t seed = 100;
  for (int from : {0, 1})
    for (uint64_t round = 0; round < 4; ++round)
      for (uint32_t channel = 0; channel < 3; ++channel) {
        const size_t n = sizes[(round + channel + static_cast<uint64_t>(from)) % 4];
        msgs.push_back(Msg{from, Tag{round, channel}, randomBytes(n, seed++), {}, {}});
      }
  std::vector<size_t> order(msgs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937 rng(7);

  // A third of the receives before any send, the sends in shuffled order, the rest after.
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i : order) {
    if (i % 3 == 0)
      ts[1 - msgs[i].from]->recv(msgs[i].from, msgs[i].tag, in(20s), msgs[i].got.callback());
  }
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i : order) {
    ts[msgs[i].from]->send(1 - msgs[i].from, msgs[i].tag, msgs[i].bytes, msgs[i].sent.callback());
  }
  pumpFor(ts, 20ms);
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i : order) {
    if (i % 3 != 0)
      ts[1 - msgs[i].from]->recv(msgs[i].from, msgs[i].tag, in(20s), msgs[i].got.callback());
  }
  REQUIRE(pumpUntil(
      ts,
      [&] {
        return std::all_of(msgs.begin(), msgs.end(),
                           [](const Msg& m) { return m.got.calls > 0 && m.sent.calls > 0; });
      },
      in(20s)));
  pumpFor(ts, 30ms);
  uint64_t bytes[2] = {0, 0};
  for (const Msg& m : msgs) {
    CAPTURE(m.from, m.tag.round, m.tag.channel, m.bytes->size());
    CHECK(m.sent.calls == 1);
    CHECK(m.sent.status.isOk());
    CHECK(m.got.calls == 1);
    REQUIRE(m.got.status.isOk());
    CHECK(sameBytes(m.got.bytes, m.bytes));
    bytes[m.from] += m.bytes->size();
  }
  for (int r : {0, 1}) {
    CAPTURE(r);
    CHECK(ts[r]->stats().messagesSent == 12);
    CHECK(ts[r]->stats().bytesSent == bytes[r]);
    CHECK(ts[r]->stats().messagesReceived == 12);
    CHECK(ts[r]->stats().bytesReceived == bytes[1 - r]);
  }
}

TEST_CASE("ucx: a peer nobody listens for fails the send with kUnavailable after connectTimeout",
          "[runtime][unit][ucx]") {
  const auto ports = freePorts(2);  // ports[1]: nobody listens there
  auto log = std::make_shared<std::vector<std::string>>();
  auto o = options(0, ports, log);
  o.connectTimeout = 500ms;
  auto t0 = make(o);
  LogDump dump{log};
  const std::string where = "127.0.0.1:" + std::to_string(ports[1]);

  Sent first;
  const auto start = Clock::now();
  t0->send(1, Tag{0, 0}, randomBytes(64, 1), first.callback());
  REQUIRE(pumpUntil(
      {t0.get()}, [&] { return first.calls > 0; }, start + 10s));
  const auto took = first.at - start;
  CAPTURE(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
  CHECK(took >= 400ms);
  CHECK(took <= 5s);
  CHECK(first.calls == 1);
  CHECK(first.status.code() == StatusCode::kUnavailable);
  CHECK_THAT(first.status.message(), Catch::Matchers::Contains("rank 1"));
  CHECK_THAT(first.status.message(), Catch::Matchers::Contains(where));
  CHECK(t0->stats().messagesSent == 0);

  // Later sends to the same peer fail at once, with the same status.
  Sent second;
  const auto again = Clock::now();
  t0->send(1, Tag{1, 0}, randomBytes(64, 2), second.callback());
  auto r = t0->progress(Clock::now() + 3s);
  REQUIRE(r.isOk());
  CHECK(*r >= 1);
  CHECK(Clock::now() - again < 1s);
  REQUIRE(second.calls == 1);
  CHECK(second.status.code() == StatusCode::kUnavailable);
  CHECK(second.status.message() == first.status.message());
  pumpFor({t0.get()}, 50ms);
  CHECK(first.calls == 1);
  CHECK(second.calls == 1);
}

TEST_CASE("ucx: a recv nobody answers times out and idle progress keeps its bound",
          "[runtime][unit][ucx]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  auto t0 = make(options(0, ports, log));
  LogDump dump{log};

  Received got;
  const auto deadline = Clock::now() + 200ms;
  t0->recv(1, Tag{5, 0}, deadline, got.callback());
  REQUIRE(pumpUntil(
      {t0.get()}, [&] { return got.calls > 0; }, deadline + 5s));
  CHECK(got.at >= deadline);  // never before its deadline
  CHECK(got.calls == 1);
  CHECK(got.status.code() == StatusCode::kTimeout);
  CHECK_THAT(got.status.message(), Catch::Matchers::Contains("rank 1"));
  CHECK(got.bytes == nullptr);
  CHECK(t0->stats().timeouts == 1);

  // Nothing left to do: progress runs no callback and comes back by its bound (plus slack).
  const auto until = Clock::now() + 300ms;
  auto r = t0->progress(until);
  const auto returned = Clock::now();
  REQUIRE(r.isOk());
  CHECK(*r == 0);
  CHECK(returned <= until + 2s);
  CHECK(got.calls == 1);
  CHECK(t0->stats().timeouts == 1);
}

TEST_CASE("ucx: a message sent before the peer starts is delivered once it is up",
          "[runtime][unit][ucx]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  auto o0 = options(0, ports, log);
  o0.connectTimeout = 5s;
  auto t0 = make(o0);
  LogDump dump{log};

  const SharedBytes msg = randomBytes(1000, 5);
  Sent sent;
  t0->send(1, Tag{1, 0}, msg, sent.callback());
  pumpFor({t0.get()}, 300ms);
  CHECK(sent.calls == 0);  // still retrying, neither done nor failed

  auto t1 = make(options(1, ports, log));
  Received got;
  t1->recv(0, Tag{1, 0}, in(10s), got.callback());
  REQUIRE(pumpUntil(
      {t0.get(), t1.get()}, [&] { return got.calls && sent.calls; }, in(10s)));
  CHECK(sent.calls == 1);
  CHECK(sent.status.isOk());
  REQUIRE(got.status.isOk());
  CHECK(sameBytes(got.bytes, msg));
  CHECK(t1->stats().messagesReceived == 1);
}

TEST_CASE("ucx: sends to a peer that went away fail instead of hanging", "[runtime][unit][ucx]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  auto o0 = options(0, ports, log);
  o0.connectTimeout = 2s;
  auto t0 = make(o0);
  auto t1 = make(options(1, ports, log));
  LogDump dump{log};
  exchange(*t0, *t1, Tag{0, 0}, 256, 1);

  t1.reset();
  // Keep sending, one message every 100 ms, until one fails; every send must complete.
  std::vector<std::unique_ptr<Sent>> sends;
  auto anyFailed = [&] {
    return std::any_of(sends.begin(), sends.end(),
                       [](const auto& s) { return s->calls && !s->status.isOk(); });
  };
  const auto stop = in(10s);
  uint64_t round = 1;
  while (!anyFailed() && Clock::now() < stop) {
    sends.push_back(std::make_unique<Sent>());
    t0->send(1, Tag{round++, 0}, randomBytes(256, 3), sends.back()->callback());
    (void)pumpUntil({t0.get()}, anyFailed, std::min(stop, in(100ms)));
  }
  REQUIRE(anyFailed());
  REQUIRE(pumpUntil(
      {t0.get()},
      [&] {
        return std::all_of(sends.begin(), sends.end(), [](const auto& s) { return s->calls > 0; });
      },
      in(10s)));
  for (const auto& s : sends) {
    CHECK(s->calls == 1);
    if (s->status.isOk()) continue;
    CAPTURE(s->status.toString());
    const bool expected =
        s->status.code() == StatusCode::kPeerGone || s->status.code() == StatusCode::kUnavailable;
    CHECK(expected);
    CHECK_THAT(s->status.message(), Catch::Matchers::Contains("rank 1"));
  }
  // The peer stays failed: a further send completes at once with an error.
  Sent last;
  t0->send(1, Tag{round, 0}, randomBytes(8, 4), last.callback());
  REQUIRE(pumpUntil(
      {t0.get()}, [&] { return last.calls > 0; }, in(2s)));
  CHECK_FALSE(last.status.isOk());
}

TEST_CASE("ucx: shared-memory transports carry a 1 MiB exchange", "[runtime][unit][ucx]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  auto t0 = make(options(0, ports, log, "sysv,posix,cma,tcp"));
  auto t1 = make(options(1, ports, log, "sysv,posix,cma,tcp"));
  LogDump dump{log};
  std::vector<Transport*> ts{t0.get(), t1.get()};
  // Sizes around the shared-memory short/bcopy limits, all posted at once before any endpoint
  // exists, so that they wait for (and must survive) wireup onto the shared-memory lanes.
  const size_t sizes[] = {0, 1, 100, 164, 1000, 8192, 65536, size_t{1} << 20};
  struct Msg {
    int from;
    SharedBytes bytes;
    Sent sent;
    Received got;
  };
  std::vector<Msg> msgs;
  msgs.reserve(2 * std::size(sizes));
  for (int from : {0, 1})
    for (size_t i = 0; i < std::size(sizes); ++i)
      msgs.push_back(
          Msg{from, randomBytes(sizes[i], static_cast<uint32_t>(40 + 10 * from + i)), {}, {}});
  for (size_t i = 0; i < msgs.size(); ++i) {
    Msg& m = msgs[i];
    const Tag tag{i % std::size(sizes), 0};
    ts[1 - m.from]->recv(m.from, tag, in(20s), m.got.callback());
    ts[m.from]->send(1 - m.from, tag, m.bytes, m.sent.callback());
  }
  REQUIRE(pumpUntil(
      ts,
      [&] {
        return std::all_of(msgs.begin(), msgs.end(),
                           [](const Msg& m) { return m.got.calls > 0 && m.sent.calls > 0; });
      },
      in(20s)));
  for (const Msg& m : msgs) {
    CAPTURE(m.from, m.bytes->size());
    CHECK(m.sent.status.isOk());
    REQUIRE(m.got.status.isOk());
    CHECK(sameBytes(m.got.bytes, m.bytes));
  }
  // And once connected, the 1 MiB exchange again.
  exchange(*t0, *t1, Tag{100, 0}, size_t{1} << 20, 30);
  CHECK(t0->stats().messagesSent == std::size(sizes) + 1);
  CHECK(t1->stats().messagesReceived == std::size(sizes) + 1);
}

TEST_CASE("ucx: with maxEndpoints 1 endpoints are closed and reopened without losing messages",
          "[runtime][unit][ucx]") {
  const auto ports = freePorts(3);
  auto log = std::make_shared<std::vector<std::string>>();
  auto o0 = options(0, ports, log);
  o0.maxEndpoints = 1;
  auto t0 = make(o0);
  auto t1 = make(options(1, ports, log));
  auto t2 = make(options(2, ports, log));
  std::vector<Transport*> ts{t0.get(), t1.get(), t2.get()};
  LogDump dump{log};

  for (uint64_t round = 0; round < 20; ++round) {
    CAPTURE(round);
    const int firstPeer = round % 2 == 0 ? 1 : 2;
    const int secondPeer = 3 - firstPeer;
    const SharedBytes a = randomBytes(200 + round, static_cast<uint32_t>(1000 + 2 * round));
    const SharedBytes b = randomBytes(300 + round, static_cast<uint32_t>(1001 + 2 * round));
    Received gotA, gotB;
    Sent sentA, sentB;
    ts[firstPeer]->recv(0, Tag{round, 0}, in(10s), gotA.callback());
    ts[secondPeer]->recv(0, Tag{round, 0}, in(10s), gotB.callback());
    t0->send(firstPeer, Tag{round, 0}, a, sentA.callback());
    if (round < 10) {
      // First half: one at a time, so the idle endpoint is evicted before the next send.
      REQUIRE(pumpUntil(
          ts, [&] { return sentA.calls && gotA.calls; }, in(10s)));
      t0->send(secondPeer, Tag{round, 0}, b, sentB.callback());
    } else {
      // Second half: both in flight at once (neither endpoint is idle yet).
      t0->send(secondPeer, Tag{round, 0}, b, sentB.callback());
    }
    REQUIRE(pumpUntil(
        ts, [&] { return sentA.calls && gotA.calls && sentB.calls && gotB.calls; }, in(10s)));
    CHECK(sentA.status.isOk());
    CHECK(sentB.status.isOk());
    REQUIRE(gotA.status.isOk());
    REQUIRE(gotB.status.isOk());
    CHECK(sameBytes(gotA.bytes, a));
    CHECK(sameBytes(gotB.bytes, b));
    // Only the endpoint used last stays open: the other one is closed.
    CHECK(pumpUntil(ts, [&] { return t0->stats().openEndpoints == 1; }, in(5s)));
  }
  CHECK(t0->stats().messagesSent == 40);
  CHECK(t1->stats().messagesReceived == 20);
  CHECK(t2->stats().messagesReceived == 20);
  CHECK(t1->stats().corruptMessages == 0);
  CHECK(t2->stats().corruptMessages == 0);
}

TEST_CASE("ucx: construction errors are reported, not half-built", "[runtime][unit][ucx]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  SECTION("rank outside the address list") {
    auto o = options(2, ports, log);
    auto t = ucx::createTransport(o);
    REQUIRE_FALSE(t.isOk());
    CHECK(t.status().code() == StatusCode::kInvalidArgument);
  }
  SECTION("unresolvable host") {
    auto o = options(0, ports, log);
    o.addresses[0].host = "no-such-host.invalid";
    auto t = ucx::createTransport(o);
    REQUIRE_FALSE(t.isOk());
    CHECK(t.status().code() == StatusCode::kInvalidArgument);
  }
  SECTION("listen address already taken") {
    auto first = make(options(0, ports, log));
    auto t = ucx::createTransport(options(0, ports, log));
    REQUIRE_FALSE(t.isOk());
    CHECK(t.status().code() == StatusCode::kIoError);
    CHECK_THAT(t.status().message(), Catch::Matchers::Contains(std::to_string(ports[0])));
  }
}

TEST_CASE("ucx: parseAddress accepts host:port and rejects the rest", "[runtime][unit][ucx]") {
  auto ok = ucx::parseAddress("127.0.0.1:4000");
  REQUIRE(ok.isOk());
  CHECK(ok->host == "127.0.0.1");
  CHECK(ok->port == 4000);
  auto v6 = ucx::parseAddress("[::1]:65535");
  REQUIRE(v6.isOk());
  CHECK(v6->host == "::1");
  CHECK(v6->port == 65535);
  for (const char* bad : {"", "host", "host:", ":80", "host:0", "host:65536", "host:12a", "host:-1",
                          "host:99999999999999999999"}) {
    CAPTURE(bad);
    auto r = ucx::parseAddress(bad);
    CHECK_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
  }
}


// Sends to `to`, one message at a time, until a send fails (its process is gone).
void sendUntilItFails(Transport& t, int to) {
  for (uint64_t round = 1;; ++round) {
    REQUIRE(round < 200);
    Sent s;
    t.send(to, Tag{round, 0}, randomBytes(64, 5), s.callback());
    REQUIRE(pumpUntil({&t}, [&] { return s.calls > 0; }, in(5s)));
    if (!s.status.isOk()) return;
  }
}

// A lost rank's restarted process (faults.restart, docs/algorithms.md §19) on the same address.
// Its neighbour takes it back when it connects (a new salt in its bootstrap hello: another
// process), or when told to (revive(), at the round the survivors agreed on); either way nothing
// its old process left unclaimed is handed out as the new one's.
TEST_CASE("ucx: a restarted peer is taken back, and its old process's messages are dropped",
          "[runtime][unit][ucx][rejoin]") {
  for (const bool byConnecting : {true, false}) {
    DYNAMIC_SECTION((byConnecting ? "it connects first" : "revive()")) {
      const auto ports = freePorts(2);
      auto log = std::make_shared<std::vector<std::string>>();
      auto o0 = options(0, ports, log);
      o0.connectTimeout = 2s;
      auto t0 = make(o0);
      auto t1 = make(options(1, ports, log));
      LogDump dump{log};
      exchange(*t0, *t1, Tag{0, 0}, 256, 1);
      // The old process's last message, never claimed.
      Sent stale;
      t1->send(0, Tag{77, 0}, randomBytes(64, 11), stale.callback());
      REQUIRE(pumpUntil({t0.get(), t1.get()}, [&] { return stale.calls > 0; }, in(5s)));
      pumpFor({t0.get(), t1.get()}, 50ms);
      t1.reset();
      // Its neighbour finds it gone.
      sendUntilItFails(*t0, 1);

      auto t1b = make(options(1, ports, log));
      const SharedBytes fresh = randomBytes(64, 12);
      if (byConnecting) {
        Sent s;
        t1b->send(0, Tag{77, 0}, fresh, s.callback());
        REQUIRE(pumpUntil({t0.get(), t1b.get()}, [&] { return s.calls > 0; }, in(5s)));
        CHECK(s.status.isOk());
        Received r;
        t0->recv(1, Tag{77, 0}, in(5s), r.callback());
        REQUIRE(pumpUntil({t0.get(), t1b.get()}, [&] { return r.calls > 0; }, in(6s)));
        REQUIRE(r.status.isOk());
        CHECK(sameBytes(r.bytes, fresh));  // not the old process's message
        CHECK(std::any_of(log->begin(), log->end(), [](const std::string& l) {
          return l.find("rank 1 connected from a new process") != std::string::npos;
        }));
      } else {
        t0->revive(1);
      }
      // Sends to it work again, on a connection to the new process.
      const SharedBytes again = randomBytes(300, 13);
      Sent s;
      Received r;
      t0->send(1, Tag{500, 0}, again, s.callback());
      t1b->recv(0, Tag{500, 0}, in(5s), r.callback());
      REQUIRE(pumpUntil({t0.get(), t1b.get()}, [&] { return s.calls > 0 && r.calls > 0; },
                        in(6s)));
      CHECK(s.status.isOk());
      REQUIRE(r.status.isOk());
      CHECK(sameBytes(r.bytes, again));
    }
  }
}

TEST_CASE("ucx: without revive a failed peer stays failed", "[runtime][unit][ucx][rejoin]") {
  // The control for the test above: what revive() changes.
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  auto o0 = options(0, ports, log);
  o0.connectTimeout = 2s;
  auto t0 = make(o0);
  auto t1 = make(options(1, ports, log));
  LogDump dump{log};
  exchange(*t0, *t1, Tag{0, 0}, 256, 1);
  t1.reset();
  sendUntilItFails(*t0, 1);
  auto t1b = make(options(1, ports, log));
  Sent s;
  t0->send(1, Tag{500, 0}, randomBytes(8, 1), s.callback());
  REQUIRE(pumpUntil({t0.get(), t1b.get()}, [&] { return s.calls > 0; }, in(3s)));
  CHECK_FALSE(s.status.isOk());
}
}  // namespace
}  // namespace starling::transport
