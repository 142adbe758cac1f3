#include "runtime/peer.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/line_file.h"
#include "runtime/metrics.h"
#include "runtime/node_stack.h"
#include "runtime/scenario_writer.h"
#include "runtime/transport/factory.h"

namespace starling::runtime {
namespace {

using Clock = std::chrono::steady_clock;
// How often a waiting peer looks at its stop flag.
constexpr auto kStopPoll = std::chrono::milliseconds(200);

void say(const PeerOptions& opt, const std::string& line) {
  if (opt.log) {
    opt.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

template <typename T>
core::Status runAs(const Experiment& e, const PeerOptions& opt, transport::Transport& net,
                   const std::string& address) {
  const Scenario& s = e.scenario;
  auto built = buildNode<T>(e, opt.rank, net);
  if (!built) return built.status();
  NodeStack<T> stack = std::move(*built);
  Node<T>& node = *stack.node;

  std::error_code ec;
  std::filesystem::create_directories(opt.outDir / "peers", ec);
  if (ec) return core::ioError("cannot create " + (opt.outDir / "peers").string() + ": " + ec.message());
  auto created = LineFile::create(peerLogPath(opt.outDir, opt.rank));
  if (!created) return created.status();
  LineFile& out = **created;

  const auto start = Clock::now();
  const auto wall = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  auto record = [&](uint64_t round) -> core::Status {
    nlohmann::ordered_json j;
    j["round"] = round;
    j["bytes_sent"] = node.bytesSent();
    j["corrupt_messages"] = node.corruptMessages() + net.stats().corruptMessages;
    j["compression_error_sum"] = node.compressionErrorSum();
    j["compression_error_count"] = node.compressionErrorCount();
    j["wall_s"] = wall();
    const auto x = node.model();
    // Large models: a sketch every logged round, the model itself at the first and the last
    // (metrics.h).
    if (x.size() > kFullModelLogMaxDim && round != 0 && round != s.rounds) {
      j["sketch"] = modelSketch<T>(x, sketchSeed(s));
    } else {
      j["x"] = std::vector<double>(x.begin(), x.end());
    }
    // A diverged model holds NaN: JSON has none, so such values are written as null.
    return out.append(j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  };

  STARLING_RETURN_IF_ERROR(out.append(peerLogHeader(s, opt.rank, address)));
  say(opt, "node-launcher peer " + std::to_string(opt.rank) + ": listening on " + address + " (" +
               std::to_string(s.nodes) + " nodes, " + std::to_string(s.rounds) + " rounds, " +
               s.name + ")");
  STARLING_RETURN_IF_ERROR(record(0));
  uint64_t r = 0;
  auto rounds = [&]() -> core::Status {
    const auto roundTimeout = std::chrono::milliseconds(s.transport.roundTimeoutMs);
    for (; r < s.rounds; ++r) {
      const auto topo = e.schedule->at(r);
      const auto deadline = Clock::now() + roundTimeout;
      STARLING_RETURN_IF_ERROR(node.startRound(r, *topo, s.algorithm.stepSize.at(r), deadline));
      while (!node.roundComplete()) {
        if (opt.stop && opt.stop->load()) return core::cancelled("stopped by a signal");
        // Receives expire at `deadline` and complete with kTimeout; the margin only bounds this
        // loop if a completion were ever lost.
        if (Clock::now() > deadline + std::chrono::seconds(5)) {
          return core::internalError("round did not complete after its deadline");
        }
        auto ran =
            net.progress(std::min(Clock::now() + kStopPoll, deadline + std::chrono::seconds(1)));
        if (!ran) return ran.status();
      }
      STARLING_RETURN_IF_ERROR(node.finishRound());
      const uint64_t done = r + 1;
      if (done % s.logEvery == 0 || done == s.rounds) STARLING_RETURN_IF_ERROR(record(done));
    }
    return core::Status::ok();
  };
  if (auto st = rounds(); !st.isOk()) {
    const auto context = "rank " + std::to_string(opt.rank) + ", round " + std::to_string(r);
    st = explainRoundFailure(s, st, context);
    // The others learn from this line whom this peer lost (the launcher and `merge` name the
    // root cause of a cascade from it). Best effort: the error itself is what is returned.
    PeerFailure f{opt.rank, r, std::string(core::statusCodeName(st.code())),
                  st.code() == core::StatusCode::kCancelled ? std::nullopt : node.lostNeighbour(),
                  st.message()};
    (void)out.append(peerFailureLine(f));
    return st;
  }
  // The neighbours still need this peer's last messages: hand them all to the network before
  // the transport is closed (its close flushes what is in flight).
  const auto flushDeadline =
      Clock::now() + std::chrono::milliseconds(s.transport.connectTimeoutMs);
  while (node.sendsInFlight() > 0 && Clock::now() < flushDeadline) {
    if (opt.stop && opt.stop->load()) break;
    auto ran = net.progress(std::min(Clock::now() + kStopPoll, flushDeadline));
    if (!ran) return ran.status();
  }
  char done[160];
  std::snprintf(done, sizeof done, "node-launcher peer %d: done, %llu rounds, %.1f MB sent, %.2f s",
                opt.rank, static_cast<unsigned long long>(s.rounds),
                static_cast<double>(node.bytesSent()) / 1e6, wall());
  say(opt, done);
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
