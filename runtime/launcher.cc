#include "runtime/launcher.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "engine/peer_log.h"
#include "runtime/merge.h"
#include "runtime/peer_log_reader.h"
#include "runtime/supervisor.h"
#include "runtime/trainer_merge.h"

namespace starling::runtime {

std::filesystem::path outputPath(const std::filesystem::path& outDir, int rank) {
  return outDir / "peers" / ("rank-" + std::to_string(rank) + ".out");
}

core::Result<std::vector<uint16_t>> freeLoopbackPorts(int count) {
  // Ports the kernel hands out to connect() and bind(0) (every UCX worker binds some for its TCP
  // interface) come from ip_local_port_range: a port picked there can be taken by another
  // process before our peer binds it. So pick below (or above) that range, from a random start,
  // and check each by binding it.
  int lo = 32768, hi = 60999;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> lo >> hi;
  int first = 10000, last = lo - 1;
  if (last - first < 4 * count) {
    first = hi + 1;
    last = 65535;
  }
  if (last - first < 4 * count) return core::ioError("no port range outside the ephemeral ports");
  std::random_device rd;
  const int span = last - first + 1;
  const int start = static_cast<int>(rd() % static_cast<unsigned>(span));
  std::vector<uint16_t> ports;
  for (int k = 0; k < span && static_cast<int>(ports.size()) < count; ++k) {
    const auto port = static_cast<uint16_t>(first + (start + k) % span);
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return core::ioError(std::string("socket: ") + strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) ports.push_back(port);
    close(fd);
  }
  if (static_cast<int>(ports.size()) < count) {
    return core::ioError("cannot find " + std::to_string(count) + " free loopback ports");
  }
  return ports;
}

namespace {

// The scenario's addresses, or free loopback ports.
core::Result<std::vector<std::string>> prepareRun(const scenario::Scenario& s) {
  std::vector<std::string> addresses;
  if (s.peers.explicitAddresses) {
    addresses = s.peers.addresses;
  } else {
    auto ports = freeLoopbackPorts(s.nodes);
    if (!ports) return ports.status();
    for (uint16_t p : *ports) addresses.push_back("127.0.0.1:" + std::to_string(p));
  }
  // A fresh run's folder was cleared of an earlier run's files by the caller (clearRunFolder,
  // runtime/run_folder.h: stale logs would be merged, stale checkpoints resumed); a resumed run
  // keeps the logs and checkpoints it resumes from (runtime/resume.h).
  return addresses;
}

}  // namespace

core::Result<LaunchResult> launchPeers(const scenario::Experiment& e, const LaunchOptions& opt) {
  auto addresses = prepareRun(e.scenario);
  if (!addresses) return addresses.status();
  auto log = MetricsLog::create(opt.outDir);
  if (!log) return log.status();
  PeerLogMerger merger(e, opt.outDir, **log);
  Merging merging{[&] { return merger.poll(); }, [&] { return merger.rootCause(); },
                  [&]() -> std::optional<uint64_t> {
                    if (!merger.last()) return std::nullopt;
                    return merger.last()->round;
                  },
                  [&] { return merger.last() ? progressDetail(*merger.last()) : std::string(); },
                  [&] { return merger.lost(); }};

  if (opt.resumeRound && *opt.resumeRound >= e.scenario.rounds) {
    // Resuming a run that had finished: nothing to run, its logs are merged again.
    auto merged = merger.poll();
    if (!merged) return merged.status();
  } else {
    STARLING_RETURN_IF_ERROR(supervise(e.scenario, opt, std::move(merging), *addresses));
  }
  if (!merger.last() || merger.last()->round != e.scenario.rounds) {
    // Every peer has exited, so no line is still to come (PeerLogMerger::finalPoll).
    auto merged = merger.finalPoll();
    if (!merged) return merged.status();
  }
  if (!merger.last() || merger.last()->round != e.scenario.rounds) {
    return core::internalError("the peers finished but their logs stop before the last round:" +
                               merger.shortLogs());
  }
  LaunchResult result{*merger.last(), merger.xMean()};
  std::optional<AsyncReport> async;
  if (e.scenario.asynchronous.enabled) async = asyncReportFromPeerLogs(e.scenario, opt.outDir);
  STARLING_RETURN_IF_ERROR((*log)->writeSummary(e.scenario, result.last, result.xMean, "run",
                                                async ? &*async : nullptr));
  return result;
}

core::Result<TrainerRunResult> launchTrainers(const scenario::Scenario& s,
                                              const LaunchOptions& opt) {
  if (opt.command.empty()) return core::invalidArgument("no trainer command");
  auto addresses = prepareRun(s);
  if (!addresses) return addresses.status();
  auto created = TrainerLogMerger::create(s, opt.outDir);
  if (!created) return created.status();
  TrainerLogMerger& merger = **created;
  Merging merging{[&] { return merger.poll(); }, [&] { return merger.rootCause(); },
                  [&] { return merger.lastRound(); }, [&] { return merger.progressDetail(); },
                  [&] { return merger.lost(); }};
  STARLING_RETURN_IF_ERROR(supervise(s, opt, std::move(merging), *addresses));
  // Every trainer has exited: rounds some rank never reached are merged from those that did.
  if (auto merged = merger.finalPoll(); !merged) return merged.status();
  TrainerRunResult result;
  result.rounds = merger.lastRound();
  result.detail = merger.progressDetail();
  result.lost = merger.lost();
  result.lastRoundByRank = merger.lastRoundByRank();
  if (result.rounds) STARLING_RETURN_IF_ERROR(merger.writeSummary());
  return result;
}

AsyncReport asyncReportFromPeerLogs(const scenario::Scenario& s,
                                    const std::filesystem::path& outDir) {
  AsyncReport report;
  report.finishUnit = "s";
  report.finish.assign(static_cast<size_t>(s.nodes), 0.0);
  for (int rank = 0; rank < s.nodes; ++rank) {
    // Untrusted like every file in the run folder: what cannot be read counts as nothing logged.
    uint64_t offset = 0;
    std::string partial;
    auto lines = readNewLines(engine::peerLogPath(outDir, rank), offset, partial);
    if (!lines) continue;
    for (const std::string& line : *lines) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("round") || !j["round"].is_number_unsigned()) continue;
      if (j.contains("staleness_max") && j["staleness_max"].is_number_unsigned()) {
        report.maxStalenessSeen =
            std::max(report.maxStalenessSeen, j["staleness_max"].get<uint64_t>());
      }
      if (j["round"].get<uint64_t>() == s.rounds && j.contains("wall_s") &&
          j["wall_s"].is_number()) {
        report.finish[static_cast<size_t>(rank)] = j["wall_s"].get<double>();
      }
    }
  }
  return report;
}

}  // namespace starling::runtime
