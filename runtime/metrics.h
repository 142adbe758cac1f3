// Run metrics: what is measured at a logged round, and the files they are written to.
//
//   metrics.jsonl  one JSON object per logged round, flushed as it is written
//   summary.json   the scenario, the final metrics and x_mean, written at the end of a run
//   scenario.resolved.json, run.json   what ran and how (writeRunInfo), written before it starts
// Formats: README.md "Output files". Thread-safety: none.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/line_file.h"
#include "core/status.h"
#include "optim/algorithm.h"
#include "scenario/experiment.h"

namespace starling::runtime {

struct RoundMetrics {
  uint64_t round = 0;                   // rounds completed
  double objective = 0;                 // F(x_mean)
  double relError = 0;                  // ||x_mean - x*|| / ||x*|| (NaN without x*)
  double consensusDistance = 0;         // (1/n) sum_i ||x_i - x_mean||^2
  double meanSquareDeviation = 0;       // (1/n) sum_i ||x_i - x*||^2 (NaN without x*)
  uint64_t bytesSent = 0;               // cumulative frame bytes, all nodes
  uint64_t corruptMessages = 0;         // cumulative, all nodes
  // Mean of ||C(v) - v||^2 / ||v||^2 over the messages every node compressed since the previous
  // logged round (0 without a lossy codec; NaN when no nonzero message was compressed).
  double compressionError = 0;
  double wallS = 0;                     // seconds since the first round started
  // Classification (the mlp problem): the fields below are written, rel_error and
  // mean_square_deviation are null (there is no x*), objective equals train_loss.
  bool classification = false;
  double trainLoss = NAN;               // F(x_mean): mean training cross-entropy + (l2/2)||x_mean||^2
  double testAccuracy = NAN;            // on the whole test set, at x_mean
  double testAccuracyPeersMean = NAN;   // at each node's own x_i, on the first
  double testAccuracyPeersMin = NAN;    //   kPeerEvalSamples test samples: mean and min over nodes
  // The methods' own metrics (optim::MethodMetric: adascale_gain, ...), each the mean over the
  // nodes that report it, in the order they are first reported.
  std::vector<std::pair<std::string, double>> methods;
};

// What a progress line says of a round: rel_error, or for a classification problem (no x*) the
// training loss and test accuracy.
std::string progressDetail(const RoundMetrics& m);

// The mean of each method metric over the nodes' reports (each node's list in its own order;
// names in the order first seen).
std::vector<std::pair<std::string, double>> meanMethodMetrics(
    const std::vector<std::vector<optim::MethodMetric>>& perNode);

// Test samples each node's own model is evaluated on (the whole test set for x_mean): with 1,000
// nodes, a full 10,000-image test set per node would cost 100 times a training round.
inline constexpr size_t kPeerEvalSamples = 1000;

// The consensus sketch (docs/algorithms.md §16): peers whose model has more than
// kFullModelLogMaxDim elements log S x_i instead of x_i, with S the k x d (k = kSketchDim)
// sparse sign matrix of a Count-Sketch: column j has one entry, +-1 in row h(j), hash and sign
// from the scenario's seed, the same at every peer; O(d) to apply.
// Then (1/n) sum_i ||S x_i - mean_j S x_j||^2 = (1/n) sum_i ||S (x_i - x_mean)||^2 estimates the
// consensus distance without bias, with relative standard deviation at most sqrt(2/k) (8.8%).
inline constexpr size_t kSketchDim = 256;
inline constexpr size_t kFullModelLogMaxDim = 4096;
template <typename T>
std::vector<double> modelSketch(std::span<const T> x, uint64_t seed);
// The mlp problem: the accuracy of one node's own model on the first kPeerEvalSamples test
// images, as test_accuracy_peers_* average it. Peers that log sketches log this too, so that
// `run` has the per-peer accuracies at every logged round (NaN without a test set).
template <typename T>
double peerTestAccuracy(const scenario::Experiment& e, std::span<const T> x);
// Seed of the sketch matrix for a scenario.
uint64_t sketchSeed(const scenario::Scenario& s);
// (1/n) sum_i ||s_i - s_mean||^2 over the nodes' sketches (all of one length).
double sketchConsensusDistance(const std::vector<std::vector<double>>& sketches);

// Running totals of the compression error behind RoundMetrics::compressionError: feed the
// cumulative sums and counts of all nodes at each logged round, get the mean since the last.
class CompressionErrorMean {
 public:
  double next(double sum, uint64_t count) {
    const double s = sum - sum_;
    const uint64_t c = count - count_;
    sum_ = sum;
    count_ = count;
    return c > 0 ? s / static_cast<double>(c) : (sum == 0 ? 0.0 : NAN);
  }

 private:
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Measures the models of all n nodes (double accumulation whatever T is). Fills everything but
// round, bytesSent, corruptMessages, compressionError and wallS. `xMean` receives the average model.
// The problem of the nodes still in a run after peers were lost (docs/algorithms.md §18): x* of
// (1/|A|) sum_{i in A} f_i + r over the survivors A, and that objective, which is
// kappa (G_A + r/kappa) with G_A the standard objective of the survivors' samples with l2 and l1
// divided by kappa = n m_A / (m |A|) (1 when the nodes hold equal shares).
struct SurvivorProblem {
  std::vector<bool> alive;
  std::vector<double> xStar;  // empty for the mlp problem
  optim::Dataset data;
  optim::ProblemSpec spec;
  double kappa = 1.0;
};
core::Result<SurvivorProblem> survivorProblem(const scenario::Experiment& e,
                                              const std::vector<bool>& alive);

template <typename T>
RoundMetrics measureModels(const scenario::Experiment& e,
                           const std::vector<std::span<const T>>& models,
                           std::vector<double>& xMean, const SurvivorProblem* survivors = nullptr);

// Asynchronous gossip's account of a run (docs/algorithms.md §26), in summary.json's
// "asynchronous": the largest staleness any node mixed with, and when each node finished its
// last round: virtual time units in `simulate` (a speed-1 round is one unit), seconds in `run`.
struct AsyncReport {
  uint64_t maxStalenessSeen = 0;
  std::vector<double> finish;
  std::string finishUnit;  // "virtual" or "s"
};

class MetricsLog {
 public:
  // Creates `dir` (and parents) and truncates dir/metrics.jsonl.
  static core::Result<std::unique_ptr<MetricsLog>> create(const std::filesystem::path& dir);

  // Appends one line and flushes it to the operating system: whole lines or none, even on a full
  // disk (LineFile).
  core::Status append(const RoundMetrics& m);

  // Writes dir/summary.json (through a temporary file and a rename, so it is never half written).
  // With `async`, also its "asynchronous" section.
  core::Status writeSummary(const scenario::Scenario& s, const RoundMetrics& last,
                            std::span<const double> xMean, const std::string& mode,
                            const AsyncReport* async = nullptr);

  const std::filesystem::path& dir() const { return dir_; }

 private:
  MetricsLog(std::filesystem::path dir, std::unique_ptr<core::LineFile> out)
      : dir_(std::move(dir)), out_(std::move(out)) {}
  std::filesystem::path dir_;
  std::unique_ptr<core::LineFile> out_;
};

// Makes a run folder self-describing: writes dir/scenario.resolved.json (the scenario with every
// default filled in, runnable as it is) and dir/run.json (Starling's version, the mode, the
// command line, start time, host, scenario file and hash, seed, rounds, nodes).
core::Status writeRunInfo(const std::filesystem::path& dir, const scenario::Scenario& s,
                          const std::string& mode, const std::vector<std::string>& command);

// The JSON object of one metrics.jsonl line (NaN and infinity are written as null).
std::string metricsLine(const RoundMetrics& m);

}  // namespace starling::runtime
