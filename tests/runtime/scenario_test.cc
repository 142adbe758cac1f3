// Scenario input that used to crash, hang, allocate without bound or be silently misread:
// duplicate keys, names that are not folder names, FIFOs and devices, oversized files, sizes
// whose product does not fit in memory, hopeless random graphs.
#include "tests/runtime/temp_dir.h"
#include "scenario/scenario.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "core/read_file.h"
#include "scenario/experiment.h"
#include "scenario/scenario_limits.h"
#include "tests/runtime/scenario_testing.h"

namespace starling::runtime {
namespace {

using namespace scenario_testing;

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

using testing::TempDir;

// Sets an environment variable for one scope.
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
  ~ScopedEnv() { ::unsetenv(name); }
};

TEST_CASE("the base scenario of these tests is valid", "[runtime][unit]") {
  const auto s = scenario::parseScenario(kGood, "s.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  CHECK(s->name == "good");
  CHECK(scenario::checkMemory(*s, scenario::scenarioShape(*s)).isOk());
}

TEST_CASE("a key given twice in one object is refused at its JSON path", "[runtime][unit]") {
  // nlohmann keeps the last of two equal keys silently; the first value was simply lost.
  CHECK_THAT(refusal(with("\"nodes\": 4,", "\"nodes\": 4, \"nodes\": 8,")),
             Contains("s.json: /nodes: duplicate key \"nodes\"; each key may appear once"));
  CHECK_THAT(refusal(with("{\"kind\": \"ring\"}", "{\"kind\": \"ring\", \"kind\": \"star\"}")),
             Contains("s.json: /topology/kind: duplicate key \"kind\""));
  CHECK_THAT(refusal(with("\"features\": 3}", "\"features\": 3, \"samples\": 50}")),
             Contains("/problem/data/synthetic/samples: duplicate key \"samples\""));
  // Inside an array, the path counts the elements.
  CHECK_THAT(refusal(with("{\"kind\": \"ring\"}",
                          "{\"kind\": \"ring\", \"schedule\": {\"kind\": \"cycle\", \"graphs\": "
                          "[{\"kind\": \"ring\"}, 7, [1, {}], {\"kind\": \"line\", \"kind\": "
                          "\"ring\"}]}}")),
             Contains("/topology/schedule/graphs/3/kind: duplicate key \"kind\""));
  // The same key in different objects is not a duplicate (kGood has "kind" in four).
  CHECK(scenario::parseScenario(kGood, "s.json", ".").isOk());
}

TEST_CASE("JSON nested deeper than any scenario is refused", "[runtime][unit]") {
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "[";
  for (int i = 0; i < 40; ++i) deep += "]";
  CHECK_THAT(refusal(with("\"description\": \"\"", "\"description\": " + deep,
                          with("\"nodes\": 4,", "\"description\": \"\", \"nodes\": 4,"))),
             Contains("s.json: /description/0/0/0") && Contains("nested more than 32 levels deep"));
  // 30 levels below the root still parse (and then fail as the wrong type, not as too deep).
  std::string ok;
  for (int i = 0; i < 30; ++i) ok += "[";
  for (int i = 0; i < 30; ++i) ok += "]";
  CHECK_THAT(refusal(with("\"nodes\": 4,", "\"description\": " + ok + ", \"nodes\": 4,")),
             Contains("/description: expected a string"));
}

TEST_CASE("names that become folders are checked as one path component", "[runtime][unit]") {
  struct Case {
    std::string name, what;
  };
  const std::string longName(129, 'a');
  for (const Case& c :
       {Case{"\\u0000", "must not contain a NUL character"},
        Case{"ok\\u0000/../../etc", "must not contain a NUL character"},
        Case{"a\\u0001b", "no NUL or other control characters"},
        Case{"tab\\there", "no NUL or other control characters"}, Case{"a/b", "no '/' or '\\'"},
        Case{"a\\\\b", "no '/' or '\\'"}, Case{"..", "\".\" and \"..\" are not folder names"},
        Case{".", "\".\" and \"..\" are not folder names"}, Case{"", "it is empty"},
        Case{longName, "at most 128 bytes, it has 129"}}) {
    INFO(c.name);
    CHECK_THAT(refusal(with("\"name\": \"good\"", "\"name\": \"" + c.name + "\"")),
               Contains("s.json: /name: ") && Contains(c.what));
  }
  CHECK(
      scenario::parseScenario(
          with("\"name\": \"good\"", "\"name\": \"" + std::string(128, 'a') + "\""), "s.json", ".")
          .isOk());
  // Without "name" the file's stem is the name, and is held to the same rules.
  const std::string unnamed = with("\"name\": \"good\", ", "");
  CHECK(scenario::parseScenario(unnamed, "dir/plain.json", ".")->name == "plain");
  CHECK_THAT(refusal(unnamed, "dir/bell\x07.json"), Contains("/name: ") &&
                                                        Contains("control characters") &&
                                                        Contains("taken from the file name"));
}

TEST_CASE("a NUL in a data path is refused (the file opened would be another)", "[runtime][unit]") {
  CHECK_THAT(refusal(with("{\"synthetic\": {\"samples\": 40, \"features\": 3}}",
                          "{\"format\": \"libsvm\", \"path\": \"a.svm\\u0000.json\"}")),
             Contains("s.json: /problem/data/path: must not contain a NUL character"));
}

TEST_CASE("scenario files: only regular files of at most 1 MiB are read", "[runtime][unit]") {
  TempDir dir("files");
  const std::string fifo = (dir.path / "fifo.json").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  struct Case {
    std::string path, kind;
  };
  for (const Case& c : {Case{fifo, "a FIFO"}, Case{"/dev/zero", "a character device"},
                        Case{dir.path.string(), "a directory"}}) {
    const auto s = scenario::loadScenario(c.path);
    INFO(c.path);
    REQUIRE_FALSE(s.isOk());
    CHECK(s.status().code() == core::StatusCode::kInvalidArgument);
    CHECK_THAT(s.status().message(), Contains(c.path + ": " + c.kind + ", not a regular file"));
  }

  const std::string big = (dir.path / "big.json").string();
  {
    std::ofstream out(big);
    out << "[";
    for (int i = 0; i < 600000; ++i) out << "0,";  // 1.2 MB
    out << "0]";
  }
  const auto s = scenario::loadScenario(big);
  REQUIRE_FALSE(s.isOk());
  CHECK(s.status().code() == core::StatusCode::kInvalidArgument);
  CHECK_THAT(s.status().message(),
             Contains(big + ": the scenario file is 1.1 MiB, larger than the limit of 1 MiB"));
  // parseScenario holds text handed to it in code to the same limit.
  CHECK_THAT(refusal(std::string(scenario::kMaxScenarioFileBytes + 1, ' ')),
             Contains("s.json: the scenario is 1.0 MiB, larger than the limit of 1 MiB"));

  const auto missing = scenario::loadScenario((dir.path / "absent.json").string());
  CHECK(missing.status().code() == core::StatusCode::kNotFound);
}

TEST_CASE("readRegularFile reads at most maxBytes, also from files that report size 0",
          "[runtime][unit]") {
  // /proc files are regular, report st_size 0 and have content.
  const auto status = core::readRegularFile("/proc/self/status", 1 << 20, "test file");
  REQUIRE(status.isOk());
  CHECK_THAT(*status, Contains("Name:"));
  const auto cut = core::readRegularFile("/proc/self/status", 16, "test file");
  REQUIRE_FALSE(cut.isOk());
  CHECK_THAT(cut.status().message(),
             Contains("/proc/self/status: the test file is larger than the limit of 16 bytes"));
}

TEST_CASE("formatBytes", "[runtime][unit]") {
  CHECK(core::formatBytes(100) == "100 bytes");
  CHECK(core::formatBytes(1 << 20) == "1 MiB");
  CHECK(core::formatBytes(1.5 * (1 << 30)) == "1.5 GiB");
  CHECK(core::formatBytes(16.0 * (uint64_t{1} << 40)) == "16 TiB");
}

TEST_CASE("sizes whose memory needs exceed the limit are refused before allocating",
          "[runtime][unit]") {
  struct Case {
    std::string name, json, path, term;
  };
  const std::string choco = with("\"exact_diffusion\"", "\"choco\"");
  const std::vector<Case> cases = {
      {"2^32 samples", with("\"samples\": 40", "\"samples\": 4294967296"),
       "/problem/data/synthetic/samples", "data "},
      {"2^28 features", with("\"features\": 3", "\"features\": 268435456"),
       "/problem/data/synthetic/features", "central solver "},
      {"5 x 2^31 sketch",
       with("\"step_size\": 0.3}",
            "\"step_size\": 0.3}, \"compression\": {\"kind\": "
            "\"countsketch\", \"cols\": 2147483648, \"k\": 2}",
            choco),
       "/compression/cols", "sketches "},
      {"complete graph on 2^20 nodes",
       with("\"samples\": 40", "\"samples\": 1048576",
            with("\"nodes\": 4", "\"nodes\": 1048576",
                 with("{\"kind\": \"ring\"}", "{\"kind\": \"complete\"}"))),
       "/topology", "topology "},
      {"LIBSVM with features 2^28",
       with("{\"synthetic\": {\"samples\": 40, \"features\": 3}}",
            "{\"format\": \"libsvm\", \"path\": \"x.svm\", \"features\": 268435456}"),
       "/problem/data/features", "models "},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string m = refusal(c.json);
    INFO(m);
    CHECK_THAT(m, Contains("s.json: " + c.path + ": this run needs an estimated ") &&
                      Contains("more than the limit of 16 GiB (") && Contains(c.term) &&
                      Contains("STARLING_MEMORY_LIMIT_GIB"));
  }
}

TEST_CASE("the memory estimate counts what the runtime holds", "[runtime][unit]") {
  auto s = scenario::parseScenario(kGood, "s.json", ".");
  REQUIRE(s.isOk());
  scenario::DataShape shape;
  shape.samples = 1000;
  shape.features = 100;
  shape.nonZeros = 1000 * 100;
  shape.rowNonZerosSquared = 1000 * 100 * 100;
  scenario::MemoryEstimate e = scenario::estimateMemory(*s, shape);
  CHECK(e.data == 5 * (12.0 * 100000 + 16 * 1000) + 24 * 1000);
  CHECK(e.solver == 36.0 * 100 * 100);  // min(d^2, sum of squares + d)
  // Exact diffusion keeps 3 vectors, the node 4 more; 4 nodes of d = 100 doubles.
  CHECK(e.models == 8.0 * 100 * 7 * 4);
  CHECK(e.sketch == 0);
  // float32 halves the models; prox_lead keeps 8; L-SVRG adds 2.
  s->precision = scenario::Precision::kFloat32;
  CHECK(scenario::estimateMemory(*s, shape).models == 4.0 * 100 * 7 * 4);
  s->algorithm.kind = optim::AlgorithmKind::kProxLead;
  s->problem.estimator.kind = optim::EstimatorSpec::Kind::kLsvrg;
  CHECK(scenario::estimateMemory(*s, shape).models == 4.0 * 100 * 14 * 4);
  // A lossy codec: 3 more per node and a decode buffer per neighbour (ring: 2 each).
  s->compression.kind = compression::CompressorSpec::Kind::kCountSketch;
  s->compression.rows = 5;
  s->compression.cols = 1000;
  e = scenario::estimateMemory(*s, shape);
  CHECK(e.models == 4.0 * 100 * (17 * 4 + 2 * 4));
  CHECK(e.sketch == 4.0 * 4 * 4 * 5 * 1000);
  // Time-varying prox_lead also tracks every neighbour of the support graph.
  s->topology.schedule.kind = topology::ScheduleKind::kEdgeDropout;
  CHECK(scenario::estimateMemory(*s, shape).models == 4.0 * 100 * (17 * 4 + 2 * 2 * 4));

  // Expected synthetic shapes: dense rows have exactly d non-zeros.
  scenario::SyntheticSpec syn;
  syn.samples = 50;
  syn.features = 20;
  const scenario::DataShape dense = scenario::expectedShape(syn);
  CHECK(dense.nonZeros == 1000);
  CHECK(dense.rowNonZerosSquared == 50 * 400);
}

TEST_CASE("STARLING_MEMORY_LIMIT_GIB moves the limit; a bad value is an error", "[runtime][unit]") {
  // 100,000 x 100 dense samples: about 0.57 GiB for the data.
  const std::string big =
      with("\"samples\": 40, \"features\": 3", "\"samples\": 100000, \"features\": 100");
  REQUIRE(scenario::parseScenario(big, "s.json", ".").isOk());
  {
    ScopedEnv env(core::kMemoryLimitEnv, "0.25");
    CHECK_THAT(refusal(big), Contains("/problem/data/synthetic/samples: this run needs") &&
                                 Contains("more than the limit of 256 MiB"));
  }
  {
    ScopedEnv env(core::kMemoryLimitEnv, "lots");
    CHECK_THAT(refusal(kGood), Contains("s.json: STARLING_MEMORY_LIMIT_GIB=lots: expected the "
                                        "memory limit in GiB"));
  }
  CHECK(core::memoryLimitBytes().value() == uint64_t{16} << 30);
}

TEST_CASE("LIBSVM data is checked against the limit once read", "[runtime][unit]") {
  TempDir dir("libsvm");
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.path / name) << text;
  };
  // One index of 2^28: d = 2^28, so 4 nodes need 4 x 16 x 2^28 x 8 bytes of models.
  write("high.svm", "1 268435456:1\n-1 1:1\n");
  // 30,000 non-zeros in one sample: A^T A has 9e8 entries for the central solver.
  std::string wide = "1";
  for (int i = 1; i <= 30000; ++i) wide += " " + std::to_string(i) + ":1";
  write("wide.svm", wide + "\n-1 1:1\n");
  struct Case {
    std::string file, term;
  };
  for (const Case& c : {Case{"high.svm", "models "}, Case{"wide.svm", "central solver "}}) {
    INFO(c.file);
    const std::string json = with("{\"synthetic\": {\"samples\": 40, \"features\": 3}}",
                                  "{\"format\": \"libsvm\", \"path\": \"" + c.file + "\"}");
    const auto s = scenario::parseScenario(json, (dir.path / "s.json").string(), dir.path);
    REQUIRE(s.isOk());  // the scenario alone does not know d
    const auto e = scenario::prepareExperiment(*s);
    REQUIRE_FALSE(e.isOk());
    CHECK(e.status().code() == core::StatusCode::kInvalidArgument);
    CHECK_THAT(e.status().message(),
               Contains((dir.path / "s.json").string() +
                        ": /problem/data/path: this run needs an estimated ") &&
                   Contains(c.term));
  }
}

TEST_CASE("a random graph that cannot be drawn connected is refused at its JSON path",
          "[runtime][unit]") {
  // p = 1e-9 on 4096 nodes: every draw has ~4096 isolated nodes; the generator used to try
  // 1000 draws (52 s) before giving up.
  const std::string sparse =
      with("\"samples\": 40", "\"samples\": 4096",
           with("\"nodes\": 4", "\"nodes\": 4096",
                with("{\"kind\": \"ring\"}", "{\"kind\": \"random\", \"p\": 1e-9}")));
  CHECK_THAT(refusal(sparse), Contains("s.json: /topology/p: p=1e-09 is too small for a "
                                       "connected random graph on 4096 nodes") &&
                                  Contains("use p >= 0.0019"));
  const std::string cycle =
      with("{\"kind\": \"ring\"}",
           "{\"kind\": \"ring\", \"schedule\": {\"kind\": \"cycle\", \"graphs\": [{\"kind\": "
           "\"ring\"}, {\"kind\": \"random\", \"p\": 1e-9}]}}",
           with("\"samples\": 40", "\"samples\": 4096", with("\"nodes\": 4", "\"nodes\": 4096")));
  CHECK_THAT(refusal(cycle), Contains("/topology/schedule/graphs/1/p: p=1e-09 is too small"));
}

}  // namespace

TEST_CASE("adacomp with error_feedback is refused while validating, not when the run starts",
          "[runtime][unit]") {
  const auto dsgd = with("\"kind\": \"exact_diffusion\", \"step_size\": 0.3",
                         "\"kind\": \"dsgd\", \"step_size\": 0.3");
  const auto base = dsgd.substr(0, dsgd.rfind('}'));
  CHECK(scenario::parseScenario(base + R"(, "compression": {"kind": "adacomp"}})", "s.json", ".")
            .isOk());
  CHECK(refusal(base + R"(, "compression": {"kind": "adacomp", "error_feedback": true}})")
            .find("s.json: /compression/error_feedback: adacomp keeps its own residue") == 0);
}

}  // namespace starling::runtime
