// Node: one peer of a run. It owns its algorithm and drives one round at a time over a borrowed
// Transport: ask the algorithm for its message, encode it once into a wire frame, send that frame
// to every neighbour of the round's graph, receive theirs, decode and hand them to the algorithm
// sorted by neighbour id.
//
// The same Node runs inside the simulator (many nodes, one thread, in-process transport) and as a
// peer process. Round protocol:
//   startRound(round, topology, step, deadline)  -> sends, posts receives (never blocks)
//   while (!roundComplete()) transport.progress(...)
//   finishRound()                          -> absorbs; errors name the neighbour
// Each message is checked (frame, CRC, size) when it arrives. A malformed one is counted, logged
// through the log callback, and the neighbour's message is asked for again with the same
// deadline, so a forged or corrupted frame never replaces the genuine one.
// Thread-safety: none; a Node and its transport are driven by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "compression/compressor.h"
#include "optim/algorithm.h"
#include "core/status.h"
#include "engine/options.h"
#include "transport/buffer_pool.h"
#include "transport/transport.h"
#include "topology/schedule.h"

namespace starling::engine {

// Channel of the algorithm's per-round message (the only one for now).
inline constexpr uint32_t kModelChannel = 0;

template <typename T>
class Node {
 public:
  using LogFn = std::function<void(const std::string&)>;
  // `codec` (borrowed, may be null) compresses every message; null is the identity codec (the
  // vector itself in the state's precision), which the algorithm writes straight into the frame
  // and receivers read in place. `codecSeed` seeds the codec's
  // random choices (stochastic rounding, random sparsification) for this node.
  // `codecSharedSeed` is the same at every node of a run: codecs whose frames must add up across
  // senders (Count-Sketch hashes) derive each round's choices from it.
  Node(int rank, std::unique_ptr<optim::Algorithm<T>> algorithm, transport::Transport& transport,
       LogFn log = {}, const compression::Compressor<T>* codec = nullptr, uint64_t codecSeed = 0,
       uint64_t codecSharedSeed = 0);

  // The schedule's support graph (borrowed; must outlive the node). Used when the algorithm
  // tracks its neighbours (Algorithm::tracksNeighbors): messages then go to and come from every
  // support neighbour each round, with weight 0 where this round's graph has no edge.
  void setSupport(const topology::Graph* support) { support_ = support; }

  // Divergence guard: a round whose message or new model has a non-finite coordinate, or whose
  // model has one with |x_k| > maxAbs, fails with kDiverged "diverged at round R (rank i): ..." at that round.
  // Non-finite values are always caught; maxAbs = infinity turns the magnitude check off.
  void setDivergenceLimit(double maxAbs) { divergenceLimit_ = maxAbs; }

  // The neighbour whose message did not come (or to which a send failed) in the round that
  // failed: the peer this node lost. Unset while rounds succeed.
  std::optional<int> lostNeighbour() const { return lostNeighbour_; }

  // Peer loss (faults.on_peer_loss "continue", docs/algorithms.md §18). With tolerateLoss, a
  // neighbour whose message does not come by the deadline (or whose connection fails) does not
  // fail the round: it becomes lost (takeNewlyLost() reports it once). A lost neighbour gets no
  // messages and none is awaited from it; until the membership changes, this node's own message
  // stands in for it, with its weight (as if the lost node held this node's model).
  void setTolerateLoss(bool on) { tolerateLoss_ = on; }
  void setLost(int peer);
  // A lost neighbour rejoined the run (faults.restart): messages go to it and come from it again.
  void setFound(int peer);
  bool isLost(int peer) const;
  std::vector<int> takeNewlyLost();
  // Why `peer` was lost (the status that made it so), or "".
  std::string lostWhy(int peer) const;
  // Waits for `peer`'s message of this round until `until` at least (it said it is alive but
  // delayed: MembershipGossip's liveness notices).
  void extend(int peer, transport::Clock::time_point until);
  // The neighbours whose message of the round in flight has not come yet and who are not lost
  // (none between rounds, and none in asynchronous mode).
  std::vector<int> awaited() const;
  // A membership change: the algorithm starts afresh from this node's current model (what it
  // keeps about the lost nodes cannot be corrected locally), codec state included; what the old
  // one carries across a restart (optim::CarriedState: DiLoCo's outer momentum) goes to the new
  // one.
  void restartAlgorithm(std::unique_ptr<optim::Algorithm<T>> algorithm);
  // That carried state, for a returning neighbour's join state, and its loading there
  // (kInvalidArgument when it does not fit the algorithm; empty: nothing to load).
  std::vector<double> carriedState() const;
  core::Status carryState(std::span<const double> values);

  // Asynchronous gossip (docs/algorithms.md §26): no round barrier. Each neighbour j keeps one
  // receive outstanding, for its next round l_j + 1; a message that comes becomes the newest
  // held from j (l_j advances), whatever this node's own round. Round r is complete once every
  // neighbour has l_j >= max(r - maxStaleness, 0); finishRound mixes the newest message held from
  // each (sorted by peer id as always) and keeps them for later rounds. maxStaleness 0 is the
  // synchronous round exactly: its receives stop at the round in flight (l_j <= r), so round r
  // mixes the round-r messages and newer ones wait in the transport. Only the wait for a
  // neighbour beyond the bound has the round's deadline: a receive that times out while its
  // neighbour is within the bound is asked for again. A failed send does not fail a round (a
  // neighbour that finished its rounds may have left). For DSGD on a static graph, uncompressed,
  // without peer loss (scenario/scenario_async.cc refuses the rest). Set before the first round.
  void setAsynchronous(uint64_t maxStaleness);
  bool asynchronous() const { return async_; }
  // max(r - l_j, 0) of the round last finished, largest over the neighbours, and largest over
  // all rounds so far (0 before any, and always 0 when synchronous).
  uint64_t lastStaleness() const { return lastStaleness_; }
  uint64_t maxStalenessSeen() const { return maxStalenessSeen_; }
  // The round of the newest message held from `peer` (asynchronous mode), -1 before any.
  int64_t newestRound(int peer) const;

  // Messages travel on `channel` (kModelChannel unless set): two nodes of one peer that share a
  // transport (the public Peer's step() and mix() states) keep theirs apart.
  void setChannel(uint32_t channel) { channel_ = channel; }

  // The codec's stream state (error feedback's residual) one per stream: round r's message is
  // stream r mod `streams` (Streaming DiLoCo's fragments, whose messages are different pieces
  // of the model: a residual carried into another fragment would land on other parameters).
  // kFailedPrecondition for a codec whose receivers keep state (LGC), whose frames are one
  // sequence. Set before the first round.
  core::Status setCodecStreams(size_t streams);

  // What every runner sets alike on a new node, before its first round: `run`'s divergence
  // limit and asynchronous gossip, the schedule's `support` graph (borrowed) and the `channel`.
  void configure(const Options& run, const topology::Graph* support,
                 uint32_t channel = kModelChannel);

  // The algorithm's local step before its first round (optim::LocalStart), on its own: no
  // message. Only needed by callers that hand the algorithm a gradient per call (the public
  // Peer); startRound runs it otherwise. needsStart(): the algorithm has one and it has not run.
  core::Status startAlgorithm(uint64_t round, double stepSize);
  bool needsStart() const { return steps_.start != nullptr && steps_.start->needsStart(); }

  core::Status startRound(uint64_t round, const topology::RoundTopology& topology, double stepSize,
                          transport::Clock::time_point deadline);
  // True once every neighbour's message is in, or as soon as a send has failed (the round cannot
  // succeed then, and waiting for the receives' deadlines would only delay the error).
  // Asynchronous mode: also once the round's deadline has passed (a receive posted in an earlier
  // round may have a later deadline of its own).
  bool roundComplete() const {
    return pending_ == 0 || !sendStatus_.isOk() || (async_ && transport::Clock::now() >= deadline_);
  }
  core::Status finishRound();
  // The algorithm's work during the exchange (optim::ExchangeOverlap), once per round
  // between startRound and finishRound: the engine's wait runs it first, with `poll` moving the
  // transport; finishRound runs it if nobody has.
  void computeDuringExchange(const std::function<void()>& poll);

  int rank() const { return rank_; }
  std::span<const T> model() const { return algorithm_->model(); }
  const optim::Algorithm<T>& algorithm() const { return *algorithm_; }
  // Frame bytes this node has put on the wire (each copy to each neighbour counted).
  uint64_t bytesSent() const { return bytesSent_; }
  uint64_t corruptMessages() const { return corruptMessages_; }
  // Sends handed to the transport whose completion has not been reported yet. A peer drives
  // progress until this is 0 after its last round, so its neighbours get their last messages.
  size_t sendsInFlight() const { return sendsInFlight_; }
  // Sum over rounds of ||C(v) - v||^2 / ||v||^2 for this node's messages v (rounds with v = 0
  // left out), and the number of rounds summed. Zero without a lossy codec.
  double compressionErrorSum() const { return compressionErrorSum_; }
  uint64_t compressionErrorCount() const { return compressionErrorCount_; }

  // Checkpoints (core/state.h): the algorithm's state, the codec's random stream and stream
  // state (error-feedback residuals, ...), the counters above and the neighbours it holds lost.
  // Between rounds only (a visit during a round fails).
  void visitState(core::StateVisitor& v);

 private:
  struct Slot {
    int peer;
    double weight;
    transport::SharedBytes bytes;
    std::span<const T> values;  // decoded view into `bytes` (or into scratch_)
    core::Status status;
    // A well-formed frame of another length or element type came from this neighbour: its
    // model is not the size of ours. Said in the round's error if its message never comes.
    std::string mismatch;
    bool standIn = false;  // a lost neighbour: this node's own message stands in
    transport::Clock::time_point extendedUntil{};
    // Asynchronous mode: the round of the newest message held (-1: none yet), and whether a
    // receive (for round newest + 1) is outstanding.
    int64_t newest = -1;
    bool posted = false;
  };

  void postReceive(size_t slot);
  void postReceive(size_t slot, transport::Clock::time_point deadline);
  void onMessage(size_t slot, const core::Status& st, transport::SharedBytes bytes);
  core::Result<std::span<const T>> decodeMessage(size_t slot, const transport::SharedBytes& bytes);
  // Asynchronous mode: the oldest round each neighbour's newest message may be from this round,
  // the receive of `slot`'s next message, and its completion.
  int64_t neededRound() const;
  void postAsyncReceive(size_t slot, transport::Clock::time_point deadline);
  void onAsyncMessage(size_t slot, uint64_t round, const core::Status& st,
                      transport::SharedBytes bytes);
  void postNextAsyncReceive(size_t slot);
  core::Status finishAsyncRound();
  // Says in slot.mismatch when `bytes` is a whole frame of another size or element type.
  void noteMismatch(Slot& slot, const transport::SharedBytes& bytes);
  // The absorb shared by both modes, over messages_ (or the accumulator): checks the new model.
  core::Status absorbMessages();
  // kDiverged unless every |values[k]| <= maxAbs (NaN never is).
  core::Status checkFinite(std::span<const T> values, const char* what, double maxAbs) const;
  // checkFinite(payload, "its message", inf) and the frame's CRC32C seal in one pass; with
  // `prepareBlocks` the algorithm writes each block first (Algorithm::prepareBlock).
  core::Status checkAndSeal(std::span<std::byte> frame, std::span<T> payload, bool prepareBlocks);
  // Writes this round's message into `frame` (codec_->maxEncodedBytes bytes) and returns the
  // frame's length; own_ is then the message as the neighbours decode it.
  core::Result<size_t> writeMessage(std::span<std::byte> frame);

  const int rank_;
  uint32_t channel_ = kModelChannel;
  LogFn log_;
  transport::Tag tag_;
  transport::Clock::time_point deadline_;
  std::unique_ptr<optim::Algorithm<T>> algorithm_;
  optim::AlgorithmCapabilities<T> steps_;  // algorithm_'s optional capabilities, asked once
  transport::Transport& transport_;

  // The round in flight.
  optim::RoundInfo info_;
  size_t messageSize_ = 0;
  transport::BufferPool framePool_{4};  // outgoing frames, reused once every neighbour let go
  transport::SharedBytes ownFrame_;     // this round's outgoing frame
  // The frames of the last absorbed round, own first, while the algorithm still reads them
  // (Algorithm::holdsMessages): kept until the next absorb or restartAlgorithm.
  bool computedDuringExchange_ = false;
  std::vector<transport::SharedBytes> kept_;
  std::span<const T> own_;           // its payload, as the algorithm wrote it
  std::vector<Slot> slots_;
  size_t pending_ = 0;
  core::Status sendStatus_;
  bool inRound_ = false;

  std::vector<std::vector<T>> scratch_;  // decode copies (unaligned frames, lossy codecs)
  std::unique_ptr<compression::Compressor<T>> identity_;  // the codec when none is given
  const compression::Compressor<T>* codec_ = nullptr;     // never null
  compression::CodecCapabilities<T> caps_;  // codec_'s optional capabilities, asked once
  bool inPlace_ = false;  // caps_.inPlace: the algorithm writes into the frame
  core::Rng codecRng_{0};
  std::vector<T> outgoing_;    // lossy codecs: what prepare wrote, before compression
  std::vector<T> ownDecoded_;  // lossy codecs: this node's frame as its neighbours decode it
  // One stream state per codec stream (setCodecStreams; one unless set): round r's is r mod n.
  std::vector<std::unique_ptr<compression::CodecState>> codecStates_;
  compression::CodecState* codecState() const {
    return codecStates_[info_.round % codecStates_.size()].get();
  }
  void newCodecStates(size_t streams);
  uint64_t codecSharedSeed_ = 0;
  // A codec whose receivers remember each sender's earlier frames (caps_.receiver, LGC's decoder
  // versions): one state per neighbour, by peer id.
  bool receiverStateful_ = false;
  std::map<int, std::unique_ptr<compression::CodecState>> receiverStates_;
  // Linear codec and an algorithm that only needs the weighted sum: frames are summed in the
  // codec's domain (own frame first, then neighbours in peer order) and decoded once.
  std::unique_ptr<compression::LinearAccumulator<T>> accumulator_;
  std::vector<T> combined_;
  const topology::Graph* support_ = nullptr;
  double compressionErrorSum_ = 0;
  uint64_t compressionErrorCount_ = 0;
  std::vector<optim::NeighborMessage<T>> messages_;
  uint64_t bytesSent_ = 0;
  uint64_t corruptMessages_ = 0;
  size_t sendsInFlight_ = 0;
  double divergenceLimit_ = std::numeric_limits<double>::infinity();
  std::optional<int> lostNeighbour_;
  bool tolerateLoss_ = false;
  std::vector<int> lost_;  // sorted
  std::vector<int> newlyLost_;
  std::map<int, std::string> lostWhy_;

  bool async_ = false;
  uint64_t maxStaleness_ = 0;
  uint64_t lastStaleness_ = 0;
  uint64_t maxStalenessSeen_ = 0;
  bool startedOnce_ = false;                  // a round has started (async slots are built)
  transport::Clock::duration receiveWait_{};  // a round's deadline minus its start
  std::vector<T> spare_;  // async decodes land here first: a rejected frame never overwrites
  // Expires with the node: async receives outlive rounds (and may outlive the node), and their
  // callbacks do nothing once it is gone.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace starling::engine
