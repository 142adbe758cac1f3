// bench-gossip's sockets column: the gossip round over plain TCP sockets, the floor under any TCP
// transport. Each byte is copied twice by the kernel (into the sender's socket buffer, out of the
// receiver's into the frame) and by no one else; the frames, their CRC32C check at the receiver
// and the combine are those of the Starling worker (bench_gossip_worker.cc), so the column says
// what a round costs before any transport's own work. docs/bench_gossip.md reads it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "compression/frame.h"
#include "tools/bench_gossip_round.h"
#include "tools/bench_gossip_worker.h"

namespace starling::bench::gossip {
namespace {

constexpr auto kTimeout = std::chrono::seconds(30);  // every wait of a rank

core::Status sysError(const std::string& what) {
  return core::ioError(what + ": " + std::strerror(errno));
}

// A socket that closes itself.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

core::Result<sockaddr_in> ipv4(const std::string& hostPort) {
  const size_t colon = hostPort.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (colon == std::string::npos ||
      inet_pton(AF_INET, hostPort.substr(0, colon).c_str(), &a.sin_addr) != 1) {
    return core::invalidArgument("sockets column: not an IPv4 host:port: " + hostPort);
  }
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(hostPort.substr(colon + 1))));
  return a;
}

// No Nagle delay (a round's last segment would wait for an acknowledgement) and no blocking.
core::Status prepare(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return sysError("TCP_NODELAY");
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) return sysError("O_NONBLOCK");
  return core::Status::ok();
}

// Milliseconds to `deadline`, for poll; 0 or less once it has passed.
long long msLeft(Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

// Waits for `events` on fd until `deadline`.
core::Status await(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const long long left = msLeft(deadline);
    if (left <= 0) return core::timeout("sockets column: a neighbour did not answer");
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return core::Status::ok();
    if (n < 0 && errno != EINTR) return sysError("poll");
  }
}

// Sends (or receives) all of `bytes` on one socket.
core::Status transferAll(int fd, std::span<std::byte> bytes, bool send,
                         Clock::time_point deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    STARLING_RETURN_IF_ERROR(await(fd, send ? POLLOUT : POLLIN, deadline));
    const ssize_t n = send ? ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL)
                           : ::recv(fd, bytes.data() + done, bytes.size() - done, 0);
    if (n == 0 && !send) return core::unavailable("sockets column: a neighbour closed");
    if (n < 0 && errno != EAGAIN && errno != EINTR) return sysError(send ? "send" : "recv");
    if (n > 0) done += static_cast<size_t>(n);
  }
  return core::Status::ok();
}

// The ring: a socket to the right neighbour (connected) and one from the left (accepted).
core::Result<std::array<Fd, 2>> connectRing(const WorkerOptions& o) {
  const int peers = static_cast<int>(o.addresses.size());
  auto self = ipv4(o.addresses[o.rank]);
  auto right = ipv4(o.addresses[(o.rank + 1) % peers]);
  if (!self) return self.status();
  if (!right) return right.status();
  const auto deadline = Clock::now() + kTimeout;
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  const int one = 1;
  setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&*self), sizeof *self) != 0 ||
      ::listen(listener.get(), 4) != 0) {
    return sysError("sockets column: listening on " + o.addresses[o.rank]);
  }
  std::array<Fd, 2> ring;  // [0] left, [1] right, as the Starling worker's neighbours
  for (;;) {               // the right neighbour may not listen yet
    Fd s(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&*right), sizeof *right) == 0) {
      ring[1] = std::move(s);
      break;
    }
    if (Clock::now() > deadline) return sysError("sockets column: connecting to the right");
    ::usleep(1000);
  }
  STARLING_RETURN_IF_ERROR(await(listener.get(), POLLIN, deadline));
  ring[0] = Fd(::accept(listener.get(), nullptr, nullptr));
  if (ring[0].get() < 0) return sysError("sockets column: accept");
  for (const Fd& s : ring) STARLING_RETURN_IF_ERROR(prepare(s.get()));
  return ring;
}

// Moves `out` to both neighbours and fills `in[s]` from neighbour s, all four at once, until done
// or the deadline. `arrived(s)` runs as soon as in[s] is complete.
template <typename Arrived>
core::Status exchange(const std::array<Fd, 2>& ring, std::span<const std::byte> out,
                      const std::array<std::span<std::byte>, 2>& in, Clock::time_point deadline,
                      Arrived&& arrived) {
  std::array<size_t, 2> sent{}, got{};
  for (;;) {
    std::array<pollfd, 2> p{};
    int waiting = 0;
    for (int s = 0; s < 2; ++s) {
      p[s].fd = ring[s].get();
      p[s].events = static_cast<short>((sent[s] < out.size() ? POLLOUT : 0) |
                                       (got[s] < in[s].size() ? POLLIN : 0));
      waiting += p[s].events != 0;
    }
    if (waiting == 0) return core::Status::ok();
    const long long left = msLeft(deadline);
    if (left <= 0) return core::timeout("sockets column: round past its deadline");
    const int n = ::poll(p.data(), 2, static_cast<int>(left));
    if (n < 0 && errno != EINTR) return sysError("poll");
    for (int s = 0; s < 2 && n > 0; ++s) {
      if ((p[s].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && got[s] < in[s].size()) {
        const ssize_t r = ::recv(p[s].fd, in[s].data() + got[s], in[s].size() - got[s], 0);
        if (r == 0) return core::unavailable("sockets column: a neighbour closed");
        if (r < 0 && errno != EAGAIN && errno != EINTR) return sysError("recv");
        if (r > 0 && (got[s] += static_cast<size_t>(r)) == in[s].size()) {
          STARLING_RETURN_IF_ERROR(arrived(s));
        }
      }
      if ((p[s].revents & POLLOUT) != 0 && sent[s] < out.size()) {
        const ssize_t w = ::send(p[s].fd, out.data() + sent[s], out.size() - sent[s], MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR) return sysError("send");
        if (w > 0) sent[s] += static_cast<size_t>(w);
      }
    }
  }
}

}  // namespace

core::Status runSocketWorker(const WorkerOptions& o) {
  const int peers = static_cast<int>(o.addresses.size());
  auto ring = connectRing(o);
  if (!ring) return ring.status();
  const size_t bytes = compression::denseFrameBytes<float>(o.dim);
  // 8-byte aligned, as decodeDense wants to view a payload in place.
  auto buffer = [bytes] { return std::vector<uint64_t>((bytes + 7) / 8); };
  std::vector<uint64_t> frameStore = buffer();
  std::array<std::vector<uint64_t>, 2> inStore = {buffer(), buffer()};
  const std::span<std::byte> frame(reinterpret_cast<std::byte*>(frameStore.data()), bytes);
  const std::array<std::span<std::byte>, 2> in = {
      std::span<std::byte>(reinterpret_cast<std::byte*>(inStore[0].data()), bytes),
      std::span<std::byte>(reinterpret_cast<std::byte*>(inStore[1].data()), bytes)};
  const std::span<float> x = compression::beginDense<float>(o.dim, frame);
  initialValues(o.rank, x);
  compression::sealFrame(frame);

  std::array<double, kPhases> phases{};
  std::array<std::vector<float>, 2> scratch;
  auto round = [&]() -> core::Status {
    const auto t1 = Clock::now();
    std::array<std::span<const float>, 2> values;
    double verifyS = 0;
    STARLING_RETURN_IF_ERROR(exchange(*ring, frame, in, t1 + kTimeout, [&](int s) {
      const auto v0 = Clock::now();
      auto v = compression::decodeDense<float>(in[s], o.dim, scratch[s]);  // CRC checked
      verifyS += seconds(v0, Clock::now());
      if (!v) return v.status();
      values[s] = *v;
      return core::Status::ok();
    }));
    const auto t2 = Clock::now();
    // Every byte of the frame is in the kernel now: the combine may write it in place.
    combineAndSeal(frame, x, x, values[0], values[1]);
    const auto t3 = Clock::now();
    phases[kExchange] += seconds(t1, t2) - verifyS;
    phases[kVerify] += verifyS;
    phases[kCombine] += seconds(t2, t3);
    return core::Status::ok();
  };

  int done = 0;
  double lastS = 0;
  for (int w = 0; w < o.warmup; ++w, ++done) {
    const auto t0 = Clock::now();
    STARLING_RETURN_IF_ERROR(round());
    lastS = seconds(t0, Clock::now());
  }
  // Rank 0 decides the round count and it travels rightwards around the ring once.
  int32_t rounds = roundsFor(lastS, o);
  const auto deadline = Clock::now() + kTimeout;
  const std::span<std::byte> count(reinterpret_cast<std::byte*>(&rounds), sizeof rounds);
  if (o.rank > 0) STARLING_RETURN_IF_ERROR(transferAll((*ring)[0].get(), count, false, deadline));
  if (o.rank < peers - 1) {
    STARLING_RETURN_IF_ERROR(transferAll((*ring)[1].get(), count, true, deadline));
  }
  for (int s = 0; s < o.settle; ++s, ++done) STARLING_RETURN_IF_ERROR(round());
  phases = {};
  std::vector<double> times;
  for (int t = 0; t < rounds; ++t, ++done) {
    const auto t0 = Clock::now();
    STARLING_RETURN_IF_ERROR(round());
    times.push_back(seconds(t0, Clock::now()));
  }
  const auto timed = phases;
  for (int s = 0; s < o.settle; ++s, ++done) STARLING_RETURN_IF_ERROR(round());

  std::ofstream out(o.out);
  out << "rounds " << rounds << "\nmaxerr " << maxError(peers, o.rank, done, x) << "\nphases";
  for (double p : timed) out << ' ' << p / rounds;
  out << '\n';
  for (double t : times) out << t << '\n';
  out.close();
  return out ? core::Status::ok() : core::ioError("cannot write " + o.out);
}

}  // namespace starling::bench::gossip
