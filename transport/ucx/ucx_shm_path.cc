// The UCX transport's shared-memory path (see ucx_shm.h for the design): the handshake that
// decides per neighbour whether frames may go through shared memory, staging a frame in a
// segment, turning a frame descriptor into a view of the sender's segment, and releases.
#include <algorithm>
#include <cstring>

#include "transport/ucx/ucx_transport_impl.h"

namespace starling::transport::ucx::detail {
namespace {

constexpr size_t kMaxSegments = 8;

// Held by every view of a neighbour's frame; reports the frame released when the last one goes.
// Built in place only: a copy would release twice.
struct Lease {
  Lease(std::shared_ptr<const MappedSegment> seg, std::weak_ptr<ReleaseQueue> q, int from,
        uint64_t serialNumber)
      : segment(std::move(seg)), queue(std::move(q)), sender(from), serial(serialNumber) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  std::shared_ptr<const MappedSegment> segment;
  std::weak_ptr<ReleaseQueue> queue;
  int sender;
  uint64_t serial;
  ~Lease() {
    if (auto q = queue.lock()) q->pending.emplace_back(sender, serial);
  }
};

// Owns a frame the caller writes straight into a segment (allocate()); the segment is free again
// once this is gone and every neighbour has released the frame.
struct OutLease {
  explicit OutLease(std::shared_ptr<OutSegment> s) : segment(std::move(s)) {}
  OutLease(const OutLease&) = delete;
  OutLease& operator=(const OutLease&) = delete;
  ~OutLease() { segment->lent = false; }
  std::shared_ptr<OutSegment> segment;
};

}  // namespace

std::optional<OutgoingMessage> UcxTransport::allocate(size_t size) {
  if (!outbox_ || size < options_.sharedMemoryThreshold) return std::nullopt;
  // Only worth it once some neighbour reads our segments.
  if (std::none_of(peers_.begin(), peers_.end(), [](const OutPeer& p) { return p.mapped; })) {
    return std::nullopt;
  }
  auto segment = outbox_->lend(size);
  if (!segment) return std::nullopt;
  const std::span<std::byte> bytes(segment->data(), size);
  auto lease = std::make_shared<OutLease>(std::move(segment));
  return OutgoingMessage{bytes, SharedBytes(std::move(lease), std::span<const std::byte>(bytes))};
}

ucs_status_t shmAmCallback(void* arg, const void* header, size_t headerLength, void* /*data*/,
                           size_t length, const ucp_am_recv_param_t* /*param*/) {
  return static_cast<UcxTransport*>(arg)->onShmMessage(header, headerLength, length);
}

core::Status UcxTransport::startSharedMemory() {
  auto id = makeIdentity();
  if (!id) return id.status();
  identity_ = *id;
  auto outbox = std::make_unique<Outbox>(identity_, kMaxSegments);
  STARLING_RETURN_IF_ERROR(outbox->createProbe());
  outbox_ = std::move(outbox);
  return core::Status::ok();
}

void UcxTransport::sendControl(int peer, const ShmHeader& header) {
  // On this rank's own connection to `peer` (opened if need be); a lost hello, ack or release
  // only means the slower path, so nothing reports its completion.
  auto op = std::make_unique<SendOp>();
  op->transport = this;
  op->peer = peer;
  op->control = true;
  op->shm = header;
  op->done = [](const core::Status&) {};
  dispatch(peer, std::move(op));
}

void UcxTransport::sendHello(int peer) {
  ShmHeader h = shmHeader(ShmType::kHello, static_cast<uint32_t>(options_.rank));
  putLe(h.data() + 12, identity_.pid, 4);
  std::memcpy(h.data() + 16, identity_.token.data(), identity_.token.size());
  std::memcpy(h.data() + 32, identity_.bootId.data(), identity_.bootId.size());
  putLe(h.data() + 48, static_cast<uint32_t>(outbox_->probeFd()), 4);
  putLe(h.data() + 52, 1, 8);  // the probe is the outbox's first segment
  // Small frames for this neighbour: one ring per neighbour process, kept across reconnections.
  OutPeer& p = peers_[peer];
  p.ringMapped = false;
  const size_t slotBytes = (options_.sharedMemoryThreshold + 63) / 64 * 64;
  if (!p.ring && options_.sharedMemoryThreshold > 0 && slotBytes <= kRingMaxSlotBytes &&
      !options_.encrypt) {
    auto ring = OutRing::create(identity_.token, slotBytes);
    if (ring) {
      p.ring = std::move(*ring);
    } else {
      log("small frames to " + describe(peer) + " stay on UCX active messages: " +
          ring.status().message());
    }
  }
  putLe(h.data() + 60, p.ring ? static_cast<uint32_t>(p.ring->fd()) : 0xffffffffu, 4);
  sendControl(peer, h);
}

bool UcxTransport::sendThroughRing(int peer, const SendOp& op) {
  OutPeer& p = peers_[peer];
  bool wake = false;
  if (!p.ring->push(op.tag, *op.bytes, wake)) return false;  // its slot is still being read
  if (wake) sendControl(peer, shmHeader(ShmType::kDoorbell, static_cast<uint32_t>(options_.rank)));
  return true;
}

int UcxTransport::pollRing(int sender) {
  InPeer& in = senders_[sender];
  int delivered = 0;
  while (in.ring) {
    Tag tag;
    std::span<const std::byte> bytes;
    uint32_t* state = nullptr;
    std::string why;
    const auto next = in.ring->next(tag, bytes, state, why);
    if (next == MappedRing::Next::kEmpty) break;
    if (next == MappedRing::Next::kCorrupt) {
      corrupt("small-frame ring of " + describe(sender) + ": " + why + "; not read any more");
      in.ring.reset();
      in.ringFd = -1;
      break;
    }
    // The slot is the sender's again once every view of the frame is gone.
    // Built in place only: a copy would free the slot twice.
    struct SlotLease {
      SlotLease(std::shared_ptr<MappedRing> r, uint32_t* s) : ring(std::move(r)), state(s) {}
      SlotLease(const SlotLease&) = delete;
      SlotLease& operator=(const SlotLease&) = delete;
      ~SlotLease() { MappedRing::freeSlot(state); }
      std::shared_ptr<MappedRing> ring;
      uint32_t* state;
    };
    auto lease = std::make_shared<SlotLease>(in.ring, state);
    stats_.sharedMemoryMessages++;
    // Read in place out of memory only the sender (and this rank) can write.
    deliver(MessageKey{sender, tag}, SharedBytes(std::move(lease), bytes).setIntact(true));
    ++delivered;
  }
  return delivered;
}

int UcxTransport::pollRings() {
  int delivered = 0;
  for (size_t i = 0; i < ringSenders_.size();) {
    const int sender = ringSenders_[i];
    delivered += pollRing(sender);
    if (senders_[sender].ring) {
      ++i;
    } else {
      ringSenders_.erase(ringSenders_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return delivered;
}

void UcxTransport::setSleeping(bool sleeping) {
  for (int sender : ringSenders_) {
    if (senders_[sender].ring) senders_[sender].ring->setSleeping(sleeping);
  }
}

bool UcxTransport::stageInSharedMemory(int peer, SendOp& op) {
  const size_t size = op.bytes->size();
  OutSegment* seg = outbox_->findLent(op.bytes->data());
  if (seg != nullptr && size <= seg->capacity) {
    // Written in place by the caller (allocate()): nothing to copy. The segment keeps the frame
    // alive until every neighbour it goes to has released it.
    if (seg->readers.empty()) seg->holder = op.bytes;
  } else {
    seg = nullptr;
    if (stagedBytes_ && stagedBytes_.owner() == op.bytes.owner() &&
        stagedBytes_->data() == op.bytes->data() && stagedBytes_->size() == size) {
      seg = outbox_->find(stagedSegment_);  // the same frame, already copied for another neighbour
    }
  }
  if (seg == nullptr) {
    seg = outbox_->acquire(size);
    if (seg == nullptr) return false;  // every segment is still being read: go by AM
    std::memcpy(seg->base + kSegmentHeaderBytes, op.bytes->data(), size);
    stagedBytes_ = op.bytes;
    stagedSegment_ = seg->serial;
  }
  seg->readers.push_back(peer);
  op.viaShm = true;
  op.segment = seg->serial;
  op.shm = shmHeader(ShmType::kFrame, static_cast<uint32_t>(options_.rank));
  putLe(op.shm.data() + 12, static_cast<uint32_t>(seg->fd), 4);
  putLe(op.shm.data() + 16, op.tag.round, 8);
  putLe(op.shm.data() + 24, op.tag.channel, 4);
  putLe(op.shm.data() + 32, seg->serial, 8);
  putLe(op.shm.data() + 40, kSegmentHeaderBytes, 8);
  putLe(op.shm.data() + 48, size, 8);
  // A frame of this neighbour's that we have let go of rides along, saving a release message
  // (and a wake-up of the neighbour): on a ring every release goes this way.
  auto& pending = releases_->pending;
  for (auto it = pending.begin(); it != pending.end(); ++it) {
    if (it->first == peer) {
      putLe(op.shm.data() + 56, it->second, 8);
      pending.erase(it);
      break;
    }
  }
  return true;
}

ucs_status_t UcxTransport::onShmMessage(const void* header, size_t headerLength, size_t length) {
  if (header == nullptr || headerLength != shmHeaderBytes() || length != 0) {
    corrupt("shared-memory message with a " + std::to_string(headerLength) + "-byte header and " +
            std::to_string(length) + " bytes of data");
    return UCS_OK;
  }
  const auto* h = static_cast<const std::byte*>(header);
  const uint64_t type = getLe(h + 4, 4);
  const uint64_t sender = getLe(h + 8, 4);
  if (getLe(h, 4) != kShmMagic || type < 1 || type > 5) {
    corrupt("bad shared-memory message header");
    return UCS_OK;
  }
  if (sender >= peers_.size() || static_cast<int>(sender) == options_.rank) {
    corrupt("shared-memory message from unknown rank " + std::to_string(sender));
    return UCS_OK;
  }
  const int from = static_cast<int>(sender);
  uint64_t counter = 0;
  auth::Mac payloadTag{};
  if (options_.key) {
    const uint64_t described = type == static_cast<uint64_t>(ShmType::kFrame) ? getLe(h + 48, 8) : 0;
    if (!verifyHeader(from, h, headerLength, described, counter, payloadTag,
                      "a shared-memory message")) {
      return UCS_OK;
    }
    // A frame's counter is taken once its payload verifies (onFrame); the others carry none.
    if (type != static_cast<uint64_t>(ShmType::kFrame)) senders_[from].window.accept(counter);
  }
  switch (static_cast<ShmType>(type)) {
    case ShmType::kHello:
      onHello(from, h);
      break;
    case ShmType::kAck: {
      const uint64_t accepted = getLe(h + 12, 4);
      OutPeer& p = peers_[from];
      if (outbox_ && (accepted & 1) != 0 && !p.mapped) {
        p.mapped = true;
        log("frames of " + std::to_string(options_.sharedMemoryThreshold) + " bytes and more to " +
            describe(from) + " go through shared memory");
      }
      if (p.ring && (accepted & 2) != 0 && !p.ringMapped) {
        p.ringMapped = true;
        log("smaller frames to " + describe(from) + " go through a ring in shared memory");
      }
      break;
    }
    case ShmType::kDoorbell:
      break;  // progress() reads the rings once UCX returns
    case ShmType::kFrame:
      onFrame(from, h, counter, payloadTag);
      break;
    case ShmType::kRelease:
      if (!outbox_ || !outbox_->release(getLe(h + 32, 8), from)) {
        corrupt("rank " + std::to_string(from) + " released a frame it did not hold");
      }
      break;
  }
  return UCS_OK;
}

void UcxTransport::onHello(int sender, const std::byte* h) {
  InPeer& in = senders_[sender];
  in.mapped = false;
  in.cache.clear();
  std::string refused;
  if (!outbox_) {
    refused = "shared memory is off here";
  } else if (std::memcmp(h + 32, identity_.bootId.data(), identity_.bootId.size()) != 0) {
    refused = "another host";
  } else {
    Token token;
    std::memcpy(token.data(), h + 16, token.size());
    const auto pid = static_cast<uint32_t>(getLe(h + 12, 4));
    auto probe = mapSegment(pid, static_cast<int32_t>(getLe(h + 48, 4)), token, getLe(h + 52, 8));
    if (probe) {
      in.mapped = true;
      in.pid = pid;
      in.token = token;
    } else {
      refused = probe.status().message();
    }
    const auto ringFd = in.mapped ? static_cast<int32_t>(getLe(h + 60, 4)) : -1;
    if (!(in.ring && ringFd >= 0 && in.ringFd == ringFd && in.ringPid == pid)) {
      // Not the ring this rank reads (a new process, the first hello, or none): what is left in
      // the old one is handed out first, in order.
      pollRing(sender);
      in.ring.reset();
      in.ringFd = -1;
      if (ringFd >= 0) {
        auto ring = mapRing(pid, ringFd, token);
        if (ring) {
          in.ring = std::move(*ring);
          in.ringFd = ringFd;
          in.ringPid = pid;
          if (std::find(ringSenders_.begin(), ringSenders_.end(), sender) == ringSenders_.end()) {
            ringSenders_.push_back(sender);
          }
        } else {
          log("small frames from " + describe(sender) + " stay on UCX active messages: " +
              ring.status().message());
        }
      }
    }
  }
  if (!refused.empty() && outbox_) {
    log("frames from " + describe(sender) + " stay on UCX active messages: " + refused);
  }
  // The answer goes back on this rank's own connection to the sender (from progress()).
  ShmHeader ack = shmHeader(ShmType::kAck, static_cast<uint32_t>(options_.rank));
  putLe(ack.data() + 12, (in.mapped ? 1 : 0) | (in.mapped && in.ring ? 2 : 0), 4);
  pendingControl_.emplace_back(sender, ack);
}

void UcxTransport::onFrame(int sender, const std::byte* h, uint64_t counter,
                           const auth::Mac& payloadTag) {
  InPeer& in = senders_[sender];
  const uint64_t serial = getLe(h + 32, 8);
  const uint64_t offset = getLe(h + 40, 8);
  const uint64_t length = getLe(h + 48, 8);
  const MessageKey key{sender, Tag{getLe(h + 16, 8), static_cast<uint32_t>(getLe(h + 24, 4))}};
  if (!in.mapped) {
    corrupt("shared-memory frame from " + describe(sender) + " without a handshake");
    return;
  }
  if (const uint64_t released = getLe(h + 56, 8); released != 0) {
    if (!outbox_ || !outbox_->release(released, sender)) {
      corrupt(describe(sender) + " released a frame it did not hold");
    }
  }
  auto segment = in.cache.find(serial);
  if (!segment) {
    auto mapped = mapSegment(in.pid, static_cast<int32_t>(getLe(h + 12, 4)), in.token, serial);
    if (!mapped) {
      corrupt("shared-memory frame from " + describe(sender) + ": " + mapped.status().message());
      releases_->pending.emplace_back(sender, serial);  // the sender can reuse it
      return;
    }
    segment = *mapped;
    in.cache.insert(serial, segment);
  }
  if (offset < kSegmentHeaderBytes || offset > segment->size() ||
      length > segment->size() - offset || length > kMaxMessageBytes) {
    corrupt("shared-memory frame from " + describe(sender) + " out of its segment's bounds (offset " +
            std::to_string(offset) + ", length " + std::to_string(length) + ", segment " +
            std::to_string(segment->size()) + " bytes)");
    releases_->pending.emplace_back(sender, serial);
    return;
  }
  auto lease = std::make_shared<Lease>(segment, releases_, sender, serial);
  const std::span<const std::byte> view(segment->base() + offset, length);
  if (options_.key && !options_.encrypt) {
    // The descriptor's tag verified (counter, segment, offset, length, round, channel): the bytes
    // are the sender's, in a segment only the sender (and whoever may ptrace it, and so read the
    // key too) can write. No payload tag to check (docs/security.md); the counter is recorded.
    if (!senders_[sender].window.accept(counter)) {
      rejectAuth("a frame from " + describe(sender) + ": message " + std::to_string(counter) +
                     " was received before (a replay)",
                 true);
      return;
    }
  } else if (options_.key) {
    std::shared_ptr<Bytes> plain;
    if (!openPayload(sender, counter, payloadTag, view, plain)) return;  // the lease releases it
    if (plain) {  // decrypted into a buffer of our own: the segment goes back at once
      stats_.sharedMemoryMessages++;
      deliver(key, SharedBytes(std::move(plain)).setIntact(true));
      return;
    }
  }
  stats_.sharedMemoryMessages++;
  // Read in place out of a segment only the sender can write: nothing between its bytes and ours.
  deliver(key, SharedBytes(std::move(lease), view).setIntact(true));
}

void UcxTransport::flushReleases() {
  for (auto& [peer, header] : pendingControl_) sendControl(peer, header);
  pendingControl_.clear();
  // Releases go back on this rank's own connection to the sender (opened if need be); a sender
  // that failed needs them no more. A frame of the receiver's to that sender carries one too.
  for (const auto& [sender, serial] : releases_->pending) {
    if (peers_[sender].state == OutPeer::State::kFailed) continue;
    ShmHeader h = shmHeader(ShmType::kRelease, static_cast<uint32_t>(options_.rank));
    putLe(h.data() + 32, serial, 8);
    sendControl(sender, h);
  }
  releases_->pending.clear();
}

}  // namespace starling::transport::ucx::detail
