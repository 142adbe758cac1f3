// Tests of the UCX transport's shared-memory frames (runtime/transport/ucx/ucx_shm.h): same-host
// neighbours hand each other views of sealed segments instead of copies, the handshake decides
// who may, releases recycle the segments, and hostile descriptors are counted and dropped.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>

#include "compression/compressor.h"
#include "core/rng.h"
#include "tests/runtime/ucx_testing.h"

namespace starling::transport {
namespace {

using namespace ucx_testing;

constexpr const char* kShm = "sysv,posix,cma,tcp";
constexpr unsigned kShmAmId = 0x5355;  // the wire constants of ucx_transport_impl.h, pinned here
constexpr uint32_t kShmMagic = 0x4D485353;

ucx::Options shmOptions(int rank, const std::vector<uint16_t>& ports, const LogLines& log) {
  ucx::Options o = options(rank, ports, log, kShm);
  o.sharedMemoryFrames = true;
  o.sharedMemoryThreshold = 4096;
  return o;
}

// Writes `v` into a shared-memory message header at `off` (n bytes, little-endian).
void put(std::array<std::byte, 64>& h, size_t off, uint64_t v, size_t n) { putLe(h.data() + off, v, n); }

// Whether `p` lies in a mapping of this process backed by a memfd named `name` (the receive-side
// view: "starling-frames" for segments, "starling-ring" for the small-frame rings).
bool inMemfdMapping(const void* p, const char* name = "memfd:starling-frames") {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return false;
  char line[512];
  bool found = false;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && addr >= lo && addr < hi) {
      found = std::strstr(line, name) != nullptr;
    }
  }
  std::fclose(f);
  return found;
}

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

TEST_CASE("ucx shm: a view outlives its transport and its sender", "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  auto t0 = make(shmOptions(0, ports, log));
  auto t1 = make(shmOptions(1, ports, log));
  for (int i = 0; i < 3; ++i) exchange(*t0, *t1, Tag{static_cast<uint64_t>(i), 0}, 1 << 16, 20 + i);
  const SharedBytes msg = randomBytes(1 << 16, 99);
  Received got;
  Sent sent;
  t1->recv(0, Tag{50, 0}, in(10s), got.callback());
  t0->send(1, Tag{50, 0}, msg, sent.callback());
  REQUIRE(pumpUntil({t0.get(), t1.get()}, [&] { return got.calls && sent.calls; }, in(10s)));
  REQUIRE(got.status.isOk());
  REQUIRE(t1->stats().sharedMemoryMessages >= 1);
  t0.reset();  // the sender unmaps and closes its segment
  t1.reset();  // the receiver's transport is gone; its view is not
  CHECK(sameBytes(got.bytes, msg));
  got.bytes.reset();  // unmaps, reports to nobody
}

// A hand-made shared-memory message from a raw UCX client posing as rank 0.
std::array<std::byte, 64> shmMessage(uint32_t type, uint32_t sender) {
  std::array<std::byte, 64> h{};
  put(h, 0, kShmMagic, 4);
  put(h, 4, type, 4);
  put(h, 8, sender, 4);
  return h;
}

// A sealed segment laid out as a sender's would be: magic, serial, token.
int sealedSegment(size_t size, uint64_t serial, const std::array<uint8_t, 16>& token) {
  const int fd = ::memfd_create("starling-frames", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
  std::array<std::byte, 32> h{};
  putLe(h.data(), 0x474553534C525453ULL, 8);  // "STRLSSEG"
  putLe(h.data() + 8, serial, 8);
  std::memcpy(h.data() + 16, token.data(), token.size());
  REQUIRE(::pwrite(fd, h.data(), h.size(), 0) == static_cast<ssize_t>(h.size()));
  REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  return fd;
}

std::array<uint8_t, 16> bootId() {
  std::array<uint8_t, 16> id{};
  FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r");
  REQUIRE(f != nullptr);
  char text[64] = {};
  REQUIRE(std::fgets(text, sizeof text, f) != nullptr);
  std::fclose(f);
  size_t n = 0;
  for (const char* c = text; *c && *c != '\n' && n < id.size();) {
    if (*c == '-') {
      ++c;
      continue;
    }
    const char pair[3] = {c[0], c[1], 0};
    id[n++] = static_cast<uint8_t>(std::strtoul(pair, nullptr, 16));
    c += 2;
  }
  return id;
}

// A hello from "rank 0" that is this process on this host, naming `fd` as its probe segment
// (serial 1) and carrying `token`.
std::array<std::byte, 64> helloNaming(int fd, const std::array<uint8_t, 16>& token = {}) {
  auto hello = shmMessage(1, 0);
  put(hello, 12, static_cast<uint32_t>(::getpid()), 4);
  std::memcpy(hello.data() + 16, token.data(), token.size());
  const std::array<uint8_t, 16> boot = bootId();
  std::memcpy(hello.data() + 32, boot.data(), boot.size());
  put(hello, 48, static_cast<uint32_t>(fd), 4);
  put(hello, 52, 1, 8);
  return hello;
}

// A frame descriptor from "rank 0": `length` bytes at `offset` of segment `serial` (file `fd`).
std::array<std::byte, 64> frameDescriptor(int fd, uint64_t serial, uint64_t offset,
                                          uint64_t length, uint64_t round = 0) {
  auto f = shmMessage(3, 0);
  put(f, 12, static_cast<uint32_t>(fd), 4);
  put(f, 16, round, 8);
  put(f, 32, serial, 8);
  put(f, 40, offset, 8);
  put(f, 48, length, 8);
  return f;
}

TEST_CASE("ucx shm: forged handshakes, descriptors and releases are counted and dropped",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  auto t1 = make(shmOptions(1, ports, log));
  std::vector<Transport*> ts{t1.get()};

  // A real sealed segment of this process, to aim descriptors at (rank 1 maps it as "rank 0").
  const int fd = ::memfd_create("starling-frames", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 8192) == 0);
  std::vector<std::array<std::byte, 64>> msgs;
  // 1. a frame before any hello;
  const auto frame = frameDescriptor(fd, 1, 64, 100);
  msgs.push_back(frame);
  // 2. a hello naming an unsealed file (refused: not counted, frames stay unmapped), then the
  //    same frame again;
  msgs.push_back(helloNaming(fd));  // this host: the seal check decides
  msgs.push_back(frame);
  // 3. bad magic, unknown type, unknown sender, itself as sender, a release of nothing.
  auto badMagic = shmMessage(3, 0);
  put(badMagic, 0, 0x12345678, 4);
  msgs.push_back(badMagic);
  msgs.push_back(shmMessage(9, 0));
  msgs.push_back(shmMessage(3, 7));
  msgs.push_back(shmMessage(3, 1));
  auto release = shmMessage(4, 0);
  put(release, 32, 12345, 8);
  msgs.push_back(release);
  {
    RawClient raw(ts, ports, 1);
    for (auto& m : msgs) raw.send(m.data(), m.size(), {}, kShmAmId);
    // And a header of the wrong length, and one with data attached.
    std::array<std::byte, 10> shortHeader{};
    raw.send(shortHeader.data(), shortHeader.size(), {}, kShmAmId);
    std::vector<std::byte> payload(32);
    raw.send(frame.data(), frame.size(), payload, kShmAmId);
    auto extra = [&raw] { raw.progress(); };
    REQUIRE(pumpUntil(
        ts, [&] { return raw.idle() && t1->stats().corruptMessages >= 9; }, in(10s), extra));
    pumpFor(ts, 100ms, extra);
  }
  ::close(fd);
  // Frames 1 and 2, bad magic, type 9, sender 7, sender itself, the release, the short header
  // and the one with data: 9. The hello is refused, not counted.
  CHECK(t1->stats().corruptMessages == 9);
  CHECK(t1->stats().messagesReceived == 0);
  CHECK(t1->stats().sharedMemoryMessages == 0);
  bool refusedLogged = false;
  for (const auto& l : *log) refusedLogged = refusedLogged || l.find("not a sealed segment") != std::string::npos;
  CHECK(refusedLogged);
}

TEST_CASE("ucx shm: a hello naming a FIFO is refused without opening it (which would block)",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  auto t1 = make(shmOptions(1, ports, log));
  std::vector<Transport*> ts{t1.get()};
  // A FIFO with a reader and no writer: a blocking open(O_RDONLY) of it waits for a writer forever.
  char dir[] = "/tmp/starling-fifo-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/fifo";
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const auto hello = helloNaming(fd);
  auto refused = [&log] {
    for (const auto& l : *log) {
      if (l.find("is not a regular file") != std::string::npos) return true;
    }
    return false;
  };
  {
    RawClient raw(ts, ports, 1);
    raw.send(hello.data(), hello.size(), {}, kShmAmId);
    auto extra = [&raw] { raw.progress(); };
    CHECK(pumpUntil(ts, refused, in(10s), extra));
  }
  ::close(fd);
  ::unlink(path.c_str());
  ::rmdir(dir);
}


TEST_CASE("ucx shm: after a genuine handshake, descriptors out of bounds or at the wrong segment "
          "are counted and dropped, never read",
          "[runtime][unit][ucx][shm]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  LogDump dump{log};
  auto t1 = make(shmOptions(1, ports, log));
  std::vector<Transport*> ts{t1.get()};
  std::array<uint8_t, 16> token{};
  for (size_t i = 0; i < token.size(); ++i) token[i] = static_cast<uint8_t>(17 * i + 3);
  const int probe = sealedSegment(4096, 1, token);
  const int data = sealedSegment(8192, 2, token);
  const auto hello = helloNaming(probe, token);
  std::vector<std::array<std::byte, 64>> msgs{
      hello,
      frameDescriptor(data, 2, 64, 8192 - 64, 1),          // genuine: the whole data area
      frameDescriptor(data, 2, 64, 8192 - 63, 2),          // one byte past the end
      frameDescriptor(data, 2, 8000, 1000, 3),             // starts inside, ends outside
      frameDescriptor(data, 2, 0, 64, 4),                  // the segment header
      frameDescriptor(data, 2, 64, uint64_t{1} << 63, 5),  // length overflowing offset + length
      frameDescriptor(data, 2, uint64_t{1} << 40, 16, 6),  // far past the end
      frameDescriptor(data, 3, 64, 16, 7),                 // wrong serial for that file
      // Another file claiming serial 2: the cache answers for serial 2, still in bounds.
      frameDescriptor(probe, 2, 64, 16, 8),
      frameDescriptor(99999, 5, 64, 16, 9),                // no such descriptor
  };
  {
    RawClient raw(ts, ports, 1);
    for (auto& m : msgs) raw.send(m.data(), m.size(), {}, kShmAmId);
    auto extra = [&raw] { raw.progress(); };
    REQUIRE(pumpUntil(
        ts, [&] { return raw.idle() && t1->stats().corruptMessages >= 7; }, in(10s), extra));
    pumpFor(ts, 100ms, extra);
  }
  // Rounds 2-7 and 9 rejected; 1 and 8 delivered (8 names serial 2, which is mapped and in bounds:
  // the descriptor's fd is only used to map a serial the receiver has not seen).
  CHECK(t1->stats().corruptMessages == 7);
  CHECK(t1->stats().sharedMemoryMessages == 2);
  Received got;
  t1->recv(0, Tag{1, 0}, in(5s), got.callback());
  REQUIRE(pumpUntil(ts, [&] { return got.calls > 0; }, in(5s)));
  REQUIRE(got.status.isOk());
  CHECK(got.bytes->size() == 8192 - 64);
  CHECK(inMemfdMapping(got.bytes->data()));
  ::close(probe);
  ::close(data);
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
