// In-process transport: every rank of a run lives in this process.
//
// An InprocHub holds one mailbox per rank; createTransport(hub, rank) returns that rank's endpoint.
// A message is the sender's shared buffer itself (no copy), delivered when the receiver calls
// progress(). allocate() lends frames from one pool for the whole hub, so a rank writes its
// message into a frame another rank let go of moments ago, still in cache. Used by the simulator
// (many ranks on one thread), by in-process Peers and by tests (ranks on threads).
//
// Thread-safety: the hub is internally locked, so endpoints may be driven from different threads;
// each endpoint must be driven by one thread at a time. The hub must outlive its endpoints.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "transport/transport.h"

namespace starling::transport::inproc {

// The mailboxes of every rank of a run. Opaque; see the file comment for thread-safety.
class InprocHub {
 public:
  struct State;
  explicit InprocHub(int ranks);
  ~InprocHub();
  InprocHub(const InprocHub&) = delete;
  InprocHub& operator=(const InprocHub&) = delete;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

std::unique_ptr<InprocHub> createHub(int ranks);
// With `vouch`, every message this endpoint sends is delivered marked intact
// (SharedBytes::intact()): the receiver skips the frame's CRC, as for a frame read out of a
// same-host sender's shared memory, since nothing lies between two ranks of one process. For the
// simulator, whose senders are all nodes writing sealed frames (a fault injector that damages
// frames takes it back on the links it damages). Off for in-process Peers and tests, which may
// hand over any bytes and expect the CRC to catch them.
std::unique_ptr<Transport> createTransport(InprocHub& hub, int rank, bool vouch = false);

// Rank `rank`'s process is gone (the simulator's kill, or a rank that left the run), as a
// network transport sees a peer whose process died: the messages it sent before are still
// delivered, every other receive from it completes with kPeerGone naming `why`, a ping of it
// answers kUnavailable (nobody listens there), and what is sent to it is discarded (the send
// completes). Its own endpoint must not be driven any more.
void closeRank(InprocHub& hub, int rank, const std::string& why);

// Completes every receive of `rank` still waiting for a message that `expire(from, tag)` picks
// with kTimeout, as their deadlines would (the simulator's virtual time: once every rank has sent
// its messages of a round, a receive of that round still waiting waits in vain). Returns how
// many.
size_t expireWaiting(InprocHub& hub, int rank,
                     const std::function<bool(int from, const Tag& tag)>& expire);

}  // namespace starling::transport::inproc
