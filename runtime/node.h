// Node: one peer of a run. It owns its algorithm and drives one round at a time over a borrowed
// Transport: ask the algorithm for its message, encode it once into a wire frame, send that frame
// to every neighbour of the round's graph, receive theirs, decode and hand them to the algorithm
// sorted by neighbour id.
//
// The same Node runs inside the simulator (many nodes, one thread, in-process transport) and as a
// peer process. Round protocol:
//   startRound(round, topology, step, deadline)  -> sends, posts receives (never blocks)
//   while (!roundComplete()) transport.progress(...)
//   finishRound()                          -> decodes and absorbs; errors name the neighbour
// Thread-safety: none; a Node and its transport are driven by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "optim/algorithm.h"
#include "runtime/core/status.h"
#include "runtime/transport/transport.h"
#include "topology/schedule.h"

namespace starling::runtime {

// Channel of the algorithm's per-round message (the only one for now).
inline constexpr uint32_t kModelChannel = 0;

template <typename T>
class Node {
 public:
  Node(int rank, std::unique_ptr<optim::Algorithm<T>> algorithm, transport::Transport& transport);

  core::Status startRound(uint64_t round, const topology::RoundTopology& topology, double stepSize,
                          transport::Clock::time_point deadline);
  bool roundComplete() const { return pending_ == 0; }
  core::Status finishRound();

  int rank() const { return rank_; }
  std::span<const T> model() const { return algorithm_->model(); }
  const optim::Algorithm<T>& algorithm() const { return *algorithm_; }
  // Frame bytes this node has put on the wire (each copy to each neighbour counted).
  uint64_t bytesSent() const { return bytesSent_; }
  uint64_t corruptMessages() const { return corruptMessages_; }

 private:
  struct Slot {
    int peer;
    double weight;
    transport::SharedBytes bytes;
    core::Status status;
  };

  const int rank_;
  std::unique_ptr<optim::Algorithm<T>> algorithm_;
  transport::Transport& transport_;

  // The round in flight.
  optim::RoundInfo info_;
  size_t messageSize_ = 0;
  transport::SharedBytes ownFrame_;  // this round's outgoing frame
  std::span<const T> own_;           // its payload, as the algorithm wrote it
  std::vector<Slot> slots_;
  size_t pending_ = 0;
  core::Status sendStatus_;
  bool inRound_ = false;

  std::vector<std::vector<T>> scratch_;  // decode copies for unaligned frames
  std::vector<optim::NeighborMessage<T>> messages_;
  uint64_t bytesSent_ = 0;
  uint64_t corruptMessages_ = 0;
};

}  // namespace starling::runtime
