#include "transport/ucx/ucx_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "transport/ucx/ucx_transport_impl.h"

namespace starling::transport::ucx {
namespace detail {

// ---- UCX callbacks -------------------------------------------------------------------------

void sendCallback(void* request, ucs_status_t status, void* userData) {
  std::unique_ptr<SendOp> op(static_cast<SendOp*>(userData));
  UcxTransport* t = op->transport;
  t->onSendComplete(std::move(op), status);
  ucp_request_free(request);
}

void flushCallback(void* request, ucs_status_t status, void* userData) {
  std::unique_ptr<FlushOp> op(static_cast<FlushOp*>(userData));
  // Not handled here: this runs inside ucp_worker_progress, possibly while UCX dispatches the
  // endpoint's pending queue, and onConnected sends the queued messages. A send from there can
  // make UCX purge the very queue it is walking (its assertion "scheduling arbiter group while
  // it's being dispatched" aborted a peer about once in ten starts), so progress() handles the
  // connection once UCX has returned.
  op->transport->connectedLater(*op, status);
  ucp_request_free(request);
}

void recvDataCallback(void* request, ucs_status_t status, size_t length, void* userData) {
  std::unique_ptr<RecvOp> op(static_cast<RecvOp*>(userData));
  UcxTransport* t = op->transport;
  t->onRecvComplete(std::move(op), status, length);
  ucp_request_free(request);
}

ucs_status_t amCallback(void* arg, const void* header, size_t headerLength, void* data,
                        size_t length, const ucp_am_recv_param_t* param) {
  return static_cast<UcxTransport*>(arg)->onActiveMessage(header, headerLength, data, length,
                                                          param);
}

void epErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status) {
  static_cast<UcxTransport*>(arg)->onEndpointError(ep, status);
}

// ---- setup ---------------------------------------------------------------------------------

core::Result<sockaddr_storage> resolve(const PeerAddress& a) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(a.host.c_str(), std::to_string(a.port).c_str(), &hints, &res);
  if (rc != 0) return core::invalidArgument("cannot resolve " + a.toString() + ": " + gai_strerror(rc));
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return out;
}

static bool isLoopback(const sockaddr_storage& s) {
  if (s.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&s)->sin_addr.s_addr) >> 24) == 127;
  }
  if (s.ss_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&s)->sin6_addr);
  }
  return false;
}

std::string numericHost(const sockaddr_storage& s) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (s.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&s)->sin_addr, text, sizeof text);
  } else if (s.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&s)->sin6_addr, text, sizeof text);
  }
  return text;
}

// The network interface of this machine that holds `own` (the loopback interface for any
// loopback address). A peer listens on exactly the address its neighbours reach it at, and UCX's
// own TCP sockets go on that interface alone, never on every interface of the machine. An
// address no interface holds means the peer runs on the wrong host: the error lists what this
// machine has, which is what a user needs to see when a launcher placed a rank elsewhere.
core::Result<std::string> owningInterface(const sockaddr_storage& own, const std::string& describe) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return core::ioError("getifaddrs: " + std::string(std::strerror(errno)));
  std::string found, have;
  const bool loopback = isLoopback(own);
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != own.ss_family) continue;
    sockaddr_storage a{};
    std::memcpy(&a, i->ifa_addr, own.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    have += std::string(have.empty() ? "" : ", ") + i->ifa_name + " " + numericHost(a);
    bool match = false;
    if (loopback) {
      match = (i->ifa_flags & IFF_LOOPBACK) != 0;
    } else if (own.ss_family == AF_INET) {
      match = reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr ==
              reinterpret_cast<const sockaddr_in*>(&own)->sin_addr.s_addr;
    } else {
      match = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr,
                          &reinterpret_cast<const sockaddr_in6*>(&own)->sin6_addr,
                          sizeof(in6_addr)) == 0;
    }
    if (match && found.empty()) found = i->ifa_name;
  }
  freeifaddrs(list);
  if (found.empty()) {
    return core::invalidArgument(describe + " is " + numericHost(own) +
                                 ", which no interface of this machine holds (it has: " +
                                 (have.empty() ? "none" : have) +
                                 "); this rank must run on the host that owns that address");
  }
  return found;
}

socklen_t sockaddrLength(const sockaddr_storage& s) {
  return s.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

core::Status UcxTransport::start() {
  const int n = static_cast<int>(options_.addresses.size());
  if (options_.rank < 0 || options_.rank >= n) {
    return core::invalidArgument("rank " + std::to_string(options_.rank) + " is not in 0.." +
                                 std::to_string(n - 1));
  }
  // Where this peer listens: exactly the address its neighbours reach it at.
  const PeerAddress& self = options_.addresses[options_.rank];
  auto own = resolve(self);
  if (!own) return own.status();
  auto device = owningInterface(*own, "rank " + std::to_string(options_.rank) + "'s address " +
                                          self.toString());
  if (!device) return device.status();
  if (isLoopback(*own)) {
    // A host name that resolves to loopback on its own machine (Debian maps the machine's name to
    // 127.0.1.1) cannot be reached from another host: fail here, naming it, rather than time out.
    for (int r = 0; r < n; ++r) {
      auto other = resolve(options_.addresses[r]);
      if (other && !isLoopback(*other)) {
        return core::invalidArgument(
            "rank " + std::to_string(options_.rank) + "'s address " + self.toString() +
            " resolves to " + numericHost(*own) + " on this machine, a loopback address, but rank " +
            std::to_string(r) + " (" + options_.addresses[r].toString() +
            ") is on another host, which cannot reach it: give this rank an address of a network "
            "interface (or fix the host name's entry in /etc/hosts)");
      }
    }
  }
  ucp_config_t* config = nullptr;
  STARLING_RETURN_IF_ERROR(fromUcs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read"));
  core::Status st = fromUcs(ucp_config_modify(config, "TLS", options_.tls.c_str()),
                            "UCX transports \"" + options_.tls + "\"");
  // UCX's tcp transport opens a listening socket of its own on every network device, the
  // machine's public address included. Keep it on the interface that holds this peer's address
  // (unless the user chose devices with UCX_NET_DEVICES).
  if (st.isOk() && std::getenv("UCX_NET_DEVICES") == nullptr) {
    st = fromUcs(ucp_config_modify(config, "NET_DEVICES", device->c_str()),
                 "UCX_NET_DEVICES=" + *device);
  }
  const bool sharedMemory = options_.tls.find("sysv") != std::string::npos ||
                            options_.tls.find("posix") != std::string::npos ||
                            options_.tls.find("sm") != std::string::npos;
  if (st.isOk() && sharedMemory) {
    // Starling's endpoints use peer-failure error handling, and UCX 1.13 then leaves shared
    // memory out silently (ep_cfg shows am(tcp/lo) only) unless this is on.
    st = fromUcs(ucp_config_modify(config, "MM_ERROR_HANDLING", "y"), "MM_ERROR_HANDLING");
  }
  if (st.isOk() && options_.eagerSends && std::getenv("UCX_RNDV_THRESH") == nullptr) {
    st = fromUcs(ucp_config_modify(config, "RNDV_THRESH", "inf"), "RNDV_THRESH");
  }
  if (st.isOk()) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.name = "starling";
    st = fromUcs(ucp_init(&params, config, &h_.context), "ucp_init");
  }
  ucp_config_release(config);
  STARLING_RETURN_IF_ERROR(st);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  STARLING_RETURN_IF_ERROR(fromUcs(ucp_worker_create(h_.context, &wp, &h_.worker), "ucp_worker_create"));

  ucp_am_handler_param_t am{};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = kAmId;
  am.cb = amCallback;
  am.arg = this;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  STARLING_RETURN_IF_ERROR(fromUcs(ucp_worker_set_am_recv_handler(h_.worker, &am), "AM handler"));
  am.id = kShmAmId;
  am.cb = shmAmCallback;
  STARLING_RETURN_IF_ERROR(
      fromUcs(ucp_worker_set_am_recv_handler(h_.worker, &am), "shared-memory AM handler"));
  if (options_.sharedMemoryFrames) {
    if (auto st = startSharedMemory(); !st.isOk()) {
      log("frames stay on UCX active messages: shared memory unavailable: " + st.message());
    }
  }

  // The bootstrap (ucx_bootstrap.h) hands our worker address to neighbours that connect; UCX's
  // own sockaddr listener is not used.
  ucp_address_t* address = nullptr;
  size_t addressLength = 0;
  STARLING_RETURN_IF_ERROR(
      fromUcs(ucp_worker_get_address(h_.worker, &address, &addressLength), "ucp_worker_get_address"));
  BootstrapConfig bc;
  bc.rank = options_.rank;
  bc.nodes = n;
  bc.key = options_.key.get();
  bc.timeout = options_.connectTimeout;
  bc.log = [this](const std::string& line) { log(line); };
  const auto* a = reinterpret_cast<const std::byte*>(address);
  bc.workerAddress.assign(a, a + addressLength);
  ucp_worker_release_address(h_.worker, address);
  if (bc.workerAddress.size() > kMaxWorkerAddressBytes) {
    return core::internalError("UCX worker address of " + std::to_string(bc.workerAddress.size()) +
                               " bytes");
  }
  // Every start draws its salt (keyed or not): a neighbour tells a restarted process of this
  // rank from the old one by it.
  auth::randomBytes(salt_);
  if (options_.key) {
    session_ = std::make_unique<auth::SessionKey>(*options_.key, static_cast<uint32_t>(options_.rank),
                                                  salt_);
  }
  bc.salt = salt_;
  bootstrap_ = std::make_unique<Bootstrap>(
      io_, std::move(bc), [this](int rank, const auth::Nonce& salt) { onAccepted(rank, salt); });
  STARLING_RETURN_IF_ERROR(bootstrap_->listen(*own, self.toString()));

  int fd = -1;
  STARLING_RETURN_IF_ERROR(fromUcs(ucp_worker_get_efd(h_.worker, &fd), "ucp_worker_get_efd"));
  // The stream descriptor closes what it owns; the worker owns its fd, so hand Asio a duplicate.
  efd_.assign(::dup(fd));
  started_ = true;
  return core::Status::ok();
}

// ---- progress ------------------------------------------------------------------------------

void UcxTransport::maintain(Clock::time_point now) {
  flushReleases();

  for (size_t i = 0; i < peers_.size(); ++i) {
    OutPeer& p = peers_[i];
    const int peer = static_cast<int>(i);
    if (p.errored && p.state != OutPeer::State::kFailed) {
      if (p.ep) closeEndpoint(p.ep, /*force=*/true);
      p.ep = nullptr;
      p.errored = false;
      if (p.state == OutPeer::State::kConnected) {
        failPeer(peer, core::peerGone(describe(peer) + " went away"));
      } else {
        p.state = OutPeer::State::kBackoff;
        p.retryAt = now + kRetryDelay;
      }
    }
    if ((p.state == OutPeer::State::kBackoff || p.state == OutPeer::State::kConnecting) &&
        now >= p.connectDeadline && (!p.unsent.empty() || p.inflight > 0)) {
      // Name the handshake when it is what failed (a connection that was accepted and then
      // broke off, again and again: a peer of another version, or bytes changed on the way).
      std::string why;
      if (p.handshakeFailures > 0 && !p.lastHandshakeError.empty()) {
        why = "; its bootstrap handshake failed " + std::to_string(p.handshakeFailures) +
              (p.handshakeFailures == 1 ? " time" : " times") + ", the last: " +
              p.lastHandshakeError;
      }
      failPeer(peer, core::unavailable("cannot reach " + describe(peer) + " within " +
                                       std::to_string(options_.connectTimeout.count()) + " ms" +
                                       why));
    }
    if (p.state == OutPeer::State::kBackoff && p.inflight == 0 && now >= p.retryAt) {
      if (auto st = connect(peer); !st.isOk()) failPeer(peer, st);
    }
  }

  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const OutPeer& from = peers_[it->first.from];
    if (options_.failReceivesOfLostPeers && from.state == OutPeer::State::kFailed &&
        now >= from.failedAt + kLostPeerGrace) {
      completeRecv(std::move(it->second.done), from.failure);
      it = waitingNodes_.erase(waiting_, it, clearWaiting);
      continue;
    }
    if (it->second.deadline <= now) {
      stats_.timeouts++;
      const int from = it->first.from;
      completeRecv(std::move(it->second.done),
                   core::timeout("no message from " + describe(from) + " for round " +
                                 std::to_string(it->first.tag.round)));
      it = waitingNodes_.erase(waiting_, it, clearWaiting);
    } else {
      ++it;
    }
  }

  reapClosed();
  evictIdle();
}

void UcxTransport::reapClosed() {
  for (auto it = closing_.begin(); it != closing_.end();) {
    if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
      ucp_request_free(*it);
      it = closing_.erase(it);
    } else {
      ++it;
    }
  }
}

void UcxTransport::evictIdle() {
  size_t open = 0;
  for (const auto& p : peers_) open += p.ep != nullptr;
  while (open > options_.maxEndpoints) {
    OutPeer* victim = nullptr;
    for (size_t i = 0; i < peers_.size(); ++i) {
      OutPeer& p = peers_[i];
      // Not idle while the neighbour still reads a frame of ours in shared memory: its release
      // comes back on this connection.
      const bool lending = outbox_ && outbox_->hasReader(static_cast<int>(i));
      if (p.ep && p.state == OutPeer::State::kConnected && p.inflight == 0 && p.unsent.empty() &&
          !lending && (!victim || p.lastUse < victim->lastUse)) {
        victim = &p;
      }
    }
    if (!victim) return;
    closeEndpoint(victim->ep, /*force=*/false);
    victim->ep = nullptr;
    victim->state = OutPeer::State::kIdle;
    --open;
  }
}

Clock::time_point UcxTransport::nextWake(Clock::time_point until) const {
  Clock::time_point wake = until;
  for (const auto& [key, pending] : waiting_) {
    wake = std::min(wake, pending.deadline);
    const OutPeer& from = peers_[key.from];
    if (options_.failReceivesOfLostPeers && from.state == OutPeer::State::kFailed) {
      wake = std::min(wake, from.failedAt + kLostPeerGrace);
    }
  }
  for (const auto& p : peers_) {
    if (p.state == OutPeer::State::kBackoff) wake = std::min(wake, p.retryAt);
    if (p.state == OutPeer::State::kConnecting || p.state == OutPeer::State::kBackoff) {
      wake = std::min(wake, p.connectDeadline);
    }
  }
  return wake;
}

namespace {

// The wait's handler, with its operation's memory in the transport (WaitArena): asio allocates an
// operation per async_wait, and a peer that sleeps every round would allocate every round.
template <typename T>
struct ArenaAllocator {
  using value_type = T;
  WaitArena* arena;
  explicit ArenaAllocator(WaitArena* a) : arena(a) {}
  template <typename U>
  ArenaAllocator(const ArenaAllocator<U>& other) : arena(other.arena) {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(arena->allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t) { arena->deallocate(p); }
  friend bool operator==(const ArenaAllocator& a, const ArenaAllocator& b) {
    return a.arena == b.arena;
  }
};

struct WaitHandler {
  bool* fired;
  WaitArena* arena;
  using allocator_type = ArenaAllocator<void>;
  allocator_type get_allocator() const noexcept { return allocator_type(arena); }
  void operator()(const boost::system::error_code&) const { *fired = true; }
};

}  // namespace

void UcxTransport::waitForEvents(Clock::time_point wake) {
  bool fired = false;
  efd_.async_wait(asio::posix::stream_descriptor::wait_read, WaitHandler{&fired, &waitArena_});
  io_.restart();
  io_.run_one_until(wake);
  if (!fired) {
    efd_.cancel();
    io_.restart();
    io_.poll();  // runs the cancelled handler, which only sets `fired`
  }
}

bool UcxTransport::spin(Clock::time_point until) {
  while (Clock::now() < until) {
    if (ucp_worker_progress(h_.worker) != 0) return true;
    if (!ringSenders_.empty() && pollRings() != 0) return true;
    ::sched_yield();  // on an oversubscribed host, let the neighbour we wait for run
  }
  return false;
}

core::Result<int> UcxTransport::progress(Clock::time_point until) {
  if (!started_) return core::failedPrecondition("transport not started");
  // The caller has sent what it will send together; let the staged frame's buffer go.
  stagedBytes_.reset();
  protected_.source.reset();
  protected_.sent.reset();
  for (;;) {
    while (ucp_worker_progress(h_.worker) != 0) {
    }
    runConnectedLater();
    pollRings();
    // Bootstrap handshakes (their sockets are on io_ with the worker's event fd).
    io_.restart();
    io_.poll();
    const auto now = Clock::now();
    maintain(now);
    if (!ready_.empty()) {
      // Run this batch from storage of its own (a callback may send or receive, queueing more),
      // and keep that storage for the next batch: no allocation per round.
      std::vector<Completion> batch = std::move(spare_);
      batch.clear();
      batch.swap(ready_);
      for (auto& c : batch) c.run();
      const int ran = static_cast<int>(batch.size());
      batch.clear();
      spare_ = std::move(batch);
      return ran;
    }
    if (now >= until) return 0;
    if (spin(std::min(until, now + options_.spin))) continue;
    // Busy polling: back to the top (connection upkeep, timers) and poll on; no sleep.
    if (options_.busyPoll) continue;
    // About to sleep in the kernel: senders with a ring to this rank ring a doorbell from now
    // on. A frame they put in just before is seen by this last look.
    setSleeping(true);
    if (pollRings() != 0) {
      setSleeping(false);
      continue;
    }
    const ucs_status_t armed = ucp_worker_arm(h_.worker);
    if (armed == UCS_ERR_BUSY) {  // events arrived meanwhile: progress again
      setSleeping(false);
      continue;
    }
    if (armed != UCS_OK) {
      setSleeping(false);
      return fromUcs(armed, "ucp_worker_arm");
    }
    waitForEvents(nextWake(until));
    setSleeping(false);
  }
}

void UcxTransport::shutdown() {
  if (h_.worker && outbox_) {
    const auto deadline = Clock::now() + kCloseGrace;
    // A neighbour reaches a segment of ours through /proc/<our pid>/fd, which closes with the
    // outbox: one that has not mapped our last frame yet would find it gone, drop the frame as
    // malformed and wait for it until its deadline. So, within the grace period, the views this
    // rank has let go of go back to their senders, and the frames of ours that live neighbours
    // still hold are waited for (their releases come back on the open connections).
    flushReleases();
    auto lent = [this] {
      for (size_t i = 0; i < peers_.size(); ++i) {
        if (peers_[i].state != OutPeer::State::kFailed && outbox_->hasReader(static_cast<int>(i))) {
          return true;
        }
      }
      return false;
    };
    while (lent() && Clock::now() < deadline) {
      if (ucp_worker_progress(h_.worker) == 0) std::this_thread::yield();
      flushReleases();
    }
  }
  shuttingDown_ = true;
  if (h_.worker) {
    // Close every endpoint with a flush, within a grace period.
    const auto deadline = Clock::now() + kCloseGrace;
    for (auto& p : peers_) {
      if (p.ep) closeEndpoint(p.ep, /*force=*/false);
      p.ep = nullptr;
      p.state = OutPeer::State::kFailed;
      p.unsent.clear();
    }
    while (!closing_.empty() && Clock::now() < deadline) {
      ucp_worker_progress(h_.worker);
      reapClosed();
    }
    // Whatever has not closed by now is released when UCX finishes with it (ucp_request_free on
    // a request in progress), and ucp_worker_destroy tears the endpoints down.
    for (void* req : closing_) ucp_request_free(req);
    closing_.clear();
  }
  ready_.clear();
  if (bootstrap_) bootstrap_->close();
  if (efd_.is_open()) efd_.close();
  if (h_.worker) ucp_worker_destroy(h_.worker);
  if (h_.context) ucp_cleanup(h_.context);
  h_ = {};
}

}  // namespace detail

core::Result<PeerAddress> parseAddress(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return core::invalidArgument("expected host:port, got \"" + text + "\"");
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = text.substr(colon + 1);
  unsigned long value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return core::invalidArgument("bad port in \"" + text + "\"");
    value = value * 10 + static_cast<unsigned long>(c - '0');
    if (value > 65535) return core::invalidArgument("port out of range in \"" + text + "\"");
  }
  if (value == 0) return core::invalidArgument("port 0 in \"" + text + "\"");
  return PeerAddress{host, static_cast<uint16_t>(value)};
}

core::Result<std::unique_ptr<Transport>> createTransport(const Options& options) {
  auto t = std::make_unique<detail::UcxTransport>(options);
  if (auto st = t->start(); !st.isOk()) return st;
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace starling::transport::ucx
