#include "runtime/merge.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/peer_log_reader.h"
#include "scenario/scenario_writer.h"

namespace starling::runtime {
namespace {

using nlohmann::json;

bool isHeader(const json& j) { return j.is_object() && j.contains("peer_log"); }

// A header line's fields, or a message saying what is wrong with it.
core::Result<PeerLogHeader> parseHeader(const json& j, const std::string& where) {
  const auto bad = [&](const std::string& why) { return core::corruption(where + ": " + why); };
  if (!isHeader(j)) return bad("the first line is not a peer log header (an older Starling's log?)");
  if (j["peer_log"] != engine::kPeerLogVersion) {
    return bad("peer log version " + j["peer_log"].dump() + "; this build reads version " +
               std::to_string(engine::kPeerLogVersion));
  }
  PeerLogHeader h;
  try {
    h.rank = j.at("rank").get<int>();
    h.nodes = j.at("nodes").get<int>();
    h.seed = j.at("seed").get<uint64_t>();
    h.rounds = j.at("rounds").get<uint64_t>();
    h.scenarioHash = j.at("scenario_hash").get<std::string>();
    h.address = j.value("address", "");
    h.version = j.value("version", "");
    h.runId = j.value("run_id", "");
    h.trainer = j.value("trainer", false);
  } catch (const json::exception& ex) {
    return bad(std::string("malformed header: ") + ex.what());
  }
  return h;
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

core::Result<std::vector<PeerLogHeader>> readPeerLogHeaders(const std::filesystem::path& dir,
                                                            int nodes) {
  std::vector<PeerLogHeader> headers;
  std::vector<int> missing;
  for (int r = 0; r < nodes; ++r) {
    const auto path = engine::peerLogPath(dir, r);
    auto line = readFirstLine(path);
    if (!line && line.status().code() != core::StatusCode::kNotFound) return line.status();
    if (!line || line->empty()) {  // no file, or no complete first line
      missing.push_back(r);
      continue;
    }
    auto h = parseHeader(json::parse(*line, nullptr, false), path.string() + ":1");
    if (!h) return h.status();
    if (h->rank != r) {
      return core::corruption(path.string() + ": written by rank " + std::to_string(h->rank));
    }
    headers.push_back(*h);
  }
  if (!missing.empty()) {
    return core::notFound("no peer log for rank" + std::string(missing.size() > 1 ? "s " : " ") +
                          joinRanks(missing) + " in " + (dir / "peers").string() +
                          " (the peer never started, or its folder is elsewhere: copy every "
                          "machine's peers/rank-*.jsonl into one folder)");
  }
  return headers;
}

std::string RootCause::describe() const {
  std::string out = "peer " + std::to_string(rank);
  if (lostByOthers) {
    out += std::string(" was lost first: ") + (lostBy.size() > 1 ? "peers " : "peer ") +
           joinRanks(lostBy) + " stopped at round " + std::to_string(round) + " waiting for it (" +
           message + ")";
  } else {
    out += " failed first, at round " + std::to_string(round) + ": " + message;
  }
  return out;
}

PeerLogMerger::PeerLogMerger(const scenario::Experiment& e, std::filesystem::path dir,
                             MetricsLog& log)
    : e_(e),
      dir_(std::move(dir)),
      log_(log),
      expectedHash_(scenario::scenarioHashHex(scenario::scenarioHash(e.scenario))),
      membership_(dir_, e.scenario.nodes) {
  for (int r = 0; r < e.scenario.nodes; ++r) {
    Source src;
    src.path = engine::peerLogPath(dir_, r);
    sources_.push_back(std::move(src));
  }
}

core::Status PeerLogMerger::readPeer(int rank) {
  Source& src = sources_[rank];
  auto lines = readNewLines(src.path, src.offset, src.partial);
  if (!lines) return lines.status();
  try {
  for (const std::string& line : *lines) {
    ++src.lines;
    const auto j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto bad = [&](const std::string& why) {
      return core::corruption(src.path.string() + ":" + std::to_string(src.lines) + ": " + why);
    };
    if (!src.sawHeader) {
      auto h = parseHeader(j, src.path.string());
      if (!h) return h.status();
      if (h->rank != rank || h->nodes != e_.scenario.nodes || h->scenarioHash != expectedHash_) {
        return bad("written by a different run (rank " + std::to_string(h->rank) + " of " +
                   std::to_string(h->nodes) + ", seed " + std::to_string(h->seed) + ", rounds " +
                   std::to_string(h->rounds) + ", scenario hash " + h->scenarioHash +
                   "; expected rank " + std::to_string(rank) + " of " +
                   std::to_string(e_.scenario.nodes) + ", seed " +
                   std::to_string(e_.scenario.seed) + ", rounds " +
                   std::to_string(e_.scenario.rounds) + ", scenario hash " + expectedHash_ + ")");
      }
      if (h->trainer) {
        return bad("a trainer's peer log (run SCENARIO -- COMMAND): its rounds are the "
                   "trainer's model, not the scenario's problem, and its launcher merged them");
      }
      if (!runId_) runId_ = h->runId;
      if (h->runId != *runId_) {
        return bad("written by another run of the same scenario (run id \"" + h->runId +
                   "\"; the logs before it say \"" + *runId_ + "\"): the peer logs of two runs "
                   "are mixed in one folder");
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
    const bool hasX = j.is_object() && j.contains("x") && j["x"].is_array();
    const bool hasSketch = j.is_object() && j.contains("sketch") && j["sketch"].is_array();
    if (!j.is_object() || !j.contains("round") || !j["round"].is_number_unsigned() ||
        hasX == hasSketch) {
      return bad("not a peer log line");
    }
    Record rec;
    rec.bytesSent = j.value("bytes_sent", uint64_t{0});
    rec.corrupt = j.value("corrupt_messages", uint64_t{0});
    rec.compressionErrorSum = j.value("compression_error_sum", 0.0);
    rec.compressionErrorCount = j.value("compression_error_count", uint64_t{0});
    rec.wallS = j.value("wall_s", 0.0);
    if (j.contains("test_accuracy_own")) {
      if (!j["test_accuracy_own"].is_number()) return bad("non-numeric test_accuracy_own");
      rec.ownAccuracy = j["test_accuracy_own"].get<double>();
    }
    if (j.contains("methods")) {
      if (!j["methods"].is_object()) return bad("\"methods\" is not an object");
      for (const auto& [name, v] : j["methods"].items()) {
        // null: a value JSON cannot hold (NaN, infinity)
        if (!v.is_number() && !v.is_null()) return bad("non-numeric method metric " + name);
        rec.methods.push_back({name, v.is_null() ? NAN : v.get<double>()});
      }
    }
    auto& values = hasX ? rec.x : rec.sketch;
    for (const auto& v : j[hasX ? "x" : "sketch"]) {
      if (v.is_null()) {  // JSON has no NaN: a diverged model's NaN is written as null
        values.push_back(NAN);
        continue;
      }
      if (!v.is_number()) return bad("non-numeric model value");
      values.push_back(v.get<double>());
    }
    if (hasX && rec.x.size() != e_.modelDim()) return bad("model of the wrong size");
    if (hasSketch && rec.sketch.size() != kSketchDim) return bad("sketch of the wrong size");
    const uint64_t round = j["round"].get<uint64_t>();
    src.lastRound = round;
    auto& slot = pending_[round];
    slot.resize(e_.scenario.nodes);
    slot[rank] = std::move(rec);
  }
  } catch (const json::exception& ex) {
    return wrongTypeInLine(src.path, src.lines, ex);
  }
  return core::Status::ok();
}

core::Result<bool> MembershipReports::read(const std::string& line, int reporter,
                                           const std::string& where) {
  // Cheap test first: round lines (models of any size) are not parsed twice for nothing.
  if (line.find("\"lost\"") == std::string::npos &&
      line.find("\"membership\"") == std::string::npos) {
    return false;
  }
  const auto j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&](const std::string& why) { return core::corruption(where + ": " + why); };
  if (j.is_object() && j.contains("lost") && j["lost"].is_object()) {
    const json& l = j["lost"];
    if (!l.contains("rank") || !l["rank"].is_number_integer() || !l.contains("round") ||
        !l["round"].is_number_unsigned()) {
      return bad("malformed \"lost\" line");
    }
    const int who = l["rank"].get<int>();
    if (who < 0 || who >= nodes_) return bad("\"lost\" names no rank of this run");
    reports_.push_back(Report{l["round"].get<uint64_t>(), reporter, who, 0, {}, line});
    return true;
  }
  if (j.is_object() && j.contains("membership") && j["membership"].is_object()) {
    const json& m = j["membership"];
    if (!m.contains("epoch") || !m["epoch"].is_number_unsigned()) {
      return bad("malformed \"membership\" line");
    }
    if (!m.contains("round") || !m["round"].is_number_unsigned()) {
      return bad("malformed \"membership\" line");
    }
    std::vector<int> joined;
    if (m.contains("joined")) {
      if (!m["joined"].is_array()) return bad("malformed \"membership\" line");
      for (const auto& r : m["joined"]) {
        if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= nodes_) {
          return bad("\"joined\" names no rank of this run");
        }
        joined.push_back(r.get<int>());
      }
    }
    reports_.push_back(Report{m["round"].get<uint64_t>(), reporter, -1,
                              m["epoch"].get<uint64_t>(), std::move(joined), line});
    return true;
  }
  return false;
}

core::Status MembershipReports::note(const std::string& line) {
  if (!log_) {
    auto created = core::LineFile::create(dir_ / "membership.jsonl");
    if (!created) return created.status();
    log_ = std::move(*created);
  }
  return log_->append(line);
}

bool MembershipReports::running(int rank, uint64_t round, bool lostRoundCounts) const {
  auto it = absent_.find(rank);
  if (it == absent_.end()) return true;
  for (const auto& [lost, back] : it->second) {
    if ((round > lost || (!lostRoundCounts && round == lost)) && round < back) return false;
  }
  return true;
}

core::Status MembershipReports::settle() {
  // Rebuilt from every report so far, in round order: a loss counts when its reporter is in the
  // run at that round (a stalled peer that resumes reports the others lost, wrongly); a return
  // ends the rank's absence from its round.
  std::stable_sort(reports_.begin(), reports_.end(),
                   [](const Report& a, const Report& b) { return a.round < b.round; });
  constexpr uint64_t kOut = ~uint64_t{0};
  absent_.clear();
  for (const Report& rep : reports_) {
    if (!running(rep.reporter, rep.round)) continue;
    if (rep.rank >= 0) {
      auto& spans = absent_[rep.rank];
      if (spans.empty() || spans.back().second != kOut) {
        // Out from this round on; a report of its loss before its last return is an old one.
        if (spans.empty() || rep.round >= spans.back().second) spans.emplace_back(rep.round, kOut);
      }
      if (spans.back().first == rep.round && noted_.insert({rep.rank, rep.round}).second) {
        STARLING_RETURN_IF_ERROR(note(rep.line));
      }
      continue;
    }
    for (int j : rep.joined) {
      auto it = absent_.find(j);
      if (it != absent_.end() && !it->second.empty() && it->second.back().second == kOut &&
          it->second.back().first < rep.round) {
        it->second.back().second = rep.round;
      }
    }
    if (!changes_.count(rep.epoch)) {
      changes_[rep.epoch] = rep.line;
      STARLING_RETURN_IF_ERROR(note(rep.line));
    }
  }
  lostNow_.clear();
  for (const auto& [rank, spans] : absent_) {
    if (!spans.empty() && spans.back().second == kOut) lostNow_[rank] = spans.back().first;
  }
  return core::Status::ok();
}

core::Result<int> PeerLogMerger::finalPoll() {
  final_ = true;
  return poll();
}

core::Result<int> PeerLogMerger::poll() {
  for (int r = 0; r < e_.scenario.nodes; ++r) STARLING_RETURN_IF_ERROR(readPeer(r));
  STARLING_RETURN_IF_ERROR(membership_.settle());
  int merged = 0;
  const int n = e_.scenario.nodes;
  if (lastRecord_.empty()) lastRecord_.resize(n);
  while (!pending_.empty()) {
    auto it = pending_.begin();
    const uint64_t round = it->first;
    // Round `round` is complete when every rank logged it or was lost before it; the records of
    // ranks lost before it (a straggler that comes back) are not the run's.
    std::vector<bool> running(n, true);
    bool complete = true;
    for (int r = 0; r < n; ++r) {
      running[r] = membership_.running(r, round);
      if (running[r] && final_ && !it->second[r].has_value() &&
          !membership_.running(r, round, /*lostRoundCounts=*/false)) {
        running[r] = false;  // lost in this round, and its line for it never came (finalPoll)
      }
      if (running[r]) complete = complete && it->second[r].has_value();
    }
    if (!complete) break;
    const bool anyLost = std::find(running.begin(), running.end(), false) != running.end();
    for (int r = 0; r < n; ++r) {
      if (!running[r]) it->second[r].reset();
    }
    if (anyLost && surviving_ != running) {
      auto problem = survivorProblem(e_, running);
      if (!problem) return problem.status();
      survivors_ = std::make_unique<SurvivorProblem>(std::move(*problem));
      surviving_ = running;
    }
    bool sketched = false;
    for (const auto& rec : it->second) sketched = sketched || (rec && rec->x.empty());
    RoundMetrics m;
    if (sketched) {
      // Only the consensus distance can be had from sketches; the model metrics stay null.
      std::vector<std::vector<double>> sketches;
      for (const auto& rec : it->second) {
        if (!rec) continue;
        sketches.push_back(rec->x.empty() ? rec->sketch
                                          : modelSketch<double>(rec->x, sketchSeed(e_.scenario)));
      }
      m.consensusDistance = sketchConsensusDistance(sketches);
      m.objective = m.relError = m.meanSquareDeviation = NAN;
      m.classification = e_.scenario.problem.isMlp();
      // Each peer's accuracy on its own model: logged by the peer, or measured here from x.
      double sum = 0, low = 1;
      bool all = m.classification;
      size_t count = 0;
      for (const auto& rec : it->second) {
        if (!rec) continue;
        ++count;
        const double a = rec->x.empty() ? rec->ownAccuracy
                                        : peerTestAccuracy<double>(e_, rec->x);
        all = all && !std::isnan(a);
        sum += a;
        low = std::min(low, a);
      }
      if (all) {
        m.testAccuracyPeersMean = sum / static_cast<double>(count);
        m.testAccuracyPeersMin = low;
      }
    } else {
      std::vector<std::span<const double>> models;
      for (const auto& rec : it->second) {
        if (rec) models.emplace_back(rec->x);
      }
      m = measureModels<double>(e_, models, xMean_, anyLost ? survivors_.get() : nullptr);
    }
    {
      std::vector<std::vector<optim::MethodMetric>> reports;
      for (const auto& rec : it->second) {
        if (rec) reports.push_back(rec->methods);
      }
      m.methods = meanMethodMetrics(reports);
    }
    m.round = it->first;
    double errSum = 0;
    uint64_t errCount = 0;
    for (int r = 0; r < n; ++r) {
      // A lost rank counts with its last logged round's counters (as simulate counts it).
      if (it->second[r]) lastRecord_[r] = it->second[r];
      const std::optional<Record>& rec = it->second[r] ? it->second[r] : lastRecord_[r];
      if (!rec) continue;
      errSum += rec->compressionErrorSum;
      errCount += rec->compressionErrorCount;
      m.bytesSent += rec->bytesSent;
      m.corruptMessages += rec->corrupt;
      m.wallS = std::max(m.wallS, rec->wallS);
    }
    m.compressionError = compressionError_.next(errSum, errCount);
    STARLING_RETURN_IF_ERROR(log_.append(m));
    last_ = m;
    pending_.erase(it);
    ++merged;
  }
  return merged;
}

std::optional<RootCause> PeerLogMerger::rootCause() const {
  std::vector<std::optional<engine::PeerFailure>> failures;
  for (const auto& src : sources_) failures.push_back(src.failure);
  return rootCauseOf(failures);
}

std::optional<RootCause> rootCauseOf(
    const std::vector<std::optional<engine::PeerFailure>>& failures) {
  // Each failure is an event at a round: a peer failing on its own, or a neighbour lost. The
  // earliest wins; at the same round a peer's own failure comes before its neighbours losing it
  // (they lose it because it failed), then the peer lost by the most.
  std::optional<RootCause> best;
  const auto better = [](const RootCause& a, const RootCause& b) {
    if (a.round != b.round) return a.round < b.round;
    if (a.lostByOthers != b.lostByOthers) return !a.lostByOthers;
    if (a.lostBy.size() != b.lostBy.size()) return a.lostBy.size() > b.lostBy.size();
    return a.rank < b.rank;
  };
  std::map<std::pair<uint64_t, int>, RootCause> losses;  // (round, lost rank)
  for (const auto& failure : failures) {
    if (!failure || failure->code == "cancelled") continue;
    const engine::PeerFailure& f = *failure;
    if (f.lostRank) {
      auto [it, fresh] = losses.try_emplace({f.round, *f.lostRank});
      RootCause& c = it->second;
      if (fresh) c = RootCause{*f.lostRank, f.round, true, {}, f.message};
      c.lostBy.push_back(f.rank);
    } else {
      RootCause c{f.rank, f.round, false, {}, f.message};
      if (!best || better(c, *best)) best = c;
    }
  }
  for (const auto& [key, c] : losses) {
    if (!best || better(c, *best)) best = c;
  }
  return best;
}

std::string PeerLogMerger::shortLogs() const {
  std::string out;
  for (int r = 0; r < e_.scenario.nodes; ++r) {
    const Source& src = sources_[r];
    if (src.lastRound && *src.lastRound == e_.scenario.rounds) continue;
    out += "\n  rank " + std::to_string(r) + ": ";
    out += src.lastRound ? "log ends at round " + std::to_string(*src.lastRound) + " of " +
                               std::to_string(e_.scenario.rounds)
                         : std::string("no round logged");
    if (src.failure) {
      out += "; it failed at round " + std::to_string(src.failure->round) + ": " +
             src.failure->message;
    } else {
      out += "; no failure recorded (killed, or still running?)";
    }
  }
  return out;
}

}  // namespace starling::runtime
