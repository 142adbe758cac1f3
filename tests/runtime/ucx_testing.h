// Helpers of the UCX transport tests (ucx_transport_test.cc, ucx_shm_test.cc): free ports,
// transports on loopback, message records, a pump that drives several transports from this one
// thread, and a raw UCX client that puts hand-made active messages on the wire.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "transport/auth.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"

namespace starling::transport::ucx_testing {

using namespace std::chrono_literals;
using core::Status;
using core::StatusCode;

// The wire constants of ucx_transport.cc, repeated here on purpose: the test pins the format.
constexpr unsigned kAmId = 0x5354;
constexpr uint32_t kMagic = 0x47534D53;  // "SMSG"

// ---- helpers -------------------------------------------------------------------------------

// `n` distinct ports that were free on 127.0.0.1 a moment ago. They are drawn below the kernel's
// ephemeral range (ip_local_port_range): a port bind(0) handed out could be taken, before the
// transport listens on it, by any UCX worker of a test running beside this one (each binds
// ephemeral ports for its TCP interface): "Address already in use".
inline std::vector<uint16_t> freePorts(size_t n) {
  int ephemeralLow = 32768;
  {
    FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != nullptr) {
      if (std::fscanf(f, "%d", &ephemeralLow) != 1) ephemeralLow = 32768;
      std::fclose(f);
    }
  }
  REQUIRE(ephemeralLow > 12000);
  std::mt19937 pick(std::random_device{}());
  std::vector<uint16_t> ports;
  for (int tries = 0; ports.size() < n && tries < 10000; ++tries) {
    const auto port = static_cast<uint16_t>(
        10000 + static_cast<int>(pick() % static_cast<unsigned>(ephemeralLow - 10000)));
    if (std::find(ports.begin(), ports.end(), port) != ports.end()) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) ports.push_back(port);
    ::close(fd);
  }
  REQUIRE(ports.size() == n);
  return ports;
}

inline std::vector<ucx::PeerAddress> loopback(const std::vector<uint16_t>& ports) {
  std::vector<ucx::PeerAddress> out;
  for (uint16_t p : ports) out.push_back({"127.0.0.1", p});
  return out;
}

// Diagnostics of one transport, kept instead of printed (shown when a check fails).
using LogLines = std::shared_ptr<std::vector<std::string>>;

// Prints the transports' diagnostics when a REQUIRE ends the test early.
struct LogDump {
  LogLines lines;
  ~LogDump() {
    if (std::uncaught_exceptions() == 0) return;
    for (const auto& l : *lines) std::fprintf(stderr, "  log: %s\n", l.c_str());
  }
};

inline ucx::Options options(int rank, const std::vector<uint16_t>& ports, const LogLines& log,
                     std::string tls = "tcp") {
  ucx::Options o;
  o.rank = rank;
  o.addresses = loopback(ports);
  o.tls = std::move(tls);
  o.log = [log](const std::string& line) { log->push_back(line); };
  return o;
}

inline std::unique_ptr<Transport> make(const ucx::Options& o) {
  auto t = ucx::createTransport(o);
  INFO("rank " << o.rank << ": " << t.status().toString());
  REQUIRE(t.isOk());
  return std::move(t).value();
}

inline SharedBytes randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  auto b = std::make_shared<Bytes>(n);
  for (auto& x : *b) x = static_cast<std::byte>(rng() & 0xff);
  return b;
}

// Byte-for-byte comparison with a short report instead of a megabyte dump.
inline bool sameBytes(const SharedBytes& got, const SharedBytes& want) {
  if (!got || !want) return !got && !want;
  if (got->size() != want->size()) {
    UNSCOPED_INFO("sizes differ: got " << got->size() << ", want " << want->size());
    return false;
  }
  auto mm = std::mismatch(got->begin(), got->end(), want->begin());
  if (mm.first != got->end()) {
    UNSCOPED_INFO("first difference at byte " << (mm.first - got->begin()));
    return false;
  }
  return true;
}

struct Received {
  int calls = 0;
  Status status;
  SharedBytes bytes;
  Clock::time_point at{};
  RecvCallback callback() {
    return [this](const Status& st, SharedBytes b) {
      ++calls;
      status = st;
      bytes = std::move(b);
      at = Clock::now();
    };
  }
};

struct Sent {
  int calls = 0;
  Status status;
  Clock::time_point at{};
  SendCallback callback() {
    return [this](const Status& st) {
      ++calls;
      status = st;
      at = Clock::now();
    };
  }
};

// Drives every transport (and `extra`, e.g. a raw UCX worker) in turn, each for a few
// milliseconds, until `pred` holds or `deadline` passes. Returns whether `pred` held.
template <typename Pred>
inline bool pumpUntil(const std::vector<Transport*>& ts, Pred pred, Clock::time_point deadline,
               const std::function<void()>& extra = {}) {
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return false;
    for (Transport* t : ts) {
      auto r = t->progress(Clock::now() + 2ms);
      REQUIRE(r.isOk());
    }
    if (extra) extra();
  }
}

// Drives for `d` whatever happens (to let stray completions or duplicates show up).
inline void pumpFor(const std::vector<Transport*>& ts, std::chrono::milliseconds d,
             const std::function<void()>& extra = {}) {
  (void)pumpUntil(
      ts, [] { return false; }, Clock::now() + d, extra);
}

// Established TCP connections on loopback whose remote end is `port` (the client side of a
// connection to a listener there), read from /proc/net/tcp.
inline int clientConnectionsTo(uint16_t port) {
  FILE* f = std::fopen("/proc/net/tcp", "r");
  if (f == nullptr) return -1;
  char line[512];
  int n = 0;
  (void)std::fgets(line, sizeof line, f);  // column names
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned localAddr = 0, localPort = 0, remoteAddr = 0, remotePort = 0, state = 0;
    if (std::sscanf(line, " %*d: %x:%x %x:%x %x", &localAddr, &localPort, &remoteAddr, &remotePort,
                    &state) == 5 &&
        state == 0x01 && remotePort == port) {
      ++n;
    }
  }
  std::fclose(f);
  return n;
}

inline Clock::time_point in(std::chrono::milliseconds d) { return Clock::now() + d; }

// ---- a raw UCX client, to put hand-made active messages on the wire --------------------------

// Writes the low `n` bytes of `v` little-endian at `at`: how every wire header here is laid out.
inline void putLe(std::byte* at, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

inline std::array<std::byte, 24> header(uint32_t magic, uint32_t sender, uint64_t round,
                                        uint32_t channel) {
  std::array<std::byte, 24> h{};
  putLe(h.data(), magic, 4);
  putLe(h.data() + 4, sender, 4);
  putLe(h.data() + 8, round, 8);
  putLe(h.data() + 16, channel, 4);
  return h;
}

// The bootstrap handshake (ucx_bootstrap.h), written out by hand with a blocking socket: the test
// pins the wire format. Claims rank `from` of `nodes` to rank `to` listening on `port`; with
// `key`, proves it (and checks the server's proof) with session salt `salt`. Returns the
// server's UCX worker address, or empty with `why` set. Runs on its own thread while the caller
// pumps the transports.
inline std::vector<std::byte> bootstrapBlocking(uint16_t port, int from, int to, int nodes,
                                                const auth::ClusterKey* key,
                                                const auth::Nonce& salt, std::string& why) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  auto fail = [&](const std::string& w) {
    why = w;
    ::close(fd);
    return std::vector<std::byte>{};
  };
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return fail("connect");
  auto readAll = [fd](std::byte* p, size_t n) {
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::read(fd, p + got, n - got);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  };
  auto writeAll = [fd](const std::byte* p, size_t n) {
    return ::write(fd, p, n) == static_cast<ssize_t>(n);
  };
  const auto text = [](const char* t) { return std::as_bytes(std::span<const char>(t, std::strlen(t))); };
  std::array<std::byte, 64> hello{};
  putLe(hello.data(), 0x31425453, 4);  // "STB1"
  putLe(hello.data() + 4, 1, 2);
  putLe(hello.data() + 6, key ? 1 : 0, 2);
  putLe(hello.data() + 8, static_cast<uint32_t>(from), 4);
  putLe(hello.data() + 12, static_cast<uint32_t>(to), 4);
  putLe(hello.data() + 16, static_cast<uint32_t>(nodes), 4);
  for (size_t i = 0; i < 16; ++i) hello[24 + i] = static_cast<std::byte>(i * 7 + 1);  // nonce
  std::memcpy(hello.data() + 40, salt.data(), 16);
  std::array<std::byte, 48> challenge{};
  if (!writeAll(hello.data(), hello.size()) || !readAll(challenge.data(), challenge.size())) {
    return fail("hello");
  }
  if (challenge[12] != std::byte{0}) return fail("challenge status " + std::to_string(int(challenge[12])));
  std::array<std::byte, 40> proof{};
  putLe(proof.data(), 0x31425453, 4);
  putLe(proof.data() + 4, 3, 2);
  if (key) {
    const auto k = auth::handshakeKey(*key);
    const auto d = auth::hmac(k, {text("client"), hello, challenge});
    std::memcpy(proof.data() + 8, d.data(), 32);
  }
  std::array<std::byte, 48> welcome{};
  if (!writeAll(proof.data(), proof.size()) || !readAll(welcome.data(), welcome.size())) {
    return fail("proof");
  }
  if (welcome[8] != std::byte{0}) return fail("welcome status " + std::to_string(int(welcome[8])));
  size_t length = 0;
  for (int i = 0; i < 4; ++i) length |= static_cast<size_t>(welcome[12 + i]) << (8 * i);
  std::vector<std::byte> address(length);
  if (!readAll(address.data(), length)) return fail("address");
  ::close(fd);
  return address;
}

class RawClient {
 public:
  // Bootstraps to rank `to` (one of `ports`) as rank `from` while pumping `ts`, then opens a raw
  // UCX endpoint to its worker.
  RawClient(const std::vector<Transport*>& ts, const std::vector<uint16_t>& ports, int to,
            int from = 0, const auth::ClusterKey* key = nullptr, auth::Nonce salt = {}) {
    ucp_config_t* config = nullptr;
    REQUIRE(ucp_config_read(nullptr, nullptr, &config) == UCS_OK);
    REQUIRE(ucp_config_modify(config, "TLS", "tcp") == UCS_OK);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    const ucs_status_t st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    REQUIRE(st == UCS_OK);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    REQUIRE(ucp_worker_create(context_, &wp, &worker_) == UCS_OK);

    std::vector<std::byte> address;
    std::string why;
    std::atomic<bool> done{false};
    std::thread t([&] {
      address = bootstrapBlocking(ports[to], from, to, static_cast<int>(ports.size()), key, salt, why);
      done = true;
    });
    (void)pumpUntil(ts, [&] { return done.load(); }, Clock::now() + 10s);
    t.join();
    INFO("bootstrap: " << why);
    REQUIRE(!address.empty());
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    REQUIRE(ucp_ep_create(worker_, &ep, &ep_) == UCS_OK);
  }
  ~RawClient() {
    if (ep_) {
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &rp);
      if (req != nullptr && !UCS_PTR_IS_ERR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker_);
        ucp_request_free(req);
      }
    }
    for (void* req : pending_) {
      ucp_request_cancel(worker_, req);
      ucp_request_free(req);
    }
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
  }

  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // Posts one active message; the header and payload must outlive its completion.
  void send(const void* hdr, size_t hdrLength, std::span<const std::byte> payload,
            unsigned amId = kAmId) {
    ucp_request_param_t rp{};
    ucs_status_ptr_t req =
        ucp_am_send_nbx(ep_, amId, hdr, hdrLength, payload.data(), payload.size(), &rp);
    REQUIRE_FALSE(UCS_PTR_IS_ERR(req));
    if (req != nullptr) pending_.push_back(req);
  }

  void progress() {
    while (ucp_worker_progress(worker_) != 0) {
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      const ucs_status_t st = ucp_request_check_status(*it);
      if (st == UCS_INPROGRESS) {
        ++it;
        continue;
      }
      CHECK(st == UCS_OK);
      ucp_request_free(*it);
      it = pending_.erase(it);
    }
  }

  bool idle() const { return pending_.empty(); }

 private:
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  std::vector<void*> pending_;
};

// Sends one message each way and checks it arrives intact (used as "still works").
// Returns whether each side's transport vouched for what it received (SharedBytes::intact()):
// {what b got, what a got}.
inline std::array<bool, 2> exchange(Transport& a, Transport& b, Tag tag, size_t size,
                                    uint32_t seed) {
  const SharedBytes ab = randomBytes(size, seed);
  const SharedBytes ba = randomBytes(size, seed + 1);
  Received gotB, gotA;
  Sent sentA, sentB;
  b.recv(a.rank(), tag, in(10s), gotB.callback());
  a.recv(b.rank(), tag, in(10s), gotA.callback());
  a.send(b.rank(), tag, ab, sentA.callback());
  b.send(a.rank(), tag, ba, sentB.callback());
  REQUIRE(pumpUntil(
      {&a, &b}, [&] { return gotA.calls && gotB.calls && sentA.calls && sentB.calls; }, in(10s)));
  CHECK(sentA.status.isOk());
  CHECK(sentB.status.isOk());
  INFO(gotB.status.toString() << " / " << gotA.status.toString());
  REQUIRE(gotB.status.isOk());
  REQUIRE(gotA.status.isOk());
  CHECK(sameBytes(gotB.bytes, ab));
  CHECK(sameBytes(gotA.bytes, ba));
  return {gotB.bytes.intact(), gotA.bytes.intact()};
}

}  // namespace starling::transport::ucx_testing
