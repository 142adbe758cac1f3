// Connections and sends of the UCX transport: the per-neighbour endpoint state machine (idle,
// connecting, connected, backoff, failed), retries until the connect timeout, and active-message
// sends. See ucx_transport_impl.h.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>

#include "transport/ucx/ucx_transport_impl.h"

namespace starling::transport::ucx::detail {

// ---- sending -------------------------------------------------------------------------------

core::Status UcxTransport::connect(int peer) {
  OutPeer& p = peers_[peer];
  auto addr = resolve(options_.addresses[peer]);
  if (!addr) return addr.status();
  p.errored = false;
  p.mapped = false;  // until the neighbour accepts this connection's hello
  p.ringMapped = false;
  p.generation++;
  p.state = OutPeer::State::kConnecting;
  // The bootstrap handshake first (ucx_bootstrap.h); it hands us the neighbour's worker address.
  const uint64_t generation = p.generation;
  bootstrap_->connect(peer, *addr, [this, peer, generation](const core::Status& st,
                                                            WorkerAddress address,
                                                            const SaltPrefix& salt) {
    if (st.isOk() && generation == peers_[peer].generation) peers_[peer].listenerSalt = salt;
    onBootstrapped(peer, generation, st, std::move(address));
  });
  return core::Status::ok();
}

void UcxTransport::onBootstrapped(int peer, uint64_t generation, const core::Status& st,
                                  WorkerAddress address) {
  OutPeer& p = peers_[peer];
  if (shuttingDown_ || generation != p.generation || p.state != OutPeer::State::kConnecting) return;
  if (!st.isOk()) {
    if (st.code() == core::StatusCode::kUnavailable) {
      p.errored = true;  // not listening yet, or gone: maintain() retries until the deadline
      // Only a connection that was accepted and then broke off is a failed handshake (not one
      // refused because nobody listens there yet).
      if (st.message().rfind("handshake broken", 0) == 0 ||
          st.message().rfind("no handshake", 0) == 0) {
        ++p.handshakeFailures;
        p.lastHandshakeError = st.message();
      }
    } else {
      failPeer(peer, core::Status(st.code(), describe(peer) + ": " + st.message()));
    }
    return;
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = epErrorCallback;
  ep.err_handler.arg = this;
  ucp_ep_h handle = nullptr;
  if (auto created = fromUcs(ucp_ep_create(h_.worker, &ep, &handle), "connect to " + describe(peer));
      !created.isOk()) {
    failPeer(peer, created);
    return;
  }
  p.handshakeFailures = 0;
  p.lastHandshakeError.clear();
  p.ep = handle;
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
}

void UcxTransport::connectedLater(const FlushOp& op, ucs_status_t status) {
  connectedLater_.emplace_back(op, status);
}

void UcxTransport::runConnectedLater() {
  while (!connectedLater_.empty()) {
    std::vector<std::pair<FlushOp, ucs_status_t>> batch;
    batch.swap(connectedLater_);
    for (const auto& [op, status] : batch) onConnected(op, status);
  }
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
  if (outbox_) sendHello(op.peer);
  while (!p.unsent.empty() && p.state == OutPeer::State::kConnected) {
    auto next = std::move(p.unsent.front());
    p.unsent.pop_front();
    post(op.peer, std::move(next));
  }
}

void UcxTransport::send(int to, Tag tag, SharedBytes bytes, SendCallback done) {
  if (to < 0 || to >= static_cast<int>(peers_.size()) || to == options_.rank) {
    completeSend(std::move(done), core::invalidArgument("cannot send to rank " + std::to_string(to)));
    return;
  }
  auto op = std::make_unique<SendOp>(SendOp{this, to, 0, tag, encodeHeader(options_.rank, tag),
                                            std::move(bytes), std::move(done)});
  if (options_.key) protect(*op);
  peers_[to].lastUse = ++useClock_;
  dispatch(to, std::move(op));
}

void UcxTransport::dispatch(int to, std::unique_ptr<SendOp> op) {
  OutPeer& p = peers_[to];
  switch (p.state) {
    case OutPeer::State::kFailed:
      if (!op->control) finish(std::move(op), p.failure);
      return;
    case OutPeer::State::kIdle: {
      p.connectDeadline = Clock::now() + options_.connectTimeout;
      if (auto st = connect(to); !st.isOk()) {
        failPeer(to, st);
        if (!op->control) finish(std::move(op), p.failure);
        return;
      }
      p.unsent.push_back(std::move(op));
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
  ucs_status_ptr_t req;
  if (raw->control) {
    if (options_.key) {
      putLe(raw->shm.data() + kShmHeaderBytes, ++counter_, 8);
      sign(raw->shm.data(), shmHeaderBytes(), peer, 0);
    }
    req = ucp_am_send_nbx(p.ep, kShmAmId, raw->shm.data(), shmHeaderBytes(), nullptr, 0, &rp);
  } else if (p.ringMapped && size < options_.sharedMemoryThreshold &&
             sendThroughRing(peer, *raw)) {
    req = nullptr;  // in the neighbour's ring: nothing else travels, nothing to wait for
  } else if (outbox_ && p.mapped && size >= options_.sharedMemoryThreshold &&
             stageInSharedMemory(peer, *raw)) {
    // Only the descriptor travels. No reply flag: UCX drops a reply-flagged message whose
    // sender's endpoint has already failed, and a peer's last frame must still arrive after it
    // exits. Releases go back on the endpoint its hello came in on.
    if (options_.key) {
      // The descriptor carries the frame's counter and payload tag (protect()).
      std::memcpy(raw->shm.data() + kShmHeaderBytes, raw->header.data() + kHeaderBytes, 24);
      sign(raw->shm.data(), shmHeaderBytes(), peer, size);
    }
    req = ucp_am_send_nbx(p.ep, kShmAmId, raw->shm.data(), shmHeaderBytes(), nullptr, 0, &rp);
  } else {
    if (options_.key) {
      payloadTagFor(*raw);
      sign(raw->header.data(), amHeaderBytes(), peer, size);
    }
    req = ucp_am_send_nbx(p.ep, kAmId, raw->header.data(), amHeaderBytes(), raw->bytes->data(),
                          size, &rp);
  }
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
  if (op->control) return;  // a lost hello, ack or release only means the slower path
  if (op->viaShm && status != UCS_OK) {
    outbox_->release(op->segment, op->peer);  // the neighbour never heard of it
    op->viaShm = false;  // a retry stages it again
  }
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
  p.failedAt = Clock::now();
  p.mapped = false;
  p.ringMapped = false;
  p.ring.reset();  // a new process of that rank gets a new ring
  if (outbox_) outbox_->forget(peer);
  if (p.ep) {
    closeEndpoint(p.ep, /*force=*/true);
    p.ep = nullptr;
  }
  while (!p.unsent.empty()) {
    if (!p.unsent.front()->control) finish(std::move(p.unsent.front()), p.failure);
    p.unsent.pop_front();
  }
}

void UcxTransport::ping(int peer, Clock::time_point deadline, PingCallback done) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size()) || peer == options_.rank ||
      shuttingDown_) {
    done(core::invalidArgument("ping: no such peer"));
    return;
  }
  auto addr = resolve(options_.addresses[peer]);
  if (!addr) {
    done(addr.status());
    return;
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  // The process this transport is connected to, if any: an answer from another one (a restarted
  // process of that rank, listening on its address now) says the known one is gone.
  const OutPeer& p = peers_[peer];
  std::optional<SaltPrefix> known;
  if (p.state == OutPeer::State::kConnected && p.listenerSalt != SaltPrefix{}) known = p.listenerSalt;
  bootstrap_->ping(peer, *addr, std::max(left, std::chrono::milliseconds(1)),
                   [peer, known, done = std::move(done)](const core::Status& st,
                                                         const SaltPrefix& listener) {
                     if (st.isOk() && known && *known != listener) {
                       done(core::Status(core::StatusCode::kPeerGone,
                                         "rank " + std::to_string(peer) +
                                             " answered from a new process: the one connected "
                                             "here is gone"));
                       return;
                     }
                     done(st);
                   });
}

void UcxTransport::revive(int peer) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size()) || peer == options_.rank) return;
  OutPeer& p = peers_[peer];
  if (p.state != OutPeer::State::kFailed) return;
  // The next send connects afresh (a new bootstrap handshake: the new process's worker address).
  p.state = OutPeer::State::kIdle;
  p.failure = core::Status::ok();
  p.errored = false;
  p.generation++;
}

void UcxTransport::onRestarted(int rank, bool confirmedLater, uint32_t oldPid) {
  log("rank " + std::to_string(rank) + " connected from a new process: it restarted");
  OutPeer& p = peers_[rank];
  // Our ring for the old process may hold frames it never read: the new one gets a new ring.
  p.ringMapped = false;
  p.ring.reset();
  if (p.state == OutPeer::State::kConnected) {
    // An endpoint to the old process: nothing sent on it can arrive. (A handshake in flight
    // reaches whoever listens on the address now: the new process.)
    if (outbox_) outbox_->forget(rank);
    if (p.ep) closeEndpoint(p.ep, /*force=*/true);
    p.ep = nullptr;
    p.mapped = false;
    p.state = OutPeer::State::kIdle;
    p.generation++;
    if (!p.unsent.empty()) {
      p.connectDeadline = Clock::now() + options_.connectTimeout;
      if (auto st = connect(rank); !st.isOk()) failPeer(rank, st);
    }
  }
  revive(rank);
  // Nothing more can come from the old process: what waits for it fails now, as it would have
  // once its failure was noticed (a receive of the round it died in would otherwise wait out
  // its deadline now that the rank is no longer failed).
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->first.from != rank) {
      ++it;
      continue;
    }
    completeRecv(std::move(it->second.done),
                 core::peerGone(describe(rank) + " restarted: its old process is gone"));
    it = waiting_.erase(it);
  }
  // Messages the old process sent and nobody claimed belong to a run it is no longer in. (Not
  // when the restart was confirmed later than the new process's hello: what came since then,
  // its join request among it, is the new process's.)
  for (auto it = arrived_.begin(); !confirmedLater && it != arrived_.end();) {
    if (it->first.from == rank) {
      queuedMessages_ -= it->second.size();
      it = arrived_.erase(it);
    } else {
      ++it;
    }
  }
  InPeer& in = senders_[rank];
  if (confirmedLater && in.mapped && in.pid != oldPid) {
    // The new process's shared memory hello came first and is mapped; its ack went out on the
    // endpoint to the old process: answer again, on the new connection.
    ShmHeader ack = shmHeader(ShmType::kAck, static_cast<uint32_t>(options_.rank));
    putLe(ack.data() + 12, 1 | (in.ring ? 2 : 0), 4);
    pendingControl_.emplace_back(rank, ack);
    return;
  }
  in.mapped = false;
  in.cache.clear();
  in.ring.reset();  // what is left in it belonged to the old process
  in.ringFd = -1;
}

void UcxTransport::onEndpointError(ucp_ep_h ep, ucs_status_t status) {
  (void)status;
  for (auto& p : peers_) {
    if (p.ep == ep) {
      p.errored = true;
      return;
    }
  }
}

void UcxTransport::closeEndpoint(ucp_ep_h ep, bool force) {
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &rp);
  if (req != nullptr && !UCS_PTR_IS_ERR(req)) closing_.push_back(req);
}

}  // namespace starling::transport::ucx::detail
