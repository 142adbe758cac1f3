// starling::Peer's insides: a scenario, its schedule, one transport, and per element type the
// engine (engine/engine.h) with up to two nodes: the algorithm's (step) and the gossip's (mix).
// Internal: nothing here is installed.
#pragma once

#include <starling/peer.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "api/external_oracle.h"
#include "compression/compressor.h"
#include "engine/engine.h"
#include "engine/fault_injection.h"
#include "engine/node.h"
#include "engine/rejoin.h"
#include "engine/session.h"
#include "optim/codistillation_gossip.h"
#include "optim/device_gossip.h"
#include "optim/gossip.h"
#include "optim/local_optimizer.h"
#include "scenario/scenario.h"
#include "topology/schedule.h"
#include "transport/transport.h"

namespace starling::transport::inproc {
class InprocHub;
}

namespace starling {

// Channels of the two nodes a Peer may drive over its one transport.
inline constexpr uint32_t kStepChannel = engine::kModelChannel;
inline constexpr uint32_t kMixChannel = 1;
// Seeds of an embedded peer's codec streams (its own, apart from the simulator's).
inline constexpr uint64_t kStepCodecSalt = 0x70636f6465;
inline constexpr uint64_t kMixCodecSalt = 0x6d636f6465;
inline constexpr uint64_t kSharedCodecSalt = 0x7368617265;

template <typename T>
struct PeerState {
  PeerState(const engine::Options& run, const topology::Schedule& schedule,
            transport::Transport& net, engine::SessionOptions options, size_t dimension)
      : dim(dimension), session(run, schedule, net, std::move(options)) {}

  size_t dim;
  // The engine, and with faults.on_peer_loss "continue" the survival of lost neighbours: both
  // nodes stand in for them and restart at a membership change (engine/session.h).
  engine::Session<T> session;
  engine::Engine<T>& engine() { return session.engine(); }
  const engine::Engine<T>& engine() const { return session.engine(); }
  // step(): the scenario's algorithm fed with the trainer's gradients.
  api::ExternalOracle<T> oracle;
  // The scenario's local optimizer around `oracle` (none for plain SGD without weight decay):
  // built at the first step() over the trainer's layout, and kept, with its moments, when the
  // algorithm restarts (the restarted algorithm is handed stepOracle() again).
  std::unique_ptr<optim::LocalOptimizerOracle<T>> localOptimizer;
  optim::GradientOracle<T>& stepOracle() {
    if (localOptimizer) return *localOptimizer;
    return oracle;
  }
  // Codistillation: the neighbours' copies the step algorithm refreshes (neighbourModels()).
  std::unique_ptr<optim::NeighborModels<T>> neighbors;
  std::unique_ptr<compression::Compressor<T>> stepCodec;
  std::unique_ptr<engine::Node<T>> stepNode;
  // mix(): gossip only.
  optim::GossipAlgorithm<T>* gossip = nullptr;  // owned by mixNode
  std::unique_ptr<compression::Compressor<T>> mixCodec;
  std::unique_ptr<engine::Node<T>> mixNode;
  std::span<T> mixParams;  // between mixStart and mixWait
  // mix(DeviceSpan): the mix node's algorithm (owned by mixNode) and the trainer's device
  // buffer between mixStart and mixWait (0: none in flight).
  optim::DeviceGossip* deviceGossip = nullptr;
  uint64_t deviceParams = 0;
  // step(DeviceSpan): the step node's algorithm (owned by stepNode).
  optim::DeviceGossip* deviceStep = nullptr;
  bool mixSkipped = false;  // a rejoined trainer's first mix() that only loaded the model
  bool mixAbandoned = false;  // ~Peer finishes the round without touching mixParams
  const engine::Node<T>* last = nullptr;  // the node of the last round (its model is logged)

  std::vector<const engine::Node<T>*> nodes() const {
    std::vector<const engine::Node<T>*> out;
    if (stepNode) out.push_back(stepNode.get());
    if (mixNode) out.push_back(mixNode.get());
    return out;
  }
};

class Peer::Impl {
 public:
  scenario::Scenario scenario;
  std::unique_ptr<topology::Schedule> schedule;
  int rank = 0;
  std::string address;
  std::string outDir;
  std::shared_ptr<transport::inproc::InprocHub> hub;  // in-process runs; outlives `net`
  // With scripted link faults `net` is a FaultInjector around `rawNet` (faults points to it).
  std::unique_ptr<transport::Transport> rawNet;
  std::unique_ptr<transport::Transport> net;
  engine::FaultInjector* faults = nullptr;
  // mix(DeviceSpan)'s GPU (api/peer_device.cc), opened at the first call; declared before
  // `state`, whose device gossip uses it, so it outlives it.
  std::unique_ptr<optim::DeviceVectors> device;
  int deviceOrdinal = -1;
  std::variant<std::monostate, PeerState<float>, PeerState<double>> state;
  std::map<std::string, double> metrics;  // logged since the last round line
  std::optional<uint64_t> pendingRecord;  // a round whose line waits for the trainer's metrics
  // A mix() round's model as the round left it (the mixed model), taken when the round ends:
  // by the time its line is written (at the next call, for the trainer's metrics) the trainer's
  // buffer has moved on with its next local step. "x" for small models, else "sketch"; empty
  // when not taken (a large model in a round not due by log_every: the line has neither).
  std::vector<double> snapshotX, snapshotSketch;
  // dilocoStep (api/peer_diloco.cc): the outer model, its momentum (nesterov, noloco),
  // exact_diffusion's correction y, and the inner steps counted so far.
  std::vector<double> dilocoTheta, dilocoMomentum, dilocoDual;
  // ... the fragment's local model before its mix (exact_diffusion) or as it was sent (overlap)
  std::vector<double> dilocoSent;
  // ... the fragment (first element, length) whose exchange is in flight (overlap)
  std::optional<std::pair<size_t, size_t>> dilocoPending;
  double dilocoInnerLr = 0;  // exact_diffusion: the inner step size dilocoGradient() was given
  // by_time: the inner steps each fragment took since its last exchange, the round's steps so
  // far, and when the round began (the first call, then each round's end).
  std::vector<uint64_t> dilocoSince;
  uint64_t dilocoRoundSteps = 0;
  std::chrono::steady_clock::time_point dilocoRoundStart;
  // ... and what a fragment (noloco: [theta, x] of it) is mixed in, in the parameters' type.
  std::vector<float> dilocoBuffer32;
  std::vector<double> dilocoBuffer64;
  // mixReference(): where the mix codec's reference points start (empty: zero).
  std::vector<double> mixReference;
  uint64_t dilocoSteps = 0;
  bool snapshotTaken = false;
  bool closed = false;
  // A lost rank's restarted trainer (PeerOptions::rejoin): the first call rejoins; the model it
  // got from a neighbour waits here for the node that takes it (step's or mix's).
  bool rejoin = false;
  std::optional<std::vector<double>> rejoinModel;
  // The call its neighbours were in when they applied the return (JoinState::channel): the
  // rejoined trainer's first call of the other kind only loads the model, so that its calls
  // line up with theirs from round Y.
  std::optional<uint32_t> rejoinChannel;
  bool firstAfterRejoin = false;  // the next step()/mix() is the first since the return
  bool restored = false;          // restore() put the neighbours' model into the parameters
  // The model's tensor sizes for the local optimizer (PeerOptions::layout); empty: one tensor.
  std::vector<size_t> layout;

  template <typename T>
  Status step(std::span<T> params, std::span<const T> grads, std::optional<double> lr,
              const StepStats& stats = {});
  template <typename T>
  Status mixStart(std::span<T> params);
  template <typename T>
  Status restore(std::span<T> params);
  Status mixWait();
  // mix(DeviceSpan) (api/peer_device.cc).
  Status mixStartDevice(const DeviceSpan& params);
  Status stepDevice(const DeviceSpan& params, const DeviceSpan& grads, std::optional<double> lr);
  Status mixWaitDevice(PeerState<float>& st);
  // The end of a device round: the node whose model the round line logs, its round, and that
  // model copied to the host when the log keeps it (every log_every-th round).
  void endDeviceRound(PeerState<float>& st, const engine::Node<float>& node);
  // The GPU of mix(DeviceSpan), opened once; errors in the context "<call> on cuda:N" (call
  // empty: "cuda:N").
  Status openDevice(int ordinal, const char* call);
  // A device round's node on `channel` (its DeviceGossip in `gossip`, which a membership
  // change replaces), registered with the session.
  Status makeDeviceNode(PeerState<float>& st, size_t dim, uint32_t channel, uint64_t salt,
                        std::unique_ptr<engine::Node<float>>& node, optim::DeviceGossip*& gossip,
                        const char* call,
                        optim::DeviceGossip::Rounds rounds = optim::DeviceGossip::Rounds::kGossip);
  Status poll();
  Status log(const std::map<std::string, double>& m);
  // `fromDestructor`: a mix in flight is finished for the neighbours' sake, but its result is
  // not written into the trainer's buffer, which may be gone (stack unwinding).
  Status close(bool fromDestructor = false);
  uint64_t rounds() const;
  // Whether a mix() has built its node (its codec and reference points are fixed then).
  bool mixStarted() const {
    return std::visit(
        [](const auto& st) {
          if constexpr (std::is_same_v<std::decay_t<decltype(st)>, std::monostate>) {
            return false;
          } else {
            return st.mixNode != nullptr;
          }
        },
        state);
  }
  Status setLayout(std::vector<size_t> sizes);
  template <typename T>
  Status neighbourModels(std::vector<std::span<const T>>& out) const;
  // The step algorithm for `params` (codistillation or the scenario's kind).
  template <typename T>
  std::unique_ptr<optim::Algorithm<T>> makeStepAlgorithm(PeerState<T>& st,
                                                         std::span<const T> x0);

 private:
  template <typename T>
  Result<PeerState<T>*> stateFor(size_t dim, const char* call);
  // The first step(): checks the layout against the buffer's `dim` and wraps the oracle in the
  // scenario's local optimizer (when it is not plain SGD).
  template <typename T>
  Status makeLocalOptimizer(PeerState<T>& st, size_t dim);
  template <typename T>
  Status writePending(PeerState<T>& st);
  Status writePendingAny();
  template <typename T>
  Status record(PeerState<T>& st);
  // The first call of a rejoining trainer: asks the neighbours (engine/rejoin.h) and returns
  // the state they agreed on; the engine starts at its round.
  template <typename T>
  Result<engine::JoinState> requestRejoin(PeerState<T>& st);
  // Copies the neighbours' model into `params` (once).
  template <typename T>
  bool takeRejoinModel(std::span<T> params);
};

// kInvalidArgument naming the first tensor of size 0 in a layout (what its sum is checked
// against comes at the first step()).
Status checkLayoutSizes(const std::vector<size_t>& sizes);

// Builds a Peer's Impl for `rank` of `scenario` (validated), with its transport.
Result<std::unique_ptr<Peer::Impl>> makePeerImpl(scenario::Scenario scenario, int rank,
                                                 const PeerOptions& options);

}  // namespace starling
