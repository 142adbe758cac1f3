// Tests of the UCX transport's shared-memory frames (transport/ucx/ucx_shm.h): same-host
// neighbours hand each other views of sealed segments instead of copies, the handshake decides
// who may, and releases recycle the segments (ucx_shm_hostile_test.cc has hostile handshakes and
// descriptors; the two files make one executable).
#include <cmath>

#include "compression/compressor.h"
#include "core/rng.h"
#include "tests/runtime/ucx_shm_testing.h"

namespace starling::transport {
namespace {

using namespace ucx_testing;

// A ring of three: every rank sends its own 64 KiB .. 1 MiB message to both neighbours each round
// and checks what it gets, then lets go of the views. Returns the number of rounds that checked out.
int ringRounds(std::vector<std::unique_ptr<Transport>>& ts, int rounds, size_t size,
               bool checkViews, const char* mapping = "memfd:starling-frames") {
  std::vector<Transport*> raw;
  for (auto& t : ts) raw.push_back(t.get());
  const int n = static_cast<int>(ts.size());
  int good = 0;
  for (int r = 0; r < rounds; ++r) {
    const Tag tag{static_cast<uint64_t>(r), 0};
    std::vector<SharedBytes> mine;
    std::vector<Received> got(2 * n);
    std::vector<Sent> sent(2 * n);
    for (int i = 0; i < n; ++i) mine.push_back(randomBytes(size + r, 1000 * r + i));
    for (int i = 0; i < n; ++i) {
      for (int s = 0; s < 2; ++s) {
        const int nb = (i + (s ? 1 : n - 1)) % n;
        ts[i]->recv(nb, tag, in(20s), got[2 * i + s].callback());
        ts[i]->send(nb, tag, mine[i], sent[2 * i + s].callback());
      }
    }
    REQUIRE(pumpUntil(
        raw,
        [&] {
          return std::all_of(got.begin(), got.end(), [](const Received& g) { return g.calls; }) &&
                 std::all_of(sent.begin(), sent.end(), [](const Sent& g) { return g.calls; });
        },
        in(20s)));
    bool ok = true;
    for (int i = 0; i < n; ++i) {
      for (int s = 0; s < 2; ++s) {
        const int nb = (i + (s ? 1 : n - 1)) % n;
        const Received& g = got[2 * i + s];
        CAPTURE(r, i, nb, g.status.toString());
        ok = ok && g.status.isOk() && sent[2 * i + s].status.isOk() && sameBytes(g.bytes, mine[nb]);
        // Not a copy: neither the sender's buffer nor one of ours, but its shared segment, and
        // the transport vouches for it (receivers skip the frame CRC on such bytes).
        if (checkViews && r > 2) {
          ok = ok && g.bytes->data() != mine[nb]->data() &&
               inMemfdMapping(g.bytes->data(), mapping) &&
               g.bytes.intact();
        }
      }
    }
    good += ok;
  }
  return good;
}

TEST_CASE("ucx shm: large frames arrive as views of the sender's segment, intact, round after round",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(3);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < 3; ++r) ts.push_back(make(shmOptions(r, ports, log)));
  // The first rounds go by active messages while the handshake completes.
  CHECK(ringRounds(ts, 40, size_t{1} << 20, /*checkViews=*/true) == 40);
  for (auto& t : ts) {
    const auto st = t->stats();
    CHECK(st.sharedMemoryMessages >= 2 * 35);  // both neighbours, past the handshake
    CHECK(st.corruptMessages == 0);
    if (st.corruptMessages) for (size_t i = 0; i < std::min<size_t>(log->size(), 20); ++i) std::fprintf(stderr, "%s\n", (*log)[i].c_str());
  }
}

TEST_CASE("ucx shm: released segments are reused, so a long run maps a bounded number",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(3);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < 3; ++r) ts.push_back(make(shmOptions(r, ports, log)));
  CHECK(ringRounds(ts, 200, 65536, /*checkViews=*/false) == 200);
  // Each transport keeps at most 8 segments; without releases 200 rounds would have run out
  // after 8 and fallen back to active messages.
  for (auto& t : ts) CHECK(t->stats().sharedMemoryMessages >= 2 * 190);
  size_t memfds = 0;
  FILE* f = std::fopen("/proc/self/maps", "r");
  REQUIRE(f != nullptr);
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) memfds += std::strstr(line, "memfd:starling-frames") != nullptr;
  std::fclose(f);
  // 3 senders × (probe + segments) + the receivers' cached mappings: well under 200.
  CHECK(memfds <= 3 * (1 + 8) + 6 * 8);
}

TEST_CASE("ucx shm: small messages, and shared memory switched off, stay on active messages",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  auto o0 = shmOptions(0, ports, log);
  auto o1 = shmOptions(1, ports, log);
  o1.sharedMemoryFrames = false;  // rank 1 refuses in the handshake and sends nothing mapped
  auto t0 = make(o0);
  auto t1 = make(o1);
  for (int i = 0; i < 5; ++i) {
    // Over active messages without a key nothing vouches for the bytes: the receiver must
    // check the frame CRC.
    const auto intact = exchange(*t0, *t1, Tag{static_cast<uint64_t>(i), 0}, 1 << 18, 7 + i);
    CHECK_FALSE(intact[0]);
    CHECK_FALSE(intact[1]);
  }
  const auto intact = exchange(*t0, *t1, Tag{9, 0}, 100, 3);
  CHECK_FALSE(intact[0]);
  CHECK_FALSE(intact[1]);
  CHECK(t0->stats().sharedMemoryMessages == 0);
  CHECK(t1->stats().sharedMemoryMessages == 0);
  CHECK(t0->stats().messagesReceived == 6);
  CHECK(t1->stats().messagesReceived == 6);
}

TEST_CASE("ucx shm: small frames are read in place out of the sender's ring, whose slots are "
          "reused", "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(3);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < 3; ++r) ts.push_back(make(shmOptions(r, ports, log)));
  // 1,000 + r bytes (below the 4,096-byte threshold), 60 rounds through rings of 8 slots: every
  // slot is freed when the receiver lets go of its view, and used again.
  CHECK(ringRounds(ts, 60, 1000, /*checkViews=*/true, "memfd:starling-ring") == 60);
  for (auto& t : ts) {
    const auto st = t->stats();
    CHECK(st.sharedMemoryMessages >= 2 * 55);
    CHECK(st.corruptMessages == 0);
  }
}

TEST_CASE("ucx shm: frames that find the ring's next slot still held go by active message",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  auto t0 = make(shmOptions(0, ports, log));
  auto t1 = make(shmOptions(1, ports, log));
  for (int i = 0; i < 3; ++i) exchange(*t0, *t1, Tag{static_cast<uint64_t>(i), 0}, 500, 40 + i);
  const auto before = t1->stats();
  REQUIRE(before.sharedMemoryMessages >= 1);  // the handshake is done: the ring is in use
  // 20 frames nobody claims yet: the receiver queues them, holding the first 8 slots' views.
  constexpr int kFrames = 20;
  std::vector<SharedBytes> msgs;
  std::vector<Sent> sent(kFrames);
  for (int i = 0; i < kFrames; ++i) {
    msgs.push_back(randomBytes(300 + i, 500 + i));
    t0->send(1, Tag{100 + static_cast<uint64_t>(i), 0}, msgs.back(), sent[i].callback());
  }
  REQUIRE(pumpUntil(
      {t0.get(), t1.get()},
      [&] { return t1->stats().messagesReceived == before.messagesReceived + kFrames; },
      in(10s)));
  CHECK(t1->stats().sharedMemoryMessages == before.sharedMemoryMessages + 8);  // kRingSlots
  std::vector<Received> got(kFrames);
  for (int i = 0; i < kFrames; ++i) t1->recv(0, Tag{100 + static_cast<uint64_t>(i), 0}, in(10s), got[i].callback());
  REQUIRE(pumpUntil({t0.get(), t1.get()}, [&] {
    return std::all_of(got.begin(), got.end(), [](const Received& g) { return g.calls; });
  }, in(10s)));
  for (int i = 0; i < kFrames; ++i) {
    CAPTURE(i);
    CHECK(sent[i].status.isOk());
    CHECK(got[i].status.isOk());
    CHECK(sameBytes(got[i].bytes, msgs[i]));
  }
  for (const auto& line : *log) UNSCOPED_INFO(line);
  CHECK(t1->stats().corruptMessages == 0);
}

TEST_CASE("ucx shm: a receiver asleep in the kernel is woken for a frame put in its ring",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  auto t0 = make(shmOptions(0, ports, log));
  auto t1 = make(shmOptions(1, ports, log));
  for (int i = 0; i < 3; ++i) exchange(*t0, *t1, Tag{static_cast<uint64_t>(i), 0}, 500, 60 + i);
  const auto before = t1->stats().sharedMemoryMessages;
  REQUIRE(before >= 1);
  // Rank 1 waits on its own thread, well past its spin, in the kernel; rank 0 sends only then.
  // Without the doorbell the receive would sit out its 20 s deadline and fail with a timeout.
  Received got;
  t1->recv(0, Tag{7, 0}, in(20s), got.callback());
  std::thread waiter([&] {
    const auto deadline = in(25s);
    while (!got.calls && Clock::now() < deadline) (void)t1->progress(deadline);
  });
  std::this_thread::sleep_for(200ms);
  const SharedBytes msg = randomBytes(700, 77);
  Sent sent;
  t0->send(1, Tag{7, 0}, msg, sent.callback());
  const auto until = in(25s);
  while (!sent.calls && Clock::now() < until) (void)t0->progress(in(10ms));
  pumpFor({t0.get()}, 100ms);  // the doorbell, if one is still queued
  waiter.join();
  REQUIRE(got.calls);
  CHECK(got.status.isOk());
  CHECK(sameBytes(got.bytes, msg));
  CHECK(t1->stats().sharedMemoryMessages == before + 1);  // it came through the ring
}

// Two transports with shared-memory frames past their handshake (three 64 KiB exchanges), and
// one more message from t0 to t1 (tag 50) to post.
struct ShmPair {
  explicit ShmPair(int seed) {
    for (int i = 0; i < 3; ++i) {
      exchange(*t0, *t1, Tag{static_cast<uint64_t>(i), 0}, 1 << 16, static_cast<uint64_t>(seed + i));
    }
  }
  // t1 waits for `msg`, and t0 sends it.
  void post(const SharedBytes& msg) {
    t1->recv(0, Tag{50, 0}, in(10s), got.callback());
    t0->send(1, Tag{50, 0}, msg, sent.callback());
  }

  std::vector<uint16_t> ports = freePorts(2);
  LogLines log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  std::unique_ptr<Transport> t0 = make(shmOptions(0, ports, log));
  std::unique_ptr<Transport> t1 = make(shmOptions(1, ports, log));
  Received got;
  Sent sent;
};

TEST_CASE("ucx shm: a view outlives its transport and its sender", "[runtime][unit][ucx][shm]") {
  ShmPair p(20);
  const SharedBytes msg = randomBytes(1 << 16, 99);
  p.post(msg);
  REQUIRE(pumpUntil({p.t0.get(), p.t1.get()}, [&] { return p.got.calls && p.sent.calls; },
                    in(10s)));
  REQUIRE(p.got.status.isOk());
  REQUIRE(p.t1->stats().sharedMemoryMessages >= 1);
  p.t0.reset();  // the sender unmaps and closes its segment
  p.t1.reset();  // the receiver's transport is gone; its view is not
  CHECK(sameBytes(p.got.bytes, msg));
  p.got.bytes.reset();  // unmaps, reports to nobody
}

// A neighbour opens a segment of ours through /proc/<pid>/fd, which closes with our transport.
// A sender that closes right after its last frame must wait (within its grace period) for the
// neighbour to map and release it; before, the neighbour found the file gone, dropped the frame
// as malformed and waited for it until its deadline (seen once in the Python API test).
TEST_CASE("ucx shm: a closing sender waits for a neighbour to take its last frame",
          "[runtime][unit][ucx][shm]") {
  ShmPair p(40);
  // Larger than the segments so far: a new one, which the receiver has never mapped.
  const SharedBytes msg = randomBytes(1 << 20, 77);
  p.post(msg);
  REQUIRE(pumpUntil({p.t0.get()}, [&] { return p.sent.calls != 0; }, in(10s)));
  REQUIRE(p.sent.status.isOk());
  // The sender closes before the receiver has even seen the frame's descriptor.
  std::thread closer([&] { p.t0.reset(); });
  std::this_thread::sleep_for(200ms);
  const bool arrived = pumpUntil({p.t1.get()}, [&] { return p.got.calls != 0; }, in(5s));
  CHECK(arrived);
  CHECK(p.got.status.isOk());
  CHECK(sameBytes(p.got.bytes, msg));
  p.got.bytes.reset();  // released: the sender's close can finish
  pumpUntil({p.t1.get()}, [] { return false; }, in(300ms));
  closer.join();
  CHECK(p.t1->stats().corruptMessages == 0);
}

TEST_CASE("ucx shm: a frame written in place with allocate() goes out without a copy and its "
          "segment is reused only after every reader released it",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(3);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < 3; ++r) ts.push_back(make(shmOptions(r, ports, log)));
  std::vector<Transport*> raw{ts[0].get(), ts[1].get(), ts[2].get()};
  // Before any handshake there is nothing to allocate from.
  CHECK_FALSE(ts[0]->allocate(1 << 16).has_value());
  CHECK(ringRounds(ts, 3, 1 << 16, /*checkViews=*/false) == 3);  // connects, handshakes
  CHECK_FALSE(ts[0]->allocate(100).has_value());                  // below the threshold

  auto sendToBoth = [&](const SharedBytes& msg, uint64_t round, std::array<Received, 2>& got) {
    std::array<Sent, 2> sent;
    for (int to : {1, 2}) {
      ts[to]->recv(0, Tag{round, 0}, in(10s), got[to - 1].callback());
      ts[0]->send(to, Tag{round, 0}, msg, sent[to - 1].callback());
    }
    REQUIRE(pumpUntil(
        raw, [&] { return got[0].calls && got[1].calls && sent[0].calls && sent[1].calls; },
        in(10s)));
    REQUIRE(got[0].status.isOk());
    REQUIRE(got[1].status.isOk());
  };
  auto a = ts[0]->allocate(1 << 16);
  REQUIRE(a.has_value());
  CHECK(a->bytes.size() == size_t{1} << 16);
  CHECK(inMemfdMapping(a->bytes.data()));
  for (size_t i = 0; i < a->bytes.size(); ++i) a->bytes[i] = static_cast<std::byte>(i * 7);
  const std::byte* aData = a->bytes.data();
  const auto mappedBefore = ts[1]->stats().sharedMemoryMessages;
  std::array<Received, 2> gotA;
  sendToBoth(a->message, 100, gotA);
  CHECK(ts[1]->stats().sharedMemoryMessages == mappedBefore + 1);
  for (const auto& g : gotA) {
    CHECK(sameBytes(g.bytes, a->message));
    CHECK(g.bytes->data() != aData);  // the receiver's own read-only mapping of the same pages
  }
  // The sender lets go of its frame, but both neighbours still read it: a new frame must land in
  // another segment.
  a.reset();
  auto b = ts[0]->allocate(1 << 16);
  REQUIRE(b.has_value());
  CHECK(b->bytes.data() != aData);
  // Readers release (the views go), the next progress() reports it, and the segment comes back.
  gotA = {};
  b.reset();
  pumpFor(raw, 100ms);
  auto c = ts[0]->allocate(1 << 16);
  REQUIRE(c.has_value());
  auto d = ts[0]->allocate(1 << 16);
  REQUIRE(d.has_value());
  CHECK((c->bytes.data() == aData || d->bytes.data() == aData));
}

TEST_CASE("ucx shm: a codec's frame written into lent memory by encodeInto and sent at its own "
          "length (SharedBytes::first) arrives as a view of the sender's segment",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(3);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < 3; ++r) ts.push_back(make(shmOptions(r, ports, log)));
  std::vector<Transport*> raw{ts[0].get(), ts[1].get(), ts[2].get()};
  CHECK(ringRounds(ts, 3, 1 << 16, /*checkViews=*/false) == 3);  // connects, handshakes

  // Top-k's frame is shorter than its bound (the index gaps are varints), as Node::startRound
  // sends it: the codec writes into the lent segment, the message is trimmed to the frame.
  compression::CompressorSpec spec;
  spec.kind = compression::CompressorSpec::Kind::kTopK;
  spec.ratio = 0.1;
  auto codec = compression::createCompressor<float>(spec);
  REQUIRE(codec.isOk());
  const size_t d = size_t{1} << 15;
  std::vector<float> x(d), seen(d);
  for (size_t i = 0; i < d; ++i) {
    x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * static_cast<double>(i % 13));
  }
  const size_t bound = (*codec)->maxEncodedBytes(d);
  auto out = ts[0]->allocate(bound);
  REQUIRE(out.has_value());
  core::Rng rng(3);
  const auto length = (*codec)->encodeInto(x, rng, {}, out->bytes, seen);
  REQUIRE(length.isOk());
  REQUIRE(*length < bound);
  const SharedBytes message = out->message.first(*length);
  CHECK(message.owner() == out->message.owner());
  CHECK(message->data() == out->bytes.data());

  const auto mappedBefore = ts[1]->stats().sharedMemoryMessages;
  std::array<Received, 2> got;
  std::array<Sent, 2> sent;
  for (int to : {1, 2}) {
    ts[to]->recv(0, Tag{100, 0}, in(10s), got[to - 1].callback());
    ts[0]->send(to, Tag{100, 0}, message, sent[to - 1].callback());
  }
  REQUIRE(pumpUntil(
      raw, [&] { return got[0].calls && got[1].calls && sent[0].calls && sent[1].calls; },
      in(10s)));
  CHECK(ts[1]->stats().sharedMemoryMessages == mappedBefore + 1);
  for (const Received& g : got) {
    REQUIRE(g.status.isOk());
    CHECK(g.bytes->size() == *length);
    CHECK(sameBytes(g.bytes, message));
    CHECK(inMemfdMapping(g.bytes->data()));
    CHECK(g.bytes.intact());
    std::vector<float> decoded(d);
    REQUIRE((*codec)->decode(*g.bytes, decoded).isOk());
    CHECK(std::memcmp(decoded.data(), seen.data(), d * sizeof(float)) == 0);
  }
  for (auto* t : raw) CHECK(t->stats().corruptMessages == 0);
}

TEST_CASE("ucx shm: with one endpoint allowed, a neighbour still holding our frame keeps its "
          "connection, and its release comes back",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(3);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  auto o0 = shmOptions(0, ports, log);
  o0.maxEndpoints = 1;  // sending to rank 2 would close rank 0's idle endpoint to rank 1
  auto t0 = make(o0);
  auto t1 = make(shmOptions(1, ports, log));
  auto t2 = make(shmOptions(2, ports, log));
  std::vector<Transport*> ts{t0.get(), t1.get(), t2.get()};
  auto deliver = [&](Transport& from, Transport& to, uint64_t round, const SharedBytes& msg) {
    Received got;
    Sent sent;
    to.recv(from.rank(), Tag{round, 0}, in(10s), got.callback());
    from.send(to.rank(), Tag{round, 0}, msg, sent.callback());
    REQUIRE(pumpUntil(ts, [&] { return got.calls && sent.calls; }, in(10s)));
    REQUIRE(got.status.isOk());
    REQUIRE(sent.status.isOk());
    return got.bytes;
  };
  for (uint64_t r = 0; r < 3; ++r) deliver(*t0, *t1, r, randomBytes(1 << 16, 60 + r));  // handshake
  auto frame = t0->allocate(1 << 16);
  REQUIRE(frame.has_value());
  const std::byte* segment = frame->bytes.data();
  std::fill(frame->bytes.begin(), frame->bytes.end(), std::byte{42});
  SharedBytes view = deliver(*t0, *t1, 10, frame->message);
  CHECK(inMemfdMapping(view->data()));
  frame.reset();
  // Rank 0 talks to rank 2. Its endpoint to rank 1 is not idle while rank 1 reads its frame (if
  // it were closed anyway, rank 1's release would wait for the next hello).
  deliver(*t0, *t2, 11, randomBytes(100, 5));
  pumpFor(ts, 200ms);
  // Rank 1 lets go of the frame.
  view.reset();
  pumpFor(ts, 100ms);
  // Rank 0 sends to rank 1 again; the release has come back by now.
  deliver(*t0, *t1, 12, randomBytes(100, 6));
  pumpFor(ts, 200ms);
  // Every free segment, held at once (at most 8): the released one is among them.
  std::vector<OutgoingMessage> held;
  bool found = false;
  while (auto m = t0->allocate(1 << 16)) {
    found = found || m->bytes.data() == segment;
    held.push_back(std::move(*m));
  }
  CHECK(held.size() <= 8);
  CHECK(found);
  for (auto* t : ts) CHECK(t->stats().corruptMessages == 0);
}

}  // namespace
}  // namespace starling::transport
