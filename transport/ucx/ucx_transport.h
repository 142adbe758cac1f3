// UCX transport: real peers in separate processes (or machines), over UCX active messages.
//
// One UCX context and worker per transport. Every rank listens on its own address with a
// bootstrap socket of its own (ucx_bootstrap.h: a handshake, authenticated with the cluster's key
// when there is one, that hands out the UCX worker address); a rank opens an endpoint to a neighbour the first time it sends to it (lazily: a
// time-varying graph touches new neighbours over time) and keeps at most `maxEndpoints` of them,
// closing the least recently used idle one beyond that. Each direction of a pair has its own
// endpoint: rank a's sends to b travel on the endpoint a opened, so there is never a race over who
// connects. Messages are active messages whose 24-byte header carries (sender, round, channel);
// large frames use UCX's rendezvous protocol and land directly in the receive buffer.
//
// The worker sleeps on its event file descriptor (through a Boost.Asio io_context) when there is
// nothing to do, so an idle peer uses no CPU. Deadlines: a neighbour that cannot be reached within
// `connectTimeout` fails the send with kUnavailable naming its rank and address; a receive that
// outlives its deadline completes with kTimeout; a neighbour whose connection breaks after it was
// established fails with kPeerGone. Malformed active messages (bad header, unknown sender) are
// dropped, logged once each and counted in stats().corruptMessages.
//
// Thread-safety: a transport is driven by one thread (its node's), which calls progress().
// This header is internal to runtime/; nothing outside transport/ucx includes UCX.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/auth.h"
#include "transport/transport.h"

namespace starling::transport::ucx {

struct PeerAddress {
  std::string host;
  uint16_t port = 0;
  std::string toString() const { return host + ":" + std::to_string(port); }
};

struct Options {
  int rank = 0;
  // Where every rank listens, indexed by rank; addresses[rank] is this transport's own.
  std::vector<PeerAddress> addresses;
  // UCX transports (UCX_TLS), e.g. "tcp,self" or "tcp,sysv,posix,cma,self" for shared memory.
  // tcp must stay in the list: it carries connection establishment.
  std::string tls = "tcp,self";
  std::chrono::milliseconds connectTimeout{10000};
  size_t maxEndpoints = 64;
  // Neighbours on the same host exchange messages of at least `sharedMemoryThreshold` bytes
  // through shared memory: one copy into a sealed segment, none on the receiving side
  // (ucx_shm.h). Used only after a handshake shows that the receiver can map this process's
  // segments; otherwise, and for smaller messages, active messages carry everything.
  bool sharedMemoryFrames = false;
  size_t sharedMemoryThreshold = 16384;
  // How long progress() polls (yielding the core between polls) before it sleeps on the worker's
  // event fd. A neighbour's message that lands within it costs no wake-up; 0 sleeps at once.
  std::chrono::microseconds spin{50};
  // Never sleep while waiting: poll (yielding the core) until the message or the deadline.
  bool busyPoll = false;
  // Send every message eagerly (UCX_RNDV_THRESH=inf unless the environment sets it): the sender
  // pushes a large frame out at each progress() without waiting for the receiver to answer a
  // rendezvous, so a frame keeps moving while both ends compute between polls (DiLoCo's
  // overlap: docs/benchmarks.md, "Overlap on a bandwidth-limited link").
  bool eagerSends = false;
  // Where diagnostics go (one line each); default: stderr.
  std::function<void(const std::string&)> log;
  // A neighbour whose connection failed (its process died: the kernel closes its sockets) fails
  // the receives from it with kPeerGone kLostPeerGrace later, instead of at their deadlines.
  bool failReceivesOfLostPeers = false;
  // The cluster's key (auth.h): peers prove it in the bootstrap handshake and every message
  // carries tags under it. Null: no authentication, frames carry their CRC only.
  std::shared_ptr<const auth::ClusterKey> key;
  // With a key: payloads also travel encrypted (AES-128-GCM).
  bool encrypt = false;
};

// Time a failed neighbour's last messages get to arrive before its receives fail (they travel
// on the connection it opened, which may be read after ours reports the failure).
inline constexpr std::chrono::milliseconds kLostPeerGrace{500};

// Creates the context, the worker and the listener. Errors: kInvalidArgument for a bad rank or
// address, kIoError when UCX cannot start or the listen address cannot be bound.
core::Result<std::unique_ptr<Transport>> createTransport(const Options& options);

// Parses "host:port". kInvalidArgument on anything else.
core::Result<PeerAddress> parseAddress(const std::string& text);

}  // namespace starling::transport::ucx
