// The UCX transport with a cluster key (docs/security.md): the bootstrap refuses peers without
// the key, and every message that is forged, altered, replayed, cut short or meant for another
// peer is rejected and counted. The test signs its own messages with auth.h's primitives and
// the wire layout written out here, so a change of the format shows up as a failure.
#include <poll.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <optional>

#include "transport/auth.h"
#include "tests/runtime/ucx_testing.h"

namespace starling::transport {
namespace {

using namespace std::chrono_literals;
using core::StatusCode;
using namespace ucx_testing;
constexpr unsigned kShmAmId = 0x5355;  // ucx_transport_impl.h, pinned here

auth::ClusterKey keyOf(uint8_t fill) {
  auth::ClusterKey k;
  k.master.assign(32, std::byte{fill});
  return k;
}

ucx::Options keyed(int rank, const std::vector<uint16_t>& ports, const LogLines& log,
                   const auth::ClusterKey& key, bool encrypt = false) {
  auto o = options(rank, ports, log);
  o.key = std::make_shared<const auth::ClusterKey>(key);
  o.encrypt = encrypt;
  return o;
}

// A model message as a keyed sender puts it on the wire: the 24-byte header, then the trailer
// (counter, payload tag, header tag over header | counter | payload tag | receiver | length).
std::vector<std::byte> signedHeader(const auth::SessionKey& session, uint32_t sender, uint64_t round,
                                    uint64_t counter, std::span<const std::byte> payload,
                                    int receiver) {
  const auto h = header(kMagic, sender, round, 0);
  std::vector<std::byte> out(h.begin(), h.end());
  out.resize(24 + 48);
  putLe(out.data() + 24, counter, 8);
  const auth::Mac ptag = session.payloadTag(counter, payload);
  std::memcpy(out.data() + 32, ptag.data(), 16);
  std::array<std::byte, 12> bound{};
  putLe(bound.data(), static_cast<uint32_t>(receiver), 4);
  putLe(bound.data() + 4, payload.size(), 8);
  const auth::Mac htag = session.headerTag({std::span<const std::byte>(out.data(), 24),
                                            std::span<const std::byte>(out.data() + 24, 24), bound});
  std::memcpy(out.data() + 48, htag.data(), 16);
  return out;
}

TEST_CASE("ucx+key: peers with the key exchange messages, plain and encrypted, eager and rendezvous",
          "[runtime][unit][ucx][auth]") {
  const bool encrypt = GENERATE(false, true);
  CAPTURE(encrypt);
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  const auto key = keyOf(7);
  auto t0 = make(keyed(0, ports, log, key, encrypt));
  auto t1 = make(keyed(1, ports, log, key, encrypt));
  LogDump dump{log};
  // Every message's payload tag (or AEAD tag) was verified: the transport vouches for the bytes,
  // eager and rendezvous alike.
  CHECK(exchange(*t0, *t1, Tag{0, 0}, 100, 1) == std::array<bool, 2>{true, true});
  CHECK(exchange(*t0, *t1, Tag{1, 0}, size_t{2} << 20, 2) == std::array<bool, 2>{true, true});
  CHECK(exchange(*t0, *t1, Tag{2, 3}, 0, 3) == std::array<bool, 2>{true, true});
  CHECK(t0->stats().corruptMessages == 0);
  CHECK(t1->stats().corruptMessages == 0);
}

TEST_CASE("ucx+key: a peer with another key, or none, is refused and logged with its address",
          "[runtime][unit][ucx][auth]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  const auto key = keyOf(7);
  auto t1 = make(keyed(1, ports, log, key));
  // Another key, or none: the send fails naming the cause, and the server counts the refusal.
  struct Case {
    const char* name;
    std::optional<auth::ClusterKey> key;
    const char* why;
  };
  const Case cases[] = {{"another key", keyOf(8), "different cluster keys"},
                        {"no key", std::nullopt, "requires the cluster's key"}};
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto o0 = c.key ? keyed(0, ports, log, *c.key) : options(0, ports, log);
    o0.connectTimeout = 3s;
    auto t0 = make(o0);
    std::vector<Transport*> ts{t0.get(), t1.get()};
    const uint64_t before = t1->stats().rejectedConnections;
    Sent sent;
    t0->send(1, Tag{0, 0}, randomBytes(10, 1), sent.callback());
    REQUIRE(pumpUntil(ts, [&] { return sent.calls > 0; }, in(10s)));
    CHECK(sent.status.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(sent.status.message(), Catch::Matchers::Contains(c.why));
    CHECK(t1->stats().rejectedConnections > before);
  }
  bool named = false;
  for (const auto& line : *log) {
    named |= line.find("refused a connection from 127.0.0.1:") != std::string::npos;
  }
  CHECK(named);
  // The handshake at the byte level: a client that proves nothing gets no worker address.
  std::string why;
  std::vector<Transport*> ts{t1.get()};
  std::atomic<bool> done{false};
  std::vector<std::byte> address;
  const auto wrong = keyOf(9);
  std::thread t([&] {
    address = bootstrapBlocking(ports[1], 0, 1, 2, &wrong, auth::Nonce{}, why);
    done = true;
  });
  (void)pumpUntil(ts, [&] { return done.load(); }, in(10s));
  t.join();
  CHECK(address.empty());
  CHECK(why == "welcome status 5");
}

TEST_CASE("ucx+key: forged, altered, replayed, truncated and misdirected messages are rejected",
          "[runtime][unit][ucx][auth]") {
  // Three ranks: t0 and t1 run; the test's raw client holds the key and speaks as rank 2, so it
  // can build genuine messages and then break them one way at a time.
  const auto ports = freePorts(3);
  auto log = std::make_shared<std::vector<std::string>>();
  const auto key = keyOf(7);
  auto t0 = make(keyed(0, ports, log, key));
  auto t1 = make(keyed(1, ports, log, key));
  std::vector<Transport*> ts{t0.get(), t1.get()};
  LogDump dump{log};
  auth::Nonce salt{};
  salt[0] = std::byte{42};
  const auth::SessionKey rank2(key, 2, salt);
  const auth::SessionKey impostor(keyOf(8), 2, salt);  // the same rank and salt, another key
  const auth::SessionKey rank0(key, 0, salt);          // rank 0's name with a salt not its own
  const Bytes payload(64, std::byte{0x5a});
  const Bytes big(size_t{1} << 20, std::byte{0x33});

  RawClient raw(ts, ports, 1, /*from=*/2, &key, salt);
  auto extra = [&raw] { raw.progress(); };
  auto sendAll = [&](const std::vector<std::pair<std::vector<std::byte>, const Bytes*>>& msgs,
                     uint64_t corruptAtLeast) {
    for (const auto& [h, p] : msgs) raw.send(h.data(), h.size(), *p);
    REQUIRE(pumpUntil(
        ts, [&] { return raw.idle() && t1->stats().corruptMessages >= corruptAtLeast; }, in(10s),
        extra));
    pumpFor(ts, 100ms, extra);
  };
  auto receive = [&](uint64_t round) {
    Received got;
    t1->recv(2, Tag{round, 0}, in(300ms), got.callback());
    REQUIRE(pumpUntil(ts, [&] { return got.calls > 0; }, in(5s), extra));
    return got;
  };

  // A genuine message is delivered: the check is not rejecting everything.
  const auto genuine = signedHeader(rank2, 2, 10, 1, payload, 1);
  sendAll({{genuine, &payload}}, 0);
  auto got = receive(10);
  REQUIRE(got.status.isOk());
  CHECK(sameBytes(got.bytes, std::make_shared<Bytes>(payload)));
  CHECK(t1->stats().corruptMessages == 0);

  auto flipped = [](std::vector<std::byte> h, size_t at) {
    h[at] ^= std::byte{1};
    return h;
  };
  Bytes flippedPayload = payload;
  flippedPayload[17] ^= std::byte{0x80};
  const Bytes shorter(payload.begin(), payload.end() - 1);
  auto otherRound = signedHeader(rank2, 2, 11, 2, payload, 1);
  putLe(otherRound.data() + 8, 12, 8);  // the round rewritten after signing
  auto truncatedHeader = signedHeader(rank2, 2, 13, 3, payload, 1);
  truncatedHeader.resize(truncatedHeader.size() - 1);
  const std::vector<std::pair<std::vector<std::byte>, const Bytes*>> bad = {
      {genuine, &payload},                                   // 1 replayed: same round
      {signedHeader(rank2, 2, 11, 1, payload, 1), &payload},  // 2 replayed counter, other round
      {otherRound, &payload},                                // 3 round altered
      {signedHeader(rank2, 2, 14, 4, payload, 0), &payload},  // 4 meant for rank 0
      {signedHeader(rank2, 2, 15, 5, payload, 1), &flippedPayload},  // 5 payload bit flipped
      {signedHeader(rank2, 2, 16, 6, payload, 1), &shorter},  // 6 payload cut short
      {truncatedHeader, &payload},                           // 7 header cut short
      {flipped(signedHeader(rank2, 2, 17, 7, payload, 1), 60), &payload},  // 8 header tag flipped
      {signedHeader(impostor, 2, 18, 8, payload, 1), &payload},  // 9 another key
      {signedHeader(rank0, 0, 19, 9, payload, 1), &payload},     // 10 rank 0's name, not its session
      {signedHeader(rank2, 2, 20, 10, big, 1), &payload},        // 11 tag of other bytes (rendezvous)
      {signedHeader(rank2, 2, 21, 11, payload, 1), &big},        // 12 big payload, small's tag
  };
  sendAll(bad, 12);
  CHECK(t1->stats().corruptMessages == 12);
  CHECK(t1->stats().replayedMessages == 2);
  CHECK(t1->stats().unauthenticatedMessages == 9);  // and the short header: malformed
  for (uint64_t round : {10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 21}) {
    CAPTURE(round);
    CHECK(receive(round).status.code() == StatusCode::kTimeout);
  }

  // A genuine rendezvous-sized message still arrives, and so does the transports' own traffic.
  sendAll({{signedHeader(rank2, 2, 30, 12, big, 1), &big}}, 12);
  got = receive(30);
  REQUIRE(got.status.isOk());
  CHECK(sameBytes(got.bytes, std::make_shared<Bytes>(big)));
  exchange(*t0, *t1, Tag{40, 0}, 1000, 5);
  CHECK(t1->stats().corruptMessages == 12);
}

TEST_CASE("ucx+key: a shared-memory descriptor without a valid tag is rejected unread",
          "[runtime][unit][ucx][auth]") {
  const auto ports = freePorts(3);
  auto log = std::make_shared<std::vector<std::string>>();
  const auto key = keyOf(7);
  auto o0 = keyed(0, ports, log, key);
  auto o1 = keyed(1, ports, log, key);
  o0.tls = o1.tls = "sysv,posix,cma,tcp";
  o0.sharedMemoryFrames = o1.sharedMemoryFrames = true;
  o0.sharedMemoryThreshold = o1.sharedMemoryThreshold = 0;
  auto t0 = make(o0);
  auto t1 = make(o1);
  std::vector<Transport*> ts{t0.get(), t1.get()};
  LogDump dump{log};
  // Once the handshakes are done (a round or two), frames go by segment, authenticated.
  for (uint64_t r = 0; r < 20 && t1->stats().sharedMemoryMessages < 3; ++r) {
    exchange(*t0, *t1, Tag{r, 1}, 4096, static_cast<uint32_t>(r));
  }
  CHECK(t1->stats().sharedMemoryMessages >= 3);
  CHECK(t1->stats().corruptMessages == 0);
  const uint64_t before = t1->stats().corruptMessages;
  // A process that knows the layout but not rank 0's session: a frame descriptor in rank 0's
  // name, with a hello and a release, each with a trailer of zeros or garbage.
  RawClient raw(ts, ports, 1, /*from=*/2, &key, auth::Nonce{});
  std::vector<std::array<std::byte, 112>> msgs;
  for (uint32_t type : {1u, 3u, 4u}) {
    std::array<std::byte, 112> m{};
    putLe(m.data(), 0x4D485353, 4);  // "SSHM"
    putLe(m.data() + 4, type, 4);
    putLe(m.data() + 8, 0, 4);
    putLe(m.data() + 16, 50, 8);           // round
    putLe(m.data() + 32, 2, 8);            // serial
    putLe(m.data() + 40, 64, 8);           // offset
    putLe(m.data() + 48, 16, 8);           // length
    putLe(m.data() + 64, 99 + type, 8);    // counter
    for (size_t i = 72; i < 104; ++i) m[i] = static_cast<std::byte>(i);
    msgs.push_back(m);
  }
  for (auto& m : msgs) raw.send(m.data(), m.size(), {}, kShmAmId);
  auto extra = [&raw] { raw.progress(); };
  REQUIRE(pumpUntil(
      ts, [&] { return raw.idle() && t1->stats().corruptMessages >= before + 3; }, in(10s), extra));
  pumpFor(ts, 100ms, extra);
  CHECK(t1->stats().corruptMessages == before + 3);
  CHECK(t1->stats().unauthenticatedMessages == 3);
  Received nothing;
  t1->recv(0, Tag{50, 0}, in(200ms), nothing.callback());
  REQUIRE(pumpUntil(ts, [&] { return nothing.calls > 0; }, in(5s), extra));
  CHECK(nothing.status.code() == StatusCode::kTimeout);
  exchange(*t0, *t1, Tag{2, 0}, 4096, 3);
}

TEST_CASE("auth: key files are refused like ssh refuses a private key", "[runtime][unit][auth]") {
  const std::string dir = "/tmp/starling-auth-test-" + std::to_string(::getpid());
  REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
  const std::string good = dir + "/good", open = dir + "/open", small = dir + "/small";
  REQUIRE(std::system(("head -c 32 /dev/urandom > " + good + " && chmod 600 " + good).c_str()) == 0);
  REQUIRE(std::system(("head -c 32 /dev/urandom > " + open + " && chmod 644 " + open).c_str()) == 0);
  REQUIRE(std::system(("head -c 31 /dev/urandom > " + small + " && chmod 600 " + small).c_str()) == 0);
  CHECK(auth::loadKeyFile(good).isOk());
  auto o = auth::loadKeyFile(open);
  REQUIRE_FALSE(o.isOk());
  CHECK_THAT(o.status().message(), Catch::Matchers::Contains("0644 are too open"));
  auto s = auth::loadKeyFile(small);
  REQUIRE_FALSE(s.isOk());
  CHECK_THAT(s.status().message(), Catch::Matchers::Contains("31 bytes"));
  CHECK(auth::loadKeyFile(dir).status().code() == StatusCode::kInvalidArgument);  // a folder
  CHECK(auth::loadKeyFile(dir + "/none").status().code() == StatusCode::kNotFound);
  (void)std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("auth: session tags depend on every input, seal and open round-trip, the replay window",
          "[runtime][unit][auth]") {
  // The replay window: each counter once, none older than the window behind the newest.
  auth::ReplayWindow w;
  CHECK_FALSE(w.accept(0));
  CHECK(w.accept(5));
  CHECK(w.accept(3));
  CHECK_FALSE(w.accept(3));
  CHECK_FALSE(w.accept(5));
  CHECK(w.accept(5 + auth::ReplayWindow::kWindow));
  CHECK_FALSE(w.accept(4));  // now older than the window
  CHECK(w.accept(4 + auth::ReplayWindow::kWindow));  // within the window, new
  // An independent check that the session's tags are the standard algorithms: two sessions
  // with the same inputs agree, other inputs disagree, and seal/open round-trips.
  const auto key = keyOf(1);
  const auth::SessionKey a(key, 3, auth::Nonce{}), b(key, 3, auth::Nonce{}), c(key, 4, auth::Nonce{});
  const Bytes msg(1000, std::byte{9});
  CHECK(a.payloadTag(1, msg) == b.payloadTag(1, msg));
  CHECK(a.payloadTag(1, msg) != a.payloadTag(2, msg));
  CHECK(a.payloadTag(1, msg) != c.payloadTag(1, msg));
  Bytes sealed(msg.size()), opened(msg.size());
  const auth::Mac tag = a.seal(7, msg, sealed);
  CHECK(sealed != msg);
  CHECK(b.open(7, sealed, tag, opened));
  CHECK(opened == msg);
  sealed[500] ^= std::byte{1};
  CHECK_FALSE(b.open(7, sealed, tag, opened));
  CHECK_FALSE(c.open(7, msg, tag, opened));
}

// A man in the middle of the bootstrap: each connection to rank 1 goes through it, and it flips
// one byte of the client's hello (its magic) on the way. The server drops such a connection, the
// client retries until its connect deadline, and the error then names the handshake and why it
// broke, not only "cannot reach".
TEST_CASE("ucx+key: a handshake changed on the way is named when the connect deadline passes",
          "[runtime][unit][ucx][auth]") {
  const auto ports = freePorts(3);  // rank 0, rank 1, the proxy
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  const auto key = keyOf(7);
  auto t1 = make(keyed(1, {ports[0], ports[1]}, log, key));
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(ports[2]);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listener, 16) == 0);
  std::atomic<bool> stop{false};
  std::atomic<int> relayed{0};
  std::thread proxy([&] {
    while (!stop) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept(listener, nullptr, nullptr);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in s{};
      s.sin_family = AF_INET;
      s.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      s.sin_port = htons(ports[1]);
      timeval tv{2, 0};
      ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(server, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      if (::connect(server, reinterpret_cast<sockaddr*>(&s), sizeof s) == 0) {
        std::array<char, 64> hello{};
        size_t got = 0;
        while (got < hello.size()) {
          const ssize_t n = ::read(client, hello.data() + got, hello.size() - got);
          if (n <= 0) break;
          got += static_cast<size_t>(n);
        }
        if (got == hello.size()) {
          hello[0] ^= 0x01;  // the magic, changed on the way
          (void)!::write(server, hello.data(), hello.size());
          ++relayed;
          std::array<char, 256> back{};
          for (ssize_t n; (n = ::read(server, back.data(), back.size())) > 0;) {
            (void)!::write(client, back.data(), static_cast<size_t>(n));
          }
        }
      }
      ::close(server);
      ::close(client);
    }
  });
  auto o0 = keyed(0, {ports[0], ports[2]}, log, key);
  o0.connectTimeout = 2s;
  auto t0 = make(o0);
  std::vector<Transport*> ts{t0.get(), t1.get()};
  Sent sent;
  t0->send(1, Tag{0, 0}, randomBytes(10, 1), sent.callback());
  const bool finished = pumpUntil(ts, [&] { return sent.calls > 0; }, in(15s));
  stop = true;
  proxy.join();
  ::close(listener);
  REQUIRE(finished);
  INFO(sent.status.toString());
  CHECK(relayed >= 2);  // retried
  CHECK(sent.status.code() == StatusCode::kUnavailable);
  CHECK_THAT(sent.status.message(), Catch::Matchers::Contains("its bootstrap handshake failed"));
  CHECK_THAT(sent.status.message(),
             Catch::Matchers::Contains("no challenge came after this peer's hello"));
  // The server said why it dropped them, at most once a second.
  size_t dropped = 0;
  for (const auto& line : *log) dropped += line.find("not a Starling handshake") != std::string::npos;
  CHECK(dropped >= 1);
  CHECK(dropped <= 4);
}

}  // namespace
}  // namespace starling::transport
