// Decentralized algorithms as pure state machines.
//
// Each round the engine (engine/node.h) asks the algorithm for the message it sends to every
// neighbour (prepare), moves the bytes, and hands back the neighbours' messages sorted by peer id
// together with that round's mixing weights (absorb). The algorithm never sees a transport, a
// thread, a file or a rank-to-address map, so the same object runs in a 1,000-node simulation, in
// a UCX peer process and inside a user's trainer.
//
// Thread-safety: none; one algorithm object belongs to one node and is driven by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/state.h"
#include "core/status.h"
#include "core/within.h"
#include "optim/adascale.h"
#include "optim/leader.h"
#include "optim/codistillation.h"
#include "optim/diloco_spec.h"
#include "optim/local_optimizer_spec.h"
#include "optim/objective.h"
#include "optim/regularizer.h"
#include "optim/sketch_spec.h"
#include "optim/step_size.h"

namespace starling::optim {

// Where an algorithm gets its local gradients: full-batch, minibatch or (later) variance-reduced
// estimates of grad f_i. Called from prepare()/absorb() on the node's thread.
template <typename T>
class GradientOracle {
 public:
  virtual ~GradientOracle() = default;
  virtual void gradient(std::span<const T> x, std::span<T> out) = 0;
  // Its state between calls (random stream, variance-reduction tables), for checkpoints
  // (core/state.h). An oracle that cannot be saved says so through the visitor.
  virtual void visitState(core::StateVisitor& v) {
    v.fail("this gradient oracle cannot be checkpointed");
  }
  // The mean loss of the samples behind the last gradient (without the l2 term), for a node's
  // running training loss (Leader SGD); NaN when the oracle does not know it (full gradients,
  // variance-reduced estimators).
  virtual double lastLoss() const { return std::numeric_limits<double>::quiet_NaN(); }
  // AdaScale's statistics of the last gradient (optim/adascale.h), from an oracle that averages
  // micro-batch gradients (AdaScaleOracle); unset otherwise.
  virtual std::optional<AdaScaleSample> lastAdaScaleSample() const { return std::nullopt; }
  // gradient() a block at a time (optim/objective.h), for an oracle whose gradient() is a full
  // gradient with no side effect; nullptr (the default) otherwise. Algorithms that fuse their
  // update with it (exact diffusion, DSGD) call either this or gradient() each round, never both.
  virtual std::unique_ptr<GradientBlocks<T>> gradientBlocks() { return nullptr; }
};

// One neighbour's message for this round, with its mixing weight w_ij.
template <typename T>
struct NeighborMessage {
  int peer;
  double weight;
  std::span<const T> message;
};

struct RoundInfo {
  uint64_t round = 0;
  double stepSize = 0.0;
  double selfWeight = 1.0;  // w_ii of this round's mixing matrix
  int self = -1;            // this node's id, where it stands among the neighbours' peer ids
  // Set for absorb() where the node keeps the round's frames, the memory behind `own` and the
  // neighbours' messages, alive after absorb for as long as the algorithm says it reads them
  // (Algorithm::holdsMessages). Synchronous rounds without a codec accumulator.
  bool messagesKept = false;
  // Set while the message is written into memory the transport lends (a shared-memory segment
  // the neighbours read in place) rather than a buffer it sends from.
  bool messageLent = false;
};

enum class AlgorithmKind {
  kDsgd,
  kExactDiffusion,
  kGradientTracking,
  kChoco,
  kNids,
  kLead,
  kProxLead,
  kDiloco,
};

// One algorithm's descriptor (the table in optim/algorithms.cc, in AlgorithmKind order): its
// scenario name, a one-line summary, and what the scenario reader and writer, the codec rules
// and PeerConfig ask of it. Every algorithm reads "step_size" and "local_optimizer".
struct AlgorithmInfo {
  AlgorithmKind kind;
  const char* name;
  const char* summary;
  bool usesGamma;         // key "gamma", (0, 1], default 1: the consensus step or dual damping
  bool usesAlpha;         // key "alpha", (0, 1], default 0.5: LEAD's reference-point speed
  bool sendsDifferences;  // a difference against a reference point both sides track: a lossy
                          // codec is safe (sendsCompressedDifferences)
  bool proximal;          // a proximal step for a non-smooth regularizer (handlesRegularizer)
};
std::span<const AlgorithmInfo> algorithmKinds();
const AlgorithmInfo& algorithmInfo(AlgorithmKind kind);

const char* algorithmKindName(AlgorithmKind kind);

struct AlgorithmSpec {
  AlgorithmKind kind = AlgorithmKind::kExactDiffusion;
  StepSizeSchedule stepSize;
  double gamma = 1.0;  // choco, dsgd: consensus step size; lead, prox_lead: dual step damping
  double alpha = 0.5;  // lead, prox_lead: how fast the reference point H follows Y-hat
  // The mixing matrix changes between rounds (set from the topology schedule). CHOCO then keeps
  // each neighbour's reference point instead of the running sum over a fixed W.
  bool timeVarying = false;
  // nids, prox_lead: the non-smooth term r (the problem's regularizer); others require none.
  RegularizerSpec regularizer;
  // What each node does to its gradient before the algorithm uses it (docs/algorithms.md §20):
  // sgd leaves it; momentum, adam and lamb replace it by their direction (dsgd and choco only).
  LocalOptimizerSpec localOptimizer;
  // dsgd only: how a node combines its own and its neighbours' updates. kAverage is DSGD's
  // weighted average; kAdasum gossips the models and combines the updates by Adasum
  // (docs/algorithms.md §23, optim/adasum_gossip.h).
  enum class Combine { kAverage, kAdasum };
  Combine combine = Combine::kAverage;
  // The sizes of the model's tensors in the flat vector (Adasum's coefficients are per tensor);
  // empty: one tensor. Not part of the scenario: the runtime fills it from the problem.
  std::vector<size_t> layout;
  // dsgd only: AdaScale's gain and scale-invariant schedule (docs/algorithms.md §22,
  // optim/adascale_gossip.h); the oracle must average micro-batches (AdaScaleOracle).
  std::optional<AdaScaleSpec> adascale;
  // dsgd only: Leader SGD (docs/algorithms.md §24, optim/leader_gossip.h), and the graph's
  // diameter its global elections take (filled by the runtime from the topology).
  std::optional<LeaderSpec> leader;
  uint64_t diameter = 0;
  // dsgd only: the peers codistil instead of averaging models (docs/algorithms.md §25,
  // optim/codistillation_gossip.h). Built by createCodistillationGossip, not createAlgorithm,
  // because the node's gradient oracle must see the neighbours' copies too.
  std::optional<CodistillationConfig> codistillation;
  // dsgd only: the sketch of the model travels, and momentum and error feedback live in sketch
  // space (docs/algorithms.md §27, optim/sketch_gossip.h).
  std::optional<SketchGossipSpec> sketch;
  // diloco only: the inner steps per round and the outer step (docs/algorithms.md §29,
  // optim/diloco.h); the inner optimizer is localOptimizer, the inner step size stepSize.
  DilocoSpec diloco;
};

// True for algorithms whose message is a difference against a reference point that sender and
// receivers both track (CHOCO's x-hat, LEAD's H), which is what makes a lossy compressor safe.
bool sendsCompressedDifferences(AlgorithmKind kind);

// True for algorithms with a proximal step for a non-smooth regularizer (nids, prox_lead).
bool handlesRegularizer(AlgorithmKind kind);

// A value a method reports about its node at every logged round (AdaScale's gain, the leader
// Leader SGD follows); metrics.jsonl has the mean over the nodes under `name`.
struct MethodMetric {
  std::string name;
  double value = 0.0;
};

// Optional capabilities. Most algorithms have none of them; one that has one also implements its
// interface and returns itself from Algorithm::capabilities(), which the Node asks when it is
// given the algorithm, instead of asking every round. Algorithm's non-virtual members of the
// same names go through capabilities() and answer as an algorithm without the capability would.

// Block-wise preparation: the algorithm can write its message a block at a time (plain gossip
// copies its model; exact diffusion's fused update is elementwise once the gradient is taken).
// The engine then calls prepareBlock instead of prepare, once for every block of the message, in
// order from offset 0 to the end, and checks and checksums each block while it is still in
// cache, instead of a pass to write the message and another to read it back. So an algorithm
// may do its whole-vector work at offset 0 and finish its state at the last block. prepare()
// stays the reference: prepareBlock over every block in order writes the same values and
// leaves the same state.
template <typename T>
class BlockPreparation {
 public:
  // Writes elements [offset, offset + out.size()) of this round's message. Returns where the
  // node reads those values back for its check and checksum: `out`, or the same values
  // elsewhere where that is cheaper (plain gossip streams a large message past the cache, and
  // returns the block it copied from).
  virtual std::span<const T> prepareBlock(const RoundInfo& info, size_t offset,
                                          std::span<T> out) = 0;

 protected:
  ~BlockPreparation() = default;
};

// Combined absorption: absorb depends on the neighbours' messages only through
// combined = w_ii own + sum_j w_ij m_j. With a linear codec (a mean-estimate Count-Sketch) the
// engine may then sum the weighted frames in the codec's domain, decode once, and call
// absorbCombined instead of absorb.
template <typename T>
class CombinedAbsorption {
 public:
  virtual void absorbCombined(const RoundInfo& info, std::span<const T> own,
                              std::span<const T> combined) = 0;

 protected:
  ~CombinedAbsorption() = default;
};

// A local start: nids, lead and prox_lead take a local step from x0 before their first round
// (x1 = prox(x0 - eta grad f(x0))), with a gradient at x0, and the first round then asks for the
// gradient at x1. start() is that step alone; prepare() runs it first if nobody did, so a caller
// that owns the problem never needs to know. needsStart() is true until it has run.
template <typename T>
class LocalStart {
 public:
  virtual bool needsStart() const = 0;
  virtual void start(const RoundInfo& info) = 0;

 protected:
  ~LocalStart() = default;
};

// Work during the exchange: local work to do while the round's messages are on the wire
// (DiLoCo's inner steps with "overlap": the next round's, docs/algorithms.md §29). The engine
// calls computeDuringExchange once per round, after the sends are posted and before the absorb,
// whatever else happens in between: from its wait loop, with `poll` moving the transport
// between pieces of work, or, where nothing waits (the simulator), just before the absorb, with
// a `poll` that does nothing. Results must not depend on which.
class ExchangeOverlap {
 public:
  virtual void computeDuringExchange(const std::function<void()>& poll) = 0;

 protected:
  ~ExchangeOverlap() = default;
};

// State carried across a restart: at a membership change every node restarts its algorithm
// from its model (docs/algorithms.md §18); what else the new algorithm should keep from the one
// it replaces (DiLoCo's outer momentum, §29) is carried(), which the node hands to the new one's
// carry(), and which a returning peer takes from its neighbour with the model (§19). carry()
// takes nothing (empty) or exactly what carried() of the same algorithm on the same model size
// returns: kInvalidArgument otherwise, and the state is unchanged.
class CarriedState {
 public:
  virtual std::vector<double> carried() const = 0;
  virtual core::Status carry(std::span<const double> values) = 0;

 protected:
  ~CarriedState() = default;
};

// One neighbour's frame of this round as it came off the wire (FrameMessages::checkFrame passed
// it), with its mixing weight w_ij.
struct NeighborFrame {
  int peer;
  double weight;
  std::span<const std::byte> frame;
};

// Messages that never exist in host memory: an algorithm whose model lives in a device's memory
// (optim/device_gossip.h, Peer::mix on CUDA tensors) encodes its own message into the wire frame
// and decodes its neighbours' frames itself, so the engine only moves frames. The node then
// calls writeFrame instead of prepare and the codec, checkFrame on each frame as it arrives (a
// frame it rejects is counted, logged and asked for again, as a codec's is), and absorbFrames
// instead of absorb, with the frames sorted by peer; a lost neighbour's stand-in is this node's
// own frame. Such an algorithm gets no codec from the node (it has its own) and never runs
// asynchronously; prepare() and absorb() are not called.
class FrameMessages {
 public:
  // The longest frame writeFrame may write.
  virtual size_t maxFrameBytes() const = 0;
  // This round's message as a whole, sealed frame at the start of `frame`; its length.
  virtual core::Result<size_t> writeFrame(const RoundInfo& info, std::span<std::byte> frame) = 0;
  // Whether a neighbour's frame is one this algorithm decodes (sizes, CRC, the codec's checks).
  virtual core::Status checkFrame(std::span<const std::byte> frame) const = 0;
  // The round's combine from the frames (each passed checkFrame; `own` is writeFrame's); then
  // whether every |x_k| <= limit in the model it leaves (NaN never is), the divergence check.
  virtual core::Result<bool> absorbFrames(const RoundInfo& info, std::span<const std::byte> own,
                                          std::span<const NeighborFrame> neighbors,
                                          double limit) = 0;

 protected:
  ~FrameMessages() = default;
};

// What capabilities() answers: each non-null when the algorithm has it (pointers into the
// algorithm itself, valid as long as it).
template <typename T>
struct AlgorithmCapabilities {
  BlockPreparation<T>* blocks = nullptr;
  CombinedAbsorption<T>* combined = nullptr;
  LocalStart<T>* start = nullptr;
  ExchangeOverlap* overlap = nullptr;
  CarriedState* carry = nullptr;
  FrameMessages* frames = nullptr;
};

template <typename T>
class Algorithm {
 public:
  virtual ~Algorithm() = default;

  // Elements in the message sent to each neighbour every round.
  virtual size_t messageSize() const = 0;
  // False for a round in which the algorithm exchanges nothing (codistillation between its
  // refreshes): the engine then sends and awaits no message, calls prepare() with an empty
  // `outgoing` and absorb() with an empty `own` and no neighbours. A pure function of the round,
  // so that every peer agrees. Not for algorithms that absorbsCombined().
  virtual bool exchangesIn(uint64_t /*round*/) const { return true; }
  // Local work before communication; writes this round's outgoing message.
  virtual void prepare(const RoundInfo& info, std::span<T> outgoing) = 0;
  // Combines the node's own message with its neighbours' and advances the state. With a lossy
  // codec, `own` is the decoded frame (what the neighbours see), not what prepare wrote. `neighbors` is sorted by peer id, so the result never depends on arrival order.
  virtual void absorb(const RoundInfo& info, std::span<const T> own,
                      std::span<const NeighborMessage<T>> neighbors) = 0;
  // The node's current model x_i. Every call an algorithm makes to its GradientOracle asks for
  // the gradient at model() as it is at that moment, at most once per round (and once in start()),
  // so a trainer's own gradient at its parameters can stand in for the oracle (the public Peer).
  virtual std::span<const T> model() const = 0;

  // True when the algorithm keeps state per neighbour that each of that neighbour's messages
  // updates (CHOCO's x-hat_j on a time-varying graph). The engine then exchanges messages with
  // every neighbour the schedule can ever give this node (Schedule::support), with weight 0 in
  // the rounds where the edge is absent, so no update is ever missed.
  virtual bool tracksNeighbors() const { return false; }

  // absorb, then the engine's divergence check of the model it leaves: true when
  // every |x_k| <= limit in model() (NaN never is; core::allWithin). The default checks with a
  // pass of its own over the model after absorbing; an algorithm whose absorb writes its whole
  // model block by block may check each block right after writing it, while it is in L1, and so
  // save a pass over d values from memory per round. Either way the answer is exactly
  // core::allWithin(model(), limit) on the model absorb leaves (tests/optim/algorithm_check_test.cc).
  virtual bool absorbWithin(const RoundInfo& info, std::span<const T> own,
                            std::span<const NeighborMessage<T>> neighbors, T limit) {
    absorb(info, own, neighbors);
    return core::allWithin(model(), limit);
  }

  // Everything the algorithm carries from one round to the next (its model, dual variables,
  // reference points, whether it has started), for checkpoints (core/state.h): one function
  // saves and loads it. Buffers that each round overwrites before reading are left out. Called
  // between rounds only. The built-in algorithms all implement it; one that does not fails the
  // checkpoint with a message.
  virtual void visitState(core::StateVisitor& v) { v.fail("this algorithm cannot be checkpointed"); }

  // Asked right after an absorb whose info.messagesKept was set: true when model() may still
  // read the spans that absorb was given (`own` and the neighbours' messages). The node then
  // keeps those frames until its next absorb has run (which replaces what the algorithm reads)
  // or the algorithm is replaced; a round that fails before its absorb keeps them too. Plain
  // gossip on a lent buffer (Peer::mix) uses it to leave its own copy of the mixed model
  // unwritten, and to recompute it from the messages only where something asks for it.
  virtual bool holdsMessages() const { return false; }

  // Appends the method's own metrics (MethodMetric); between rounds. Most algorithms have none.
  virtual void methodMetrics(std::vector<MethodMetric>& /*out*/) const {}

  // The optional capabilities above; none by default.
  virtual AlgorithmCapabilities<T> capabilities() { return {}; }

  // Through capabilities(), for callers that ask once (the public Peer, tests): BlockPreparation,
  // CombinedAbsorption, LocalStart and ExchangeOverlap, or what an algorithm without them
  // answers (prepare() whole, absorb() only, no start, nothing to do during the exchange).
  bool preparesInBlocks() { return capabilities().blocks != nullptr; }
  std::span<const T> prepareBlock(const RoundInfo& info, size_t offset, std::span<T> out) {
    auto* c = capabilities().blocks;
    return c ? c->prepareBlock(info, offset, out) : std::span<const T>(out);
  }
  bool absorbsCombined() { return capabilities().combined != nullptr; }
  void absorbCombined(const RoundInfo& info, std::span<const T> own,
                      std::span<const T> combined) {
    if (auto* c = capabilities().combined) c->absorbCombined(info, own, combined);
  }
  bool needsStart() {
    auto* c = capabilities().start;
    return c != nullptr && c->needsStart();
  }
  void start(const RoundInfo& info) {
    if (auto* c = capabilities().start) c->start(info);
  }
  bool computesDuringExchange() { return capabilities().overlap != nullptr; }
  void computeDuringExchange(const std::function<void()>& poll) {
    if (auto* c = capabilities().overlap) c->computeDuringExchange(poll);
  }
};

// Builds the algorithm for one node, starting from x0 (copied). `oracle` is borrowed and must
// outlive the algorithm.
template <typename T>
std::unique_ptr<Algorithm<T>> createAlgorithm(const AlgorithmSpec& spec, std::span<const T> x0,
                                              GradientOracle<T>& oracle);

}  // namespace starling::optim
