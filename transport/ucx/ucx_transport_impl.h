// Internal to transport/ucx: the UCX transport's class and the records of its operations,
// shared by ucx_transport.cc (setup, progress, shutdown), ucx_endpoints.cc (connections and sends)
// and ucx_receive.cc (active messages in, matching). See ucx_transport.h for the contract.
#pragma once

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "transport/auth.h"
#include "transport/buffer_pool.h"
#include "transport/recycling.h"
#include "transport/ucx/ucx_bootstrap.h"
#include "transport/ucx/ucx_shm.h"
#include "transport/ucx/ucx_status.h"
#include "transport/ucx/ucx_transport.h"

namespace starling::transport::ucx::detail {


namespace asio = boost::asio;

// Active message id of Starling messages, and the header that travels with each.
constexpr unsigned kAmId = 0x5354;
constexpr uint32_t kHeaderMagic = 0x47534D53;  // "SMSG"
constexpr size_t kHeaderBytes = 24;
// With a cluster key every header (model messages and shared-memory messages alike) carries this
// trailer (auth.h): the sender's message counter (8), the payload's tag (16; zero for messages
// without a payload), the header's tag (16) and 8 reserved zero bytes.
constexpr size_t kAuthTrailerBytes = 48;
// Larger messages are refused before any buffer is allocated for them.
constexpr size_t kMaxMessageBytes = size_t{1} << 36;
constexpr auto kRetryDelay = std::chrono::milliseconds(100);
constexpr auto kCloseGrace = std::chrono::seconds(2);

using Header = std::array<std::byte, kHeaderBytes + kAuthTrailerBytes>;

// The shared-memory path's messages (ucx_shm.h): header-only active messages on their own id.
// Layout, little-endian: magic (4), type (4), sender rank (4), then by type:
//   kHello:   pid (4) @12, token (16) @16, boot id (16) @32, probe fd (4) @48, probe serial (8) @52,
//             fd of the sender's small-frame ring for the receiver, or -1 (4) @60
//   kAck:     bit 0: segments accepted, bit 1: ring mapped (4) @12
//   kDoorbell: nothing (a frame is in the ring of a receiver that was about to sleep)
//   kFrame:   fd (4) @12, round (8) @16, channel (4) @24, serial (8) @32, offset (8) @40,
//             length (8) @48, serial of a frame of the receiver's that the sender released, or
//             0 (8) @56
//   kRelease: serial (8) @32
constexpr unsigned kShmAmId = 0x5355;
constexpr uint32_t kShmMagic = 0x4D485353;  // "SSHM"
constexpr size_t kShmHeaderBytes = 64;
enum class ShmType : uint32_t { kHello = 1, kAck = 2, kFrame = 3, kRelease = 4, kDoorbell = 5 };
// Room for the header and, with a key, its trailer; the bytes sent are amHeaderBytes() or
// shmHeaderBytes() of it.
using ShmHeader = std::array<std::byte, kShmHeaderBytes + kAuthTrailerBytes>;


inline ShmHeader shmHeader(ShmType type, uint32_t sender) {
  ShmHeader h{};
  putLe(h.data(), kShmMagic, 4);
  putLe(h.data() + 4, static_cast<uint32_t>(type), 4);
  putLe(h.data() + 8, sender, 4);
  return h;
}

inline Header encodeHeader(uint32_t sender, Tag tag) {
  Header h{};
  putLe(h.data(), kHeaderMagic, 4);
  putLe(h.data() + 4, sender, 4);
  putLe(h.data() + 8, tag.round, 8);
  putLe(h.data() + 16, tag.channel, 4);
  return h;
}

struct MessageKey {
  int from;
  Tag tag;
  friend auto operator<=>(const MessageKey&, const MessageKey&) = default;
};

struct Handle {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
};

class UcxTransport;

// One send in flight or waiting for a connection.
struct SendOp {
  STARLING_RECYCLED(SendOp)
  UcxTransport* transport;
  int peer;
  uint64_t generation;  // of the endpoint it was posted on
  Tag tag;
  Header header;
  SharedBytes bytes;
  SendCallback done;
  // A shared-memory control message (hello, ack, release): `shm` is all that travels, and
  // nothing reports its completion.
  bool control = false;
  // Set when the frame went into shared memory: only this descriptor travels.
  bool viaShm = false;
  // With a key and no encryption: the payload's tag is still to be computed (only an active
  // message needs it; ucx_auth.cc).
  bool payloadTagPending = false;
  uint64_t segment = 0;
  ShmHeader shm{};
};

// What this rank knows of a neighbour that sends to it through shared memory.
struct InPeer {
  bool mapped = false;  // its hello checked out: its frames may arrive as segments
  uint32_t pid = 0;
  Token token{};
  SegmentCache cache;
  // Its ring of small frames for this rank (mapped from its hello), and which one it is.
  std::shared_ptr<MappedRing> ring;
  int32_t ringFd = -1;
  uint32_t ringPid = 0;
  // The salt of its process (bootstrap Hello): another salt is another start of that rank.
  auth::Nonce salt{};
  bool known = false;
  // With a key: its session (from its last bootstrap handshake) and the counters seen in it.
  std::unique_ptr<auth::SessionKey> session;
  auth::ReplayWindow window;
};

// The flush that tells when a new endpoint's wireup is complete.
struct FlushOp {
  UcxTransport* transport;
  int peer;
  uint64_t generation;
};

// One rendezvous receive in flight.
struct RecvOp {
  STARLING_RECYCLED(RecvOp)
  UcxTransport* transport;
  MessageKey key;
  std::shared_ptr<Bytes> buffer;
  // With a key: the payload's counter and tag, checked once the bytes are in.
  uint64_t counter = 0;
  auth::Mac payloadTag{};
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
  // The first bytes of the salt of the process that the last handshake reached (ucx_bootstrap.h).
  SaltPrefix listenerSalt{};
  Clock::time_point connectDeadline{};
  Clock::time_point retryAt{};
  uint64_t lastUse = 0;
  size_t inflight = 0;
  bool mapped = false;  // the neighbour accepted our hello: large frames go through shared memory
  // Small frames for this neighbour (kept across reconnections to the same process), and
  // whether the neighbour mapped it (its ack).
  std::unique_ptr<OutRing> ring;
  bool ringMapped = false;
  std::deque<std::unique_ptr<SendOp>> unsent;
  core::Status failure;
  Clock::time_point failedAt{};
  // Handshakes that broke off since the last connection (each is retried until the connect
  // deadline), and the last one's reason: named when the deadline passes.
  uint64_t handshakeFailures = 0;
  std::string lastHandshakeError;
};

// Memory for the one wait operation in flight at a time (waitForEvents); a larger or second
// request falls back to the heap.
class WaitArena {
 public:
  void* allocate(size_t n) {
    if (!used_ && n <= sizeof(block_)) {
      used_ = true;
      return block_;
    }
    return ::operator new(n);
  }
  void deallocate(void* p) {
    if (p == block_) {
      used_ = false;
    } else {
      ::operator delete(p);
    }
  }

 private:
  alignas(std::max_align_t) std::byte block_[512];
  bool used_ = false;
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
    senders_.resize(options_.addresses.size());
  }

  ~UcxTransport() override { shutdown(); }

  core::Status start();

  int rank() const override { return options_.rank; }
  void send(int to, Tag tag, SharedBytes bytes, SendCallback done) override;
  void recv(int from, Tag tag, Clock::time_point deadline, RecvCallback done) override;
  core::Result<int> progress(Clock::time_point until) override;
  TransportStats stats() const override {
    TransportStats s = stats_;
    if (bootstrap_) s.rejectedConnections = bootstrap_->refused() + bootstrap_->rejected();
    for (const auto& p : peers_) s.openEndpoints += p.ep != nullptr;
    return s;
  }
  std::optional<OutgoingMessage> allocate(size_t size) override;
  void revive(int peer) override;
  void ping(int peer, Clock::time_point deadline, PingCallback done) override;

  // Callbacks from UCX (static trampolines below).
  void onSendComplete(std::unique_ptr<SendOp> op, ucs_status_t status);
  void onConnected(const FlushOp& op, ucs_status_t status);
  // A connection's flush completed inside ucp_worker_progress: onConnected runs from
  // runConnectedLater(), which progress() calls once UCX has returned (ucx_transport.cc).
  void connectedLater(const FlushOp& op, ucs_status_t status);
  void runConnectedLater();
  std::vector<std::pair<FlushOp, ucs_status_t>> connectedLater_;
  ucs_status_t onActiveMessage(const void* header, size_t headerLength, void* data, size_t length,
                               const ucp_am_recv_param_t* param);
  ucs_status_t onShmMessage(const void* header, size_t headerLength, size_t length);
  void onRecvComplete(std::unique_ptr<RecvOp> op, ucs_status_t status, size_t length);
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
    completeSend(std::move(op->done), std::move(status));
  }
  // Queue a completion for the next progress(). Typed rather than a std::function: a round
  // queues a handful, and a closure holding a callback and a message would allocate each time.
  void completeSend(SendCallback done, core::Status status) {
    ready_.push_back(Completion{std::move(done), nullptr, std::move(status), nullptr});
  }
  void completeRecv(RecvCallback done, core::Status status, SharedBytes bytes = nullptr) {
    ready_.push_back(Completion{nullptr, std::move(done), std::move(status), std::move(bytes)});
  }
  void corrupt(const std::string& why);
  core::Status connect(int peer);
  void onBootstrapped(int peer, uint64_t generation, const core::Status& st, WorkerAddress address);
  void onAccepted(int rank, const auth::Nonce& salt);
  // A new process of `rank` connected: what this rank knew of the old one goes (its endpoint, a
  // failure, its queued messages, its shared-memory mappings).
  // `confirmedLater`: the restart is confirmed after the new process's hello (confirmRestart),
  // so what arrived since is the new process's; `oldPid`: the process whose shared memory this
  // rank read when that hello came.
  void onRestarted(int rank, bool confirmedLater = false, uint32_t oldPid = 0);
  // Without a key, a hello with a new salt from a rank that has not failed here is taken for a
  // restart only once the rank's own address answers with that salt (its old process is gone:
  // the new one listens there); a stranger's claim cannot pass this while the rank lives.
  void confirmRestart(int rank, const auth::Nonce& salt);
  // Authentication (ucx_auth.cc). Sizes of the headers that travel.
  size_t amHeaderBytes() const { return options_.key ? kHeaderBytes + kAuthTrailerBytes : kHeaderBytes; }
  size_t shmHeaderBytes() const {
    return options_.key ? kShmHeaderBytes + kAuthTrailerBytes : kShmHeaderBytes;
  }
  // Writes the counter and payload tag of what `op` sends into its header's trailer (computed
  // once per message and tag, whatever the fan-out); with `encrypt`, op.bytes becomes the
  // ciphertext.
  void protect(SendOp& op);
  // Puts the payload's tag into the header of a message that goes out as an active message.
  void payloadTagFor(SendOp& op);
  // Writes the header tag into the trailer of `header` (`bytes` long with it, its counter and
  // payload tag already in place) for receiver `to` and a payload of `length` bytes.
  void sign(std::byte* header, size_t bytes, int to, uint64_t length);
  // Checks a received header's trailer; on success returns the counter and payload tag.
  bool verifyHeader(int sender, const std::byte* header, size_t bytes, uint64_t length,
                    uint64_t& counter, auth::Mac& payloadTag, const char* what);
  // Checks a payload (with `encrypt`: decrypts it into `plain`, a new buffer) and records its
  // counter; false (counted and logged) when it does not verify or was seen before.
  bool openPayload(int sender, uint64_t counter, const auth::Mac& payloadTag,
                   std::span<const std::byte> payload, std::shared_ptr<Bytes>& plain);
  void rejectAuth(const std::string& why, bool replay);
  void post(int peer, std::unique_ptr<SendOp> op);
  // Posts `op` to `to` now, or queues it until the connection is up (connecting if idle).
  void dispatch(int to, std::unique_ptr<SendOp> op);
  void failPeer(int peer, core::Status status);
  void closeEndpoint(ucp_ep_h ep, bool force);
  void maintain(Clock::time_point now);
  void evictIdle();
  void reapClosed();
  Clock::time_point nextWake(Clock::time_point until) const;
  void waitForEvents(Clock::time_point wake);
  // Polls the worker until it makes progress (true) or `until` passes (false).
  bool spin(Clock::time_point until);
  void shutdown();
  // Shared-memory path (ucx_shm_path.cc).
  core::Status startSharedMemory();
  bool stageInSharedMemory(int peer, SendOp& op);
  void sendControl(int peer, const ShmHeader& header);
  void sendHello(int peer);
  void onHello(int sender, const std::byte* h);
  void onFrame(int sender, const std::byte* h, uint64_t counter, const auth::Mac& payloadTag);
  void flushReleases();
  // Small-frame rings: copies `op`'s frame into the ring for `peer` (false: it goes by AM);
  // hands out every frame waiting in this rank's inbound rings (returns how many); tells the
  // senders whether this rank is about to sleep.
  bool sendThroughRing(int peer, const SendOp& op);
  int pollRings();
  int pollRing(int sender);
  void setSleeping(bool sleeping);
  std::vector<int> ringSenders_;  // ranks whose ring this rank maps

  Options options_;
  Handle h_;
  WaitArena waitArena_;  // before io_: a wait still pending when io_ goes gives its memory back
  asio::io_context io_;
  asio::posix::stream_descriptor efd_;

  std::vector<OutPeer> peers_;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::vector<void*> closing_;          // close requests still in flight
  BufferPool recvPool_{32};  // receive buffers, reused once the node has let go of them
  // In arrival order, at most kMaxQueuedPerKey each: a vector (a deque used as a queue allocates
  // a chunk every few dozen messages even when it never holds more than one).
  std::map<MessageKey, std::vector<SharedBytes>> arrived_;
  size_t queuedMessages_ = 0;  // in arrived_
  std::map<MessageKey, PendingRecv> waiting_;
  // Their erased nodes, kept for the next message (an emptied queue keeps its storage).
  NodeCache<decltype(arrived_)> arrivedNodes_;
  NodeCache<decltype(waiting_)> waitingNodes_;
  static void clearQueue(std::vector<SharedBytes>& q) { q.clear(); }
  static void clearWaiting(PendingRecv& w) { w.done = nullptr; }
  // A finished send or receive whose callback progress() runs.
  struct Completion {
    SendCallback send;
    RecvCallback recv;
    core::Status status;
    SharedBytes bytes;
    void run() {
      if (recv) {
        recv(status, std::move(bytes));
      } else {
        send(status);
      }
    }
  };
  std::vector<Completion> ready_;
  std::vector<Completion> spare_;  // the last batch's storage, reused by the next one
  TransportStats stats_;
  // Shared-memory path; outbox_ is null when it is off or unavailable.
  ShmIdentity identity_;
  std::unique_ptr<Outbox> outbox_;
  std::vector<InPeer> senders_;
  std::shared_ptr<ReleaseQueue> releases_ = std::make_shared<ReleaseQueue>();
  std::vector<std::pair<int, ShmHeader>> pendingControl_;  // acks, sent from progress()
  SharedBytes stagedBytes_;  // the frame last copied into a segment (sent to several neighbours)
  uint64_t stagedSegment_ = 0;
  uint64_t useClock_ = 0;
  // Authentication (with options_.key): this process's session and its message counter, and the
  // last message protected (a frame goes to several neighbours with one tag).
  auth::Nonce salt_{};
  std::unique_ptr<auth::SessionKey> session_;
  uint64_t counter_ = 0;
  struct Protected {
    const void* owner = nullptr;
    const std::byte* data = nullptr;
    size_t size = 0;
    Tag tag;
    uint64_t counter = 0;
    auth::Mac payloadTag{};
    bool tagged = false;  // payloadTag holds the payload's tag (see payloadTagFor)
    SharedBytes source;  // held until the next progress(), so that its address stays its own
    SharedBytes sent;    // the ciphertext with `encrypt`
  } protected_;

  bool started_ = false;
  bool shuttingDown_ = false;
};

// UCX callbacks (C function pointers) that forward to the transport.
void sendCallback(void* request, ucs_status_t status, void* userData);
ucs_status_t shmAmCallback(void* arg, const void* header, size_t headerLength, void* data,
                           size_t length, const ucp_am_recv_param_t* param);
void flushCallback(void* request, ucs_status_t status, void* userData);
void recvDataCallback(void* request, ucs_status_t status, size_t length, void* userData);
ucs_status_t amCallback(void* arg, const void* header, size_t headerLength, void* data,
                        size_t length, const ucp_am_recv_param_t* param);
void epErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status);

core::Result<sockaddr_storage> resolve(const PeerAddress& a);
socklen_t sockaddrLength(const sockaddr_storage& s);

}  // namespace starling::transport::ucx::detail
