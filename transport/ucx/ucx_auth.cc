// Message authentication in the UCX transport (with a cluster key; auth.h has the scheme): the
// sender's tags, the receiver's checks and replay window. See ucx_transport_impl.h.
#include <cstring>

#include "transport/ucx/ucx_transport_impl.h"

namespace starling::transport::ucx::detail {

void UcxTransport::onAccepted(int rank, const auth::Nonce& salt) {
  InPeer& in = senders_[rank];
  if (in.known && in.salt == salt) return;  // the same start of that peer, reconnecting
  const bool restarted = in.known;
  in.known = true;
  in.salt = salt;
  // With a key the Hello was proven, so another salt is another process of that rank. Without
  // one anybody can claim a rank: it counts as a restart only once the rank has failed here (a
  // live rank's neighbour would otherwise drop what it waits for on a stranger's word).
  if (restarted && (options_.key || peers_[rank].state == OutPeer::State::kFailed)) {
    onRestarted(rank);
  } else if (restarted) {
    confirmRestart(rank, salt);
  }
  if (!options_.key) return;
  // A new start of that peer (or its first): a new session, and nothing of the old one verifies.
  in.session = std::make_unique<auth::SessionKey>(*options_.key, static_cast<uint32_t>(rank), salt);
  in.window.reset();
}

void UcxTransport::confirmRestart(int rank, const auth::Nonce& salt) {
  // Over TCP the old process's endpoint fails as it dies, so the rank has failed by the time its
  // new process connects. Over shared memory UCX may not notice for a long time (or only once a
  // new endpoint exists, and then the failure is taken for the new one's): the endpoint to the
  // old process would carry the join state and the acks into the void.
  auto addr = resolve(options_.addresses[rank]);
  if (!addr) return;
  // The process whose shared memory this rank reads now: the old one, until the new one's shared
  // memory hello (which may come before the answer).
  const uint32_t oldPid = senders_[rank].pid;
  bootstrap_->ping(rank, *addr, std::chrono::milliseconds(2000),
                   [this, rank, salt, oldPid](const core::Status& st, const SaltPrefix& listener) {
                     if (shuttingDown_ || !st.isOk()) return;
                     const InPeer& in = senders_[rank];
                     if (in.salt != salt) return;  // yet another process since
                     if (std::memcmp(listener.data(), salt.data(), listener.size()) != 0) {
                       log("a connection claimed to be a new process of " + describe(rank) +
                           ", but the process listening at its address is another one; ignored");
                       return;
                     }
                     // Only an endpoint to a process that no longer listens at the rank's
                     // address needs replacing. (Not connected, or connected to the process
                     // there now: the hello before was a stranger's, or this one connected since.)
                     const OutPeer& p = peers_[rank];
                     if (p.state != OutPeer::State::kConnected || p.listenerSalt == listener) return;
                     onRestarted(rank, /*confirmedLater=*/true, oldPid);
                   });
}

void UcxTransport::protect(SendOp& op) {
  Protected& pr = protected_;
  const bool same = pr.source && pr.source.owner() == op.bytes.owner() &&
                    pr.data == op.bytes->data() && pr.size == op.bytes->size() && pr.tag == op.tag;
  if (!same) {
    pr.source = op.bytes;
    pr.owner = op.bytes.owner();
    pr.data = op.bytes->data();
    pr.size = op.bytes->size();
    pr.tag = op.tag;
    pr.counter = ++counter_;
    pr.tagged = false;
    if (options_.encrypt) {
      auto out = std::make_shared<Bytes>(pr.size);
      pr.payloadTag = session_->seal(pr.counter, *op.bytes, *out);
      pr.sent = SharedBytes(std::move(out));
      pr.tagged = true;
    } else {
      // The payload's tag is computed when the message first goes out as an active message
      // (payloadTagFor): a frame that goes through shared memory needs none (docs/security.md).
      pr.payloadTag = auth::Mac{};
      pr.sent = nullptr;
    }
  }
  if (options_.encrypt) op.bytes = pr.sent;
  op.payloadTagPending = !options_.encrypt;
  putLe(op.header.data() + kHeaderBytes, pr.counter, 8);
  std::memcpy(op.header.data() + kHeaderBytes + 8, pr.payloadTag.data(), pr.payloadTag.size());
}

void UcxTransport::payloadTagFor(SendOp& op) {
  if (!op.payloadTagPending) return;
  op.payloadTagPending = false;
  const uint64_t counter = getLe(op.header.data() + kHeaderBytes, 8);
  Protected& pr = protected_;
  const bool same = pr.source && pr.source.owner() == op.bytes.owner() &&
                    pr.data == op.bytes->data() && pr.size == op.bytes->size() &&
                    pr.tag == op.tag && pr.counter == counter;
  auth::Mac tag;
  if (same && pr.tagged) {
    tag = pr.payloadTag;  // computed for another neighbour already: once per message
  } else {
    tag = session_->payloadTag(counter, *op.bytes);
    if (same) {
      pr.payloadTag = tag;
      pr.tagged = true;
    }
  }
  std::memcpy(op.header.data() + kHeaderBytes + 8, tag.data(), tag.size());
}

namespace {
// What the header tag covers besides the header and the trailer's counter and payload tag: the
// receiver and the payload's length.
std::array<std::byte, 12> bound(int receiver, uint64_t length) {
  std::array<std::byte, 12> b{};
  putLe(b.data(), static_cast<uint32_t>(receiver), 4);
  putLe(b.data() + 4, length, 8);
  return b;
}
}  // namespace

void UcxTransport::sign(std::byte* header, size_t bytes, int to, uint64_t length) {
  std::byte* t = header + bytes - kAuthTrailerBytes;
  const auto extra = bound(to, length);
  const auth::Mac tag = session_->headerTag(
      {std::span<const std::byte>(header, bytes - kAuthTrailerBytes),
       std::span<const std::byte>(t, 24), extra});
  std::memcpy(t + 24, tag.data(), tag.size());
  std::memset(t + 40, 0, 8);
}

void UcxTransport::rejectAuth(const std::string& why, bool replay) {
  stats_.corruptMessages++;
  if (replay) {
    stats_.replayedMessages++;
  } else {
    stats_.unauthenticatedMessages++;
  }
  log("rejected a message: " + why);
}

bool UcxTransport::verifyHeader(int sender, const std::byte* header, size_t bytes, uint64_t length,
                                uint64_t& counter, auth::Mac& payloadTag, const char* what) {
  InPeer& in = senders_[sender];
  const std::string from = std::string(what) + " claiming to come from " + describe(sender);
  if (!in.session) {
    rejectAuth(from + ", which has not proven the cluster's key to this peer", false);
    return false;
  }
  const std::byte* t = header + bytes - kAuthTrailerBytes;
  const auto extra = bound(options_.rank, length);
  const auth::Mac expected = in.session->headerTag(
      {std::span<const std::byte>(header, bytes - kAuthTrailerBytes),
       std::span<const std::byte>(t, 24), extra});
  if (!auth::equal(expected, std::span<const std::byte>(t + 24, auth::kMacBytes)) ||
      getLe(t + 40, 8) != 0) {
    rejectAuth(from + ": its header tag does not verify (forged, altered, or meant for another "
                      "peer)",
               false);
    return false;
  }
  counter = getLe(t, 8);
  std::memcpy(payloadTag.data(), t + 8, payloadTag.size());
  if (!in.window.fresh(counter)) {
    rejectAuth(from + ": message " + std::to_string(counter) + " was received before (a replay)",
               true);
    return false;
  }
  return true;
}

bool UcxTransport::openPayload(int sender, uint64_t counter, const auth::Mac& payloadTag,
                               std::span<const std::byte> payload, std::shared_ptr<Bytes>& plain) {
  InPeer& in = senders_[sender];
  bool ok = false;
  if (options_.encrypt) {
    plain = recvPool_.acquire(payload.size());
    ok = in.session->open(counter, payload, payloadTag, *plain);
  } else {
    ok = auth::equal(in.session->payloadTag(counter, payload), payloadTag);
  }
  if (!ok) {
    plain.reset();
    rejectAuth("a message from " + describe(sender) + ": its payload does not verify", false);
    return false;
  }
  if (!in.window.accept(counter)) {  // a copy that was verified meanwhile (rendezvous)
    plain.reset();
    rejectAuth("a message from " + describe(sender) + ": message " + std::to_string(counter) +
                   " was received before (a replay)",
               true);
    return false;
  }
  return true;
}

}  // namespace starling::transport::ucx::detail
