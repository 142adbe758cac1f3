#include "runtime/peer.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/node_stack.h"
#include "runtime/transport/factory.h"

namespace starling::runtime {
namespace {

using Clock = std::chrono::steady_clock;
// How often a waiting peer looks at its stop flag.
constexpr auto kStopPoll = std::chrono::milliseconds(200);

template <typename T>
core::Status runAs(const Experiment& e, const PeerOptions& opt, transport::Transport& net) {
  const Scenario& s = e.scenario;
  auto built = buildNode<T>(e, opt.rank, net);
  if (!built) return built.status();
  NodeStack<T> stack = std::move(*built);
  Node<T>& node = *stack.node;

  std::error_code ec;
  std::filesystem::create_directories(opt.outDir / "peers", ec);
  const auto path = peerLogPath(opt.outDir, opt.rank);
  std::ofstream out(path, std::ios::trunc);
  if (ec || !out) return core::ioError("cannot write " + path.string());

  const auto start = Clock::now();
  auto record = [&](uint64_t round) -> core::Status {
    nlohmann::ordered_json j;
    j["round"] = round;
    j["bytes_sent"] = node.bytesSent();
    j["corrupt_messages"] = node.corruptMessages() + net.stats().corruptMessages;
    j["compression_error_sum"] = node.compressionErrorSum();
    j["compression_error_count"] = node.compressionErrorCount();
    j["wall_s"] = std::chrono::duration<double>(Clock::now() - start).count();
    const auto x = node.model();
    j["x"] = std::vector<double>(x.begin(), x.end());
    out << j.dump() << '\n';
    out.flush();
    return out ? core::Status::ok() : core::ioError("write failed: " + path.string());
  };

  STARLING_RETURN_IF_ERROR(record(0));
  const auto roundTimeout = std::chrono::milliseconds(s.transport.roundTimeoutMs);
  for (uint64_t r = 0; r < s.rounds; ++r) {
    const auto topo = e.schedule->at(r);
    const auto deadline = Clock::now() + roundTimeout;
    const auto context = "rank " + std::to_string(opt.rank) + ", round " + std::to_string(r);
    STARLING_RETURN_IF_ERROR(node.startRound(r, *topo, s.algorithm.stepSize.at(r), deadline)
                                 .withContext(context));
    while (!node.roundComplete()) {
      if (opt.stop && opt.stop->load()) return core::cancelled(context + ": stopped by a signal");
      // Receives expire at `deadline` and complete with kTimeout; the margin only bounds this
      // loop if a completion were ever lost.
      if (Clock::now() > deadline + std::chrono::seconds(5)) {
        return core::internalError(context + ": round did not complete after its deadline");
      }
      auto ran = net.progress(std::min(Clock::now() + kStopPoll, deadline + std::chrono::seconds(1)));
      if (!ran) return ran.status().withContext(context);
    }
    STARLING_RETURN_IF_ERROR(node.finishRound().withContext(context));
    const uint64_t done = r + 1;
    if (done % s.logEvery == 0 || done == s.rounds) STARLING_RETURN_IF_ERROR(record(done));
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
  return core::Status::ok();
}

}  // namespace

std::filesystem::path peerLogPath(const std::filesystem::path& outDir, int rank) {
  return outDir / "peers" / ("rank-" + std::to_string(rank) + ".jsonl");
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
  if (s.precision == Precision::kFloat32) return runAs<float>(e, opt, **net);
  return runAs<double>(e, opt, **net);
}

}  // namespace starling::runtime
