// Making a starling::Peer: from a scenario file, from the environment `node-launcher run -- CMD`
// sets, or from a PeerConfig (written out as the scenario JSON it stands for and parsed by the
// same parser, so it is validated with the same messages).
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>

#include "api/peer_impl.h"
#include "scenario/compile.h"
#include "runtime/peer_placement.h"
#include "scenario/experiment.h"
#include "scenario/scenario_writer.h"
#include "transport/factory.h"
#include "transport/inproc/inproc_transport.h"

namespace starling {
namespace {

// In-process runs: the Peers of one scenario in this process share a hub, found by the
// scenario's hash. Weak: the hub goes with its last Peer.
std::shared_ptr<transport::inproc::InprocHub> sharedHub(const scenario::Scenario& s) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<transport::inproc::InprocHub>> hubs;
  const std::string key = scenario::scenarioHashHex(scenario::scenarioHash(s));
  std::lock_guard<std::mutex> lock(mu);
  if (auto hub = hubs[key].lock()) return hub;
  std::shared_ptr<transport::inproc::InprocHub> hub = transport::inproc::createHub(s.nodes);
  hubs[key] = hub;
  return hub;
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

Result<int> parseRank(const std::string& value, const char* var) {
  char* end = nullptr;
  errno = 0;
  const long r = std::strtol(value.c_str(), &end, 10);
  if (errno != 0 || end == value.c_str() || *end != '\0' || r < 0 || r > (1 << 20)) {
    return core::invalidArgument(std::string(var) + "=\"" + value + "\" is not a rank");
  }
  return static_cast<int>(r);
}

}  // namespace

Result<std::unique_ptr<Peer::Impl>> makePeerImpl(scenario::Scenario s, int rank,
                                                 const PeerOptions& options) {
  if (rank < 0 || rank >= s.nodes) {
    return core::invalidArgument("rank " + std::to_string(rank) + " is not in 0.." +
                                 std::to_string(s.nodes - 1) + " (" + s.file + " has " +
                                 std::to_string(s.nodes) + " nodes)");
  }
  STARLING_RETURN_IF_ERROR(checkLayoutSizes(options.layout));
  auto impl = std::make_unique<Peer::Impl>();
  auto schedule = topology::Schedule::create(s.topology);
  if (!schedule) return schedule.status().withContext(s.file + ": /topology");
  impl->schedule = std::move(*schedule);
  STARLING_RETURN_IF_ERROR(scenario::resolveLeaderDiameter(s, *impl->schedule));
  impl->rank = rank;
  impl->outDir = options.outDir;
  impl->rejoin = options.rejoin;
  impl->layout = options.layout;
  if (s.transport.kind == scenario::TransportConfig::Kind::kInproc) {
    impl->hub = sharedHub(s);
    impl->net = transport::inproc::createTransport(*impl->hub, rank);
    impl->address = "inproc";
  } else {
    auto no = scenario::networkOptions(s, rank, options.addresses);
    if (!no) return no.status();
    auto net = transport::createNetworkTransport(*no);
    if (!net) return net.status().withContext("rank " + std::to_string(rank));
    impl->net = std::move(*net);
    impl->address = no->addresses[rank];
  }
  if (engine::FaultInjector::wanted(s.faults.script)) {
    // The script's link faults, on the messages of step() and mix() alike.
    const bool realTime = s.transport.kind != scenario::TransportConfig::Kind::kInproc;
    impl->rawNet = std::move(impl->net);
    auto f = std::make_unique<engine::FaultInjector>(*impl->rawNet, s.faults.script, s.seed,
                                                     kStepChannel, realTime);
    f->addChannel(kMixChannel);
    impl->faults = f.get();
    impl->net = std::move(f);
  }
  impl->scenario = std::move(s);
  return impl;
}

Result<std::unique_ptr<Peer>> Peer::fromScenario(const std::string& path, int rank) {
  return fromScenario(path, rank, PeerOptions{});
}

Result<std::unique_ptr<Peer>> Peer::fromScenario(const std::string& path, int rank,
                                                 const PeerOptions& options) {
  auto s = scenario::loadScenario(path);
  if (!s) return s.status();
  auto impl = makePeerImpl(std::move(*s), rank, options);
  if (!impl) return impl.status();
  return std::unique_ptr<Peer>(new Peer(std::move(*impl)));
}

Result<std::unique_ptr<Peer>> Peer::fromEnv() {
  const auto scenario = env("STARLING_SCENARIO");
  if (!scenario) {
    return core::invalidArgument(
        "STARLING_SCENARIO is not set (start the trainer with `node-launcher run SCENARIO -- "
        "COMMAND`, or set STARLING_SCENARIO and STARLING_RANK)");
  }
  std::optional<int> rank;
  for (const char* var :
       {"STARLING_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (auto v = env(var)) {
      auto r = parseRank(*v, var);
      if (!r) return r.status();
      rank = *r;
      break;
    }
  }
  if (!rank) {
    return core::invalidArgument(
        "no rank: set STARLING_RANK (or run under srun or mpirun, which set SLURM_PROCID, "
        "OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK)");
  }
  PeerOptions options;
  options.outDir = env("STARLING_OUT").value_or("");
  options.rejoin = env("STARLING_REJOIN").value_or("") == "1";
  auto s = scenario::loadScenario(*scenario);
  if (!s) return s.status();
  if (auto nodes = env("STARLING_NODES"); nodes && *nodes != std::to_string(s->nodes)) {
    return core::invalidArgument("STARLING_NODES=" + *nodes + " but " + *scenario + " has " +
                                 std::to_string(s->nodes) + " nodes");
  }
  // Every rank's address as `node-launcher peer` finds it (runtime/peer_placement.h):
  // STARLING_PEERS, the scenario's peers section, STARLING_HOSTFILE, the Slurm step, the
  // launcher's PMIx server, or loopback.
  runtime::PeerPlacementRequest request;
  request.peersFlag = env("STARLING_PEERS").value_or("");
  request.hostfile = env("STARLING_HOSTFILE").value_or("");
  request.rank = rank;
  auto placed = runtime::placePeer(*s, request, runtime::processEnvironment());
  if (!placed) return placed.status();
  options.addresses = std::move(placed->addresses);
  auto impl = makePeerImpl(std::move(*s), *rank, options);
  if (!impl) return impl.status();
  return std::unique_ptr<Peer>(new Peer(std::move(*impl)));
}

namespace {

const char* topologyName(PeerConfig::Topology t) {
  switch (t) {
    case PeerConfig::Topology::kRing: return "ring";
    case PeerConfig::Topology::kLine: return "line";
    case PeerConfig::Topology::kGrid: return "grid";
    case PeerConfig::Topology::kRandom: return "random";
    case PeerConfig::Topology::kExponential: return "exponential";
    case PeerConfig::Topology::kComplete: return "complete";
    case PeerConfig::Topology::kStar: return "star";
  }
  return "?";
}

const char* scheduleName(PeerConfig::Schedule s) {
  switch (s) {
    case PeerConfig::Schedule::kStatic: return "static";
    case PeerConfig::Schedule::kOnePeerExponential: return "one_peer_exponential";
    case PeerConfig::Schedule::kRandomMatching: return "random_matching";
    case PeerConfig::Schedule::kEdgeDropout: return "edge_dropout";
  }
  return "?";
}

const char* algorithmName(PeerConfig::Algorithm a) {
  switch (a) {
    case PeerConfig::Algorithm::kDsgd: return "dsgd";
    case PeerConfig::Algorithm::kExactDiffusion: return "exact_diffusion";
    case PeerConfig::Algorithm::kGradientTracking: return "gradient_tracking";
    case PeerConfig::Algorithm::kChoco: return "choco";
    case PeerConfig::Algorithm::kNids: return "nids";
    case PeerConfig::Algorithm::kLead: return "lead";
    case PeerConfig::Algorithm::kProxLead: return "prox_lead";
  }
  return "?";
}

const char* codecName(PeerConfig::Codec c) {
  switch (c) {
    case PeerConfig::Codec::kIdentity: return "identity";
    case PeerConfig::Codec::kFp16: return "fp16";
    case PeerConfig::Codec::kBf16: return "bf16";
    case PeerConfig::Codec::kTopK: return "topk";
    case PeerConfig::Codec::kRandK: return "randk";
    case PeerConfig::Codec::kSign: return "sign";
    case PeerConfig::Codec::kQsgd: return "qsgd";
    case PeerConfig::Codec::kNuqsgd: return "nuqsgd";
    case PeerConfig::Codec::kNatural: return "natural";
  }
  return "?";
}

const char* localOptimizerName(PeerConfig::LocalOptimizer o) {
  switch (o) {
    case PeerConfig::LocalOptimizer::kSgd: return "sgd";
    case PeerConfig::LocalOptimizer::kMomentum: return "momentum";
    case PeerConfig::LocalOptimizer::kAdam: return "adam";
    case PeerConfig::LocalOptimizer::kLamb: return "lamb";
  }
  return "?";
}

const optim::AlgorithmInfo* algorithmNamed(std::string_view name) {
  for (const auto& a : optim::algorithmKinds()) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

// The scenario a PeerConfig stands for (scenarios/README.md), as JSON.
std::string scenarioJson(const PeerConfig& c) {
  using json = nlohmann::ordered_json;
  using C = PeerConfig;
  json j;
  j["schema_version"] = scenario::kScenarioSchemaVersion;
  j["name"] = c.name;
  j["nodes"] = c.nodes;
  j["seed"] = c.seed;
  json topo{{"kind", topologyName(c.topology)}};
  if (c.topology == C::Topology::kGrid) {
    topo["rows"] = c.gridRows;
    topo["cols"] = c.gridCols;
    if (c.torus) topo["torus"] = true;
  }
  if (c.topology == C::Topology::kRandom) topo["p"] = c.randomP;
  json sched{{"kind", scheduleName(c.schedule)}};
  if (c.schedule == C::Schedule::kEdgeDropout) sched["p"] = c.dropoutP;
  topo["schedule"] = sched;
  j["topology"] = topo;
  json alg{{"kind", algorithmName(c.algorithm)}, {"step_size", c.stepSize}};
  // The keys each algorithm takes come from optim's table (the enum's names are its names).
  if (const auto* info = algorithmNamed(algorithmName(c.algorithm))) {
    if (info->usesGamma) alg["gamma"] = c.gamma;
    if (info->usesAlpha) alg["alpha"] = c.alpha;
  }
  using LO = C::LocalOptimizer;
  if (c.localOptimizer != LO::kSgd || c.weightDecay != 0.0) {
    json lo{{"kind", localOptimizerName(c.localOptimizer)}, {"weight_decay", c.weightDecay}};
    if (c.localOptimizer == LO::kMomentum) {
      lo["momentum"] = c.momentum;
      lo["nesterov"] = c.nesterov;
    }
    if (c.localOptimizer == LO::kAdam || c.localOptimizer == LO::kLamb) {
      lo["beta1"] = c.beta1;
      lo["beta2"] = c.beta2;
      if (c.eps != 0.0) lo["eps"] = c.eps;  // 0: the scenario's default for the kind
      lo["bias_correction"] = c.biasCorrection;
    }
    alg["local_optimizer"] = lo;
  }
  if (c.codistillation) {
    alg.erase("gamma");  // nothing is averaged (the parser refuses gamma with it)
    alg["codistillation"] = json{{"alpha", c.codistillationAlpha},
                                 {"distance", c.codistillationKl ? "kl" : "cross_entropy"},
                                 {"period", c.codistillationPeriod},
                                 {"burn_in", c.codistillationBurnIn}};
  }
  j["algorithm"] = alg;
  if (c.codec != C::Codec::kIdentity) {
    json co{{"kind", codecName(c.codec)}};
    if (c.codec == C::Codec::kTopK || c.codec == C::Codec::kRandK) {
      if (c.k > 0) {
        co["k"] = c.k;
      } else {
        co["ratio"] = c.ratio;
      }
    }
    if (c.codec == C::Codec::kQsgd || c.codec == C::Codec::kNuqsgd) {
      co["bits"] = c.bits;
      co["bucket"] = c.bucket;
    }
    if (c.codec == C::Codec::kQsgd && c.linfNorm) co["norm"] = "linf";
    if (c.errorFeedback) co["error_feedback"] = true;
    j["compression"] = co;
  }
  if (c.transport == C::Transport::kInProcess) {
    j["transport"] = json{{"kind", "inproc"}};
  } else {
    j["transport"] = json{{"kind", "ucx"},
                          {"tls", c.tls},
                          {"connect_timeout_ms", c.connectTimeoutMs},
                          {"round_timeout_ms", c.roundTimeoutMs}};
    if (!c.addresses.empty()) j["peers"] = json{{"addresses", c.addresses}};
  }
  return j.dump(2);
}

// scenarioJson with `overrides` merged in (PeerConfig::overrides).
Result<std::string> mergedScenarioJson(const PeerConfig& c) {
  const std::string base = scenarioJson(c);
  if (c.overrides.empty()) return base;
  nlohmann::ordered_json patch =
      nlohmann::ordered_json::parse(c.overrides, nullptr, /*allow_exceptions=*/false);
  if (patch.is_discarded() || !patch.is_object()) {
    return core::invalidArgument("PeerConfig::overrides: not a JSON object: " +
                                 c.overrides.substr(0, 200));
  }
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(base);
  j.merge_patch(patch);
  return j.dump(2);
}

}  // namespace

Result<std::unique_ptr<Peer>> Peer::fromConfig(const PeerConfig& config) {
  auto json = mergedScenarioJson(config);
  if (!json) return json.status();
  auto s = scenario::parseScenario(*json, "PeerConfig", ".");
  if (!s) return s.status();
  PeerOptions options;
  options.outDir = config.outDir;
  options.layout = config.layout;
  auto impl = makePeerImpl(std::move(*s), config.rank, options);
  if (!impl) return impl.status();
  return std::unique_ptr<Peer>(new Peer(std::move(*impl)));
}

}  // namespace starling
