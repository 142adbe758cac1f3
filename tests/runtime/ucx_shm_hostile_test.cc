// Tests of the UCX transport's shared-memory frames against hostile input from a raw UCX client
// posing as a same-host neighbour: forged handshakes, descriptors and releases, a hello naming a
// FIFO, and descriptors out of bounds or at the wrong segment after a genuine handshake are
// counted and dropped, never read (ucx_shm_test.cc has the rest; the two files make one
// executable).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/runtime/ucx_shm_testing.h"

namespace starling::transport {
namespace {

using namespace ucx_testing;

constexpr unsigned kShmAmId = 0x5355;  // the wire constants of ucx_transport_impl.h, pinned here
constexpr uint32_t kShmMagic = 0x4D485353;

// Writes `v` into a shared-memory message header at `off` (n bytes, little-endian).
void put(std::array<std::byte, 64>& h, size_t off, uint64_t v, size_t n) { putLe(h.data() + off, v, n); }

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

}  // namespace
}  // namespace starling::transport
