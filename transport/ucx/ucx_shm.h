// Shared-memory frames for neighbours on the same host: the UCX transport's zero-copy path.
//
// Why this exists: with peer-failure error handling (which Starling needs to name a lost
// neighbour), UCX 1.13 leaves its single-copy CMA transport out of the rendezvous lanes, so a
// large message between two processes on one host crossed TCP loopback (two kernel copies and
// several wake-ups). UCX's own mapped-memory route (ucp_rkey_ptr) gives no bounds for the remote
// segment, so a bad offset from a neighbour could read past it. Instead, a sender stages each
// large frame once in a sealed memfd segment; the frame's (segment, offset, length) travels as a
// small UCX active message; the receiver maps the segment read-only through
// /proc/<pid>/fd/<fd>, checks the bounds against the segment's real, sealed size, and hands the
// node a view of the sender's bytes. When the node lets go of the view, a release message tells
// the sender the segment is free again. One copy per frame, shared by every neighbour, and none
// on the receiving side.
//
// Trust: a receiver reads only what the segment's sealed size allows (F_SEAL_SHRINK, checked
// before mapping), so a truncated or forged descriptor is rejected, never a SIGBUS or a read out
// of bounds. The bytes themselves belong to a process of the same user on the same host, which
// could attach a debugger to us anyway; frame CRCs are still checked by the decoder.
//
// Internal to transport/ucx; no UCX types here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/transport.h"

namespace starling::transport::ucx::detail {

using Token = std::array<uint8_t, 16>;

// Little-endian fields of Starling's wire headers (the low `n` bytes of a value).
inline void putLe(std::byte* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
inline uint64_t getLe(const std::byte* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(std::to_integer<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Every segment starts with this many bytes of header (magic, token, serial); frames follow.
constexpr size_t kSegmentHeaderBytes = 64;

// This process's identity for the shared-memory handshake.
struct ShmIdentity {
  uint32_t pid = 0;
  Token token{};   // random per transport: proves a mapped segment is the sender's
  Token bootId{};  // /proc/sys/kernel/random/boot_id: same host (and boot) or not
};

// Reads the boot id and draws a token. kIoError when the host has no boot id (not Linux).
core::Result<ShmIdentity> makeIdentity();

// One segment a sender puts frames in: copied there by the transport, or written there in place
// by the caller (Transport::allocate). Unmapped and closed when the last owner lets go.
struct OutSegment {
  OutSegment() = default;
  ~OutSegment();
  OutSegment(const OutSegment&) = delete;
  OutSegment& operator=(const OutSegment&) = delete;
  int fd = -1;
  std::byte* base = nullptr;  // mapped read-write, kSegmentHeaderBytes + capacity bytes
  size_t capacity = 0;        // bytes available for a frame
  uint64_t serial = 0;
  std::vector<int> readers;   // neighbours that have not released the frame in it yet
  bool lent = false;          // a caller holds a frame it wrote here in place
  SharedBytes holder;         // that frame, kept alive while neighbours read it
  bool isFree() const { return readers.empty() && !lent; }
  std::byte* data() const { return base + kSegmentHeaderBytes; }
};

// The sender's segments. At most `maxSegments`; a frame that finds none free goes by the
// ordinary active-message path instead.
class Outbox {
 public:
  Outbox(const ShmIdentity& id, size_t maxSegments) : id_(id), maxSegments_(maxSegments) {}
  ~Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // A small segment holding only the header: the receiver maps it during the handshake to prove
  // it can. kIoError when memfd segments are not available.
  core::Status createProbe();
  int probeFd() const { return probe_ ? probe_->fd : -1; }

  // A free segment with room for `size` bytes, growing one if needed; nullptr at the cap.
  OutSegment* acquire(size_t size);
  // The same, marked lent to a caller that writes a frame into it in place.
  std::shared_ptr<OutSegment> lend(size_t size);
  // The lent segment whose frame starts at `data`, or nullptr.
  OutSegment* findLent(const std::byte* data);
  // `reader` has let go of the frame in segment `serial`. False when it held none there.
  bool release(uint64_t serial, int reader);
  // `reader` is gone: drop it from every segment.
  void forget(int reader);
  OutSegment* find(uint64_t serial);
  // Whether `reader` still holds a frame of ours (its release has not come back yet).
  bool hasReader(int reader) const;
  size_t segments() const { return segments_.size(); }

 private:
  core::Result<std::shared_ptr<OutSegment>> create(size_t capacity);
  void dropReader(OutSegment& s, std::vector<int>::iterator it);

  ShmIdentity id_;
  size_t maxSegments_;
  uint64_t nextSerial_ = 1;
  std::shared_ptr<OutSegment> probe_;
  std::vector<std::shared_ptr<OutSegment>> segments_;
};

// A neighbour's segment, mapped read-only into this process. Unmapped when the last view of a
// frame in it is gone.
class MappedSegment {
 public:
  MappedSegment(const std::byte* base, size_t size) : base_(base), size_(size) {}
  ~MappedSegment();
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;
  const std::byte* base() const { return base_; }
  size_t size() const { return size_; }

 private:
  const std::byte* base_;
  size_t size_;
};

// Maps segment `fd` of process `pid` and checks that it is sealed against shrinking and that its
// header carries `token` and `serial`. Errors name what failed (kUnavailable: cannot open or map,
// kCorruption: not the segment the descriptor claims).
core::Result<std::shared_ptr<const MappedSegment>> mapSegment(uint32_t pid, int32_t fd,
                                                              const Token& token, uint64_t serial);

// The receiver's mappings of one sender's segments, least recently used evicted beyond `max`.
class SegmentCache {
 public:
  explicit SegmentCache(size_t max = 8) : max_(max) {}
  std::shared_ptr<const MappedSegment> find(uint64_t serial);
  void insert(uint64_t serial, std::shared_ptr<const MappedSegment> segment);
  void clear() { entries_.clear(); }

 private:
  size_t max_;
  std::deque<std::pair<uint64_t, std::shared_ptr<const MappedSegment>>> entries_;  // newest last
};

// ---- small frames: a ring per (sender, receiver) ----------------------------------------------
//
// Frames below the segment threshold (a d = 1e3 model is 4 KB) do not pay for a descriptor, a
// release message and UCX's active-message path each: the sender keeps, for each neighbour on
// its host, a ring of kRingSlots slots in a sealed memfd segment that the neighbour maps
// read-write during the handshake. Sending copies the frame into the next free slot and marks it
// full; the receiver polls its rings from progress(), hands the node a view of the slot (read in
// place, like a segment) and marks the slot free when the node lets go of it. Nothing else
// travels, except a doorbell (a small control message) when the receiver has said, in the
// ring's control word, that it is about to sleep in the kernel.
//
// Layout: the segment header (magic, serial 0, token), a 64-byte control line (the receiver's
// `sleeping` word), then kRingSlots slots of 64 header bytes (state, length, sequence number,
// round, channel) and `slotBytes` payload bytes. A slot is free, full (written, unread) or held
// (read, still viewed). The sender writes a slot only while it is free and then makes it full;
// the receiver only makes slots held and free and writes its control word; a receiver that scribbles on the
// ring can only spoil its own inbound frames, and the sender never reads a length or an offset
// from it. The receiver checks every slot's length and sequence number against its own count.
constexpr size_t kRingSlots = 8;
constexpr size_t kRingControlBytes = 64;
constexpr size_t kRingSlotHeaderBytes = 64;
constexpr size_t kRingMaxSlotBytes = size_t{64} << 10;

// The sender's ring for one neighbour.
class OutRing {
 public:
  // A ring whose slots hold frames of up to `slotBytes` bytes (a multiple of 64).
  static core::Result<std::unique_ptr<OutRing>> create(const Token& token, size_t slotBytes);
  ~OutRing();
  OutRing(const OutRing&) = delete;
  OutRing& operator=(const OutRing&) = delete;
  int fd() const { return fd_; }
  size_t slotBytes() const { return slotBytes_; }
  // Copies `frame` into the next slot; false when the receiver still holds that slot (the
  // caller sends the frame another way). Sets `wake` when the receiver said it is going to sleep.
  bool push(const Tag& tag, std::span<const std::byte> frame, bool& wake);

 private:
  OutRing() = default;
  int fd_ = -1;
  std::byte* base_ = nullptr;
  size_t total_ = 0;
  size_t slotBytes_ = 0;
  uint64_t head_ = 0;  // sequence number of the next frame
};

// A neighbour's ring, mapped read-write into the receiver. Held by every view of a frame in it.
class MappedRing {
 public:
  MappedRing(std::byte* base, size_t size, size_t slotBytes)
      : base_(base), size_(size), slotBytes_(slotBytes) {}
  ~MappedRing();
  MappedRing(const MappedRing&) = delete;
  MappedRing& operator=(const MappedRing&) = delete;

  enum class Next { kEmpty, kFrame, kCorrupt };
  // The next frame in order, if the sender has written it: its tag, its bytes (a view into the
  // slot) and the slot's state word, to free it. kCorrupt (with `why`) when the slot does not hold
  // the frame this receiver expects.
  Next next(Tag& tag, std::span<const std::byte>& bytes, uint32_t*& state, std::string& why);
  // The receiver is (or is no longer) about to sleep: the sender then rings the doorbell.
  void setSleeping(bool sleeping);
  static void freeSlot(uint32_t* state);

 private:
  std::byte* base_;
  size_t size_;
  size_t slotBytes_;
  uint64_t cursor_ = 0;  // sequence number of the next frame to hand out
};

// Maps ring `fd` of process `pid` read-write and checks it is sealed, laid out as a ring, and
// carries `token`.
core::Result<std::shared_ptr<MappedRing>> mapRing(uint32_t pid, int32_t fd, const Token& token);

// Frames whose views the node has let go of, to be reported to their senders from progress().
// Views hold it weakly, so a view that outlives its transport releases nothing.
struct ReleaseQueue {
  std::vector<std::pair<int, uint64_t>> pending;  // (sender rank, segment serial)
};

}  // namespace starling::transport::ucx::detail
