#include "scenario/compile.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/peer_log.h"
#include "scenario/experiment.h"
#include "scenario/scenario_writer.h"
#include "transport/auth.h"

namespace starling::scenario {

engine::Options engineOptions(const Scenario& s) {
  engine::Options o;
  o.nodes = s.nodes;
  o.rounds = s.rounds;
  o.stepSize = s.algorithm.stepSize;
  o.connectTimeoutMs = s.transport.connectTimeoutMs;
  o.roundTimeoutMs = s.transport.roundTimeoutMs;
  o.onPeerLoss = s.faults.onPeerLoss;
  o.repair = s.faults.repair;
  o.agreementRounds = s.faults.agreementRounds;
  o.faultScript = s.faults.script;
  o.divergenceMaxAbs = s.divergenceMaxAbs;
  if (s.asynchronous.enabled) o.maxStaleness = s.asynchronous.maxStaleness;
  o.explainFailure = [algorithm = s.algorithm](const core::Status& st, const std::string& context) {
    return explainRoundFailure(algorithm, st, context);
  };
  return o;
}

core::Result<transport::NetworkOptions> networkOptions(const Scenario& s, int rank,
                                                       std::vector<std::string> addresses) {
  transport::NetworkOptions no;
  no.rank = rank;
  no.addresses = addresses.empty() ? peerAddresses(s) : std::move(addresses);
  if (static_cast<int>(no.addresses.size()) != s.nodes) {
    return core::invalidArgument("expected " + std::to_string(s.nodes) + " peer addresses, got " +
                                 std::to_string(no.addresses.size()));
  }
  no.tls = s.transport.tls;
  no.ucxTls = s.transport.ucxTls;
  no.connectTimeout = std::chrono::milliseconds(s.transport.connectTimeoutMs);
  no.maxEndpoints = s.transport.maxEndpoints;
  no.sharedMemoryFrames = s.transport.shmFrames;
  no.sharedMemoryThreshold = s.transport.shmThresholdBytes;
  no.spin = std::chrono::microseconds(s.transport.spinUs);
  no.busyPoll = s.transport.busyPoll == TransportConfig::BusyPoll::kAuto
                    ? transport::coreForEachLocalRank(no.addresses, rank)
                    : s.transport.busyPoll == TransportConfig::BusyPoll::kOn;
  no.failReceivesOfLostPeers = s.faults.onPeerLoss == engine::OnPeerLoss::kContinue;
  // DiLoCo's overlap computes while its frames travel, polling between inner steps: a
  // rendezvous would stall each frame until the receiver's next poll.
  no.eagerSends = s.algorithm.kind == optim::AlgorithmKind::kDiloco && s.algorithm.diloco.overlap;
  // The cluster's key: the scenario's key_file, or the file STARLING_KEY_FILE names.
  std::string keyFile = s.security.keyFile;
  if (keyFile.empty()) {
    if (const char* env = std::getenv(kKeyFileEnv); env != nullptr && *env != '\0')
      keyFile = env;
  }
  if (!keyFile.empty()) {
    auto key = transport::auth::loadKeyFile(keyFile);
    if (!key) return key.status();
    no.key = std::make_shared<const transport::auth::ClusterKey>(std::move(*key));
  } else if (s.security.encrypt) {
    return core::invalidArgument(
        "security.encrypt needs the cluster's key: set security.key_file or " +
        std::string(kKeyFileEnv));
  }
  no.encrypt = s.security.encrypt;
  return no;
}

std::string currentRunId() {
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v).substr(0, 128) : std::string();
  };
  if (auto id = env("STARLING_RUN_ID"); !id.empty()) return id;
  if (auto job = env("SLURM_JOB_ID"); !job.empty()) {
    const auto step = env("SLURM_STEP_ID");
    return "slurm-" + job + (step.empty() ? "" : "." + step);
  }
  if (auto ns = env("PMIX_NAMESPACE"); !ns.empty()) return "pmix-" + ns;
  return "";
}

std::string peerLogHeader(const Scenario& s, int rank, const std::string& address,
                          bool trainer) {
  nlohmann::ordered_json j;
  j["peer_log"] = engine::kPeerLogVersion;
  j["rank"] = rank;
  j["nodes"] = s.nodes;
  j["seed"] = s.seed;
  j["rounds"] = s.rounds;
  j["scenario_hash"] = scenarioHashHex(scenarioHash(s));
  j["address"] = address;
  j["version"] = STARLING_VERSION;
  j["run_id"] = currentRunId();
  j["trainer"] = trainer;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace starling::scenario
