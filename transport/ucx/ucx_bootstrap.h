// Internal to transport/ucx: the bootstrap that stands in front of UCX.
//
// Every rank listens on its scenario address with a plain TCP socket of its own (not UCX's
// sockaddr listener, whose connection manager in UCX 1.13 aborts the process on 17 zero bytes).
// A rank that wants to send to a neighbour connects there and runs a four-message handshake:
//
//   client -> server  Hello      64 B  magic, from, to, nodes, keyed?, client nonce, client salt
//   server -> client  Challenge  48 B  magic, server rank, status, server nonce, server salt's
//                                      first 12 bytes
//   client -> server  Proof      40 B  HMAC(handshake key, "client" | Hello | Challenge)
//   server -> client  Welcome    48 B  status, address length, HMAC(handshake key, "server" |
//                                      Hello | Challenge | Proof | address), then the server's
//                                      UCX worker address (at most 4 KiB)
//
// The client then opens a UCX endpoint from the worker address. Without a cluster key the proofs
// are zero and not checked; with one, a client that cannot prove the key gets no worker address
// (refused, logged with its address, counted) and a server that cannot prove it is not used.
// The server learns the client's salt, from which it derives the client's session key for the
// frames that follow (auth.h). Every read has a bounded size and every connection a deadline;
// anything that is not this protocol closes the connection and is counted.
// Thread-safety: driven by the transport's thread through its io_context.
#pragma once

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/auth.h"

namespace starling::transport::ucx::detail {

inline constexpr size_t kHelloBytes = 64;
inline constexpr size_t kChallengeBytes = 48;
inline constexpr size_t kProofBytes = 40;
inline constexpr size_t kWelcomeBytes = 48;
inline constexpr size_t kMaxWorkerAddressBytes = 4096;
// Handshakes served at once. A connection beyond them takes the place of the oldest one (closed
// and counted): idle connections (a flood of them, or port scans) cost a peer nothing it needs,
// since a real neighbour's handshake takes a millisecond and always finds a place.
inline constexpr size_t kMaxServerSessions = 64;
// A client must send its hello within this (or the handshake timeout, if shorter).
inline constexpr std::chrono::milliseconds kHelloTimeout{2000};
// Lines about refused or dropped connections: at most one a second, with a count of those left out.
inline constexpr std::chrono::seconds kLogInterval{1};

using WorkerAddress = std::vector<std::byte>;

// The challenge carries the first 12 bytes of the server's salt (its bytes 36..47, zero before
// this field existed): a neighbour that is told of a new process of a rank without a key asks
// the rank's address which process listens there (UcxTransport::onAccepted).
inline constexpr size_t kSaltPrefixBytes = 12;
using SaltPrefix = std::array<std::byte, kSaltPrefixBytes>;

struct BootstrapConfig {
  int rank = 0;
  int nodes = 0;
  const auth::ClusterKey* key = nullptr;  // null: no authentication
  auth::Nonce salt{};                      // this process's session salt (auth.h)
  WorkerAddress workerAddress;
  std::chrono::milliseconds timeout{10000};  // per handshake
  std::function<void(const std::string&)> log;
};

// A verified client: its rank and session salt.
using AcceptedFn = std::function<void(int rank, const auth::Nonce& salt)>;
// A finished client handshake: ok with the server's worker address; kUnavailable when the
// server could not be reached or the connection broke (worth retrying); kFailedPrecondition when
// it answered and refused us, or could not prove the key (not worth retrying).
// The server's worker address, and the first bytes of its salt (which process it is).
using ConnectedFn = std::function<void(const core::Status&, WorkerAddress, const SaltPrefix&)>;

class Bootstrap {
 public:
  Bootstrap(boost::asio::io_context& io, BootstrapConfig config, AcceptedFn accepted);
  ~Bootstrap();

  // Binds and listens on `own` (errors name the address).
  core::Status listen(const sockaddr_storage& own, const std::string& describe);
  // Starts a handshake with rank `peer` at `addr`; `done` runs once, from the io_context, unless
  // cancel(peer) or close() comes first.
  void connect(int peer, const sockaddr_storage& addr, ConnectedFn done);
  void cancel(int peer);
  // Asks whether rank `peer` is alive at `addr`: a hello marked as a ping, which the server
  // answers with its challenge and then closes quietly (not counted, not logged). `done` runs
  // once: ok when the challenge says rank `peer` of this run; kUnavailable when the connection
  // was refused or broke, or someone else answered; kTimeout after `timeout`. With ok it also
  // gets the first kSaltPrefixBytes of the answering process's salt (which process listens on
  // the address now).
  using PingFn = std::function<void(const core::Status&, const SaltPrefix&)>;
  void ping(int peer, const sockaddr_storage& addr, std::chrono::milliseconds timeout, PingFn done);
  // Closes the listener and every connection; no callback runs afterwards.
  void close();

  uint64_t refused() const { return refused_; }    // clients that could not prove the key
  uint64_t rejected() const { return rejected_; }  // connections that broke the protocol

 private:
  struct Server;
  struct Client;
  void accept();
  void serve(std::shared_ptr<Server> s);
  void endServer(const std::shared_ptr<Server>& s, const std::string& why, bool refusedKey);
  void finishClient(int peer, uint64_t id, const core::Status& st, WorkerAddress address);
  // config_.log, at most once per kLogInterval; lines left out are counted in the next one.
  void logLimited(const std::string& line);

  boost::asio::io_context& io_;
  BootstrapConfig config_;
  AcceptedFn accepted_;
  std::optional<auth::Digest> handshakeKey_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::map<Server*, std::shared_ptr<Server>> servers_;
  std::map<int, std::shared_ptr<Client>> clients_;
  struct Ping;
  std::map<uint64_t, std::shared_ptr<Ping>> pings_;
  uint64_t nextPingId_ = 1;
  uint64_t nextClientId_ = 1;
  uint64_t refused_ = 0;
  uint64_t rejected_ = 0;
  uint64_t serverSeq_ = 0;                                 // accept order, for eviction
  std::chrono::steady_clock::time_point lastLog_{};
  uint64_t unlogged_ = 0;
  bool closed_ = false;
};

// Message builders and checks, exposed for the tests (ucx_bootstrap.cc).
namespace bootstrap {
// ping: the hello of Bootstrap::ping (bit 0 of the flags at byte 20).
std::array<std::byte, kHelloBytes> hello(int from, int to, int nodes, bool keyed,
                                         const auth::Nonce& clientNonce, const auth::Nonce& salt,
                                         bool ping = false);
}  // namespace bootstrap

}  // namespace starling::transport::ucx::detail
