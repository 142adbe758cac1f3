#include "runtime/transport/ucx/ucx_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "runtime/transport/ucx/ucx_status.h"

namespace starling::transport::ucx {
namespace {

namespace asio = boost::asio;

// Active message id of Starling messages, and the header that travels with each.
constexpr unsigned kAmId = 0x5354;
constexpr uint32_t kHeaderMagic = 0x47534D53;  // "SMSG"
constexpr size_t kHeaderBytes = 24;
// Larger messages are refused before any buffer is allocated for them.
constexpr size_t kMaxMessageBytes = size_t{1} << 36;
constexpr auto kRetryDelay = std::chrono::milliseconds(100);
constexpr auto kCloseGrace = std::chrono::seconds(2);

using Header = std::array<std::byte, kHeaderBytes>;

Header encodeHeader(uint32_t sender, Tag tag) {
  Header h{};
  auto put = [&h](size_t off, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) h[off + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
  };
  put(0, kHeaderMagic, 4);
  put(4, sender, 4);
  put(8, tag.round, 8);
  put(16, tag.channel, 4);
  return h;
}

uint64_t getLe(const std::byte* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(std::to_integer<uint8_t>(p[i])) << (8 * i);
  return v;
}

struct MessageKey {
  int from;
  Tag tag;
  friend auto operator<=>(const MessageKey&, const MessageKey&) = default;
};

struct Handle {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_listener_h listener = nullptr;
};

class UcxTransport;

// One send in flight or waiting for a connection.
struct SendOp {
  UcxTransport* transport;
  int peer;
  uint64_t generation;  // of the endpoint it was posted on
  Tag tag;
  Header header;
  SharedBytes bytes;
  SendCallback done;
};

// The flush that tells when a new endpoint's wireup is complete.
struct FlushOp {
  UcxTransport* transport;
  int peer;
  uint64_t generation;
};

// One rendezvous receive in flight.
struct RecvOp {
  UcxTransport* transport;
  MessageKey key;
  std::shared_ptr<Bytes> buffer;
};

// The endpoint this rank sends to one neighbour on, and the sends that wait for it.
struct OutPeer {
  OutPeer() = default;
  OutPeer(OutPeer&&) = default;
  OutPeer(const OutPeer&) = delete;  // so that std::vector moves, never copies, the queue
  enum class State { kIdle, kConnecting, kConnected, kBackoff, kFailed };
  State state = State::kIdle;
  ucp_ep_h ep = nullptr;
  uint64_t generation = 0;
  bool errored = false;  // the error handler fired; close and decide in progress()
  Clock::time_point connectDeadline{};
  Clock::time_point retryAt{};
  uint64_t lastUse = 0;
  size_t inflight = 0;
  std::deque<std::unique_ptr<SendOp>> unsent;
  core::Status failure;
};

struct PendingRecv {
  Clock::time_point deadline;
  RecvCallback done;
};

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(Options options) : options_(std::move(options)), efd_(io_) {
    if (!options_.log) {
      options_.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    }
    peers_.resize(options_.addresses.size());
  }

  ~UcxTransport() override { shutdown(); }

  core::Status start();

  int rank() const override { return options_.rank; }
  void send(int to, Tag tag, SharedBytes bytes, SendCallback done) override;
  void recv(int from, Tag tag, Clock::time_point deadline, RecvCallback done) override;
  core::Result<int> progress(Clock::time_point until) override;
  TransportStats stats() const override { return stats_; }

  // Callbacks from UCX (static trampolines below).
  void onSendComplete(std::unique_ptr<SendOp> op, ucs_status_t status);
  void onConnected(const FlushOp& op, ucs_status_t status);
  ucs_status_t onActiveMessage(const void* header, size_t headerLength, void* data, size_t length,
                               const ucp_am_recv_param_t* param);
  void onRecvComplete(std::unique_ptr<RecvOp> op, ucs_status_t status, size_t length);
  void onConnectionRequest(ucp_conn_request_h request);
  void onEndpointError(ucp_ep_h ep, ucs_status_t status);

 private:
  void log(const std::string& line) {
    options_.log("[rank " + std::to_string(options_.rank) + "] " + line);
  }
  std::string describe(int peer) const {
    return "rank " + std::to_string(peer) + " (" + options_.addresses[peer].toString() + ")";
  }
  void deliver(const MessageKey& key, SharedBytes bytes);
  // Queues the send's completion for the next progress() (callbacks never run inside UCX's).
  void finish(std::unique_ptr<SendOp> op, core::Status status) {
    ready_.push_back([done = std::move(op->done), st = std::move(status)] { done(st); });
  }
  void corrupt(const std::string& why);
  core::Status connect(int peer);
  void post(int peer, std::unique_ptr<SendOp> op);
  void failPeer(int peer, core::Status status);
  void closeEndpoint(ucp_ep_h ep, bool force);
  void maintain(Clock::time_point now);
  void evictIdle();
  void reapClosed();
  Clock::time_point nextWake(Clock::time_point until) const;
  void waitForEvents(Clock::time_point wake);
  void shutdown();

  Options options_;
  Handle h_;
  asio::io_context io_;
  asio::posix::stream_descriptor efd_;

  std::vector<OutPeer> peers_;
  std::set<ucp_ep_h> inbound_;          // endpoints accepted from neighbours' connections
  std::set<ucp_ep_h> erroredInbound_;   // to close in progress()
  std::vector<void*> closing_;          // close requests still in flight
  std::map<MessageKey, std::deque<SharedBytes>> arrived_;
  size_t queuedMessages_ = 0;  // in arrived_
  std::map<MessageKey, PendingRecv> waiting_;
  std::deque<std::function<void()>> ready_;
  TransportStats stats_;
  uint64_t useClock_ = 0;
  bool started_ = false;
  bool shuttingDown_ = false;
};

// ---- UCX callbacks -------------------------------------------------------------------------

void sendCallback(void* request, ucs_status_t status, void* userData) {
  std::unique_ptr<SendOp> op(static_cast<SendOp*>(userData));
  UcxTransport* t = op->transport;
  t->onSendComplete(std::move(op), status);
  ucp_request_free(request);
}

void flushCallback(void* request, ucs_status_t status, void* userData) {
  std::unique_ptr<FlushOp> op(static_cast<FlushOp*>(userData));
  op->transport->onConnected(*op, status);
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

void connCallback(ucp_conn_request_h request, void* arg) {
  static_cast<UcxTransport*>(arg)->onConnectionRequest(request);
}

void epErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status) {
  static_cast<UcxTransport*>(arg)->onEndpointError(ep, status);
}

// ---- setup ---------------------------------------------------------------------------------

core::Result<sockaddr_storage> resolve(const PeerAddress& a, bool forListening) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(a.host.c_str(), std::to_string(a.port).c_str(), &hints, &res);
  if (rc != 0) return core::invalidArgument("cannot resolve " + a.toString() + ": " + gai_strerror(rc));
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (forListening) {
    // A loopback address listens on loopback only; any other address listens on every interface
    // (the peers reach it by the name in the scenario, which may be one of several).
    if (out.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&out);
      if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) in->sin_addr.s_addr = htonl(INADDR_ANY);
    } else if (out.ss_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&out);
      if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) in6->sin6_addr = in6addr_any;
    }
  }
  return out;
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
  ucp_config_t* config = nullptr;
  STARLING_RETURN_IF_ERROR(fromUcs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read"));
  core::Status st = fromUcs(ucp_config_modify(config, "TLS", options_.tls.c_str()),
                            "UCX transports \"" + options_.tls + "\"");
  const bool sharedMemory = options_.tls.find("sysv") != std::string::npos ||
                            options_.tls.find("posix") != std::string::npos ||
                            options_.tls.find("sm") != std::string::npos;
  if (st.isOk() && sharedMemory) {
    // Starling's endpoints use peer-failure error handling, and UCX 1.13 then leaves shared
    // memory out silently (ep_cfg shows am(tcp/lo) only) unless this is on.
    st = fromUcs(ucp_config_modify(config, "MM_ERROR_HANDLING", "y"), "MM_ERROR_HANDLING");
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

  auto own = resolve(options_.addresses[options_.rank], /*forListening=*/true);
  if (!own) return own.status();
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*own);
  lp.sockaddr.addrlen = sockaddrLength(*own);
  lp.conn_handler.cb = connCallback;
  lp.conn_handler.arg = this;
  STARLING_RETURN_IF_ERROR(fromUcs(ucp_listener_create(h_.worker, &lp, &h_.listener),
                                   "listen on " + options_.addresses[options_.rank].toString()));

  int fd = -1;
  STARLING_RETURN_IF_ERROR(fromUcs(ucp_worker_get_efd(h_.worker, &fd), "ucp_worker_get_efd"));
  // The stream descriptor closes what it owns; the worker owns its fd, so hand Asio a duplicate.
  efd_.assign(::dup(fd));
  started_ = true;
  return core::Status::ok();
}

// ---- sending -------------------------------------------------------------------------------

core::Status UcxTransport::connect(int peer) {
  OutPeer& p = peers_[peer];
  auto addr = resolve(options_.addresses[peer], /*forListening=*/false);
  if (!addr) return addr.status();
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*addr);
  ep.sockaddr.addrlen = sockaddrLength(*addr);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = epErrorCallback;
  ep.err_handler.arg = this;
  ucp_ep_h handle = nullptr;
  STARLING_RETURN_IF_ERROR(fromUcs(ucp_ep_create(h_.worker, &ep, &handle), "connect to " + describe(peer)));
  p.ep = handle;
  p.errored = false;
  p.generation++;
  p.state = OutPeer::State::kConnecting;
  // Sends wait until the flush completes, i.e. until wireup has settled on its final lanes.
  // Posting them earlier trips a UCX 1.13 bug over shared memory: requests queued during wireup
  // keep the thresholds of the first (TCP) configuration and are then replayed on the shared
  // memory lane as "short" messages larger than it allows ("Invalid am_short_iov length: 164
  // (expected: <= 100)"); 8 peers on a one-peer-exponential schedule failed 5 runs of 6.
  auto op = std::make_unique<FlushOp>(FlushOp{this, peer, p.generation});
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.send = flushCallback;
  rp.user_data = op.get();
  ucs_status_ptr_t req = ucp_ep_flush_nbx(handle, &rp);
  if (req == nullptr) {
    onConnected(*op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(req)) {
    onConnected(*op, UCS_PTR_STATUS(req));
  } else {
    op.release();
  }
  return core::Status::ok();
}

void UcxTransport::onConnected(const FlushOp& op, ucs_status_t status) {
  OutPeer& p = peers_[op.peer];
  if (shuttingDown_ || op.generation != p.generation || p.state != OutPeer::State::kConnecting ||
      p.ep == nullptr) {
    return;
  }
  if (status != UCS_OK) {
    p.errored = true;  // maintain() closes the endpoint and retries or gives up
    return;
  }
  p.state = OutPeer::State::kConnected;
  while (!p.unsent.empty() && p.state == OutPeer::State::kConnected) {
    auto next = std::move(p.unsent.front());
    p.unsent.pop_front();
    post(op.peer, std::move(next));
  }
}

void UcxTransport::send(int to, Tag tag, SharedBytes bytes, SendCallback done) {
  if (to < 0 || to >= static_cast<int>(peers_.size()) || to == options_.rank) {
    ready_.push_back([done = std::move(done), to] {
      done(core::invalidArgument("cannot send to rank " + std::to_string(to)));
    });
    return;
  }
  OutPeer& p = peers_[to];
  p.lastUse = ++useClock_;
  auto op = std::make_unique<SendOp>(SendOp{this, to, 0, tag, encodeHeader(options_.rank, tag),
                                            std::move(bytes), std::move(done)});
  switch (p.state) {
    case OutPeer::State::kFailed:
      finish(std::move(op), p.failure);
      return;
    case OutPeer::State::kIdle: {
      p.connectDeadline = Clock::now() + options_.connectTimeout;
      if (auto st = connect(to); !st.isOk()) {
        failPeer(to, st);
        finish(std::move(op), p.failure);
        return;
      }
      if (p.state == OutPeer::State::kConnected) {
        post(to, std::move(op));
      } else {
        p.unsent.push_back(std::move(op));
      }
      return;
    }
    case OutPeer::State::kBackoff:
    case OutPeer::State::kConnecting:
      p.unsent.push_back(std::move(op));
      return;
    case OutPeer::State::kConnected:
      post(to, std::move(op));
      return;
  }
}

void UcxTransport::post(int peer, std::unique_ptr<SendOp> op) {
  OutPeer& p = peers_[peer];
  op->generation = p.generation;
  const size_t size = op->bytes->size();
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.send = sendCallback;
  SendOp* raw = op.get();
  rp.user_data = raw;
  ucs_status_ptr_t req = ucp_am_send_nbx(p.ep, kAmId, raw->header.data(), raw->header.size(),
                                         raw->bytes->data(), size, &rp);
  if (req == nullptr) {
    onSendComplete(std::move(op), UCS_OK);
  } else if (UCS_PTR_IS_ERR(req)) {
    onSendComplete(std::move(op), UCS_PTR_STATUS(req));
  } else {
    p.inflight++;
    op.release();  // owned by the request until sendCallback
  }
}

void UcxTransport::onSendComplete(std::unique_ptr<SendOp> op, ucs_status_t status) {
  OutPeer& p = peers_[op->peer];
  if (p.inflight > 0) p.inflight--;
  if (status == UCS_OK) {
    stats_.messagesSent++;
    stats_.bytesSent += op->bytes->size();
    finish(std::move(op), core::Status::ok());
    return;
  }
  if (p.state == OutPeer::State::kFailed) {
    finish(std::move(op), p.failure);
  } else if (p.state != OutPeer::State::kConnected && Clock::now() < p.connectDeadline) {
    // The neighbour is not listening yet: close this endpoint and try again after a pause.
    if (op->generation == p.generation && p.ep) p.errored = true;
    p.unsent.push_front(std::move(op));
  } else if (p.state == OutPeer::State::kConnected) {
    failPeer(op->peer, core::peerGone(describe(op->peer) + " went away: " + ucs_status_string(status)));
    finish(std::move(op), p.failure);
  } else {
    failPeer(op->peer, core::unavailable("cannot reach " + describe(op->peer) + " within " +
                                         std::to_string(options_.connectTimeout.count()) +
                                         " ms: " + ucs_status_string(status)));
    finish(std::move(op), p.failure);
  }
}

void UcxTransport::failPeer(int peer, core::Status status) {
  OutPeer& p = peers_[peer];
  if (p.state == OutPeer::State::kFailed) return;
  log(status.message());
  p.state = OutPeer::State::kFailed;
  p.failure = std::move(status);
  if (p.ep) {
    closeEndpoint(p.ep, /*force=*/true);
    p.ep = nullptr;
  }
  while (!p.unsent.empty()) {
    finish(std::move(p.unsent.front()), p.failure);
    p.unsent.pop_front();
  }
}

void UcxTransport::onEndpointError(ucp_ep_h ep, ucs_status_t status) {
  for (auto& p : peers_) {
    if (p.ep == ep) {
      p.errored = true;
      return;
    }
  }
  if (inbound_.count(ep)) {
    // A neighbour closed (or lost) its connection to us; its absence shows up as receive
    // deadlines, which name it. Just release the endpoint.
    erroredInbound_.insert(ep);
    (void)status;
  }
}

void UcxTransport::closeEndpoint(ucp_ep_h ep, bool force) {
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &rp);
  if (req != nullptr && !UCS_PTR_IS_ERR(req)) closing_.push_back(req);
}

// ---- receiving -----------------------------------------------------------------------------

void UcxTransport::corrupt(const std::string& why) {
  stats_.corruptMessages++;
  log("dropped a malformed message: " + why);
}

ucs_status_t UcxTransport::onActiveMessage(const void* header, size_t headerLength, void* data,
                                           size_t length, const ucp_am_recv_param_t* param) {
  if (headerLength != kHeaderBytes || header == nullptr) {
    corrupt("header of " + std::to_string(headerLength) + " bytes, expected " +
            std::to_string(kHeaderBytes));
    return UCS_OK;
  }
  const auto* h = static_cast<const std::byte*>(header);
  const uint64_t sender = getLe(h + 4, 4);
  if (getLe(h, 4) != kHeaderMagic || getLe(h + 20, 4) != 0) {
    corrupt("bad header magic");
    return UCS_OK;
  }
  if (sender >= peers_.size() || static_cast<int>(sender) == options_.rank) {
    corrupt("unknown sender rank " + std::to_string(sender));
    return UCS_OK;
  }
  if (length > kMaxMessageBytes) {
    corrupt(std::to_string(length) + " bytes from rank " + std::to_string(sender));
    return UCS_OK;
  }
  const MessageKey key{static_cast<int>(sender),
                       Tag{getLe(h + 8, 8), static_cast<uint32_t>(getLe(h + 16, 4))}};
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    // Rendezvous: receive straight into the buffer the decoder will read.
    auto op = std::make_unique<RecvOp>(RecvOp{this, key, std::make_shared<Bytes>(length)});
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.recv_am = recvDataCallback;
    rp.user_data = op.get();
    ucs_status_ptr_t req = ucp_am_recv_data_nbx(h_.worker, data, op->buffer->data(), length, &rp);
    if (req == nullptr) {
      onRecvComplete(std::move(op), UCS_OK, length);
    } else if (UCS_PTR_IS_ERR(req)) {
      onRecvComplete(std::move(op), UCS_PTR_STATUS(req), 0);
    } else {
      op.release();
    }
    return UCS_OK;
  }
  auto bytes = std::make_shared<Bytes>(length);
  if (length) std::memcpy(bytes->data(), data, length);
  deliver(key, std::move(bytes));
  return UCS_OK;
}

void UcxTransport::onRecvComplete(std::unique_ptr<RecvOp> op, ucs_status_t status, size_t length) {
  if (status != UCS_OK || length != op->buffer->size()) {
    corrupt("rendezvous receive from rank " + std::to_string(op->key.from) + " failed: " +
            ucs_status_string(status));
    return;
  }
  deliver(op->key, std::move(op->buffer));
}

void UcxTransport::deliver(const MessageKey& key, SharedBytes bytes) {
  stats_.messagesReceived++;
  stats_.bytesReceived += bytes->size();
  if (auto it = waiting_.find(key); it != waiting_.end()) {
    ready_.push_back([cb = std::move(it->second.done), b = std::move(bytes)]() mutable {
      cb(core::Status::ok(), std::move(b));
    });
    waiting_.erase(it);
  } else if (queuedMessages_ >= kMaxQueuedMessages) {
    corrupt("more than " + std::to_string(kMaxQueuedMessages) + " unclaimed messages; dropped one "
            "from rank " + std::to_string(key.from) + " for round " + std::to_string(key.tag.round));
  } else if (auto& queue = arrived_[key]; queue.size() < kMaxQueuedPerKey) {
    queue.push_back(std::move(bytes));
    queuedMessages_++;
  } else {
    corrupt("more than " + std::to_string(kMaxQueuedPerKey) + " messages from rank " +
            std::to_string(key.from) + " for round " + std::to_string(key.tag.round));
  }
}

void UcxTransport::recv(int from, Tag tag, Clock::time_point deadline, RecvCallback done) {
  if (from < 0 || from >= static_cast<int>(peers_.size()) || from == options_.rank) {
    ready_.push_back([cb = std::move(done), from] {
      cb(core::invalidArgument("cannot receive from rank " + std::to_string(from)), nullptr);
    });
    return;
  }
  const MessageKey key{from, tag};
  if (auto it = arrived_.find(key); it != arrived_.end()) {
    ready_.push_back([cb = std::move(done), b = std::move(it->second.front())]() mutable {
      cb(core::Status::ok(), std::move(b));
    });
    it->second.pop_front();
    queuedMessages_--;
    if (it->second.empty()) arrived_.erase(it);
    return;
  }
  if (waiting_.count(key) == 0) {
    waiting_.emplace(key, PendingRecv{deadline, std::move(done)});
  } else {
    // One receive per key at a time; the second completes at once, with an error.
    ready_.push_back([cb = std::move(done), from, round = tag.round] {
      cb(core::failedPrecondition("a receive from rank " + std::to_string(from) + " for round " +
                                  std::to_string(round) + " is already pending"),
         nullptr);
    });
  }
}

void UcxTransport::onConnectionRequest(ucp_conn_request_h request) {
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.conn_request = request;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = epErrorCallback;
  ep.err_handler.arg = this;
  ucp_ep_h handle = nullptr;
  const ucs_status_t st = ucp_ep_create(h_.worker, &ep, &handle);
  if (st != UCS_OK) {
    log(std::string("could not accept a connection: ") + ucs_status_string(st));
    return;
  }
  inbound_.insert(handle);
}

// ---- progress ------------------------------------------------------------------------------

void UcxTransport::maintain(Clock::time_point now) {
  for (ucp_ep_h ep : erroredInbound_) {
    inbound_.erase(ep);
    closeEndpoint(ep, /*force=*/true);
  }
  erroredInbound_.clear();

  for (size_t i = 0; i < peers_.size(); ++i) {
    OutPeer& p = peers_[i];
    const int peer = static_cast<int>(i);
    if (p.errored && p.ep && p.state != OutPeer::State::kFailed) {
      closeEndpoint(p.ep, /*force=*/true);
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
      failPeer(peer, core::unavailable("cannot reach " + describe(peer) + " within " +
                                       std::to_string(options_.connectTimeout.count()) + " ms"));
    }
    if (p.state == OutPeer::State::kBackoff && p.inflight == 0 && now >= p.retryAt) {
      if (auto st = connect(peer); !st.isOk()) failPeer(peer, st);
    }
  }

  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second.deadline <= now) {
      stats_.timeouts++;
      const int from = it->first.from;
      ready_.push_back([cb = std::move(it->second.done), msg = "no message from " + describe(from) +
                                                                 " for round " +
                                                                 std::to_string(it->first.tag.round)] {
        cb(core::timeout(msg), nullptr);
      });
      it = waiting_.erase(it);
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
    for (auto& p : peers_) {
      if (p.ep && p.state == OutPeer::State::kConnected && p.inflight == 0 && p.unsent.empty() &&
          (!victim || p.lastUse < victim->lastUse)) {
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
  for (const auto& [key, pending] : waiting_) wake = std::min(wake, pending.deadline);
  for (const auto& p : peers_) {
    if (p.state == OutPeer::State::kBackoff) wake = std::min(wake, p.retryAt);
    if (p.state == OutPeer::State::kConnecting || p.state == OutPeer::State::kBackoff) {
      wake = std::min(wake, p.connectDeadline);
    }
  }
  return wake;
}

void UcxTransport::waitForEvents(Clock::time_point wake) {
  bool fired = false;
  efd_.async_wait(asio::posix::stream_descriptor::wait_read,
                  [&fired](const boost::system::error_code&) { fired = true; });
  io_.restart();
  io_.run_one_until(wake);
  if (!fired) {
    efd_.cancel();
    io_.restart();
    io_.poll();  // runs the cancelled handler, which only sets `fired`
  }
}

core::Result<int> UcxTransport::progress(Clock::time_point until) {
  if (!started_) return core::failedPrecondition("transport not started");
  for (;;) {
    while (ucp_worker_progress(h_.worker) != 0) {
    }
    const auto now = Clock::now();
    maintain(now);
    if (!ready_.empty()) {
      std::deque<std::function<void()>> batch;
      batch.swap(ready_);
      for (auto& fn : batch) fn();
      return static_cast<int>(batch.size());
    }
    if (now >= until) return 0;
    const ucs_status_t armed = ucp_worker_arm(h_.worker);
    if (armed == UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress again
    if (armed != UCS_OK) return fromUcs(armed, "ucp_worker_arm");
    waitForEvents(nextWake(until));
  }
}

void UcxTransport::shutdown() {
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
    for (ucp_ep_h ep : inbound_) closeEndpoint(ep, /*force=*/false);
    inbound_.clear();
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
  if (efd_.is_open()) efd_.close();
  if (h_.listener) ucp_listener_destroy(h_.listener);
  if (h_.worker) ucp_worker_destroy(h_.worker);
  if (h_.context) ucp_cleanup(h_.context);
  h_ = {};
}

}  // namespace

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
  auto t = std::make_unique<UcxTransport>(options);
  if (auto st = t->start(); !st.isOk()) return st;
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace starling::transport::ucx
