#include "runtime/resume.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "core/read_file.h"
#include "runtime/checkpoint.h"
#include "runtime/peer.h"
#include "scenario/scenario_writer.h"

namespace starling::runtime {
namespace {

// A verified checkpoint of one rank: its header and the ranks its membership holds lost.
struct Found {
  CheckpointHeader header;
  std::vector<uint64_t> lost;
};

// Whether `path` has at least `bytes` bytes and byte `bytes` ends a line (or bytes == 0).
std::string checkLog(const std::filesystem::path& path, uint64_t bytes) {
  auto opened =
      core::openRegularFile(path.string(), "peer log");  // never a FIFO's open that blocks
  if (!opened) return "its peer log cannot be read: " + opened.status().message();
  const int fd = *opened;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  std::string why;
  if (size < 0 || static_cast<uint64_t>(size) < bytes) {
    why = "its peer log " + path.string() + " has " + std::to_string(size < 0 ? 0 : size) +
          " bytes, fewer than the " + std::to_string(bytes) + " it recorded";
  } else if (bytes > 0) {
    char last = 0;
    if (::pread(fd, &last, 1, static_cast<off_t>(bytes - 1)) != 1 || last != '\n') {
      why = "its peer log " + path.string() + " has no line ending at byte " +
            std::to_string(bytes);
    }
  }
  ::close(fd);
  return why;
}

std::string listRounds(const std::vector<uint64_t>& rounds) {
  if (rounds.empty()) return "none";
  std::string out;
  for (size_t k = 0; k < rounds.size() && k < 6; ++k) {
    out += (k ? ", " : "") + std::to_string(rounds[k]);
  }
  if (rounds.size() > 6) out += ", ...";
  return out;
}

}  // namespace

core::Result<ResumePlan> planResume(const scenario::Scenario& s,
                                    const std::filesystem::path& outDir,
                                    const std::function<void(const std::string&)>& say) {
  const uint64_t hash = scenario::scenarioHash(s);
  const int n = s.nodes;
  std::vector<std::map<uint64_t, Found>> valid(n);  // rank -> round -> checkpoint
  bool any = false;
  std::vector<std::string> foreign;  // verified checkpoints of another scenario
  for (int r = 0; r < n; ++r) {
    const auto dir = checkpointDir(outDir, r);
    for (uint64_t round : checkpointRounds(dir)) {
      any = true;
      const auto path = checkpointPath(outDir, r, round);
      auto ck = readCheckpoint(path);
      if (!ck) {  // the message starts with the file's name
        say("node-launcher: skipping checkpoint " + ck.status().message());
        continue;
      }
      const CheckpointHeader& h = ck->header;
      if (h.scenarioHash != hash) {
        foreign.push_back(path.string() + " was written for scenario hash " +
                          scenario::scenarioHashHex(h.scenarioHash));
        continue;
      }
      if (h.rank != r || h.round != round) {
        say("node-launcher: skipping checkpoint " + path.string() + ": it holds rank " +
            std::to_string(h.rank) + " at round " + std::to_string(h.round));
        continue;
      }
      if (h.round > s.rounds) {
        say("node-launcher: skipping checkpoint " + path.string() + ": round " +
            std::to_string(h.round) + " is past the scenario's " + std::to_string(s.rounds));
        continue;
      }
      if (const std::string why = checkLog(engine::peerLogPath(outDir, r), h.peerLogBytes);
          !why.empty()) {
        say("node-launcher: skipping checkpoint " + path.string() + ": " + why);
        continue;
      }
      Found f{h, {}};
      if (s.faults.onPeerLoss == engine::OnPeerLoss::kContinue) {
        auto fields = checkpointFields(ck->payload);
        if (!fields) {
          say("node-launcher: skipping checkpoint " + path.string() + ": " +
              fields.status().message());
          continue;
        }
        // Out at that round: a rank whose latest change (engine/membership_gossip.h) is a
        // departure, or a return not yet applied.
        auto ranks = checkpointU64s(*fields, "gossip/ranks");
        auto changes = checkpointU64s(*fields, "gossip/changes");
        auto applied = checkpointU64s(*fields, "gossip/applied");
        if (ranks && changes && applied && changes->size() == ranks->size() &&
            applied->size() == ranks->size()) {
          std::map<uint64_t, std::pair<uint64_t, uint64_t>> latest;  // rank -> (change, applied)
          for (size_t k = 0; k < ranks->size(); ++k) {
            auto& l = latest[(*ranks)[k]];
            if ((*changes)[k] >= l.first) l = {(*changes)[k], (*applied)[k]};
          }
          for (const auto& [rank, l] : latest) {
            if (l.first % 2 == 1 || l.second == 0) f.lost.push_back(rank);
          }
        }
      }
      valid[r].emplace(round, std::move(f));
    }
  }
  if (!any) {
    return core::invalidArgument(
        (outDir / "checkpoints").string() + " holds no checkpoint (rank-R/round-N.ckpt): "
        "nothing to resume (was the run started with a \"checkpoint\" section in its scenario?)");
  }
  bool verified = false;
  for (const auto& m : valid) verified = verified || !m.empty();
  if (!foreign.empty() && !verified) {
    return core::invalidArgument("the checkpoints in " + (outDir / "checkpoints").string() +
                                 " belong to another scenario: " + foreign.front() +
                                 ", this scenario's (with its seed "
                                 "and rounds) is " +
                                 scenario::scenarioHashHex(hash) +
                                 "; pass the scenario file that run used (" +
                                 (outDir / "scenario.resolved.json").string() + " is a copy)");
  }
  for (const auto& f : foreign) {
    say("node-launcher: skipping checkpoint " + f + ", not this scenario's " +
        scenario::scenarioHashHex(hash));
  }
  // Candidate rounds, newest first.
  std::set<uint64_t, std::greater<>> rounds;
  for (const auto& m : valid) {
    for (const auto& [round, f] : m) rounds.insert(round);
  }
  for (uint64_t round : rounds) {
    std::vector<int> missing;
    std::set<uint64_t> lostThere;
    for (int r = 0; r < n; ++r) {
      auto it = valid[r].find(round);
      if (it == valid[r].end()) {
        missing.push_back(r);
      } else {
        lostThere.insert(it->second.lost.begin(), it->second.lost.end());
      }
    }
    const bool allLost =
        static_cast<int>(missing.size()) < n &&
        std::all_of(missing.begin(), missing.end(),
                    [&](int r) { return lostThere.count(static_cast<uint64_t>(r)) > 0; });
    if (!missing.empty() && !allLost) continue;
    ResumePlan plan;
    plan.round = round;
    plan.lost = missing;
    plan.logBytes.assign(n, 0);
    for (int r = 0; r < n; ++r) {
      auto it = valid[r].find(round);
      if (it != valid[r].end()) plan.logBytes[r] = it->second.header.peerLogBytes;
    }
    return plan;
  }
  std::string have;
  for (int r = 0; r < n && r < 16; ++r) {
    std::vector<uint64_t> list;
    for (auto it = valid[r].rbegin(); it != valid[r].rend(); ++it) list.push_back(it->first);
    have += "\n  rank " + std::to_string(r) + ": " + listRounds(list);
  }
  return core::invalidArgument(
      "no round that every rank has a verified checkpoint of in " +
      (outDir / "checkpoints").string() + " (ranks run up to the graph's diameter apart: a "
      "larger checkpoint.keep or checkpoint.every keeps a common round):" + have);
}

core::Status rewindToPlan(const scenario::Scenario& s, const std::filesystem::path& outDir,
                          const ResumePlan& plan) {
  for (int r = 0; r < s.nodes; ++r) {
    if (std::binary_search(plan.lost.begin(), plan.lost.end(), r)) continue;
    const auto log = engine::peerLogPath(outDir, r);
    std::error_code ec;
    std::filesystem::resize_file(log, plan.logBytes[r], ec);
    if (ec) return core::ioError("cannot cut " + log.string() + ": " + ec.message());
    STARLING_RETURN_IF_ERROR(removeCheckpointsAfter(checkpointDir(outDir, r), plan.round));
  }
  return core::Status::ok();
}

}  // namespace starling::runtime
