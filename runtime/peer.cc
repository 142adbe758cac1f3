#include "runtime/peer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "runtime/line_file.h"
#include "runtime/metrics.h"
#include "runtime/node_stack.h"
#include "runtime/scenario_writer.h"
#include "runtime/transport/factory.h"

namespace starling::runtime {
namespace {

template <typename T>
core::Status runAs(const Experiment& e, const PeerOptions& opt, transport::Transport& net,
                   const std::string& address) {
  const Scenario& s = e.scenario;
  auto built = buildNode<T>(e, opt.rank, net);
  if (!built) return built.status();
  NodeStack<T> stack = std::move(*built);
  Node<T>& node = *stack.node;

  // The same round loop as a starling::Peer in a user's trainer (runtime/engine.h); here the
  // gradients come from the scenario's own problem (the NodeStack's oracle).
  EngineOptions eo;
  eo.rank = opt.rank;
  eo.outDir = opt.outDir;
  eo.address = address;
  eo.stop = opt.stop;
  eo.log = opt.log;
  Engine<T> engine(s, *e.schedule, net, eo);
  STARLING_RETURN_IF_ERROR(engine.open());

  auto record = [&](uint64_t round) -> core::Status {
    nlohmann::ordered_json j;
    j["round"] = round;
    j["bytes_sent"] = node.bytesSent();
    j["corrupt_messages"] = node.corruptMessages() + net.stats().corruptMessages;
    j["compression_error_sum"] = node.compressionErrorSum();
    j["compression_error_count"] = node.compressionErrorCount();
    j["wall_s"] = engine.wallSeconds();
    const auto x = node.model();
    // Large models: a sketch every logged round, the model itself at the first and the last
    // (metrics.h).
    if (x.size() > kFullModelLogMaxDim && round != 0 && round != s.rounds) {
      j["sketch"] = modelSketch<T>(x, sketchSeed(s));
      // The merge cannot evaluate a sketch: the peer evaluates its own model (the first 1,000
      // test images, as simulate's test_accuracy_peers_*).
      if (const double a = peerTestAccuracy<T>(e, x); !std::isnan(a)) j["test_accuracy_own"] = a;
    } else {
      j["x"] = std::vector<double>(x.begin(), x.end());
    }
    // A diverged model holds NaN: JSON has none, so such values are written as null.
    return engine.append(
        j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  };

  engine.say("node-launcher peer " + std::to_string(opt.rank) + ": listening on " + address +
             " (" + std::to_string(s.nodes) + " nodes, " + std::to_string(s.rounds) +
             " rounds, " + s.name + ")");
  STARLING_RETURN_IF_ERROR(record(0));
  while (engine.rounds() < s.rounds) {
    STARLING_RETURN_IF_ERROR(engine.round(node));  // a failure is already in the log
    const uint64_t done = engine.rounds();
    if (done % s.logEvery == 0 || done == s.rounds) STARLING_RETURN_IF_ERROR(record(done));
  }
  // The neighbours still need this peer's last messages: hand them all to the network before
  // the transport is closed (its close flushes what is in flight).
  STARLING_RETURN_IF_ERROR(engine.flush({&node}));
  char done[160];
  std::snprintf(done, sizeof done, "node-launcher peer %d: done, %llu rounds, %.1f MB sent, %.2f s",
                opt.rank, static_cast<unsigned long long>(s.rounds),
                static_cast<double>(node.bytesSent()) / 1e6, engine.wallSeconds());
  engine.say(done);
  return core::Status::ok();
}

}  // namespace

std::filesystem::path peerLogPath(const std::filesystem::path& outDir, int rank) {
  return outDir / "peers" / ("rank-" + std::to_string(rank) + ".jsonl");
}

std::string peerLogHeader(const Scenario& s, int rank, const std::string& address) {
  nlohmann::ordered_json j;
  j["peer_log"] = kPeerLogVersion;
  j["rank"] = rank;
  j["nodes"] = s.nodes;
  j["seed"] = s.seed;
  j["rounds"] = s.rounds;
  j["scenario_hash"] = scenarioHashHex(scenarioHash(s));
  j["address"] = address;
  j["version"] = STARLING_VERSION;
  return j.dump();
}

std::string peerFailureLine(const PeerFailure& f) {
  nlohmann::ordered_json j;
  j["round"] = f.round;
  j["code"] = f.code;
  if (f.lostRank) j["lost_rank"] = *f.lostRank;
  j["message"] = f.message;
  return nlohmann::ordered_json{{"failed", j}}.dump(-1, ' ', false,
                                                    nlohmann::json::error_handler_t::replace);
}

core::Status runPeer(const Experiment& e, const PeerOptions& opt) {
  const Scenario& s = e.scenario;
  if (opt.rank < 0 || opt.rank >= s.nodes) {
    return core::invalidArgument("rank " + std::to_string(opt.rank) + " is not in 0.." +
                                 std::to_string(s.nodes - 1));
  }
  transport::NetworkOptions no;
  no.rank = opt.rank;
  no.addresses = opt.addresses.empty() ? peerAddresses(s) : opt.addresses;
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
  no.log = opt.log;
  auto net = transport::createNetworkTransport(no);
  if (!net) return net.status().withContext("rank " + std::to_string(opt.rank));
  const std::string& address = no.addresses[opt.rank];
  if (s.precision == Precision::kFloat32) return runAs<float>(e, opt, **net, address);
  return runAs<double>(e, opt, **net, address);
}

}  // namespace starling::runtime
