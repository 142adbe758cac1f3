#include "scenario/scenario.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "core/read_file.h"
#include "scenario/scenario_limits.h"
#include "scenario/scenario_reader.h"
#include "topology/graph.h"

namespace starling::scenario {
namespace {

using namespace scenario_detail;

// The algorithms' names, from optim's table (optim::algorithmKinds()), in kind order.
std::vector<std::string> algorithmNames() {
  std::vector<std::string> names;
  for (const auto& a : optim::algorithmKinds()) names.emplace_back(a.name);
  return names;
}
topology::GraphSpec parseGraph(Obj& o, topology::WeightRule defaultWeights, int nodes) {
  topology::GraphSpec g;
  g.kind = static_cast<topology::GraphKind>(o.choice("kind", "topology", kGraphKinds));
  g.weights = static_cast<topology::WeightRule>(
      o.choice("weights", "weight rule", kWeightRules, static_cast<size_t>(defaultWeights)));
  if (g.kind == topology::GraphKind::kGrid) {
    g.rows = o.integer<int>("rows", 1, 1 << 20);
    g.cols = o.integer<int>("cols", 1, 1 << 20);
    g.torus = o.boolean("torus", false);
  } else if (g.kind == topology::GraphKind::kRandom) {
    g.p = o.number("p", 0.0, 1.0, std::nullopt, /*openLo=*/true);
    // Refused here, with its JSON path, rather than after the generator's draws run out.
    if (auto st = topology::checkRandomGraph(g.p, nodes); !st.isOk()) {
      throw ScenarioError{o.at("p"), st.message()};
    }
  }
  return g;
}

void parseTopology(Obj& o, Scenario& s) {
  auto& t = s.topology;
  t.nodes = s.nodes;
  t.seed = s.seed;
  t.base = parseGraph(o, topology::WeightRule::kMetropolis, s.nodes);
  if (t.base.kind == topology::GraphKind::kGrid &&
      static_cast<int64_t>(t.base.rows) * t.base.cols != s.nodes) {
    throw ScenarioError{o.at("rows"), "grid " + std::to_string(t.base.rows) + " x " +
                                          std::to_string(t.base.cols) + " does not have " +
                                          std::to_string(s.nodes) + " nodes (/nodes)"};
  }
  if (!o.has("schedule")) {
    o.get("schedule");
    o.finish();
    return;
  }
  Obj sch = o.object("schedule");
  t.schedule.kind =
      static_cast<topology::ScheduleKind>(sch.choice("kind", "schedule", kScheduleKinds));
  switch (t.schedule.kind) {
    case topology::ScheduleKind::kCycle: {
      const json& list = sch.require("graphs");
      if (!list.is_array() || list.empty()) {
        throw ScenarioError{sch.at("graphs"), "expected a non-empty array of topologies"};
      }
      for (size_t i = 0; i < list.size(); ++i) {
        Obj entry(list[i], sch.at("graphs") + "/" + std::to_string(i));
        t.schedule.cycle.push_back(parseGraph(entry, t.base.weights, s.nodes));
        const auto& g = t.schedule.cycle.back();
        if (g.kind == topology::GraphKind::kGrid &&
            static_cast<int64_t>(g.rows) * g.cols != s.nodes) {
          throw ScenarioError{entry.at("rows"), "grid does not have " + std::to_string(s.nodes) +
                                                    " nodes (/nodes)"};
        }
        entry.finish();
      }
      break;
    }
    case topology::ScheduleKind::kEdgeDropout:
      t.schedule.p = sch.number("p", 0.0, 1.0, std::nullopt, false, /*openHi=*/true);
      break;
    default: break;
  }
  sch.finish();
  o.finish();
}

void parseTransport(Obj& o, Scenario& s) {
  auto& t = s.transport;
  t.kind = o.choice("kind", "transport", {"ucx", "inproc"}) == 0 ? TransportConfig::Kind::kUcx
                                                               : TransportConfig::Kind::kInproc;
  if (t.kind == TransportConfig::Kind::kUcx) {
    t.tls = o.choice("tls", "UCX transport selection", {"tcp", "shm"}, 0) == 0 ? "tcp" : "shm";
    t.ucxTls = o.string("ucx_tls", "");
    if (!t.ucxTls.empty() && t.ucxTls.find("tcp") == std::string::npos) {
      throw ScenarioError{o.at("ucx_tls"), "must include tcp (it carries connection setup), got \"" +
                                               t.ucxTls + "\""};
    }
    t.connectTimeoutMs = o.integer<uint64_t>("connect_timeout_ms", 1, 3600000, uint64_t{10000});
    t.roundTimeoutMs = o.integer<uint64_t>("round_timeout_ms", 1, 86400000, uint64_t{30000});
    t.maxEndpoints = o.integer<uint64_t>("max_endpoints", 1, 1 << 20, uint64_t{64});
    t.shmFrames = o.boolean("shm_frames", true);
    t.shmThresholdBytes =
        o.integer<uint64_t>("shm_threshold_bytes", 0, uint64_t{1} << 40, uint64_t{16384});
    t.spinUs = o.integer<uint64_t>("spin_us", 0, 1000000, uint64_t{50});
    t.busyPoll = static_cast<TransportConfig::BusyPoll>(
        o.choice("busy_poll", "busy polling", {"auto", "on", "off"}, 0));
  }
  o.finish();
}

void parsePeers(Obj& o, Scenario& s) {
  auto& p = s.peers;
  p.basePort = o.integer<int>("base_port", 1, 65535, int{kDefaultBasePort});
  if (p.basePort + s.nodes - 1 > 65535) {
    throw ScenarioError{o.at("base_port"), "base_port + nodes - 1 exceeds 65535"};
  }
  // Only a base port: the addresses come from the launcher (`peer`) or loopback (`run`).
  if (!o.has("addresses") && !o.has("hosts")) {
    o.finish();
    return;
  }
  if (o.has("addresses") && o.has("base_port")) {
    throw ScenarioError{o.at("base_port"), "goes with \"hosts\" or alone; \"addresses\" name "
                                           "their ports"};
  }
  p.explicitAddresses = true;
  auto checkHostPort = [](const std::string& path, const std::string& text) {
    const auto colon = text.rfind(':');
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < text.size() &&
              colon + 6 >= text.size();
    unsigned long port = 0;
    for (size_t i = colon + 1; ok && i < text.size(); ++i) {
      ok = text[i] >= '0' && text[i] <= '9';
      port = port * 10 + static_cast<unsigned long>(text[i] - '0');
    }
    if (!ok || port == 0 || port > 65535) {
      throw ScenarioError{path, "expected \"host:port\", got \"" + text + "\""};
    }
  };
  if (o.has("addresses")) {
    const json& list = o.require("addresses");
    if (!list.is_array()) throw ScenarioError{o.at("addresses"), "expected an array of \"host:port\""};
    if (static_cast<int>(list.size()) != s.nodes) {
      throw ScenarioError{o.at("addresses"), "has " + std::to_string(list.size()) +
                                                 " entries for " + std::to_string(s.nodes) +
                                                 " nodes (/nodes)"};
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = o.at("addresses") + "/" + std::to_string(i);
      if (!list[i].is_string()) throw ScenarioError{path, "expected a string \"host:port\""};
      checkHostPort(path, list[i].get<std::string>());
      const std::string address = list[i].get<std::string>();
      for (size_t k = 0; k < p.addresses.size(); ++k) {
        if (p.addresses[k] == address) {
          throw ScenarioError{path, "rank " + std::to_string(i) + " and rank " +
                                        std::to_string(k) + " would both listen on " + address +
                                        ": each rank needs a host:port of its own"};
        }
      }
      p.addresses.push_back(address);
    }
  } else {
    const json& hosts = o.require("hosts");
    if (!hosts.is_array() || hosts.empty()) {
      throw ScenarioError{o.at("hosts"), "expected a non-empty array of host names"};
    }
    const int base = p.basePort;
    for (size_t i = 0; i < hosts.size(); ++i) {
      if (!hosts[i].is_string() || hosts[i].get<std::string>().empty()) {
        throw ScenarioError{o.at("hosts") + "/" + std::to_string(i), "expected a host name"};
      }
    }
    // Ranks fill the hosts in contiguous blocks: with 2 hosts and 8 nodes, ranks 0-3 on the
    // first host and 4-7 on the second; rank r listens on base_port + r.
    for (int r = 0; r < s.nodes; ++r) {
      const size_t h = static_cast<size_t>(r) * hosts.size() / static_cast<size_t>(s.nodes);
      p.addresses.push_back(hosts[h].get<std::string>() + ":" + std::to_string(base + r));
    }
  }
  o.finish();
}

Scenario parseRoot(const json& root, const std::string& file, const std::filesystem::path& baseDir) {
  Obj o(root, "");
  Scenario s;
  s.file = file;
  const int version = o.integer<int>("schema_version", 0, 1 << 20);
  if (version != kScenarioSchemaVersion) {
    throw ScenarioError{"/schema_version", "unsupported schema version " + std::to_string(version) +
                                               "; this build reads version " +
                                               std::to_string(kScenarioSchemaVersion)};
  }
  const bool named = o.has("name");
  s.name = o.string("name", std::filesystem::path(file).stem().string());
  checkName(s.name, named);
  s.description = o.string("description", "");
  s.nodes = o.integer<int>("nodes", 1, kMaxNodes);
  s.seed = o.integer<uint64_t>("seed", 0, std::numeric_limits<uint64_t>::max(), uint64_t{0});
  // An embedded run (a trainer calling starling::Peer) may leave out rounds and problem: the
  // trainer owns model and data and decides how many steps it takes. rounds 0 stands for that.
  s.rounds = o.has("rounds") ? o.integer<uint64_t>("rounds", 1, kMaxRounds) : (o.get("rounds"), 0);
  s.logEvery = o.integer<uint64_t>("log_every", 1, uint64_t{1} << 40,
                                   std::max<uint64_t>(1, s.rounds / 100));
  s.precision = o.choice("precision", "precision", {"float32", "float64"}, 1) == 0
                    ? Precision::kFloat32
                    : Precision::kFloat64;

  Obj topo = o.object("topology");
  parseTopology(topo, s);
  if (o.has("problem")) {
    Obj prob = o.object("problem");
    parseProblem(prob, s, baseDir);
  } else {
    o.get("problem");
    s.hasProblem = false;
  }
  Obj alg = o.object("algorithm");
  static const std::vector<std::string> kAlgorithms = algorithmNames();
  s.algorithm.kind = static_cast<optim::AlgorithmKind>(alg.choice("kind", "algorithm", kAlgorithms));
  s.algorithm.stepSize = parseStepSize(alg);
  parseLocalOptimizerOf(alg, s);
  parseDilocoOf(alg, s);
  using AK = optim::AlgorithmKind;
  const AK kind = s.algorithm.kind;
  const optim::AlgorithmInfo& info = optim::algorithmInfo(kind);
  if (info.usesGamma) s.algorithm.gamma = alg.number("gamma", 0.0, 1.0, 1.0, /*openLo=*/true);
  if (info.usesAlpha) s.algorithm.alpha = alg.number("alpha", 0.0, 1.0, 0.5, /*openLo=*/true);
  if (kind == AK::kDsgd) {
    s.algorithm.combine = alg.choice("combine", "combine", {"average", "adasum"}, 0) == 1
                              ? optim::AlgorithmSpec::Combine::kAdasum
                              : optim::AlgorithmSpec::Combine::kAverage;
    if (s.algorithm.combine == optim::AlgorithmSpec::Combine::kAdasum && alg.has("gamma")) {
      throw ScenarioError{alg.at("gamma"), "Adasum combines the updates itself; gamma goes with "
                                           "\"combine\": \"average\""};
    }
  }
  parseTrainingMethodsOf(alg, s);
  parseCodistillationOf(alg, s);
  if (s.algorithm.codistillation && (s.algorithm.adascale || s.algorithm.leader)) {
    throw ScenarioError{alg.at("codistillation"),
                        std::string("codistillation exchanges models every period; \"") +
                            (s.algorithm.adascale ? "adascale" : "leader") +
                            "\" needs a message every round; use one of them"};
  }
  s.algorithm.regularizer = s.problem.spec.regularizer;
  if (!s.algorithm.regularizer.none() && !optim::handlesRegularizer(kind)) {
    throw ScenarioError{"/problem/regularizer",
                        std::string(optim::algorithmKindName(kind)) +
                            " has no proximal step for a non-smooth regularizer; use "
                            "\"prox_lead\" or \"nids\""};
  }
  s.algorithm.timeVarying = s.topology.schedule.kind != topology::ScheduleKind::kStatic;
  if (alg.has("asynchronous")) {
    parseAsynchronous(alg, s);
  } else {
    alg.get("asynchronous");
  }
  alg.finish();
  if (o.has("compression")) {
    Obj co = o.object("compression");
    parseCompression(co, s);
  } else {
    o.get("compression");
  }
  if (o.has("transport")) {
    Obj tr = o.object("transport");
    parseTransport(tr, s);
  } else {
    o.get("transport");
  }
  checkTrainingMethodsCompression(s);
  s.algorithm.diloco.compressedDifferences =
      s.algorithm.kind == optim::AlgorithmKind::kDiloco &&
      !compression::sendsIdentityOnly(s.compression) && !s.compression.errorFeedback &&
      s.compression.kind != compression::CompressorSpec::Kind::kAdaComp;
  if (s.algorithm.combine == optim::AlgorithmSpec::Combine::kAdasum &&
      !compression::sendsIdentityOnly(s.compression)) {
    throw ScenarioError{"/compression/kind", "\"combine\": \"adasum\" sends models and updates "
                                             "uncompressed; leave compression out"};
  }
  if (o.has("peers")) {
    Obj pe = o.object("peers");
    parsePeers(pe, s);
  } else {
    o.get("peers");
  }
  if (o.has("divergence")) {
    Obj dv = o.object("divergence");
    s.divergenceMaxAbs = dv.number("max_abs", 0.0, std::numeric_limits<double>::max(),
                                   s.divergenceMaxAbs, /*openLo=*/true);
    dv.finish();
  } else {
    o.get("divergence");
  }
  if (o.has("faults")) {
    Obj fa = o.object("faults");
    parseFaults(fa, s);
  } else {
    o.get("faults");
  }
  if (s.algorithm.codistillation && s.faults.onPeerLoss == engine::OnPeerLoss::kContinue) {
    throw ScenarioError{"/faults/on_peer_loss",
                        "codistillation does not restart at a membership change yet; use "
                        "\"stop\""};
  }
  if (o.has("security")) {
    Obj se = o.object("security");
    parseSecurity(se, s, baseDir);
  } else {
    o.get("security");
  }
  if (o.has("checkpoint")) {
    Obj ck = o.object("checkpoint");
    s.checkpoint.every = ck.integer<uint64_t>("every", 1, kMaxRounds);
    s.checkpoint.keep = ck.integer<uint64_t>("keep", 2, 1000000, kDefaultCheckpointKeep);
    ck.finish();
    if (!s.hasProblem) {
      throw ScenarioError{"/checkpoint", "checkpoints are written by the peers of `node-launcher "
                                         "run` that train the scenario's own problem; a "
                                         "trainer's starling::Peer does not write them"};
    }
  } else {
    o.get("checkpoint");
  }
  o.finish();
  checkAsynchronous(s);
  checkLgc(s);
  return s;
}

}  // namespace

const char* precisionName(Precision p) { return p == Precision::kFloat32 ? "float32" : "float64"; }

core::Result<Scenario> parseScenario(std::string_view text, const std::string& file,
                                     const std::filesystem::path& baseDir) {
  if (text.size() > kMaxScenarioFileBytes) {
    return core::invalidArgument(file + ": the scenario is " +
                                 core::formatBytes(static_cast<double>(text.size())) +
                                 ", larger than the limit of " +
                                 core::formatBytes(static_cast<double>(kMaxScenarioFileBytes)));
  }
  json root;
  try {
    root = parseJson(text);
  } catch (const ScenarioError& e) {
    return core::invalidArgument(file + ": " + e.path + ": " + e.message);
  } catch (const json::parse_error& e) {
    // Turn the byte offset into a line and column a person can find.
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    if (auto pos = what.find("parse error"); pos != std::string::npos) what = what.substr(pos);
    return core::invalidArgument(file + ":" + std::to_string(line) + ":" + std::to_string(col) +
                                 ": invalid JSON: " + what);
  }
  try {
    Scenario s = parseRoot(root, file, baseDir);
    // What the sizes multiply out to, before anything is allocated. LIBSVM data is checked again
    // once read (prepareExperiment); here only what the scenario itself fixes.
    STARLING_RETURN_IF_ERROR(checkMemory(s, scenarioShape(s)));
    return s;
  } catch (const ScenarioError& e) {
    return core::invalidArgument(file + ": " + (e.path.empty() ? "/" : e.path) + ": " + e.message);
  } catch (const json::exception& e) {
    return core::invalidArgument(file + ": " + e.what());
  }
}

core::Result<Scenario> loadScenario(const std::string& path) {
  auto text = core::readRegularFile(path, kMaxScenarioFileBytes, "scenario file");
  if (!text) return text.status();
  return parseScenario(*text, path, std::filesystem::path(path).parent_path());
}

std::vector<std::string> peerAddresses(const Scenario& s) {
  if (s.peers.explicitAddresses) return s.peers.addresses;
  std::vector<std::string> out;
  for (int r = 0; r < s.nodes; ++r) out.push_back("127.0.0.1:" + std::to_string(s.peers.basePort + r));
  return out;
}

void applyOverrides(Scenario& s, std::optional<uint64_t> rounds, std::optional<uint64_t> seed) {
  if (rounds) s.rounds = *rounds;
  if (seed) {
    s.seed = *seed;
    s.topology.seed = *seed;
  }
}

}  // namespace starling::scenario
