#include "runtime/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/rng.h"
#include "optim/algorithm.h"
#include "optim/mlp.h"
#include "runtime/run_folder.h"
#include "scenario/scenario_writer.h"
#include "topology/spec.h"

namespace starling::runtime {

std::string progressDetail(const RoundMetrics& m) {
  char detail[96];
  if (m.classification) {
    std::snprintf(detail, sizeof detail, "train_loss %.4f  test_accuracy %.4f", m.trainLoss,
                  m.testAccuracy);
  } else {
    std::snprintf(detail, sizeof detail, "rel_error %.3e", m.relError);
  }
  return detail;
}
namespace {

using ojson = nlohmann::ordered_json;  // not `json`: scenario_reader.h has that name

ojson number(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }

ojson metricsJson(const RoundMetrics& m) {
  ojson j{{"round", m.round},
         {"objective", number(m.objective)},
         {"rel_error", number(m.relError)},
         {"consensus_distance", number(m.consensusDistance)},
         {"mean_square_deviation", number(m.meanSquareDeviation)}};
  if (m.classification) {
    j["train_loss"] = number(m.trainLoss);
    j["test_accuracy"] = number(m.testAccuracy);
    j["test_accuracy_peers_mean"] = number(m.testAccuracyPeersMean);
    j["test_accuracy_peers_min"] = number(m.testAccuracyPeersMin);
  }
  for (const auto& [name, value] : m.methods) j[name] = number(value);
  j["bytes_sent"] = m.bytesSent;
  j["corrupt_messages"] = m.corruptMessages;
  j["compression_error"] = number(m.compressionError);
  j["wall_s"] = m.wallS;
  return j;
}

constexpr uint64_t kSketchSalt = 0x534b45'544348ULL;  // "SKETCH"

}  // namespace

std::vector<std::pair<std::string, double>> meanMethodMetrics(
    const std::vector<std::vector<optim::MethodMetric>>& perNode) {
  std::vector<std::pair<std::string, double>> sums;
  std::vector<size_t> counts;
  for (const auto& node : perNode) {
    for (const auto& metric : node) {
      size_t k = 0;
      while (k < sums.size() && sums[k].first != metric.name) ++k;
      if (k == sums.size()) {
        sums.emplace_back(metric.name, 0.0);
        counts.push_back(0);
      }
      sums[k].second += metric.value;
      ++counts[k];
    }
  }
  for (size_t k = 0; k < sums.size(); ++k) sums[k].second /= static_cast<double>(counts[k]);
  return sums;
}

template <typename T>
double peerTestAccuracy(const scenario::Experiment& e, std::span<const T> xi) {
  if (!e.scenario.problem.isMlp() || e.testImages.samples() == 0) return NAN;
  std::vector<size_t> first(std::min(kPeerEvalSamples, e.testImages.samples()));
  for (size_t j = 0; j < first.size(); ++j) first[j] = j;
  const optim::ImageDataset probe = e.testImages.subset(first);
  const std::vector<double> x(xi.begin(), xi.end());
  return optim::evaluateMlp(e.scenario.problem.layers, x, probe).accuracy;
}

template double peerTestAccuracy<float>(const scenario::Experiment&, std::span<const float>);
template double peerTestAccuracy<double>(const scenario::Experiment&, std::span<const double>);

namespace {

// The mlp problem's metrics at x_mean and at every node's model.
template <typename T>
void measureClassifier(const scenario::Experiment& e, const std::vector<std::span<const T>>& models,
                       const std::vector<double>& xMean, RoundMetrics& m) {
  const auto& layers = e.scenario.problem.layers;
  m.classification = true;
  double sq = 0;
  for (double v : xMean) sq += v * v;
  m.trainLoss = optim::evaluateMlp(layers, xMean, e.images).loss + 0.5 * e.scenario.problem.spec.l2 * sq;
  m.objective = m.trainLoss;
  m.testAccuracy = optim::evaluateMlp(layers, xMean, e.testImages).accuracy;
  double sum = 0, low = 1;
  for (const auto& xi : models) {
    const double a = peerTestAccuracy<T>(e, xi);
    sum += a;
    low = std::min(low, a);
  }
  m.testAccuracyPeersMean = sum / static_cast<double>(models.size());
  m.testAccuracyPeersMin = low;
}

// F(x-bar) + r(x-bar). Models that all lie in r's box can still average to a point just outside
// it: summing n copies of a bound b and dividing by n can land an ulp or so beyond b
// (3 x 0.1 / 3 > 0.1), which would make the objective +inf (null). That rounding error is below
// n eps |b|, so a mean at most that far out is put back on the bound; anything further out is
// infeasible.
double objectiveAt(const optim::ProblemSpec& spec, const optim::Dataset& data,
                   const std::vector<double>& xMean, size_t n) {
  const optim::RegularizerSpec& r = spec.regularizer;
  const optim::GlobalObjective objective(spec, data);
  if (std::isinf(r.lower) && std::isinf(r.upper)) return objective.value(xMean);
  const double slack = 4.0 * static_cast<double>(n) * std::numeric_limits<double>::epsilon();
  std::vector<double> x = xMean;
  for (double& v : x) {
    if (v < r.lower && v >= r.lower - slack * std::abs(r.lower)) v = r.lower;
    if (v > r.upper && v <= r.upper + slack * std::abs(r.upper)) v = r.upper;
  }
  return objective.value(x);
}

}  // namespace

template <typename T>
RoundMetrics measureModels(const scenario::Experiment& e,
                           const std::vector<std::span<const T>>& models,
                           std::vector<double>& xMean, const SurvivorProblem* survivors) {
  const std::vector<double>& xStar = survivors ? survivors->xStar : e.xStar;
  const size_t n = models.size();
  const size_t d = e.modelDim();
  xMean.assign(d, 0.0);
  for (const auto& x : models) {
    for (size_t k = 0; k < d; ++k) xMean[k] += static_cast<double>(x[k]);
  }
  for (double& v : xMean) v /= static_cast<double>(n);

  RoundMetrics m;
  double cons = 0, msd = 0;
  for (const auto& x : models) {
    for (size_t k = 0; k < d; ++k) {
      const double xi = static_cast<double>(x[k]);
      cons += (xi - xMean[k]) * (xi - xMean[k]);
      if (!xStar.empty()) msd += (xi - xStar[k]) * (xi - xStar[k]);
    }
  }
  m.consensusDistance = cons / static_cast<double>(n);
  m.meanSquareDeviation = xStar.empty() ? NAN : msd / static_cast<double>(n);
  if (e.scenario.problem.isMlp()) {
    measureClassifier<T>(e, models, xMean, m);
    m.relError = NAN;
    return m;
  }
  m.objective = survivors ? survivors->kappa * objectiveAt(survivors->spec, survivors->data, xMean, n)
                          : objectiveAt(e.scenario.problem.spec, e.data, xMean, n);
  if (xStar.empty()) {
    m.relError = NAN;
  } else {
    double num = 0, den = 0;
    for (size_t k = 0; k < d; ++k) {
      num += (xMean[k] - xStar[k]) * (xMean[k] - xStar[k]);
      den += xStar[k] * xStar[k];
    }
    // x* = 0 happens (e.g. a zero-label least-squares problem): fall back to the absolute error.
    m.relError = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  }
  return m;
}

template RoundMetrics measureModels<float>(const scenario::Experiment&,
                                           const std::vector<std::span<const float>>&,
                                           std::vector<double>&, const SurvivorProblem*);
template RoundMetrics measureModels<double>(const scenario::Experiment&,
                                            const std::vector<std::span<const double>>&,
                                            std::vector<double>&, const SurvivorProblem*);

core::Result<SurvivorProblem> survivorProblem(const scenario::Experiment& e,
                                              const std::vector<bool>& alive) {
  SurvivorProblem p;
  p.alive = alive;
  if (e.scenario.problem.isMlp()) return p;
  std::vector<size_t> idx;
  int count = 0;
  for (size_t i = 0; i < alive.size(); ++i) {
    if (!alive[i]) continue;
    ++count;
    idx.insert(idx.end(), e.parts[i].begin(), e.parts[i].end());
  }
  if (count == 0 || idx.empty()) return core::failedPrecondition("no survivor holds any data");
  p.data = e.data.subset(idx);
  const double n = static_cast<double>(alive.size());
  const double m = static_cast<double>(e.data.samples());
  p.kappa = n * static_cast<double>(idx.size()) / (m * count);
  p.spec = e.scenario.problem.spec;
  p.spec.l2 /= p.kappa;
  p.spec.regularizer.l1 /= p.kappa;
  if (!e.xStar.empty()) {
    auto xs = optim::solveCentral(p.spec, p.data);
    if (!xs) return xs.status().withContext("the survivors' optimum");
    p.xStar = std::move(*xs);
  }
  return p;
}

template <typename T>
std::vector<double> modelSketch(std::span<const T> x, uint64_t seed) {
  // A sparse sign projection (Count-Sketch of one row): coordinate j goes to bucket h(j) with
  // sign s(j), both from SplitMix64's j-th output for the seed; one pass, O(d).
  static_assert(kSketchDim == 256, "the bucket is the hash's low 8 bits");
  std::vector<double> out(kSketchDim, 0.0);
  const uint64_t key = core::mix64(seed ^ kSketchSalt);
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  for (size_t j = 0; j < x.size(); ++j) {
    const uint64_t h = core::mix64(key + static_cast<uint64_t>(j) * kGolden);
    const double v = static_cast<double>(x[j]);
    out[h & 0xff] += (h & 0x100) ? v : -v;
  }
  return out;
}

template std::vector<double> modelSketch<float>(std::span<const float>, uint64_t);
template std::vector<double> modelSketch<double>(std::span<const double>, uint64_t);

uint64_t sketchSeed(const scenario::Scenario& s) { return core::deriveSeed(s.seed, kSketchSalt); }

double sketchConsensusDistance(const std::vector<std::vector<double>>& sketches) {
  if (sketches.empty()) return NAN;
  const size_t k = sketches.front().size();
  std::vector<double> mean(k, 0.0);
  for (const auto& s : sketches) {
    for (size_t r = 0; r < k; ++r) mean[r] += s[r];
  }
  for (double& v : mean) v /= static_cast<double>(sketches.size());
  double cons = 0;
  for (const auto& s : sketches) {
    for (size_t r = 0; r < k; ++r) cons += (s[r] - mean[r]) * (s[r] - mean[r]);
  }
  return cons / static_cast<double>(sketches.size());
}

std::string metricsLine(const RoundMetrics& m) { return metricsJson(m).dump(); }

core::Result<std::unique_ptr<MetricsLog>> MetricsLog::create(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return core::ioError("cannot create output folder " + dir.string() + ": " + ec.message());
  auto out = core::LineFile::create(dir / "metrics.jsonl");
  if (!out) return out.status();
  return std::unique_ptr<MetricsLog>(new MetricsLog(dir, std::move(*out)));
}

core::Status MetricsLog::append(const RoundMetrics& m) {
  return out_->append(metricsLine(m));
}

core::Status MetricsLog::writeSummary(const scenario::Scenario& s, const RoundMetrics& last,
                                      std::span<const double> xMean, const std::string& mode,
                                      const AsyncReport* async) {
  ojson j{{"scenario", s.name},
          {"scenario_file", s.file},
          {"mode", mode},
          {"nodes", s.nodes},
          {"rounds", s.rounds},
          {"seed", s.seed},
          {"precision", scenario::precisionName(s.precision)},
          {"algorithm", optim::algorithmKindName(s.algorithm.kind)},
          {"topology", topology::graphKindName(s.topology.base.kind)},
          {"schedule", topology::scheduleKindName(s.topology.schedule.kind)},
          {"final", metricsJson(last)},
          {"x_mean", std::vector<double>(xMean.begin(), xMean.end())}};
  // The final values also at the top level, where scripts look first.
  const ojson final = j["final"];  // a copy: inserting into j would invalidate a reference
  for (const auto& [k, v] : final.items()) {
    if (k != "round") j[k] = v;
  }
  if (async) {
    double last = 0;
    for (double f : async->finish) last = std::max(last, f);
    j["asynchronous"] = {{"max_staleness", s.asynchronous.maxStaleness},
                         {"max_staleness_seen", async->maxStalenessSeen},
                         {"finish_unit", async->finishUnit},
                         {"finish", async->finish},
                         {"finish_last", last}};
  }
  return core::writeFileAtomically(dir_ / "summary.json", j.dump(2) + "\n");
}

core::Status writeRunInfo(const std::filesystem::path& dir, const scenario::Scenario& s,
                          const std::string& mode, const std::vector<std::string>& command) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return core::ioError("cannot create output folder " + dir.string() + ": " + ec.message());
  STARLING_RETURN_IF_ERROR(core::writeFileAtomically(dir / "scenario.resolved.json",
                                                     scenario::resolvedScenarioJson(s) + "\n"));
  char started[32] = "";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc)) std::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &utc);
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  nlohmann::ordered_json j;
  j["starling_version"] = STARLING_VERSION;
  j["mode"] = mode;
  j["command"] = command;
  j["started"] = started;
  j["host"] = host;
  j["scenario_file"] = s.file;
  j["scenario_hash"] = scenario::scenarioHashHex(scenario::scenarioHash(s));
  j["seed"] = s.seed;
  j["rounds"] = s.rounds;
  j["nodes"] = s.nodes;
  // What in this folder is Starling's: all a later fresh run on it may remove (run_folder.h).
  j["files"] = runFolderFiles();
  return core::writeFileAtomically(dir / "run.json", j.dump(2) + "\n");
}

}  // namespace starling::runtime
