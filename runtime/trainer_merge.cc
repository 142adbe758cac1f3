#include "runtime/trainer_merge.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "optim/algorithm.h"
#include "runtime/metrics.h"
#include "runtime/peer_log_reader.h"
#include "scenario/scenario_writer.h"
#include "topology/spec.h"

namespace starling::runtime {
namespace {

using ojson = nlohmann::ordered_json;  // not `json`: scenario_reader.h has that name

ojson number(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }

}  // namespace

TrainerLogMerger::TrainerLogMerger(const scenario::Scenario& s, std::filesystem::path dir,
                                   std::unique_ptr<core::LineFile> out)
    : s_(s),
      dir_(std::move(dir)),
      out_(std::move(out)),
      expectedHash_(scenario::scenarioHashHex(scenario::scenarioHash(s))),
      membership_(dir_, s.nodes) {
  for (int r = 0; r < s.nodes; ++r) {
    Source src;
    src.path = engine::peerLogPath(dir_, r);
    sources_.push_back(std::move(src));
  }
}

core::Result<std::unique_ptr<TrainerLogMerger>> TrainerLogMerger::create(
    const scenario::Scenario& s, std::filesystem::path dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return core::ioError("cannot create output folder " + dir.string() + ": " + ec.message());
  auto out = core::LineFile::create(dir / "metrics.jsonl");
  if (!out) return out.status();
  return std::unique_ptr<TrainerLogMerger>(new TrainerLogMerger(s, std::move(dir), std::move(*out)));
}

core::Status TrainerLogMerger::readPeer(int rank) {
  Source& src = sources_[rank];
  auto lines = readNewLines(src.path, src.offset, src.partial);
  if (!lines) return lines.status();
  try {
  for (const std::string& line : *lines) {
    ++src.lines;
    const auto j = ojson::parse(line, nullptr, false);
    const auto bad = [&](const std::string& why) {
      return core::corruption(src.path.string() + ":" + std::to_string(src.lines) + ": " + why);
    };
    if (!src.sawHeader) {
      if (!j.is_object() || !j.contains("peer_log")) return bad("the first line is not a peer log header");
      if (j.value("rank", -1) != rank || j.value("nodes", -1) != s_.nodes ||
          j.value("scenario_hash", std::string()) != expectedHash_) {
        return bad("written by a different run (rank " + j.value("rank", ojson(-1)).dump() +
                   ", scenario hash " + j.value("scenario_hash", ojson("")).dump() +
                   "; expected rank " + std::to_string(rank) + ", scenario hash " +
                   expectedHash_ + ")");
      }
      const std::string runId = j.value("run_id", std::string());
      if (!runId_) runId_ = runId;
      if (runId != *runId_) {
        return bad("written by another run (run id \"" + runId + "\"; the logs before it say \"" +
                   *runId_ + "\"): the peer logs of two runs are mixed in one folder");
      }
      src.sawHeader = true;
      continue;
    }
    if (auto failure = parseFailureLine(j, rank)) {
      src.failure = *failure;
      continue;
    }
    if (auto m = membership_.read(line, rank,
                                  src.path.string() + ":" + std::to_string(src.lines));
        !m) {
      return m.status();
    } else if (*m) {
      continue;
    }
    if (!j.is_object() || !j.contains("round") || !j["round"].is_number_unsigned()) {
      return bad("not a peer log line");
    }
    Record rec;
    rec.bytesSent = j.value("bytes_sent", uint64_t{0});
    rec.corrupt = j.value("corrupt_messages", uint64_t{0});
    rec.errSum = j.value("compression_error_sum", 0.0);
    rec.errCount = j.value("compression_error_count", uint64_t{0});
    rec.wallS = j.value("wall_s", 0.0);
    if (j.contains("x") && j["x"].is_array()) {
      rec.hasX = true;
      for (const auto& v : j["x"]) rec.x.push_back(v.is_number() ? v.get<double>() : NAN);
    }
    if (j.contains("sketch") && j["sketch"].is_array()) {
      for (const auto& v : j["sketch"]) rec.sketch.push_back(v.is_number() ? v.get<double>() : NAN);
      if (rec.sketch.size() != kSketchDim) return bad("sketch of the wrong size");
    }
    if (j.contains("metrics") && j["metrics"].is_object()) {
      for (const auto& [k, v] : j["metrics"].items()) {
        rec.metrics[k] = v.is_number() ? v.get<double>() : NAN;
      }
    }
    const uint64_t round = j["round"].get<uint64_t>();
    src.lastRound = std::max(src.lastRound.value_or(0), round);
    auto& slot = pending_[round];
    slot.resize(s_.nodes);
    slot[rank] = std::move(rec);
  }
  } catch (const ojson::exception& ex) {
    return wrongTypeInLine(src.path, src.lines, ex);
  }
  return core::Status::ok();
}

core::Result<int> TrainerLogMerger::poll() {
  for (int r = 0; r < s_.nodes; ++r) STARLING_RETURN_IF_ERROR(readPeer(r));
  STARLING_RETURN_IF_ERROR(membership_.settle());
  int merged = 0;
  while (!pending_.empty()) {
    auto it = pending_.begin();
    // The ranks in this round: all, less those lost in it or before (see the header). One that
    // has logged a later round (or, at the final poll, none will come) skipped this one.
    std::vector<const Record*> recs;
    bool complete = true;
    int running = 0;
    for (int r = 0; r < s_.nodes; ++r) {
      if (!membership_.running(r, it->first, /*lostRoundCounts=*/false)) continue;
      ++running;
      if (it->second[r]) {
        recs.push_back(&*it->second[r]);
        continue;
      }
      const auto& last = sources_[r].lastRound;
      if (!final_ && !(last && *last > it->first)) {
        complete = false;
        break;
      }
    }
    if (!complete) break;
    if (recs.empty()) {
      pending_.erase(it);
      continue;
    }
    const double n = static_cast<double>(recs.size());
    ojson line;
    line["round"] = it->first;
    const bool gap = static_cast<int>(recs.size()) < running;
    if (gap) line["logged_ranks"] = recs.size();
    // Consensus distance from the models, when every peer logged one of one length.
    bool models = !gap;
    for (const auto& rec : recs) models = models && rec->hasX && rec->x.size() == recs[0]->x.size();
    double consensus = NAN;
    if (models) {
      const size_t d = recs[0]->x.size();
      xMean_.assign(d, 0.0);
      for (const auto& rec : recs) {
        for (size_t k = 0; k < d; ++k) xMean_[k] += rec->x[k] / n;
      }
      double c = 0;
      for (const auto& rec : recs) {
        for (size_t k = 0; k < d; ++k) c += (rec->x[k] - xMean_[k]) * (rec->x[k] - xMean_[k]);
      }
      consensus = c / n;
    } else {
      // Models too large to log: the consensus sketch's unbiased estimate (runtime/metrics.h).
      xMean_.clear();
      bool sketches = !gap;
      for (const auto& rec : recs) sketches = sketches && !rec->sketch.empty();
      if (sketches) {
        std::vector<std::vector<double>> all;
        for (const auto& rec : recs) all.push_back(rec->sketch);
        consensus = sketchConsensusDistance(all);
      }
    }
    line["consensus_distance"] = number(consensus);
    uint64_t bytes = 0, corrupt = 0, errCount = 0;
    double errSum = 0, wall = 0;
    std::map<std::string, std::pair<double, int>> sums;
    for (const auto& rec : recs) {
      bytes += rec->bytesSent;
      corrupt += rec->corrupt;
      errSum += rec->errSum;
      errCount += rec->errCount;
      wall = std::max(wall, rec->wallS);
      for (const auto& [k, v] : rec->metrics) {
        sums[k].first += v;
        ++sums[k].second;
      }
    }
    line["bytes_sent"] = bytes;
    line["corrupt_messages"] = corrupt;
    // (Fewer ranks after a loss: the sums may shrink; that round reports none.)
    const uint64_t c = errCount > errCountSeen_ ? errCount - errCountSeen_ : 0;
    line["compression_error"] =
        number(c > 0 ? (errSum - errSumSeen_) / static_cast<double>(c) : 0.0);
    errSumSeen_ = errSum;
    errCountSeen_ = errCount;
    line["wall_s"] = wall;
    for (const auto& [k, v] : sums) line[k] = number(v.first / v.second);
    lastLine_ = line.dump();
    STARLING_RETURN_IF_ERROR(out_->append(lastLine_));
    lastRound_ = it->first;
    pending_.erase(it);
    ++merged;
  }
  return merged;
}

core::Result<int> TrainerLogMerger::finalPoll() {
  final_ = true;
  return poll();
}

std::map<int, uint64_t> TrainerLogMerger::lastRoundByRank() const {
  std::map<int, uint64_t> out;
  for (int r = 0; r < s_.nodes; ++r) {
    if (sources_[r].lastRound) out[r] = *sources_[r].lastRound;
  }
  return out;
}

std::string TrainerLogMerger::progressDetail() const {
  if (lastLine_.empty()) return "";
  const auto j = ojson::parse(lastLine_);
  std::string out;
  char buf[96];
  if (!j["consensus_distance"].is_null()) {
    std::snprintf(buf, sizeof buf, "consensus %.3e", j["consensus_distance"].get<double>());
    out = buf;
  }
  for (const char* key : {"loss", "train_loss", "accuracy", "test_accuracy"}) {
    if (j.contains(key) && j[key].is_number()) {
      std::snprintf(buf, sizeof buf, "%s%s %.4g", out.empty() ? "" : ", ", key, j[key].get<double>());
      out += buf;
    }
  }
  return out;
}

std::optional<RootCause> TrainerLogMerger::rootCause() const {
  std::vector<std::optional<engine::PeerFailure>> failures;
  for (const auto& src : sources_) failures.push_back(src.failure);
  return rootCauseOf(failures);
}

core::Status TrainerLogMerger::writeSummary() const {
  if (lastLine_.empty()) return core::failedPrecondition("no round to summarize");
  const ojson final = ojson::parse(lastLine_);
  ojson j{{"scenario", s_.name},
         {"scenario_file", s_.file},
         {"mode", "run"},
         {"trainer", true},
         {"nodes", s_.nodes},
         {"rounds", final["round"]},
         {"seed", s_.seed},
         {"algorithm", optim::algorithmKindName(s_.algorithm.kind)},
         {"topology", topology::graphKindName(s_.topology.base.kind)},
         {"schedule", topology::scheduleKindName(s_.topology.schedule.kind)},
         {"final", final}};
  for (const auto& [k, v] : final.items()) {
    if (k != "round") j[k] = v;
  }
  j["x_mean"] = xMean_;
  // How far each rank got: the merged rounds stop at the last any rank logged.
  ojson reached = ojson::object();
  for (const auto& [rank, round] : lastRoundByRank()) reached[std::to_string(rank)] = round;
  j["last_round_by_rank"] = reached;
  return core::writeFileAtomically(dir_ / "summary.json", j.dump(2) + "\n");
}

}  // namespace starling::runtime
