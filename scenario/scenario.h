// Scenarios: a run described in a JSON file (format: scenarios/README.md), parsed once into typed
// structs and validated field by field.
//
// Every error names the file, the JSON path and what was expected, e.g.
//   scenarios/x.json: /topology/kind: unknown topology "rign"; expected one of ring, line, ...
// Unknown keys are errors. Thread-safety: free functions and values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compression/compressor.h"
#include "core/status.h"
#include "engine/options.h"
#include "optim/algorithm.h"
#include "optim/oracle.h"
#include "optim/problem.h"
#include "scenario/data.h"
#include "topology/spec.h"

namespace starling::scenario {

inline constexpr int kScenarioSchemaVersion = 1;
// Limits shared by the scenario file and the command line.
inline constexpr uint64_t kMaxRounds = uint64_t{1} << 40;
inline constexpr int kMaxNodes = 1 << 20;
// Default `divergence.max_abs`: far beyond any model a converging run of the shipped problems
// reaches, and reached within a few rounds by one that blows up.
inline constexpr double kDefaultDivergenceMaxAbs = 1e8;

enum class Precision { kFloat32, kFloat64 };
const char* precisionName(Precision p);

// Where `"dataset": "fashion-mnist"` points: Debian's dataset-fashion-mnist package.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct DataSource {
  enum class Kind { kSynthetic, kLibsvm, kIdx };
  Kind kind = Kind::kSynthetic;
  SyntheticSpec synthetic;       // kSynthetic
  std::string path;              // kLibsvm: resolved against the scenario file's folder
  std::optional<int> features;   // kLibsvm: fixes d
  // kIdx (scenario/idx.h): training and test images and labels, resolved like `path`.
  std::string images, labels, testImages, testLabels;
  std::string dataset;           // kIdx: "fashion-mnist" when the paths came from that shortcut
  uint64_t trainSamples = 0;     // kIdx: use only the first this many (0: all)
  uint64_t testSamples = 0;
};

struct ProblemConfig {
  // kLinear: least squares or logistic regression (spec.loss); kMlp: the built-in neural network
  // (optim/mlp.h) with `layers`, on kIdx data.
  enum class Model { kLinear, kMlp };
  Model model = Model::kLinear;
  std::vector<int> layers;  // kMlp
  optim::ProblemSpec spec;  // loss, l2 and the regularizer r
  DataSource data;
  PartitionKind partition = PartitionKind::kContiguous;
  double partitionAlpha = 0.5;  // kDirichlet: the concentration
  int shardsPerNode = 2;        // kShards
  optim::EstimatorSpec estimator;  // full local gradients unless the scenario says otherwise
  std::string batchPath = "/problem/batch";  // JSON path of the batch size ("/problem/batch" or
                                             // "/problem/estimator/batch"), for messages

  // True when gradients are estimated from batches of estimator.batch samples.
  bool usesBatch() const { return estimator.kind != optim::EstimatorSpec::Kind::kFull; }
  bool isMlp() const { return model == Model::kMlp; }
};

// How peers reach each other when they run as separate processes (node-launcher run/peer).
struct TransportConfig {
  enum class Kind { kUcx, kInproc };
  Kind kind = Kind::kUcx;
  std::string tls = "tcp";      // "tcp" or "shm" (shared memory, with tcp for connection setup)
  std::string ucxTls;           // when set, passed to UCX as UCX_TLS verbatim
  uint64_t connectTimeoutMs = 10000;
  uint64_t roundTimeoutMs = 30000;
  uint64_t maxEndpoints = 64;
  bool shmFrames = true;            // same-host frames through shared memory (tls "shm" only)
  uint64_t shmThresholdBytes = 16384;
  uint64_t spinUs = 50;             // poll this long before sleeping on the event fd
  // Whether a waiting rank polls until its message comes instead of sleeping after spinUs:
  // kAuto polls on a host with a core for each of this run's ranks on it (at least 4 cores).
  enum class BusyPoll { kAuto, kOn, kOff };
  BusyPoll busyPoll = BusyPoll::kAuto;
};

// Where each rank listens: "host:port" per rank, from `addresses` or `hosts` + `base_port`.
// Empty when the section has neither: `run` then picks free loopback ports, and `peer` takes the
// addresses from its launcher (runtime/peer_placement.h) with ports base_port + rank, where
// base_port is the section's (a section may hold only that) or 29500.
struct PeersConfig {
  std::vector<std::string> addresses;
  bool explicitAddresses = false;
  int basePort = 29500;
};

// `faults`: what a run does when peers are lost, and faults scripted for tests and users.
inline constexpr int kDefaultMaxRestarts = 3;
struct FaultsConfig {
  engine::OnPeerLoss onPeerLoss = engine::OnPeerLoss::kStop;
  engine::RepairKind repair = engine::RepairKind::kReconnect;
  uint64_t agreementRounds = 0;  // rounds from noticing a loss to the change; 0: automatic
  // `node-launcher run` restarts a lost peer (killed, crashed, or left) with --rejoin, at most
  // maxRestarts times per rank (engine/rejoin.h).
  bool restart = false;
  int maxRestarts = kDefaultMaxRestarts;
  std::vector<engine::FaultEvent> script;
};

// `security`: the cluster's key (docs/security.md). Peers prove they hold it when they connect
// and every message carries tags under it; `encrypt` also encrypts the payloads. The key itself
// never appears in a scenario: `key_file` names a file (relative to the scenario's folder), or,
// without it, the environment variable STARLING_KEY_FILE does (read where each peer starts).
struct SecurityConfig {
  std::string keyFile;  // resolved path; empty: STARLING_KEY_FILE, or no key
  bool encrypt = false;
};
inline constexpr const char* kKeyFileEnv = "STARLING_KEY_FILE";
// `checkpoint`: every `every` completed rounds (and at the last round) each peer of `run`/`peer`
// writes its whole state to OUT/checkpoints/rank-R/, keeping the newest `keep` files, so that
// `run --resume OUT` continues a killed run bit for bit (runtime/checkpoint.h). every == 0: off.
// `simulate` ignores it.
inline constexpr uint64_t kDefaultCheckpointKeep = 2;
struct CheckpointConfig {
  uint64_t every = 0;
  uint64_t keep = kDefaultCheckpointKeep;
};

// `algorithm.asynchronous` (docs/algorithms.md §26): no round barrier. Node i mixes, at round r,
// the newest message it holds from each neighbour and waits only while one's newest is older than
// r - maxStaleness (its round-0 message is always awaited); maxStaleness 0 mixes exactly the
// round-r messages, the synchronous round. `speeds[i]` is node i's
// relative compute speed: in `simulate` its round takes 1/speeds[i] units of virtual time; in
// `run` it sleeps computeMs / speeds[i] ms per round (no sleep when computeMs is 0). Only DSGD
// on a static topology, uncompressed, without peer-loss recovery, fault scripts or checkpoints.
struct AsyncConfig {
  bool enabled = false;
  uint64_t maxStaleness = 0;
  std::vector<double> speeds;  // n values, all 1 unless the scenario gives them
  double computeMs = 0;
};

struct Scenario {
  std::string file;  // the path as given, for messages
  std::string name;
  std::string description;
  int nodes = 0;
  uint64_t seed = 0;
  uint64_t rounds = 0;
  uint64_t logEvery = 1;
  Precision precision = Precision::kFloat64;
  topology::TopologySpec topology;
  // False when the scenario has no "problem" (an embedded run: the trainer owns model and data;
  // `problem` then keeps its defaults and means nothing). Such a scenario may also leave out
  // "rounds" (then 0): only a trainer (`node-launcher run SCENARIO -- COMMAND`) can run it.
  bool hasProblem = true;
  ProblemConfig problem;
  optim::AlgorithmSpec algorithm;
  AsyncConfig asynchronous;                 // algorithm.asynchronous
  compression::CompressorSpec compression;  // identity unless the scenario says otherwise
  TransportConfig transport;
  PeersConfig peers;
  // A run stops with "diverged at round R (rank i)" when a model coordinate is non-finite or
  // beyond this magnitude (`divergence.max_abs`).
  double divergenceMaxAbs = kDefaultDivergenceMaxAbs;
  FaultsConfig faults;
  SecurityConfig security;
  CheckpointConfig checkpoint;
};

inline constexpr uint16_t kDefaultBasePort = 29500;

// The listen address of every rank: the scenario's `peers` section, or 127.0.0.1:29500 + rank.
std::vector<std::string> peerAddresses(const Scenario& s);

// Parses and validates the JSON of one scenario. `file` names it in messages; relative data paths
// resolve against `baseDir`. Errors: kInvalidArgument "<file>: <json path>: <what>".
core::Result<Scenario> parseScenario(std::string_view text, const std::string& file,
                                     const std::filesystem::path& baseDir);

// Reads and parses a scenario file (kNotFound / kIoError if it cannot be read).
core::Result<Scenario> loadScenario(const std::string& path);

// Overrides from the command line, applied after parsing; they keep the scenario valid.
void applyOverrides(Scenario& s, std::optional<uint64_t> rounds, std::optional<uint64_t> seed);

}  // namespace starling::scenario
