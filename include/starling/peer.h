// starling::Peer: one node of a decentralized run, inside the user's own trainer.
//
//   auto peer = starling::Peer::fromEnv();           // under `node-launcher run s.json -- ./trainer`
//   if (!peer) { std::cerr << peer.status().toString() << "\n"; return 1; }
//   for (int t = 0; t < steps; ++t) {
//     computeGradient(params, grads);                // the trainer's model, data and backward pass
//     if (auto st = (*peer)->step(params, grads); !st.isOk()) { ... }  // params: the new model
//     (void)(*peer)->log({{"loss", loss}});
//   }
//   (void)(*peer)->close();
//
// The trainer owns its parameters: one flat buffer of float or double (std::span), which step()
// and mix() update in place. The first step() or mix() fixes the element type and the dimension
// for the Peer's lifetime. Every peer of the run must make the same sequence of step()/mix()
// calls: round r of one peer exchanges messages with round r of its neighbours.
//
// step(params, grads): one round of the scenario's algorithm (dsgd, exact_diffusion,
// gradient_tracking, choco, nids, lead, prox_lead) with `grads` the gradient the trainer computed
// at `params`. Between steps `params` must hold what the last step left there (the algorithm's
// model; changing them is kFailedPrecondition: use mix() for trainers that update their parameters
// themselves). nids, lead and prox_lead take a local step from x0 before their first round: their
// first step() returns after it without communicating (round() stays 0).
//
// mix(params): one gossip round averaging `params` with the neighbours, for trainers that keep
// their own optimizer. Without compression x_i <- x_i + gamma sum_j w_ij (x_j - x_i) (gamma from
// the scenario's algorithm, 1 by default: exactly x_i <- sum_j w_ij x_j); with the scenario's
// codec it is CHOCO-gossip (reference points x-hat tracked by sender and receivers, so compression
// errors do not accumulate). mixStart(params) + mixWait() is the same round split in two, so that
// the exchange overlaps the trainer's work in between (do not touch `params` until mixWait()):
// mixStart encodes and hands this peer's message to the transport and posts the receives; what
// the transport does not move on its own (UCX rendezvous over TCP, completions) moves when the
// trainer calls poll() in between (never blocks: call it between layers of the backward pass)
// or in mixWait.
//
// Local optimizer (step() only): the scenario's algorithm.local_optimizer (or PeerConfig's
// localOptimizer) turns the trainer's gradient g into a direction u per tensor before the
// algorithm uses it, so step(params, grads, lr) runs psi_i = x_i - lr u_i and then the
// algorithm's combine: momentum, Adam or LAMB (with its per-tensor trust ratio), all with
// decoupled weight decay (docs/algorithms.md §20; dsgd and choco only). The tensors are the
// model's layout: PeerOptions::layout / PeerConfig::layout / setLayout(), the sizes of its
// tensors in the flat buffer in order (empty: the whole buffer is one tensor); their sum must be
// the buffer's size, checked at the first step(). The optimizer's moments live in the Peer: they
// survive the algorithm's restarts at membership changes, are not saved anywhere (the Peer keeps
// no checkpoints) and start at zero in a restarted trainer. mix() never applies it (a trainer
// that mixes steps with its own optimizer).
//
// Codistillation (the scenario's algorithm.codistillation, or PeerConfig::codistillation;
// docs/algorithms.md §25): step() never averages models. It applies the trainer's gradient
// (params <- params - lr u) and, every `period` steps (rounds r with r % period == 0, from
// `period` rounds before burn_in), sends the parameters to the neighbours and keeps theirs;
// the other steps send nothing. The trainer adds alpha D(its predictions, its neighbours'
// predictions) on its own batch to its loss before computing the gradient: neighbourModels()
// gives the neighbours' models to run (stale by up to `period` steps). mix() is refused
// (kFailedPrecondition). Lower the explicit weight decay when codistilling (the term
// regularises).
//
// Errors are Statuses carrying Starling's messages; a failed round (a neighbour gone or timed
// out, a dimension mismatch, divergence) leaves the Peer failed: later calls return the same
// error. Thread-safety: one Peer is driven by one thread; several Peers may live in one process
// (each with its own transport).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <starling/status.h>

namespace starling {

// A run described in code instead of a scenario file; mapped onto the same scenario (and the
// same validation and messages) as a file with these keys (scenarios/README.md).
struct PeerConfig {
  enum class Topology { kRing, kLine, kGrid, kRandom, kExponential, kComplete, kStar };
  enum class Schedule { kStatic, kOnePeerExponential, kRandomMatching, kEdgeDropout };
  enum class Algorithm {
    kDsgd, kExactDiffusion, kGradientTracking, kChoco, kNids, kLead, kProxLead
  };
  enum class Codec { kIdentity, kFp16, kBf16, kTopK, kRandK, kSign, kQsgd, kNuqsgd, kNatural };
  enum class Transport { kUcx, kInProcess };
  enum class LocalOptimizer { kSgd, kMomentum, kAdam, kLamb };

  int nodes = 0;  // required
  int rank = 0;
  uint64_t seed = 1;
  std::string name = "embedded";

  Topology topology = Topology::kRing;
  int gridRows = 0, gridCols = 0;  // kGrid
  bool torus = false;              // kGrid
  double randomP = 0.0;            // kRandom
  Schedule schedule = Schedule::kStatic;
  double dropoutP = 0.0;           // kEdgeDropout

  Algorithm algorithm = Algorithm::kDsgd;
  double stepSize = 0.01;  // the default step size; step()'s lr overrides it per call
  double gamma = 1.0;      // dsgd, choco, mix(): consensus step; lead, prox_lead: dual damping
  double alpha = 0.5;      // lead, prox_lead

  // What step() makes of the trainer's gradient (algorithm.local_optimizer; anything but plain
  // SGD without weight decay only with kDsgd and kChoco). Each tensor of `layout` is one LAMB
  // trust ratio.
  LocalOptimizer localOptimizer = LocalOptimizer::kSgd;
  double weightDecay = 0.0;     // every kind: lambda >= 0, decoupled (u += lambda x)
  double momentum = 0.9;        // kMomentum: mu in [0, 1)
  bool nesterov = false;        // kMomentum
  double beta1 = 0.9;           // kAdam, kLamb: in [0, 1)
  double beta2 = 0.999;         // kAdam, kLamb: in [0, 1)
  double eps = 0.0;             // kAdam, kLamb: in (0, 1]; 0: 1e-8 for kAdam, 1e-6 for kLamb
  bool biasCorrection = true;   // kAdam, kLamb: divide the moments by 1 - beta^t
  // The model's tensors in the flat parameter buffer: their sizes, in order (they must sum to
  // the buffer's size; checked at the first step()). Empty: one tensor.
  std::vector<size_t> layout;

  // Codistillation (kDsgd only; see above): algorithm.codistillation with these keys.
  bool codistillation = false;
  double codistillationAlpha = 1.0;      // alpha >= 0
  bool codistillationKl = false;         // distance "kl" (else "cross_entropy")
  uint64_t codistillationPeriod = 1;     // tau >= 1
  uint64_t codistillationBurnIn = 0;     // rounds before the term is on

  Codec codec = Codec::kIdentity;
  uint64_t k = 0;           // topk, randk: elements kept (or ratio)
  double ratio = 0.0;       // topk, randk: fraction kept
  int bits = 4;             // qsgd, nuqsgd
  uint64_t bucket = 512;    // qsgd, nuqsgd
  bool linfNorm = false;    // qsgd
  bool errorFeedback = false;

  Transport transport = Transport::kUcx;
  std::vector<std::string> addresses;  // "host:port" per rank; empty: 127.0.0.1:29500 + rank
  std::string tls = "tcp";             // "tcp" or "shm"
  uint64_t connectTimeoutMs = 10000;
  uint64_t roundTimeoutMs = 30000;

  std::string outDir;  // where peers/rank-R.jsonl goes; empty: nothing is written

  // Every other scenario key: a JSON object merged into the scenario the fields above describe
  // (RFC 7386: an object merges key by key, a value replaces, null removes), then validated with
  // the same messages as a file, e.g. R"({"compression": {"kind": "int8", "error_feedback":
  // true}})" for a codec the enums above leave out (scenarios/README.md lists every key).
  std::string overrides;
};

// Where a Peer made from a scenario file writes and listens.
struct PeerOptions {
  std::string outDir;                  // empty: nothing is written
  std::vector<std::string> addresses;  // "host:port" per rank; empty: the scenario's
  // This rank was lost and its trainer restarted (`node-launcher run` sets STARLING_REJOIN=1 with
  // faults.restart; fromEnv reads it). The first step() or mix() asks the neighbours to take it
  // back and waits for the round they agree on: the parameters then hold a neighbour's model and
  // round() is that round; restore() does it before the first call. Loop on round() < N rather
  // than counting calls. Needs faults.on_peer_loss "continue".
  bool rejoin = false;
  // The model's tensors in the flat parameter buffer, for the scenario's local optimizer and its
  // compression "layers" rules (docs/compression.md): their sizes, in order (they must sum to the
  // buffer's size; checked at the first step(), and at the first mix() with layers rules).
  // Empty: one tensor.
  std::vector<size_t> layout;
};

// What a trainer knows about its gradient besides the vector, for the methods that use it
// (docs/algorithms.md §22, §24). Unset values are unknown.
struct StepStats {
  // The mean loss of the batch the gradient came from: Leader SGD's running loss. A peer that
  // never gives one never leads.
  std::optional<double> loss;
  // AdaScale's estimates for this gradient (both or neither): the variance of one base-batch
  // gradient and the squared norm of the expected gradient. From k >= 2 micro-batch gradients
  // g_c of b samples each, mean gbar, base batch b0:
  //   variance = (b / b0) (1/(k-1)) sum_c ||g_c - gbar||^2
  //   squaredMean = ||gbar||^2 - (1/(k-1)) sum_c ||g_c - gbar||^2 / k
  // and pass gbar as the gradient. Without them AdaScale's gain stays 1.
  std::optional<double> gradientVariance;
  std::optional<double> gradientSquaredMean;
};

// A float32 vector in a CUDA GPU's memory, for mix() on a model that lives on the GPU
// (docs/cuda.md, "Tensors on the GPU").
struct DeviceSpan {
  uint64_t address = 0;  // a device pointer (cudaMalloc's, PyTorch's tensor.data_ptr())
  size_t size = 0;       // float32 elements
  int device = 0;        // the CUDA device ordinal the memory is on
  // The stream whose work wrote the values (a CUstream as an integer; 0: the legacy default
  // stream): Starling's own stream waits for that work by an event (the host does not wait).
  // Unset: the caller has ordered its work before deviceStream() itself.
  std::optional<uint64_t> stream = 0;
};

class Peer {
 public:
  // Node `rank` of the scenario at `path`. A scenario for an embedded run may leave out
  // `problem` and `rounds`.
  static Result<std::unique_ptr<Peer>> fromScenario(const std::string& path, int rank);
  static Result<std::unique_ptr<Peer>> fromScenario(const std::string& path, int rank,
                                                    const PeerOptions& options);
  // What `node-launcher run SCENARIO -- COMMAND` hands each copy of COMMAND: STARLING_SCENARIO,
  // STARLING_RANK (else SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK), STARLING_OUT
  // (optional) and STARLING_PEERS (optional: comma-separated host:port of every rank). Without
  // STARLING_PEERS the addresses come from where `node-launcher peer` finds them: the scenario's
  // `peers` section, the hostfile STARLING_HOSTFILE names, the Slurm step (under srun), the
  // launcher's PMIx server (under mpirun), else 127.0.0.1; ports peers.base_port + rank.
  // The model's layout, if the scenario has a local optimizer: setLayout() before the first
  // step() (without it the buffer is one tensor).
  static Result<std::unique_ptr<Peer>> fromEnv();
  static Result<std::unique_ptr<Peer>> fromConfig(const PeerConfig& config);

  // Closes (errors are dropped: call close() to see them). A mix in flight is finished for the
  // neighbours, but its result is not written into the trainer's buffer, which may already be
  // gone; close() first to get it.
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  Status step(std::span<float> params, std::span<const float> grads,
              std::optional<double> lr = std::nullopt);
  Status step(std::span<double> params, std::span<const double> grads,
              std::optional<double> lr = std::nullopt);
  // The same, with what the trainer knows about its gradient (StepStats), for the scenario's
  // `leader` and `adascale` methods.
  Status step(std::span<float> params, std::span<const float> grads, std::optional<double> lr,
              const StepStats& stats);
  Status step(std::span<double> params, std::span<const double> grads, std::optional<double> lr,
              const StepStats& stats);

  Status mix(std::span<float> params);
  Status mix(std::span<double> params);
  // A restarted trainer (PeerOptions::rejoin): asks its neighbours to take it back now and
  // writes their model into `params`, so that the trainer takes its first gradient there (its
  // first step() then runs as its neighbours' does, with that gradient). Call it before the first
  // step()/mix(); a no-op for a trainer that is not rejoining.
  Status restore(std::span<float> params);
  Status restore(std::span<double> params);
  Status mixStart(std::span<float> params);
  Status mixStart(std::span<double> params);
  Status mixWait();
  // mix() on a model in GPU memory (a build with the CUDA path, a GPU and its driver;
  // docs/cuda.md): the round runs on the GPU, with the same frames on the wire as the CPU's,
  // and only the frames cross to host memory (the scenario's codec encodes on the GPU; without
  // a codec the frame is the model, copied into it). It returns with `params` holding the mixed
  // model (Starling's stream synchronized); mixStart(DeviceSpan) + mixWait() split it, and
  // `params` must then stay untouched and allocated until mixWait(). float32; the scenario's codec
  // one of fp16, bf16, qsgd, nuqsgd, natural_dithering, topk, countsketch or none, without error
  // feedback (CHOCO-gossip's reference points, as mix() on the host). Not yet with diloco, asynchronous
  // rounds, compression layers rules, a time-varying schedule under a codec, or a rejoining
  // trainer (kFailedPrecondition naming the key). A Peer mixes host buffers or device buffers,
  // not both. kUnavailable, saying which, in a build without the CUDA path, without a driver,
  // or without that GPU.
  Status mix(const DeviceSpan& params);
  Status mixStart(const DeviceSpan& params);
  // step() on a model and its gradient in GPU memory (the same device, float32): the scenario's
  // dsgd or exact_diffusion (uncompressed) or choco (CHOCO-SGD under the scenario's GPU codec,
  // static graph), with
  // plain SGD as the local step, the host's rounds value for value on the GPU; what
  // mix(DeviceSpan) says of frames and streams holds. `params` is the model each step starts
  // from (not checked against what the last step left). Other algorithms, local optimizers and
  // the scenario's leader/adascale methods are refused (kFailedPrecondition naming the key);
  // errors otherwise as mix(DeviceSpan)'s.
  Status step(const DeviceSpan& params, const DeviceSpan& grads,
              std::optional<double> lr = std::nullopt);
  // Starling's CUDA stream on GPU `device` (opening it; the same for the Peer's lifetime), for a
  // producer that orders its work before it itself (DLPack's __dlpack__(stream=...)); pass
  // DeviceSpan::stream unset then. Errors as mix(DeviceSpan)'s.
  Status deviceStream(int device, uint64_t* stream);
  // Before the first mix(): the model every rank starts from, the same on every rank (DiLoCo's
  // common initial model). With a lossy codec, mix() sends each round the compressed change of
  // `params` against reference points that start there, which every rank tracks alike, so no
  // exchange is spent on the start; in a diloco scenario the round leaves params = the mixed
  // reference points, sum_j w_ij x-hat_j (docs/algorithms.md §29). Without it the reference
  // points start at zero and mix() is CHOCO-gossip (the first messages carry the whole model).
  // With the scenario's "fragments": F (Streaming DiLoCo), `start` is the whole model of d
  // values and each mix() carries fragment r mod F of it in round r (ceil(d / F) values, the
  // last fragment padded with zeros), each fragment with reference points of its own (what
  // starling.torch.DiLoCo(fragments=F) does). A membership change starts the reference points
  // again from zero. kFailedPrecondition after the first mix(); the size is checked there.
  // Without a codec it changes nothing.
  Status mixReference(std::span<const float> start);
  Status mixReference(std::span<const double> start);
  // The model's layout for the local optimizer and the compression's layers rules (see
  // PeerOptions::layout), for a Peer made by fromEnv() or one made without it: replaces the one
  // given. kInvalidArgument for a tensor of size 0; kFailedPrecondition once step() has run (the
  // optimizer is built at the first step), or mix() with layers rules (its codec, likewise).
  Status setLayout(std::vector<size_t> sizes);
  // The layout given (empty: none, one tensor).
  const std::vector<size_t>& layout() const;

  // The scenario's codistillation (docs/algorithms.md §25), if it has one.
  struct Codistillation {
    double alpha = 1.0;
    bool kl = false;  // distance "kl" (else "cross_entropy"); both have the same gradient
    uint64_t period = 1;
    uint64_t burnIn = 0;
  };
  std::optional<Codistillation> codistillation() const;
  // The scenario's DiLoCo keys (kind "diloco", docs/algorithms.md §29), if it is one: a trainer
  // takes innerSteps steps with its own optimizer, then mix() and the outer step on
  // theta - mixed (starling.torch.DiLoCo does). outer is "sgd", "nesterov", "exact_diffusion" or
  // "noloco".
  struct Diloco {
    uint64_t innerSteps = 1;
    std::string outer = "nesterov";
    double outerLr = 0.7;
    double outerMomentum = 0.9;
    uint64_t fragments = 1;  // Streaming DiLoCo's fragments: 1/fragments of the model a round
    bool overlap = false;    // the exchange runs during the next round's inner steps
    bool compressed = false;  // the scenario's messages go through a lossy codec
    // ... as compressed differences against reference points (a lossy codec without
    // error_feedback, docs/algorithms.md §29): fragments take those (one set per fragment).
    bool compressedDifferences = false;
    double pull = 0.7;        // noloco: the pull toward the neighbours' outer models
    // > 0: "inner_steps": {"kind": "by_time"}: each round lasts seconds / fragments of the
    // clock (innerSteps is then the most steps a round may take times fragments: max_steps).
    double seconds = 0;
  };
  std::optional<Diloco> diloco() const;
  // DiLoCo from a trainer: call it once before your first inner step (it takes `params` as the
  // outer model theta; with a lossy codec's compressed differences, also the reference points'
  // start, mixReference), then after each of your optimizer's (inner) steps on `params`. Every
  // innerSteps-th call after the first is an outer round: mix() of the local models, then the
  // outer step (diloco()'s outer) on theta - mixed, leaving the new outer model theta in
  // `params`; the other calls only count. With the scenario's fragments F, every
  // innerSteps / F-th call is a round of fragment r mod F of the peer's round r (ceil(d / F)
  // values), and only that fragment of `params` takes its new theta. With the scenario's
  // "overlap": true a round sends its fragment of the local model and returns at once; the
  // exchange travels during the next inner steps (the calls between rounds poll() it), and the
  // next round (or dilocoFinish) lands its outer step under them: x <- theta + (x - sent).
  // With by_time inner steps ("inner_steps": {"kind": "by_time", "seconds": s}) a round ends
  // at the first call s / F seconds after the last round ended (or the first call), or after
  // max_steps / F calls, and the mix weights each rank's local model by the steps its fragment
  // took since its last exchange (exact_diffusion: unweighted); the ranks then take different
  // numbers of steps, so loop until your count of rounds reaches lastRound(), not over a fixed
  // number of steps. `outerRound` (optional) says whether this call was a round. theta, the
  // outer momentum and exact_diffusion's y live in the Peer, in float64. kFailedPrecondition
  // unless the scenario's algorithm is diloco.
  Status dilocoStep(std::span<float> params, bool* outerRound = nullptr);
  Status dilocoStep(std::span<double> params, bool* outerRound = nullptr);
  // The exact_diffusion outer step's correction: call it on each inner step's gradient before
  // your optimizer's step (plain SGD of step size `lr`, the same at every step): it adds y, which
  // each round moves by (x - x-bar) / (2 lr innerSteps), so that the local steps stop drifting
  // toward each node's own optimum (docs/algorithms.md §29). A no-op for the other outer kinds.
  Status dilocoGradient(std::span<float> grad, double lr);
  Status dilocoGradient(std::span<double> grad, double lr);
  // overlap: waits for the exchange in flight and lands its outer step on `params` (after your
  // last inner step, before close() or a checkpoint); a no-op when nothing is in flight.
  Status dilocoFinish(std::span<float> params);
  Status dilocoFinish(std::span<double> params);
  // The neighbours' models the next step()'s loss should distil from, sorted by rank: copies
  // from the last exchange, each of the parameter buffer's size. Empty while the term is off
  // (the rounds before burn_in, before the first exchange, before the first step()). The spans
  // stay valid until the next step(). kFailedPrecondition without codistillation or when `out`'s
  // element type is not the one the steps use.
  Status neighbourModels(std::vector<std::span<const float>>& out) const;
  Status neighbourModels(std::vector<std::span<const double>>& out) const;

  // Moves what the transport can move now, without waiting: the exchange of a mixStart in
  // flight progresses while the trainer computes. Returns the peer's failure, if it has one;
  // a no-op (ok) when nothing is in flight.
  Status poll();

  int rank() const;
  int nodes() const;
  // Rounds completed (step() and mix() rounds alike).
  uint64_t round() const;
  // The run's last round: the scenario's "rounds", or 0 when it has none (an embedded scenario
  // may leave it out; the trainer then decides when to stop, and every rank must stop at the
  // same round).
  uint64_t lastRound() const;
  // Whether this is a lost rank's restarted trainer that has not rejoined yet (PeerOptions::
  // rejoin, STARLING_REJOIN=1). Before its first step() or mix(), call restore() to take the
  // neighbours' model and learn from round() where the run stands; then continue from round()
  // to the same last round as the others, not from 0.
  bool rejoining() const;

  // The trainer's own metrics at the current round (loss, accuracy, ...): written to the peer
  // log; the launcher averages them over the peers into metrics.jsonl and summary.json. Names
  // are [A-Za-z0-9_.]+ and must not be one of the engine's (round, bytes_sent, ...).
  Status log(const std::map<std::string, double>& metrics);
  Status log(std::string_view name, double value);

  // Hands the peer's last messages to the network (its neighbours may still wait for them),
  // writes its end line and closes the transport. Idempotent; later step()/mix() fail.
  Status close();

  class Impl;

 private:
  explicit Peer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace starling
