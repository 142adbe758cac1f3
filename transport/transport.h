// Transport: moves opaque byte messages between the peers of a run.
//
// The transport knows nothing of gradients, graphs or algorithms. Messages are tagged with
// (round, channel) and matched on (sender, round, channel), so the order in which they arrive never
// matters. Several messages with the same key are handed out one per recv(), in arrival order: a
// forged or corrupted message therefore cannot hide the genuine one behind it (the receiver
// rejects the bad one and asks again). At most kMaxQueuedPerKey wait per key and
// kMaxQueuedMessages in all; more are dropped and counted as corrupt. Every operation completes exactly once with a Status, delivered through its callback
// from progress() on the thread that calls progress(): ok, kTimeout (deadline passed),
// kPeerGone (the peer disconnected or failed), kCancelled (the transport was shut down), or
// kCorruption (bytes that broke the transport's own framing; counted in stats()).
//
// Backends: transport/inproc (this process; the simulator and tests). Each backend folder
// has a single construction point and nothing outside it includes its headers.
//
// Thread-safety: one Transport object is driven by one thread (its node's); see each backend for
// what may be shared between transports.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"

namespace starling::transport {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::byte>;

// A message's bytes: an immutable view kept alive by its owner. Messages are immutable once sent;
// one encoded buffer is shared by every neighbour it goes to. The owner is usually the Bytes
// buffer itself; a transport may instead hand out a view of memory it does not own (the UCX
// transport's shared-memory path lends a receiver the sender's frame, and the owner's destructor
// gives it back). Reads like a shared_ptr<const Bytes>: `msg->size()`, `*msg` (a span).
class SharedBytes {
 public:
  SharedBytes() = default;
  SharedBytes(std::nullptr_t) {}  // NOLINT: reads like a null shared_ptr
  SharedBytes(std::shared_ptr<const Bytes> buffer)  // NOLINT: a buffer is its own owner
      : view_(buffer ? std::span<const std::byte>(*buffer) : std::span<const std::byte>()),
        owner_(std::move(buffer)) {}
  SharedBytes(std::shared_ptr<Bytes> buffer)  // NOLINT
      : SharedBytes(std::shared_ptr<const Bytes>(std::move(buffer))) {}
  // `view` stays valid while `owner` lives.
  SharedBytes(std::shared_ptr<const void> owner, std::span<const std::byte> view)
      : view_(view), owner_(std::move(owner)) {}

  // The first n bytes (n <= size()) of this message, kept alive by the same owner: a frame
  // written into a larger buffer (Compressor::maxEncodedBytes), sent at its own length.
  SharedBytes first(size_t n) const {
    SharedBytes b(*this);
    b.view_ = view_.first(n);
    return b;
  }

  const std::span<const std::byte>& operator*() const { return view_; }
  const std::span<const std::byte>* operator->() const { return &view_; }
  explicit operator bool() const { return owner_ != nullptr; }
  friend bool operator==(const SharedBytes& b, std::nullptr_t) { return b.owner_ == nullptr; }
  // The object that keeps the bytes alive; equal for copies of one message.
  const void* owner() const { return owner_.get(); }
  long use_count() const { return owner_.use_count(); }
  void reset() {
    owner_.reset();
    view_ = {};
    intact_ = false;
  }

  // True when the transport that delivered these bytes vouches that they are exactly what the
  // sender wrote: they were read straight out of the sender's sealed shared-memory segment (no
  // wire in between; only the sender can write it), the transport verified a MAC or AEAD tag
  // over them, or they came from another rank of the same process through an in-process
  // endpoint that vouches (the simulator's; transport::inproc::createTransport). A frame CRC over such bytes can only re-read them, so receivers skip it
  // (compression::Checksum::kSkip) and check everything else. False for everything else,
  // including whatever a test hands over; a fault injector that damages frames on purpose
  // (before the transport, where no transport can see it) clears it on the links it damages.
  bool intact() const { return intact_; }
  SharedBytes& setIntact(bool intact) {
    intact_ = intact && owner_ != nullptr;
    return *this;
  }

 private:
  std::span<const std::byte> view_;
  std::shared_ptr<const void> owner_;
  bool intact_ = false;
};

struct Tag {
  uint64_t round = 0;
  uint32_t channel = 0;
  friend bool operator==(const Tag&, const Tag&) = default;
  friend auto operator<=>(const Tag&, const Tag&) = default;
};

inline constexpr size_t kMaxQueuedPerKey = 4;
// Unclaimed messages a transport keeps in all (a neighbour a round ahead, or junk); more are
// dropped and counted as corrupt, so a misbehaving sender cannot grow a peer without limit.
inline constexpr size_t kMaxQueuedMessages = size_t{1} << 16;

// A message to fill before sending it: `bytes` is writable until `message` is first sent.
struct OutgoingMessage {
  std::span<std::byte> bytes;
  SharedBytes message;
};

using SendCallback = std::function<void(const core::Status&)>;
using RecvCallback = std::function<void(const core::Status&, SharedBytes)>;

struct TransportStats {
  uint64_t messagesSent = 0;
  uint64_t bytesSent = 0;
  uint64_t messagesReceived = 0;
  uint64_t bytesReceived = 0;
  uint64_t corruptMessages = 0;  // rejected by the transport's own framing
  uint64_t sharedMemoryMessages = 0;  // received as views of the sender's shared memory
  uint64_t timeouts = 0;
  // With a cluster key (network transports): connections refused or dropped in the bootstrap
  // handshake, messages whose tags did not verify, and messages seen before (replays). The last
  // two are also in corruptMessages.
  uint64_t rejectedConnections = 0;
  uint64_t unauthenticatedMessages = 0;
  uint64_t replayedMessages = 0;
  // Connections this transport holds open to neighbours now (not a running count).
  uint64_t openEndpoints = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;

  // Queues `bytes` for peer `to`. Never blocks; `done` runs from progress() once the transport no
  // longer needs the buffer (or with an error).
  virtual void send(int to, Tag tag, SharedBytes bytes, SendCallback done) = 0;

  // Asks for the message from `from` tagged `tag`. `done` runs from progress() with the bytes, or
  // with kTimeout once `deadline` has passed without it.
  virtual void recv(int from, Tag tag, Clock::time_point deadline, RecvCallback done) = 0;

  // Runs every completion that is ready, waiting until `until` at most for the first one. Returns
  // the number of callbacks run. Never waits past `until`.
  virtual core::Result<int> progress(Clock::time_point until) = 0;

  virtual TransportStats stats() const = 0;

  // A buffer of `size` bytes (8-byte aligned) in memory the transport can send without copying,
  // e.g. a shared-memory segment its neighbours map; nullopt when it has none for this size,
  // and the caller uses a buffer of its own. Fill `bytes`, then send `message` to any number of
  // neighbours, and do not write to it after the first send.
  virtual std::optional<OutgoingMessage> allocate(size_t /*size*/) { return std::nullopt; }

  // Forgets that `peer` failed: a peer that was lost has come back (a new process on its
  // address, faults.restart), so sends to it connect afresh and receives from it wait for it
  // again. A transport also does this by itself when a new process of that rank connects to it.
  virtual void revive(int /*peer*/) {}

  // Whether a process of rank `peer` is alive and answering now, asked outside the message
  // stream (the network transport: a bootstrap hello marked as a ping, which a live peer's
  // bootstrap answers from its progress() whatever it waits for). `done` runs once from
  // progress(): ok (it answered as rank `peer`), kUnavailable (nobody listens there: the process
  // is gone), kPeerGone (another process of that rank answers, a restarted one: the process this
  // transport was connected to is gone), or kTimeout (no answer by `deadline`: a host that is
  // gone, or a process stopped).
  // Used to tell a dead neighbour's neighbours from live ones (engine/survival.h). The default
  // answers ok: a transport without a way to ask says every peer is alive.
  using PingCallback = std::function<void(const core::Status&)>;
  virtual void ping(int /*peer*/, Clock::time_point /*deadline*/, PingCallback done) {
    done(core::Status::ok());
  }
};

}  // namespace starling::transport
