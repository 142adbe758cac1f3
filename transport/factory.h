// The one construction point for network transports. Only this factory knows which backends the
// build has (STARLING_HAVE_UCX); callers describe what they need and get a Transport.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/auth.h"
#include "transport/transport.h"

namespace starling::transport {

struct NetworkOptions {
  int rank = 0;
  std::vector<std::string> addresses;  // "host:port" of every rank, indexed by rank
  std::string tls = "tcp";             // "tcp" or "shm"
  std::string ucxTls;                  // verbatim UCX_TLS when not empty
  std::chrono::milliseconds connectTimeout{10000};
  size_t maxEndpoints = 64;
  // With shared memory in the UCX transports: large frames to neighbours on this host go through
  // sealed shared-memory segments (one copy, zero on receive) instead of UCX's own protocols.
  bool sharedMemoryFrames = true;
  size_t sharedMemoryThreshold = 16384;  // smaller messages stay on UCX active messages
  std::chrono::microseconds spin{50};    // polling before sleeping on the event fd
  // Poll until the awaited message comes, never sleeping on the event fd (each poll still yields
  // the core). A wake-up costs far more than a small message on a busy or virtualised host, and
  // a rank that sleeps makes its neighbours wait long enough to sleep too (docs/bench_gossip.md,
  // "A host with a core per peer"). For hosts with a core per rank: coreForEachLocalRank.
  bool busyPoll = false;
  bool eagerSends = false;  // UCX: every message eagerly, no rendezvous (ucx_transport.h)
  std::function<void(const std::string&)> log;  // diagnostics, one line each (default stderr)
  // Receives from a neighbour whose connection failed fail soon after (kPeerGone) rather than at
  // their deadlines: for runs that carry on without lost peers (faults.on_peer_loss "continue").
  bool failReceivesOfLostPeers = false;
  // The cluster's key (auth.h): peers must prove it and every message is authenticated with it;
  // `encrypt` also encrypts payloads. Null: no authentication (frames keep their CRC).
  std::shared_ptr<const auth::ClusterKey> key;
  bool encrypt = false;
};

// Whether this host has a core for each rank of `addresses` placed on it (ranks whose host is
// `addresses[rank]`'s, loopback names counting as one host) and at least 4 cores: where the
// scenario's busy_poll "auto" polls. Cores are those this process may run on.
bool coreForEachLocalRank(const std::vector<std::string>& addresses, int rank);
// The same with the host's core count given (for tests).
bool coreForEachLocalRank(const std::vector<std::string>& addresses, int rank, int cores);

// A UCX transport for `options.rank`. kFailedPrecondition when this build has no UCX;
// kInvalidArgument for a malformed address; kIoError when UCX cannot start or listen.
core::Result<std::unique_ptr<Transport>> createNetworkTransport(const NetworkOptions& options);

// The UCX_TLS string a `tls` choice stands for.
std::string ucxTlsFor(const std::string& tls);

}  // namespace starling::transport
