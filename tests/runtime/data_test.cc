#include "scenario/data.h"
#include "tests/runtime/temp_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#ifndef STARLING_TEST_DATA
#error "STARLING_TEST_DATA must name the tests/data folder"
#endif

namespace starling::runtime {
namespace {

using optim::Dataset;
using optim::LossKind;

TEST_CASE("parseLibsvm reads sparse lines, comments and blank lines", "[runtime][unit]") {
  const std::string text =
      "# header comment\n"
      "+1 1:0.5 4:-2\n"
      "\n"
      "   \t\n"
      "-1\t2:3.25   3:1e2 # trailing 5:9\n"
      "0.5 7:-1\r\n"
      "2";  // no final newline, no features
  const auto d = scenario::parseLibsvm(text, "t.svm", std::nullopt);
  REQUIRE(d.isOk());
  CHECK(d->features == 7);
  CHECK(d->labels == std::vector<double>{1.0, -1.0, 0.5, 2.0});
  CHECK(d->rowPtr == std::vector<int64_t>{0, 2, 4, 5, 5});
  CHECK(d->colIdx == std::vector<int32_t>{0, 3, 1, 2, 6});
  CHECK(d->values == std::vector<double>{0.5, -2.0, 3.25, 100.0, -1.0});

  const auto wide = scenario::parseLibsvm(text, "t.svm", 10);
  REQUIRE(wide.isOk());
  CHECK(wide->features == 10);
  CHECK(wide->colIdx == d->colIdx);
}

TEST_CASE("parseLibsvm rejects malformed lines with their line number", "[runtime][unit]") {
  struct Bad {
    const char* line;
    const char* what;  // part of the expected message
  };
  const Bad bad = GENERATE(values<Bad>({
      {"1 0:1", "index >= 1"},
      {"1 -2:1", "index >= 1"},
      {"1 3:1 2:1", "strictly increasing"},
      {"1 2:1 2:1", "strictly increasing"},
      {"1 2:abc", "\"2:abc\""},
      {"1 2:", "\"2:\""},
      {"1 2:nan", "finite"},
      {"1 2:inf", "finite"},
      {"1 2:1.5x", "\"2:1.5x\""},
      {"1 x:1", "integer feature index"},
      {"1 2.5:1", "integer feature index"},
      {"abc 1:1", "label"},
      {"1x 1:1", "\"1x\""},
      {"nan 1:1", "label"},
      {"1 6:1", "exceeds features = 5"},
      {"1 3", "expected index:value, got \"3\""},
  }));
  const std::string text = std::string("1 1:1\n# ok\n") + bad.line + "\n1 1:1\n";
  const auto d = scenario::parseLibsvm(text, "x.svm", 5);
  REQUIRE_FALSE(d.isOk());
  CHECK(d.status().code() == core::StatusCode::kCorruption);
  CHECK_THAT(d.status().message(), Catch::StartsWith("x.svm:3: "));
  CHECK_THAT(d.status().message(), Catch::Contains(bad.what));
}

TEST_CASE("parseLibsvm rejects inputs without samples", "[runtime][unit]") {
  for (const char* text : {"", "\n\n", "# only a comment\n   # another\n"}) {
    const auto d = scenario::parseLibsvm(text, "e.svm", 3);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == core::StatusCode::kCorruption);
    CHECK_THAT(d.status().message(), Catch::Contains("e.svm") && Catch::Contains("no samples"));
  }
  CHECK_FALSE(scenario::parseLibsvm("1 1:1\n", "f.svm", 0).isOk());
}

TEST_CASE("readLibsvm reads a file and names a missing one", "[runtime][unit]") {
  const std::string dir = STARLING_TEST_DATA;
  const auto d = scenario::readLibsvm(dir + "/small.svm", std::nullopt);
  REQUIRE(d.isOk());
  CHECK(d->features == 6);
  CHECK(d->labels == std::vector<double>{1.0, -1.0, 1.5, 0.0});
  CHECK(d->rowPtr == std::vector<int64_t>{0, 3, 4, 7, 7});
  CHECK(d->colIdx == std::vector<int32_t>{0, 2, 5, 1, 0, 1, 2});
  CHECK(d->values == std::vector<double>{0.5, -2.0, 1e-3, 4.0, 1.0, 2.0, 3.0});

  const auto narrow = scenario::readLibsvm(dir + "/small.svm", 5);
  REQUIRE_FALSE(narrow.isOk());
  CHECK_THAT(narrow.status().message(), Catch::Contains("small.svm:2: "));

  const std::string missing = dir + "/no_such_file.svm";
  const auto m = scenario::readLibsvm(missing, std::nullopt);
  REQUIRE_FALSE(m.isOk());
  CHECK(m.status().code() == core::StatusCode::kNotFound);
  CHECK_THAT(m.status().message(), Catch::Contains(missing + ": no such data file"));
}

TEST_CASE("parseLibsvm holds indices to 2^28 when the scenario does not fix features",
          "[runtime][unit]") {
  // The documented limit; the parser used to accept anything up to 2^31 - 1.
  const auto atLimit = scenario::parseLibsvm("1 268435456:1\n", "w.svm", std::nullopt);
  REQUIRE(atLimit.isOk());
  CHECK(atLimit->features == scenario::kMaxFeatures);
  CHECK(atLimit->nonZeros() == 1);
  for (const char* line : {"1 268435457:1\n", "1 2147483647:1\n", "1 9223372036854775807:1\n"}) {
    const auto d = scenario::parseLibsvm(line, "w.svm", std::nullopt);
    INFO(line);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == core::StatusCode::kCorruption);
    CHECK_THAT(d.status().message(),
               Catch::Contains("w.svm:1: feature index") &&
                   Catch::Contains("exceeds the limit of 268435456 (2^28) features"));
  }
  // A scenario's `features` still names itself as the limit.
  const auto fixed = scenario::parseLibsvm("1 9:1\n", "w.svm", 8);
  REQUIRE_FALSE(fixed.isOk());
  CHECK_THAT(fixed.status().message(), Catch::Contains("exceeds features = 8"));
}

// A temporary folder removed at the end of the test.
using testing::TempDir;

TEST_CASE("readLibsvm reads only regular files: a FIFO, a device or a folder is refused unread",
          "[runtime][unit]") {
  // Reading a FIFO without a writer used to block forever, /dev/zero to fill memory.
  TempDir dir("special");
  const std::string fifo = (dir.path / "data.svm").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  struct Case {
    std::string path, kind;
  };
  for (const Case& c : {Case{fifo, "a FIFO"}, Case{"/dev/zero", "a character device"},
                        Case{dir.path.string(), "a directory"}}) {
    const auto d = scenario::readLibsvm(c.path, std::nullopt);
    INFO(c.path);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == core::StatusCode::kInvalidArgument);
    CHECK_THAT(d.status().message(),
               Catch::Contains(c.path + ": " + c.kind + ", not a regular file; the data file "
                                                        "must be a regular file"));
  }
}

TEST_CASE("readLibsvm refuses a file larger than an eighth of the memory limit",
          "[runtime][unit]") {
  TempDir dir("large");
  const std::string path = (dir.path / "big.svm").string();
  {
    std::ofstream out(path);
    for (int i = 0; i < 20000; ++i) out << "1 1:0.5 2:0.25\n";  // 300,000 bytes
  }
  REQUIRE(scenario::readLibsvm(path, std::nullopt).isOk());
  // 0.001 GiB: an eighth is 134,217 bytes.
  ::setenv("STARLING_MEMORY_LIMIT_GIB", "0.001", 1);
  const auto d = scenario::readLibsvm(path, std::nullopt);
  ::unsetenv("STARLING_MEMORY_LIMIT_GIB");
  REQUIRE_FALSE(d.isOk());
  CHECK(d.status().code() == core::StatusCode::kInvalidArgument);
  CHECK_THAT(d.status().message(),
             Catch::Contains(path + ": the data file is 293.0 KiB, larger than the limit of "
                                    "131.1 KiB"));
}

bool sameDataset(const Dataset& a, const Dataset& b) {
  return a.features == b.features && a.labels == b.labels && a.rowPtr == b.rowPtr &&
         a.colIdx == b.colIdx && a.values == b.values;
}

TEST_CASE("makeSynthetic is deterministic in its seed", "[runtime][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  scenario::SyntheticSpec spec;
  spec.samples = 300;
  spec.features = 8;
  spec.heterogeneity = 0.5;
  spec.density = 0.4;
  const auto a = scenario::makeSynthetic(spec, loss, 3, 42);
  const auto b = scenario::makeSynthetic(spec, loss, 3, 42);
  const auto c = scenario::makeSynthetic(spec, loss, 3, 43);
  REQUIRE((a.isOk() && b.isOk() && c.isOk()));
  CHECK(sameDataset(*a, *b));
  CHECK_FALSE(sameDataset(*a, *c));
  CHECK(a->samples() == 300);
  CHECK(a->features == 8);
  if (loss == LossKind::kLogistic) {
    for (double y : a->labels) CHECK((y == 1.0 || y == -1.0));
  }
}

TEST_CASE("makeSynthetic honours density and scales labels to O(1)", "[runtime][unit]") {
  scenario::SyntheticSpec spec;
  spec.samples = 4000;
  spec.features = 50;
  spec.noise = 0.0;
  const double density = GENERATE(1.0, 0.2, 0.01);
  spec.density = density;
  const auto d = scenario::makeSynthetic(spec, LossKind::kLeastSquares, 1, 7);
  REQUIRE(d.isOk());
  const double cells = double(spec.samples) * spec.features;
  // Each cell is non-zero with probability density, plus one forced entry for each empty row
  // (probability (1 - density)^d): 5 binomial standard deviations.
  const double pEmpty = std::pow(1.0 - density, spec.features);
  const double expected = cells * density + spec.samples * pEmpty;
  CHECK(std::abs(double(d->nonZeros()) - expected) <= 5.0 * std::sqrt(cells * density) + 1.0);
  double sq = 0.0, vsq = 0.0;
  size_t emptyRows = 0;
  for (size_t j = 0; j < d->samples(); ++j) {
    emptyRows += d->rowPtr[j + 1] == d->rowPtr[j] ? 1 : 0;
    sq += d->labels[j] * d->labels[j];
  }
  CHECK(emptyRows == 0);
  for (double v : d->values) vsq += v * v;
  CHECK(vsq / double(d->nonZeros()) == Approx(1.0).epsilon(0.1));  // N(0, 1) entries
  // E[(a^T x)^2] = E[nnz per row] * Var(x_k) = chi^2_d / d: sd 0.2 for d = 50, so [0.3, 2]
  // holds with a wide margin and excludes the d * density = 50 (dense) a missing scale gives.
  const double meanSq = sq / double(d->samples());
  CHECK(meanSq > 0.3);
  CHECK(meanSq < 2.0);
}

TEST_CASE("makeSynthetic validates its spec", "[runtime][unit]") {
  const auto check = [](scenario::SyntheticSpec s, LossKind loss, const std::string& want) {
    const auto d = scenario::makeSynthetic(s, loss, 2, 1);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == core::StatusCode::kInvalidArgument);
    CHECK_THAT(d.status().message(), Catch::Contains(want));
  };
  scenario::SyntheticSpec s;
  s.density = 0.0;
  check(s, LossKind::kLeastSquares, "synthetic/density: must be in (0, 1], got 0");
  s = {};
  s.density = 1.5;
  check(s, LossKind::kLeastSquares, "synthetic/density");
  s = {};
  s.samples = 0;
  check(s, LossKind::kLeastSquares, "synthetic/samples");
  s = {};
  s.features = 0;
  check(s, LossKind::kLeastSquares, "synthetic/features");
  s = {};
  s.heterogeneity = -1.0;
  check(s, LossKind::kLeastSquares, "synthetic/heterogeneity");
  s = {};
  s.noise = -0.1;
  check(s, LossKind::kLeastSquares, "synthetic/noise");
  s = {};
  s.noise = 0.5;
  check(s, LossKind::kLogistic, "synthetic/noise");
  s = {};
  s.noise = 0.5;
  CHECK(scenario::makeSynthetic(s, LossKind::kLeastSquares, 2, 1).isOk());  // a std-dev, not a rate
}

// Distance between the least-squares optima of node 0's and node 1's contiguous shards.
double localOptimaGap(double heterogeneity) {
  scenario::SyntheticSpec spec;
  spec.samples = 4000;
  spec.features = 10;
  spec.noise = 0.1;
  spec.heterogeneity = heterogeneity;
  const int nodes = 4;
  const auto d = scenario::makeSynthetic(spec, LossKind::kLeastSquares, nodes, 2024);
  REQUIRE(d.isOk());
  const auto parts =
      scenario::partitionSamples(d->samples(), nodes, scenario::PartitionKind::kContiguous, 0);
  REQUIRE(parts.isOk());
  const optim::ProblemSpec problem{LossKind::kLeastSquares, 0.0};
  const auto x0 = optim::solveCentral(problem, d->subset((*parts)[0]));
  const auto x1 = optim::solveCentral(problem, d->subset((*parts)[1]));
  REQUIRE((x0.isOk() && x1.isOk()));
  double s = 0.0;
  for (int k = 0; k < spec.features; ++k) s += std::pow(x0->at(k) - x1->at(k), 2);
  return std::sqrt(s);
}

TEST_CASE("Heterogeneity moves the nodes' local optima apart", "[runtime][unit]") {
  // Heterogeneity 0: both shards estimate the same x_true; the gap is noise, about
  // 0.1 * sqrt(2 d / m_i) = 0.014. Heterogeneity 2: the gap is 2 ||delta_0 - delta_1|| with
  // ||delta|| about 1, i.e. about 2.8.
  CHECK(localOptimaGap(0.0) < 0.05);
  CHECK(localOptimaGap(2.0) > 1.0);
}

TEST_CASE("Synthetic groups coincide with contiguous shards", "[runtime][unit]") {
  // 12 samples over 5 nodes: shards of 3, 3, 2, 2, 2 (j * 5 / 12 would give 3, 2, 3, 2, 2).
  // Noise-free, one feature: a shard fits exactly iff all its samples share one model.
  scenario::SyntheticSpec spec;
  spec.samples = 12;
  spec.features = 1;
  spec.noise = 0.0;
  spec.heterogeneity = 1.0;
  const int nodes = 5;
  const auto d = scenario::makeSynthetic(spec, LossKind::kLeastSquares, nodes, 3);
  REQUIRE(d.isOk());
  const auto parts = scenario::partitionSamples(12, nodes, scenario::PartitionKind::kContiguous, 0);
  REQUIRE(parts.isOk());
  std::vector<double> slopes;
  for (const auto& idx : *parts) {
    const Dataset shard = d->subset(idx);
    const optim::ProblemSpec problem{LossKind::kLeastSquares, 0.0};
    const auto x = optim::solveCentral(problem, shard);
    REQUIRE(x.isOk());
    CHECK(optim::GlobalObjective(problem, shard).value(*x) < 1e-20);
    slopes.push_back(x->at(0));
  }
  std::sort(slopes.begin(), slopes.end());
  CHECK(std::adjacent_find(slopes.begin(), slopes.end()) == slopes.end());  // five models
}

TEST_CASE("partitionSamples cuts near-equal blocks", "[runtime][unit]") {
  const size_t samples = GENERATE(size_t{5}, size_t{17}, size_t{100}, size_t{1001});
  const int nodes = GENERATE(1, 3, 5);
  const scenario::PartitionKind kind =
      GENERATE(scenario::PartitionKind::kContiguous, scenario::PartitionKind::kRandom);
  const auto p = scenario::partitionSamples(samples, nodes, kind, 9);
  REQUIRE(p.isOk());
  REQUIRE(p->size() == size_t(nodes));
  std::vector<int> seen(samples, 0);
  size_t next = 0;
  bool inOrder = true;
  for (int i = 0; i < nodes; ++i) {
    const auto& part = (*p)[i];
    CHECK(part.size() == samples / nodes + (size_t(i) < samples % nodes ? 1 : 0));
    for (size_t j : part) {
      REQUIRE(j < samples);
      ++seen[j];
      inOrder = inOrder && j == next++;
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  if (kind == scenario::PartitionKind::kContiguous) {
    CHECK(inOrder);
  } else if (samples >= 17) {
    CHECK_FALSE(inOrder);
    const auto again = scenario::partitionSamples(samples, nodes, kind, 9);
    const auto other = scenario::partitionSamples(samples, nodes, kind, 10);
    REQUIRE((again.isOk() && other.isOk()));
    CHECK(*again == *p);
    CHECK(*other != *p);
  }
}

TEST_CASE("partitionSamples needs a sample per node", "[runtime][unit]") {
  const auto p = scenario::partitionSamples(3, 4, scenario::PartitionKind::kContiguous, 0);
  REQUIRE_FALSE(p.isOk());
  CHECK(p.status().code() == core::StatusCode::kInvalidArgument);
  CHECK(scenario::partitionSamples(4, 4, scenario::PartitionKind::kRandom, 0).isOk());
  CHECK_FALSE(scenario::partitionSamples(10, 0, scenario::PartitionKind::kRandom, 0).isOk());
}

}  // namespace
}  // namespace starling::runtime
