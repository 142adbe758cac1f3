#include "transport/transport.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transport/factory.h"
#include "transport/inproc/inproc_transport.h"
#include "inproc_testing.h"

namespace starling::transport {
namespace {

using namespace inproc_testing;  // and std::chrono_literals, Status, StatusCode

TEST_CASE("inproc endpoints report their rank", "[runtime][unit]") {
  Fixture f(3);
  for (int r = 0; r < 3; ++r) CHECK(f.t[r]->rank() == r);
}

TEST_CASE("a message is delivered whether send or recv comes first", "[runtime][unit]") {
  Fixture f(2);
  const SharedBytes msg = bytesOf({1, 2, 3});
  const Tag tag{5, 1};
  Received got;
  Sent sent;
  SECTION("send first") {
    f.t[0]->send(1, tag, msg, sent.callback());
    CHECK(sent.calls == 0);  // completions run from progress(), never inside send()
    f.t[1]->recv(0, tag, later(), got.callback());
  }
  SECTION("recv first") {
    f.t[1]->recv(0, tag, later(), got.callback());
    f.t[0]->send(1, tag, msg, sent.callback());
    CHECK(sent.calls == 0);
  }
  CHECK(got.calls == 0);  // nothing runs before the receiver's progress()
  REQUIRE(drive({f.t[0].get(), f.t[1].get()}, [&] { return got.calls > 0 && sent.calls > 0; }));
  CHECK(got.calls == 1);
  CHECK(got.status.isOk());
  // Zero copy: the receiver holds the sender's own buffer.
  CHECK(got.bytes->data() == msg->data());
  CHECK(sent.calls == 1);
  CHECK(sent.status.isOk());
}

TEST_CASE("a vouching endpoint's messages arrive marked intact, no other's do",
          "[runtime][unit]") {
  // The simulator's endpoints vouch (nothing lies between two ranks of one process, so the
  // receiver may skip the frame's CRC); everyone else's bytes must be checked, even bytes the
  // caller had marked intact itself.
  auto hub = inproc::createHub(3);
  auto vouching = inproc::createTransport(*hub, 0, /*vouch=*/true);
  auto plain = inproc::createTransport(*hub, 1);
  auto receiver = inproc::createTransport(*hub, 2);
  SharedBytes marked = bytesOf({7});
  marked.setIntact(true);
  Received fromVouching, fromPlain;
  Sent a, b;
  vouching->send(2, Tag{1, 1}, bytesOf({1, 2}), a.callback());
  plain->send(2, Tag{1, 1}, marked, b.callback());
  receiver->recv(0, Tag{1, 1}, later(), fromVouching.callback());
  receiver->recv(1, Tag{1, 1}, later(), fromPlain.callback());
  REQUIRE(drive({vouching.get(), plain.get(), receiver.get()},
                [&] { return fromVouching.calls > 0 && fromPlain.calls > 0; }));
  REQUIRE(fromVouching.status.isOk());
  REQUIRE(fromPlain.status.isOk());
  CHECK(fromVouching.bytes.intact());
  CHECK(fromVouching.bytes->size() == 2);
  CHECK_FALSE(fromPlain.bytes.intact());
  CHECK(fromPlain.bytes->data() == marked->data());  // still the sender's buffer
}

TEST_CASE("messages are matched on sender, round and channel", "[runtime][unit]") {
  Fixture f(3);
  // Rank 0 and rank 2 both send to rank 1, for rounds 0..1 and channels 0..1, each message
  // distinct; sends and receives are posted in different orders.
  struct Key {
    int from;
    Tag tag;
  };
  std::vector<Key> keys;
  for (int from : {0, 2})
    for (uint64_t round : {0u, 1u})
      for (uint32_t channel : {0u, 1u}) keys.push_back({from, Tag{round, channel}});
  auto payload = [](const Key& k) {
    return bytesOf({k.from, static_cast<int>(k.tag.round), static_cast<int>(k.tag.channel)});
  };
  std::vector<SharedBytes> sentBytes;
  for (const Key& k : keys) sentBytes.push_back(payload(k));

  std::vector<Received> got(keys.size());
  // Half the receives are posted before any send, in reverse order.
  for (size_t i = keys.size(); i-- > 0;) {
    if (i % 2 == 0) f.t[1]->recv(keys[i].from, keys[i].tag, later(), got[i].callback());
  }
  for (size_t i : {5, 0, 7, 2, 1, 6, 3, 4}) {
    f.t[keys[i].from]->send(1, keys[i].tag, sentBytes[i], [](const Status&) {});
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i % 2 == 1) f.t[1]->recv(keys[i].from, keys[i].tag, later(), got[i].callback());
  }
  REQUIRE(drive({f.t[0].get(), f.t[1].get(), f.t[2].get()}, [&] {
    for (const Received& g : got)
      if (g.calls == 0) return false;
    return true;
  }));
  for (size_t i = 0; i < keys.size(); ++i) {
    CAPTURE(i, keys[i].from, keys[i].tag.round, keys[i].tag.channel);
    CHECK(got[i].calls == 1);
    CHECK(got[i].status.isOk());
    CHECK(got[i].bytes->data() == sentBytes[i]->data());
  }
  CHECK(f.t[1]->stats().messagesReceived == keys.size());
}

TEST_CASE("a message for another round or channel does not satisfy a recv", "[runtime][unit]") {
  Fixture f(2);
  Received got;
  f.t[1]->recv(0, Tag{3, 0}, Clock::now() + 100ms, got.callback());
  f.t[0]->send(1, Tag{4, 0}, bytesOf({1}), [](const Status&) {});
  f.t[0]->send(1, Tag{3, 1}, bytesOf({2}), [](const Status&) {});
  REQUIRE(drive({f.t[0].get(), f.t[1].get()}, [&] { return got.calls > 0; }));
  CHECK(got.calls == 1);
  CHECK(got.status.code() == StatusCode::kTimeout);
  CHECK(got.bytes == nullptr);
  // Those messages are still there for the right recvs.
  Received r4, r31;
  f.t[1]->recv(0, Tag{4, 0}, later(), r4.callback());
  f.t[1]->recv(0, Tag{3, 1}, later(), r31.callback());
  REQUIRE(drive({f.t[1].get()}, [&] { return r4.calls > 0 && r31.calls > 0; }));
  REQUIRE(r4.bytes != nullptr);
  REQUIRE(r31.bytes != nullptr);
  CHECK((*r4.bytes)[0] == std::byte{1});
  CHECK((*r31.bytes)[0] == std::byte{2});
}

TEST_CASE("progress never waits past until", "[runtime][unit]") {
  Fixture f(2);
  SECTION("nothing pending") {
    const auto start = Clock::now();
    auto r = f.t[0]->progress(start + 50ms);
    CHECK(Clock::now() - start < 2s);
    REQUIRE(r.isOk());
    CHECK(*r == 0);
  }
  SECTION("until already passed") {
    const auto start = Clock::now();
    auto r = f.t[0]->progress(start - 1s);
    CHECK(Clock::now() - start < 2s);
    REQUIRE(r.isOk());
    CHECK(*r == 0);
  }
  SECTION("a recv whose deadline is later than until") {
    Received got;
    f.t[0]->recv(1, Tag{0, 0}, Clock::now() + 60s, got.callback());
    const auto start = Clock::now();
    auto r = f.t[0]->progress(start + 50ms);
    CHECK(Clock::now() - start < 2s);
    REQUIRE(r.isOk());
    CHECK(*r == 0);
    CHECK(got.calls == 0);
  }
}

TEST_CASE("progress wakes up for a message sent from another thread", "[runtime][unit]") {
  Fixture f(2);
  Received got;
  f.t[1]->recv(0, Tag{0, 0}, later(), got.callback());
  std::thread sender([&] {
    std::this_thread::sleep_for(20ms);
    f.t[0]->send(1, Tag{0, 0}, bytesOf({4}), [](const Status&) {});
  });
  const auto start = Clock::now();
  auto r = f.t[1]->progress(start + 5s);
  const auto took = Clock::now() - start;
  sender.join();
  REQUIRE(r.isOk());
  CHECK(*r == 1);
  CHECK(got.calls == 1);
  CHECK(got.status.isOk());
  CHECK(took < 4s);  // woken by the send, not by until
}

TEST_CASE("messages with the same key are queued FIFO, one per recv", "[runtime][unit]") {
  static_assert(kMaxQueuedPerKey == 4);
  Fixture f(2);
  const Tag tag{2, 0};
  std::vector<SharedBytes> queued;
  for (int i = 0; i < static_cast<int>(kMaxQueuedPerKey); ++i) queued.push_back(bytesOf({i}));
  const SharedBytes fifth = bytesOf({50});
  const SharedBytes sixth = bytesOf({60});
  std::vector<Sent> sent(kMaxQueuedPerKey + 2);
  for (size_t i = 0; i < queued.size(); ++i) f.t[0]->send(1, tag, queued[i], sent[i].callback());
  // Same bytes on another channel and another round: other keys, neither queued with these nor
  // counted against their limit.
  f.t[0]->send(1, Tag{2, 1}, fifth, [](const Status&) {});
  f.t[0]->send(1, Tag{3, 0}, fifth, [](const Status&) {});
  // Duplicates alone are not corruption.
  CHECK(f.t[1]->stats().corruptMessages == 0);

  f.t[0]->send(1, tag, fifth, sent[kMaxQueuedPerKey].callback());
  CHECK(f.t[1]->stats().corruptMessages == 1);
  f.t[0]->send(1, tag, sixth, sent[kMaxQueuedPerKey + 1].callback());
  CHECK(f.t[1]->stats().corruptMessages == 2);
  CHECK(f.t[0]->stats().corruptMessages == 0);
  // Every send still completes exactly once.
  REQUIRE(drive({f.t[0].get()}, [&] {
    for (const Sent& s : sent)
      if (s.calls == 0) return false;
    return true;
  }));
  for (const Sent& s : sent) {
    CHECK(s.calls == 1);
    CHECK(s.status.isOk());
  }

  // One message per recv, in the order they were sent.
  for (size_t i = 0; i < queued.size(); ++i) {
    CAPTURE(i);
    Received got;
    f.t[1]->recv(0, tag, later(), got.callback());
    REQUIRE(drive({f.t[1].get()}, [&] { return got.calls > 0; }));
    CHECK(got.calls == 1);
    CHECK(got.status.isOk());
    CHECK(got.bytes->data() == queued[i]->data());
  }
  CHECK(f.t[1]->stats().messagesReceived == kMaxQueuedPerKey);

  // The dropped ones are gone: the next recv for the key times out.
  Received none;
  f.t[1]->recv(0, tag, Clock::now() + 50ms, none.callback());
  REQUIRE(drive({f.t[1].get()}, [&] { return none.calls > 0; }));
  CHECK(none.status.code() == StatusCode::kTimeout);
  CHECK(none.bytes == nullptr);

  // The other keys kept theirs.
  Received channel1, round3;
  f.t[1]->recv(0, Tag{2, 1}, later(), channel1.callback());
  f.t[1]->recv(0, Tag{3, 0}, later(), round3.callback());
  REQUIRE(drive({f.t[1].get()}, [&] { return channel1.calls > 0 && round3.calls > 0; }));
  CHECK(channel1.bytes->data() == fifth->data());
  CHECK(round3.bytes->data() == fifth->data());
  CHECK(f.t[1]->stats().corruptMessages == 2);
}

TEST_CASE("the per-key limit counts messages waiting, not messages ever sent", "[runtime][unit]") {
  Fixture f(2);
  const Tag tag{0, 0};
  std::vector<SharedBytes> msgs;
  for (int i = 0; i < 2 * static_cast<int>(kMaxQueuedPerKey); ++i) msgs.push_back(bytesOf({i}));
  size_t next = 0;  // index of the next message to send
  for (; next < kMaxQueuedPerKey; ++next) f.t[0]->send(1, tag, msgs[next], [](const Status&) {});
  // Each recv frees a place, so sending one more after each recv never drops anything.
  for (size_t i = 0; i < msgs.size(); ++i) {
    CAPTURE(i);
    Received got;
    f.t[1]->recv(0, tag, later(), got.callback());
    REQUIRE(drive({f.t[1].get()}, [&] { return got.calls > 0; }));
    CHECK(got.status.isOk());
    CHECK(got.bytes->data() == msgs[i]->data());
    if (next < msgs.size()) {
      f.t[0]->send(1, tag, msgs[next], [](const Status&) {});
      ++next;
    }
  }
  CHECK(f.t[1]->stats().corruptMessages == 0);
  CHECK(f.t[1]->stats().messagesReceived == msgs.size());
}

// A duplicate that arrives after the first copy was consumed waits for a later recv like any
// other message with that key.
TEST_CASE("a duplicate arriving after the first was received goes to the next recv",
          "[runtime][unit]") {
  Fixture f(2);
  const SharedBytes first = bytesOf({1});
  const SharedBytes second = bytesOf({2});
  Received got;
  f.t[1]->recv(0, Tag{0, 0}, later(), got.callback());
  f.t[0]->send(1, Tag{0, 0}, first, [](const Status&) {});
  REQUIRE(drive({f.t[1].get()}, [&] { return got.calls > 0; }));
  CHECK(got.bytes->data() == first->data());
  f.t[0]->send(1, Tag{0, 0}, second, [](const Status&) {});
  CHECK(f.t[1]->stats().corruptMessages == 0);
  // Progressing does not hand it to the recv that already completed.
  REQUIRE(f.t[1]->progress(Clock::now() + 20ms).isOk());
  CHECK(got.calls == 1);
  CHECK(got.bytes->data() == first->data());

  Received later2;
  f.t[1]->recv(0, Tag{0, 0}, later(), later2.callback());
  REQUIRE(drive({f.t[1].get()}, [&] { return later2.calls > 0; }));
  CHECK(later2.calls == 1);
  CHECK(later2.status.isOk());
  CHECK(later2.bytes->data() == second->data());
  CHECK(f.t[1]->stats().messagesReceived == 2);
  CHECK(f.t[1]->stats().corruptMessages == 0);
}

// The header promises "every operation completes exactly once". A second recv for the same
// (sender, round, channel) while the first is still waiting completes at once with
// kFailedPrecondition; the first is unaffected, whether its message comes or its deadline passes.
TEST_CASE("a second recv for a pending key fails at once; the first still completes",
          "[runtime][unit]") {
  Fixture f(2);
  const bool messageComes = GENERATE(true, false);
  CAPTURE(messageComes);
  const Tag tag{4, 2};
  const auto deadline = Clock::now() + (messageComes ? 10s : 500ms);
  Received a, b;
  f.t[1]->recv(0, tag, deadline, a.callback());
  f.t[1]->recv(0, tag, later(), b.callback());
  CHECK(b.calls == 0);  // completions run from progress(), never inside recv()
  // One progress runs b's failure without waiting for any deadline; a keeps waiting.
  const auto start = Clock::now();
  auto r = f.t[1]->progress(start + 3s);
  REQUIRE(r.isOk());
  CHECK(*r == 1);
  CHECK(Clock::now() - start < 2s);
  CHECK(a.calls == 0);
  CHECK(b.calls == 1);
  CHECK(b.status.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(b.status.message(), Catch::Matchers::Contains("rank 0"));
  CHECK(b.bytes == nullptr);

  const SharedBytes msg = bytesOf({7});
  if (messageComes) f.t[0]->send(1, tag, msg, [](const Status&) {});
  REQUIRE(drive({f.t[1].get()}, [&] { return a.calls > 0; }));
  if (messageComes) {
    CHECK(a.status.isOk());
    CHECK(a.bytes->data() == msg->data());
  } else {
    CHECK(Clock::now() >= deadline);
    CHECK(a.status.code() == StatusCode::kTimeout);
    CHECK(a.bytes == nullptr);
  }
  // Nothing completes twice.
  REQUIRE(f.t[1]->progress(Clock::now() + 50ms).isOk());
  CHECK(a.calls == 1);
  CHECK(b.calls == 1);
  CHECK(f.t[1]->stats().timeouts == (messageComes ? 0u : 1u));
  CHECK(f.t[1]->stats().messagesReceived == (messageComes ? 1u : 0u));

  // With a done, the key takes a recv again.
  const SharedBytes next = bytesOf({8});
  Received again;
  f.t[1]->recv(0, tag, later(), again.callback());
  f.t[0]->send(1, tag, next, [](const Status&) {});
  REQUIRE(drive({f.t[1].get()}, [&] { return again.calls > 0; }));
  CHECK(again.status.isOk());
  CHECK(again.bytes->data() == next->data());
  CHECK(a.calls == 1);
  CHECK(b.calls == 1);
}

TEST_CASE("stats count messages and bytes on both sides", "[runtime][unit]") {
  Fixture f(3);
  f.t[0]->send(1, Tag{0, 0}, bytesOfSize(10, 1), [](const Status&) {});
  f.t[0]->send(1, Tag{1, 0}, bytesOfSize(20, 2), [](const Status&) {});
  f.t[0]->send(2, Tag{0, 0}, bytesOfSize(30, 3), [](const Status&) {});
  f.t[2]->send(1, Tag{0, 0}, bytesOfSize(7, 4), [](const Status&) {});
  Received a, b, c;
  f.t[1]->recv(0, Tag{0, 0}, later(), a.callback());
  f.t[1]->recv(0, Tag{1, 0}, later(), b.callback());
  f.t[2]->recv(0, Tag{0, 0}, later(), c.callback());
  // Rank 1 does not ask for rank 2's message: sent, but not received.
  REQUIRE(drive({f.t[0].get(), f.t[1].get(), f.t[2].get()},
                [&] { return a.calls && b.calls && c.calls; }));
  const TransportStats s0 = f.t[0]->stats();
  const TransportStats s1 = f.t[1]->stats();
  const TransportStats s2 = f.t[2]->stats();
  CHECK(s0.messagesSent == 3);
  CHECK(s0.bytesSent == 60);
  CHECK(s0.messagesReceived == 0);
  CHECK(s0.bytesReceived == 0);
  CHECK(s1.messagesSent == 0);
  CHECK(s1.bytesSent == 0);
  CHECK(s1.messagesReceived == 2);
  CHECK(s1.bytesReceived == 30);
  CHECK(s2.messagesSent == 1);
  CHECK(s2.bytesSent == 7);
  CHECK(s2.messagesReceived == 1);
  CHECK(s2.bytesReceived == 30);
  for (const TransportStats& s : {s0, s1, s2}) {
    CHECK(s.corruptMessages == 0);
    CHECK(s.timeouts == 0);
  }
}

TEST_CASE("two ranks on two threads exchange 1000 rounds", "[runtime][unit]") {
  constexpr int kRounds = 1000;
  Fixture f(2);
  struct Outcome {
    int wrong = 0;  // bad status, wrong bytes or a callback that ran twice
    int completed = 0;
    std::string firstError;
  };
  Outcome out[2];
  auto peer = [&](int me) {
    Transport& t = *f.t[me];
    const int other = 1 - me;
    Outcome& o = out[me];
    for (int round = 0; round < kRounds; ++round) {
      // Alternate the order of send and recv so both interleavings run against the other thread.
      const Tag tag{static_cast<uint64_t>(round), static_cast<uint32_t>(round % 3)};
      auto msg = std::make_shared<Bytes>();
      for (int k = 0; k < 4; ++k)
        msg->push_back(static_cast<std::byte>((round * 4 + k + me) & 0xff));
      const SharedBytes expected =
          bytesOf({(round * 4 + other) & 0xff, (round * 4 + 1 + other) & 0xff,
                   (round * 4 + 2 + other) & 0xff, (round * 4 + 3 + other) & 0xff});
      int recvCalls = 0, sendCalls = 0;
      auto onRecv = [&](const Status& st, SharedBytes b) {
        ++recvCalls;
        if (!st.isOk() || b == nullptr || !std::ranges::equal(*b, *expected)) {
          if (o.firstError.empty())
            o.firstError = "round " + std::to_string(round) + ": " + st.toString();
          ++o.wrong;
        }
      };
      auto onSend = [&](const Status& st) {
        ++sendCalls;
        if (!st.isOk()) ++o.wrong;
      };
      if (round % 2 == me) {
        t.send(other, tag, msg, onSend);
        t.recv(other, tag, Clock::now() + 10s, onRecv);
      } else {
        t.recv(other, tag, Clock::now() + 10s, onRecv);
        t.send(other, tag, msg, onSend);
      }
      while (recvCalls == 0 || sendCalls == 0) {
        auto r = t.progress(Clock::now() + 20ms);
        if (!r.isOk()) {
          ++o.wrong;
          return;
        }
      }
      if (recvCalls != 1 || sendCalls != 1) ++o.wrong;
      ++o.completed;
    }
  };
  std::thread a(peer, 0), b(peer, 1);
  a.join();
  b.join();
  for (int me = 0; me < 2; ++me) {
    CAPTURE(me, out[me].firstError);
    CHECK(out[me].completed == kRounds);
    CHECK(out[me].wrong == 0);
    const TransportStats s = f.t[me]->stats();
    CHECK(s.messagesSent == kRounds);
    CHECK(s.bytesSent == 4 * kRounds);
    CHECK(s.messagesReceived == kRounds);
    CHECK(s.bytesReceived == 4 * kRounds);
    CHECK(s.corruptMessages == 0);
    CHECK(s.timeouts == 0);
  }
}

TEST_CASE("busy_poll auto: a core for each rank on this host, and at least 4 cores",
          "[runtime][unit]") {
  const std::vector<std::string> four = {"127.0.0.1:1", "127.0.0.1:2", "localhost:3", "[::1]:4"};
  // Loopback names are one host: 4 ranks here.
  CHECK(coreForEachLocalRank(four, 0, 4));
  CHECK_FALSE(coreForEachLocalRank(four, 3, 3));
  CHECK_FALSE(coreForEachLocalRank(four, 1, 2));
  // Never on fewer than 4 cores, even with one rank.
  CHECK_FALSE(coreForEachLocalRank({"127.0.0.1:1"}, 0, 3));
  CHECK(coreForEachLocalRank({"127.0.0.1:1"}, 0, 4));
  // Only ranks on this rank's host count: 2 on a, 3 on b.
  const std::vector<std::string> hosts = {"a:1", "b:1", "a:2", "b:2", "b:3"};
  CHECK(coreForEachLocalRank(hosts, 0, 4));
  CHECK(coreForEachLocalRank(hosts, 1, 4));
  const std::vector<std::string> crowded = {"a:1", "b:1", "b:2", "b:3", "b:4", "b:5"};
  CHECK(coreForEachLocalRank(crowded, 0, 4));        // a holds 1 rank
  CHECK_FALSE(coreForEachLocalRank(crowded, 1, 4));  // b holds 5
  CHECK(coreForEachLocalRank(crowded, 1, 5));
  // A rank outside the list has no host.
  CHECK_FALSE(coreForEachLocalRank(four, 4, 64));
  CHECK_FALSE(coreForEachLocalRank(four, -1, 64));
}

}  // namespace
}  // namespace starling::transport
