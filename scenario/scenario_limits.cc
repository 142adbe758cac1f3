#include "scenario/scenario_limits.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/read_file.h"
#include "optim/mlp.h"

namespace starling::scenario {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The terms of the estimate. Each constant rounds up what the code allocates today; the estimate
// is for one process holding every node (simulate, validate). It is meant to refuse what cannot
// fit by a wide margin, not to predict the peak to the byte.
//
// Samples are stored as CSR (optim::Dataset): per non-zero a double and an int32 column, per
// sample a label and a row offset. At the peak they are held up to five times: the Experiment's
// data set, the nodes' shards (LocalObjective), and in the central solver the sparse matrix A,
// the transposed copy Eigen makes for A^T A and, for logistic loss, the Hessian's scaled A.
// (Measured: 200,000 x 200 dense samples, 0.45 GiB as CSR, peak at 2.0 GiB for least squares
// and 2.1 GiB for logistic regression.)
constexpr double kBytesPerNonZero = 12;
constexpr double kBytesPerSample = 16;
constexpr double kSampleCopies = 5;
// Per sample once more: the partition's permutation and index lists, and SAGA's scalar.
constexpr double kBytesPerSampleExtra = 24;
// The central solver builds A^T A (a double and an index per entry), adds l2 I into a second
// matrix and factorises it (the LDLT factor holds up to half as many entries): ~3 x 12 bytes.
// A^T A has at most min(d^2, sum over samples of nnz(row)^2 + d) entries.
constexpr double kSolverBytesPerEntry = 36;
// Vectors of d elements per node besides the algorithm's state (stateVectors): two outgoing
// frames (one in flight, one being written), the combined neighbour sum, x0 and scratch. A lossy
// codec adds the uncompressed message, its own decoded frame and its state (error feedback);
// L-SVRG a snapshot and its gradient, SAGA its average. (Measured: exact diffusion on 1,024
// nodes with d = 10,000 peaks at 7 x d x 8 bytes per node with the data and solver included.)
constexpr double kNodeVectors = 4;
constexpr double kLossyCodecVectors = 3;
// Count-Sketch tables per node: its frame, the encode table, the accumulator's sum and last table.
constexpr double kSketchTablesPerNode = 4;
// Per edge of a stored graph: adjacency both ways in three copies (base, round, support), the
// mixing entries both ways (twice for static schedules), edge lists, and Boost's copy when
// connectivity is checked. Per node: the adjacency and mixing row headers.
constexpr double kBytesPerEdge = 128;
constexpr double kBytesPerNode = 96;

double ceilLog2(double n) { return n <= 1 ? 0 : std::ceil(std::log2(n)); }

double graphEdges(const topology::GraphSpec& g, double n) {
  using K = topology::GraphKind;
  switch (g.kind) {
    case K::kRing:
      return n;
    case K::kLine:
    case K::kStar:
      return n - 1;
    case K::kGrid:
      return 2 * n;
    case K::kExponential:
      return n * ceilLog2(n);
    case K::kComplete:
      return n * (n - 1) / 2;
    case K::kRandom:
      return g.p * n * (n - 1) / 2;
  }
  return n * (n - 1) / 2;
}

// Edges of the support graph (every edge any round can have) and of all stored graphs.
struct Edges {
  double support = 0;
  double stored = 0;
};

Edges topologyEdges(const topology::TopologySpec& t) {
  const double n = t.nodes;
  using S = topology::ScheduleKind;
  switch (t.schedule.kind) {
    case S::kCycle: {
      double sum = 0;
      for (const auto& g : t.schedule.cycle) sum += graphEdges(g, n);
      return {std::min(sum, n * (n - 1) / 2), 2 * sum};
    }
    case S::kOnePeerExponential: {
      const double e = n / 2 * ceilLog2(n);
      return {e, e};
    }
    default: {
      const double e = graphEdges(t.base, n);
      return {e, e};
    }
  }
}

// The vectors of d elements each algorithm keeps (optim/algorithms.cc, choco.cc, lead.cc).
double stateVectors(optim::AlgorithmKind kind) {
  using AK = optim::AlgorithmKind;
  switch (kind) {
    case AK::kDsgd:
    case AK::kExactDiffusion:
      return 3;
    case AK::kGradientTracking:
    case AK::kChoco:
      return 4;
    case AK::kNids:
      return 7;
    case AK::kLead:
    case AK::kProxLead:
      return 8;
    case AK::kDiloco:
      return 6;
  }
  return 8;
}

bool lossyCodec(const Scenario& s) {
  return !compression::sendsIdentityOnly(s.compression);
}

// Algorithms that keep a vector per neighbour of the support graph (time-varying CHOCO / LEAD).
bool tracksNeighbours(const Scenario& s) {
  using AK = optim::AlgorithmKind;
  const AK k = s.algorithm.kind;
  return s.topology.schedule.kind != topology::ScheduleKind::kStatic &&
         (k == AK::kChoco || k == AK::kLead || k == AK::kProxLead);
}

std::string count(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, x < 1e15 ? "%.0f" : "%.3g", x);
  return buf;
}

// The JSON path of a synthetic size, or of the LIBSVM file (whose contents fix the sizes).
std::string dataPath(const Scenario& s, const char* syntheticKey) {
  return s.problem.data.kind == DataSource::Kind::kSynthetic
             ? std::string("/problem/data/synthetic/") + syntheticKey
             : "/problem/data/path";
}

// The JSON path that fixes d: synthetic `features`, LIBSVM `features` when given, else the file.
std::string featuresPath(const Scenario& s) {
  if (s.problem.isMlp()) return "/problem/layers";
  return s.problem.data.kind == DataSource::Kind::kLibsvm && s.problem.data.features
             ? "/problem/data/features"
             : dataPath(s, "features");
}

}  // namespace

core::Result<uint64_t> maxDataFileBytes() {
  auto limit = core::memoryLimitBytes();
  if (!limit) return limit.status();
  return *limit / 8;
}

DataShape shapeOf(const optim::Dataset& data) {
  DataShape s;
  s.samples = static_cast<double>(data.samples());
  s.features = data.features;
  s.nonZeros = static_cast<double>(data.nonZeros());
  for (size_t j = 0; j < data.samples(); ++j) {
    const double r = static_cast<double>(data.rowPtr[j + 1] - data.rowPtr[j]);
    s.rowNonZerosSquared += r * r;
  }
  return s;
}

DataShape expectedShape(const SyntheticSpec& spec) {
  DataShape s;
  const double m = static_cast<double>(spec.samples);
  const double d = spec.features;
  const double rho = std::clamp(spec.density, 0.0, 1.0);
  // Binomial(d, rho) non-zeros per row, plus the one forced into a row that would be empty.
  const double empty = rho >= 1.0 ? 0.0 : std::pow(1.0 - rho, d);
  const double mean = d * rho + empty;
  const double meanSquare = d * rho * (1.0 - rho) + d * rho * d * rho + empty;
  s.samples = m;
  s.features = d;
  s.nonZeros = m * mean;
  s.rowNonZerosSquared = m * meanSquare;
  return s;
}

DataShape scenarioShape(const Scenario& s) {
  if (s.problem.data.kind == DataSource::Kind::kSynthetic) {
    return expectedShape(s.problem.data.synthetic);
  }
  DataShape shape;
  shape.features = s.problem.data.features.value_or(0);
  return shape;
}

double vectorsPerNode(const Scenario& s) {
  using EK = optim::EstimatorSpec::Kind;
  const EK estimator = s.problem.estimator.kind;
  return stateVectors(s.algorithm.kind) + kNodeVectors +
         (lossyCodec(s) ? kLossyCodecVectors : 0.0) +
         (estimator == EK::kLsvrg  ? 2.0
          : estimator == EK::kSaga ? 1.0
                                   : 0.0);
}

MemoryEstimate estimateMemory(const Scenario& s, const DataShape& data) {
  MemoryEstimate e;
  const double n = s.nodes;
  // The mlp problem's vectors hold its parameters, not one value per feature; its images are
  // bytes (bounded by the data-file limit when read) and it has no central solver.
  const bool mlp = s.problem.isMlp();
  const double d = mlp ? static_cast<double>(optim::mlpParameterCount(s.problem.layers))
                       : data.features;
  const double elem = s.precision == Precision::kFloat32 ? 4.0 : 8.0;
  e.data = kSampleCopies * (kBytesPerNonZero * data.nonZeros + kBytesPerSample * data.samples) +
           kBytesPerSampleExtra * data.samples;
  if (!mlp && d > 0 && data.samples > 0) {
    e.solver = kSolverBytesPerEntry * std::min(d * d, data.rowNonZerosSquared + d);
  }
  const Edges edges = topologyEdges(s.topology);
  const double perNeighbour = (lossyCodec(s) ? 1.0 : 0.0) + (tracksNeighbours(s) ? 1.0 : 0.0);
  e.models = elem * d * (vectorsPerNode(s) * n + perNeighbour * 2 * edges.support);
  // The top-level codec's table, and the tables of the layers rules that sketch their group.
  auto sketch = [&](const compression::CompressorSpec& c) {
    if (c.kind != compression::CompressorSpec::Kind::kCountSketch) return;
    e.sketch += n * kSketchTablesPerNode * elem * static_cast<double>(c.rows) *
                static_cast<double>(c.cols);
  };
  sketch(s.compression);
  for (const compression::LayerRule& r : s.compression.layers) sketch(r.codec);
  e.topology = kBytesPerEdge * (edges.support + edges.stored) + kBytesPerNode * n;
  return e;
}

core::Status checkMemory(const Scenario& s, const DataShape& data) {
  auto limitOr = core::memoryLimitBytes();
  if (!limitOr) return core::invalidArgument(s.file + ": " + limitOr.status().message());
  const double limit = static_cast<double>(*limitOr);
  const MemoryEstimate e = estimateMemory(s, data);
  if (e.total() <= limit) return core::Status::ok();

  // Name the largest term, its JSON path and the sizes behind it.
  const double n = s.nodes;
  const char* precision = s.precision == Precision::kFloat32 ? "4" : "8";
  struct Term {
    double bytes;
    const char* name;
    std::string path, why;
  };
  const bool libsvm = s.problem.data.kind == DataSource::Kind::kLibsvm;
  const std::string dataWhat = libsvm ? "the data file" : "the synthetic data";
  std::vector<Term> terms = {
      {e.data, "data",
       dataPath(
           s, data.samples >= data.nonZeros / std::max(1.0, data.samples) ? "samples" : "features"),
       dataWhat + " has " + count(data.samples) + " samples with " + count(data.nonZeros) +
           " non-zeros, held " + count(kSampleCopies) +
           " times (data set, node shards, central solver's copies)"},
      {e.solver, "central solver", dataPath(s, "features"),
       "the central solver for x* factorises A^T A, up to " +
           count(e.solver / kSolverBytesPerEntry) + " entries for " + count(data.features) +
           " features"},
      {e.models, "models", featuresPath(s),
       count(n) + " nodes each hold about " + count(vectorsPerNode(s)) + " vectors of " +
           (s.problem.isMlp()
                ? count(static_cast<double>(optim::mlpParameterCount(s.problem.layers))) +
                      " parameters x "
                : count(data.features) + " features x ") + precision + " bytes"},
      {e.sketch, "sketches", "/compression/cols",
       count(n) + " nodes each hold " + count(kSketchTablesPerNode) + " Count-Sketch tables of " +
           count(static_cast<double>(s.compression.rows)) + " x " +
           count(static_cast<double>(s.compression.cols)) + " x " + precision + " bytes"},
      {e.topology, "topology", "/topology",
       "the graphs have about " + count(topologyEdges(s.topology).support) + " edges on " +
           count(n) + " nodes"},
  };
  const auto top = std::max_element(terms.begin(), terms.end(),
                                    [](const Term& a, const Term& b) { return a.bytes < b.bytes; });
  std::string parts;
  for (const Term& t : terms) {
    if (t.bytes < 1.0) continue;
    parts += (parts.empty() ? "" : ", ") + std::string(t.name) + " " + core::formatBytes(t.bytes);
  }
  return core::invalidArgument(
      s.file + ": " + top->path + ": this run needs an estimated " + core::formatBytes(e.total()) +
      " of memory, more than the limit of " + core::formatBytes(limit) + " (" + parts +
      "): " + top->why + "; make it smaller, or on a machine with more memory set " +
      core::kMemoryLimitEnv + " (GiB; default " + count(core::kDefaultMemoryLimitGiB) + ")");
}

}  // namespace starling::scenario
