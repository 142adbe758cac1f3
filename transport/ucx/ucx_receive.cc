// The receiving side of the UCX transport: active messages in (eager copy or rendezvous straight
// into the frame buffer), header checks, and matching on (sender, round, channel).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "transport/ucx/ucx_transport_impl.h"

namespace starling::transport::ucx::detail {

// ---- receiving -----------------------------------------------------------------------------

void UcxTransport::corrupt(const std::string& why) {
  stats_.corruptMessages++;
  log("dropped a malformed message: " + why);
}

ucs_status_t UcxTransport::onActiveMessage(const void* header, size_t headerLength, void* data,
                                           size_t length, const ucp_am_recv_param_t* param) {
  if (headerLength != amHeaderBytes() || header == nullptr) {
    corrupt("header of " + std::to_string(headerLength) + " bytes, expected " +
            std::to_string(amHeaderBytes()));
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
  uint64_t counter = 0;
  auth::Mac payloadTag{};
  if (options_.key &&
      !verifyHeader(key.from, h, headerLength, length, counter, payloadTag, "a message")) {
    return UCS_OK;
  }
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    // Rendezvous: receive straight into the buffer the decoder will read.
    auto op = std::make_unique<RecvOp>(RecvOp{this, key, recvPool_.acquire(length), counter,
                                              payloadTag});
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
  const std::span<const std::byte> payload(static_cast<const std::byte*>(data), length);
  std::shared_ptr<Bytes> plain;
  if (options_.key && !openPayload(key.from, counter, payloadTag, payload, plain)) return UCS_OK;
  if (plain) {  // decrypted, and its AEAD tag verified
    deliver(key, SharedBytes(std::move(plain)).setIntact(true));
    return UCS_OK;
  }
  auto bytes = recvPool_.acquire(length);
  if (length) std::memcpy(bytes->data(), data, length);
  SharedBytes message(std::move(bytes));
  if (options_.key) message.setIntact(true);  // its payload MAC verified
  deliver(key, std::move(message));
  return UCS_OK;
}

void UcxTransport::onRecvComplete(std::unique_ptr<RecvOp> op, ucs_status_t status, size_t length) {
  if (status != UCS_OK || length != op->buffer->size()) {
    corrupt("rendezvous receive from rank " + std::to_string(op->key.from) + " failed: " +
            ucs_status_string(status));
    return;
  }
  if (options_.key) {
    std::shared_ptr<Bytes> plain;
    if (!openPayload(op->key.from, op->counter, op->payloadTag, *op->buffer, plain)) return;
    if (plain) op->buffer = std::move(plain);
  }
  SharedBytes message(std::move(op->buffer));
  if (options_.key) message.setIntact(true);  // its payload MAC or AEAD tag verified
  deliver(op->key, std::move(message));
}

void UcxTransport::deliver(const MessageKey& key, SharedBytes bytes) {
  stats_.messagesReceived++;
  stats_.bytesReceived += bytes->size();
  if (auto it = waiting_.find(key); it != waiting_.end()) {
    completeRecv(std::move(it->second.done), core::Status::ok(), std::move(bytes));
    waitingNodes_.erase(waiting_, it, clearWaiting);
  } else if (queuedMessages_ >= kMaxQueuedMessages) {
    corrupt("more than " + std::to_string(kMaxQueuedMessages) + " unclaimed messages; dropped one "
            "from rank " + std::to_string(key.from) + " for round " + std::to_string(key.tag.round));
  } else if (auto& queue = arrivedNodes_.at(arrived_, key); queue.size() < kMaxQueuedPerKey) {
    queue.push_back(std::move(bytes));
    queuedMessages_++;
  } else {
    corrupt("more than " + std::to_string(kMaxQueuedPerKey) + " messages from rank " +
            std::to_string(key.from) + " for round " + std::to_string(key.tag.round));
  }
}

void UcxTransport::recv(int from, Tag tag, Clock::time_point deadline, RecvCallback done) {
  if (from < 0 || from >= static_cast<int>(peers_.size()) || from == options_.rank) {
    completeRecv(std::move(done),
                 core::invalidArgument("cannot receive from rank " + std::to_string(from)));
    return;
  }
  const MessageKey key{from, tag};
  if (auto it = arrived_.find(key); it != arrived_.end()) {
    completeRecv(std::move(done), core::Status::ok(), std::move(it->second.front()));
    it->second.erase(it->second.begin());
    queuedMessages_--;
    if (it->second.empty()) arrivedNodes_.erase(arrived_, it, clearQueue);
    return;
  }
  if (waiting_.count(key) == 0) {
    waitingNodes_.at(waiting_, key) = PendingRecv{deadline, std::move(done)};
  } else {
    // One receive per key at a time; the second completes at once, with an error.
    completeRecv(std::move(done),
                 core::failedPrecondition("a receive from rank " + std::to_string(from) +
                                          " for round " + std::to_string(tag.round) +
                                          " is already pending"));
  }
}

}  // namespace starling::transport::ucx::detail
