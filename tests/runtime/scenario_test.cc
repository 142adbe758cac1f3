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
#include "engine/fault_injection.h"
#include "scenario/compile.h"
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

namespace starling::runtime {
namespace {

using namespace scenario_testing;

TEST_CASE("faults: the keys, their defaults and their refusals", "[runtime][unit]") {
  const auto plain = scenario::parseScenario(kGood, "s.json", ".");
  REQUIRE(plain.isOk());
  CHECK(plain->faults.onPeerLoss ==
        engine::OnPeerLoss::kStop);  // today's clear stop is the default
  CHECK(plain->faults.repair == engine::RepairKind::kReconnect);
  CHECK(plain->faults.script.empty());
  const std::string alg = R"("step_size": 0.3}})";
  const auto withFaults = [&](const std::string& faults) {
    return with(alg, R"("step_size": 0.3}, "faults": )" + faults + "}");
  };
  const auto s =
      scenario::parseScenario(withFaults(R"({"on_peer_loss": "continue", "repair": "none",
      "agreement_rounds": 9, "script": [{"kill": 2, "at_round": 30}, {"kill": 1, "at_round": 5}]})"),
                              "s.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  CHECK(s->faults.onPeerLoss == engine::OnPeerLoss::kContinue);
  CHECK(s->faults.repair == engine::RepairKind::kNone);
  CHECK(s->faults.agreementRounds == 9);
  REQUIRE(s->faults.script.size() == 2);
  CHECK(s->faults.script[0].kill == 1);  // sorted by round
  CHECK(s->faults.script[1].atRound == 30);

  CHECK_THAT(refusal(withFaults(R"({"on_peer_loss": "retry"})")),
             Contains("s.json: /faults/on_peer_loss: unknown") && Contains("stop, continue"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 4, "at_round": 1}]})")),
             Contains("/faults/script/0/kill: must be between 0 and 3"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 1, "at_round": 40}]})")),
             Contains("/faults/script/0/at_round: must be between 0 and 39"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 1, "at_round": 3},
                                                {"kill": 1, "at_round": 9}]})")),
             Contains("/faults/script/1/kill: rank 1 is killed twice"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 0, "at_round": 1}, {"kill": 1, "at_round": 1},
      {"kill": 2, "at_round": 1}, {"kill": 3, "at_round": 1}]})")),
             Contains("/faults/script: the script kills every node"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 1, "at_round": 3, "signal": 9}]})")),
             Contains("/faults/script/0/signal: unknown key"));
  CHECK_THAT(refusal(withFaults(R"({"script": {"kill": 1}})")),
             Contains("/faults/script: expected an array"));
  const auto links =
      scenario::parseScenario(withFaults(R"({"script": [{"corrupt": 0.25, "from_round": 3,
      "to_round": 9, "link": [0, 2]}, {"delay_ms": 40}]})"),
                              "s.json", ".");
  INFO(links.status().toString());
  REQUIRE(links.isOk());
  REQUIRE(links->faults.script.size() == 2);
  CHECK(links->faults.script[1].kind ==
        engine::FaultEvent::Kind::kCorrupt);  // sorted by first round
  CHECK(links->faults.script[1].probability == 0.25);
  CHECK(links->faults.script[1].linkB == 2);
  CHECK(links->faults.script[0].delayMs == 40);
  CHECK(links->faults.script[0].toRound == 40);  // to the end by default
  CHECK_THAT(refusal(withFaults(R"({"script": [{"corrupt": 0.5, "kill": 1, "at_round": 2}]})")),
             Contains("/faults/script/0: a fault event has exactly one of"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"corrupt": 1.5}]})")),
             Contains("/faults/script/0/corrupt"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"delay_ms": 5, "link": [1, 1]}]})")),
             Contains("/faults/script/0/link: expected [A, B]: two different ranks of 0..3"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"delay_ms": 5, "from_round": 9, "to_round": 3}]})")),
             Contains("/faults/script/0/to_round: must be between 9 and 40"));
}

TEST_CASE("checkpoint: the keys, their defaults and their refusals", "[runtime][unit]") {
  const auto plain = scenario::parseScenario(kGood, "s.json", ".");
  REQUIRE(plain.isOk());
  CHECK(plain->checkpoint.every == 0);  // off
  const std::string alg = R"("step_size": 0.3}})";
  const auto withCheckpoint = [&](const std::string& c) {
    return with(alg, R"("step_size": 0.3}, "checkpoint": )" + c + "}");
  };
  const auto s = scenario::parseScenario(withCheckpoint(R"({"every": 10})"), "s.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  CHECK(s->checkpoint.every == 10);
  CHECK(s->checkpoint.keep == 2);
  const auto kept =
      scenario::parseScenario(withCheckpoint(R"({"every": 1, "keep": 5})"), "s.json", ".");
  REQUIRE(kept.isOk());
  CHECK(kept->checkpoint.keep == 5);
  CHECK_THAT(refusal(withCheckpoint(R"({})")),
             Contains("s.json: /checkpoint: missing required key \"every\""));
  CHECK_THAT(refusal(withCheckpoint(R"({"every": 0})")),
             Contains("s.json: /checkpoint/every: must be between 1 and"));
  CHECK_THAT(refusal(withCheckpoint(R"({"every": 5, "keep": 1})")),
             Contains("s.json: /checkpoint/keep: must be between 2 and 1000000, got 1"));
  CHECK_THAT(refusal(withCheckpoint(R"({"every": 5, "dir": "x"})")),
             Contains("s.json: /checkpoint/dir: unknown key; expected one of every, keep"));
  CHECK_THAT(refusal(withCheckpoint(R"({"every": "5"})")),
             Contains("s.json: /checkpoint/every: expected an integer, got a string"));
  CHECK_THAT(refusal(withCheckpoint(R"(10)")),
             Contains("s.json: /checkpoint: expected an object, got an integer"));
  // A trainer's scenario (no problem) has nobody to write them.
  const std::string trainer = R"({"schema_version": 1, "nodes": 4, "topology": {"kind": "ring"},
      "algorithm": {"kind": "dsgd", "step_size": 0.1}, "checkpoint": {"every": 5}})";
  CHECK_THAT(refusal(trainer), Contains("s.json: /checkpoint: checkpoints are written by the peers"));
}

TEST_CASE("faults: drop, duplicate and reorder events", "[runtime][unit]") {
  const std::string alg = R"("step_size": 0.3}})";
  const auto withFaults = [&](const std::string& faults) {
    return with(alg, R"("step_size": 0.3}, "faults": )" + faults + "}");
  };
  const auto s = scenario::parseScenario(withFaults(R"({"on_peer_loss": "continue", "script": [
      {"drop": 0.01, "link": [1, 3], "from_round": 5, "to_round": 6},
      {"duplicate": 0.5}, {"reorder": 1, "from_round": 2, "link": [0, 1]}]})"),
                                         "s.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  REQUIRE(s->faults.script.size() == 3);
  // Sorted by first round: duplicate (0), reorder (2), drop (5).
  CHECK(s->faults.script[0].kind == engine::FaultEvent::Kind::kDuplicate);
  CHECK(s->faults.script[0].probability == 0.5);
  CHECK(s->faults.script[0].linkA == -1);
  CHECK(s->faults.script[0].toRound == 40);
  CHECK(s->faults.script[1].kind == engine::FaultEvent::Kind::kReorder);
  CHECK(s->faults.script[1].probability == 1.0);
  CHECK(s->faults.script[1].fromRound == 2);
  CHECK(s->faults.script[2].kind == engine::FaultEvent::Kind::kDrop);
  CHECK(s->faults.script[2].probability == 0.01);
  CHECK(s->faults.script[2].linkA == 1);
  CHECK(s->faults.script[2].linkB == 3);
  CHECK(s->faults.script[2].toRound == 6);
  CHECK(engine::FaultInjector::wanted(s->faults.script));

  // Exactly one kind per event; the message names them all.
  CHECK_THAT(refusal(withFaults(R"({"script": [{"drop": 0.5, "duplicate": 0.5}]})")),
             Contains("s.json: /faults/script/0: a fault event has exactly one of \"kill\", "
                      "\"corrupt\", \"delay_ms\", \"drop\", \"duplicate\" or \"reorder\""));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"link": [0, 1]}]})")),
             Contains("/faults/script/0: a fault event has exactly one of"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 1, "at_round": 2, "reorder": 0.5}]})")),
             Contains("/faults/script/0: a fault event has exactly one of"));
  // Probabilities in [0, 1].
  CHECK_THAT(refusal(withFaults(R"({"script": [{"drop": 1.5}]})")),
             Contains("s.json: /faults/script/0/drop: must be in [0, 1], got 1.5"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"duplicate": -0.1}]})")),
             Contains("/faults/script/0/duplicate: must be in [0, 1]"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"reorder": "often"}]})")),
             Contains("/faults/script/0/reorder: expected a number, got a string"));
  // Rounds and links as for the other link faults; no stray keys.
  CHECK_THAT(refusal(withFaults(R"({"script": [{"drop": 0.5, "from_round": 40}]})")),
             Contains("/faults/script/0/from_round: must be between 0 and 39"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"reorder": 0.5, "link": [0, 4]}]})")),
             Contains("/faults/script/0/link: expected [A, B]: two different ranks of 0..3"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"duplicate": 0.5, "at_round": 3}]})")),
             Contains("/faults/script/0/at_round: unknown key"));
}

}  // namespace
}  // namespace starling::runtime

namespace starling::runtime {
namespace {

using namespace scenario_testing;

// {"kind": KIND, "step_size": 0.1, MORE "codistillation": {KEYS}}
std::string codistilling(const std::string& keys, const std::string& more = "",
                         const std::string& kind = "dsgd") {
  return R"({"kind": ")" + kind + R"(", "step_size": 0.1, )" + more + R"("codistillation": {)" +
         keys + "}}";
}

TEST_CASE("codistillation: the keys, their defaults and their refusals", "[runtime][unit]") {
  const auto defaults = scenario::parseScenario(mlpScenario(codistilling("")), "s.json", ".");
  INFO(defaults.status().toString());
  REQUIRE(defaults.isOk());
  REQUIRE(defaults->algorithm.codistillation.has_value());
  const optim::CodistillationConfig& d = *defaults->algorithm.codistillation;
  CHECK(d.loss.alpha == 1.0);
  CHECK(d.loss.distance == optim::CodistillationSpec::Distance::kCrossEntropy);
  CHECK(d.period == 1);
  CHECK(d.burnIn == 0);
  const auto given = scenario::parseScenario(
      mlpScenario(codistilling(R"("alpha": 0.5, "distance": "kl", "period": 10, "burn_in": 100)"),
                  R"(, "compression": {"kind": "fp16"})"),
      "s.json", ".");
  INFO(given.status().toString());
  REQUIRE(given.isOk());
  const optim::CodistillationConfig& g = *given->algorithm.codistillation;
  CHECK(g.loss.alpha == 0.5);
  CHECK(g.loss.distance == optim::CodistillationSpec::Distance::kKl);
  CHECK(g.period == 10);
  CHECK(g.burnIn == 100);
  const auto plain =
      scenario::parseScenario(mlpScenario(R"({"kind": "dsgd", "step_size": 0.1})"), "s.json", ".");
  REQUIRE(plain.isOk());
  CHECK_FALSE(plain->algorithm.codistillation.has_value());

  const std::string co = R"("period": 4)";
  CHECK_THAT(refusal(mlpScenario(codistilling(R"("period": 0)"))),
             Contains("/algorithm/codistillation/period: must be between 1"));
  CHECK_THAT(refusal(mlpScenario(codistilling(R"("alpha": -1)"))),
             Contains("/algorithm/codistillation/alpha"));
  CHECK_THAT(refusal(mlpScenario(codistilling(R"("distance": "mse")"))),
             Contains("/algorithm/codistillation/distance"));
  CHECK_THAT(refusal(mlpScenario(codistilling(R"("tau": 3)"))),
             Contains("/algorithm/codistillation"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co, "", "choco"))),
             Contains("s.json: /algorithm/codistillation: codistillation replaces dsgd's "
                      "averaging"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co, R"("combine": "adasum", )"))),
             Contains("/algorithm/combine: codistillation never combines"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co, R"("gamma": 0.5, )"))),
             Contains("/algorithm/gamma: codistillation never averages models"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co), "", R"({"kind": "full"})")),
             Contains("/problem/estimator/batch: codistillation compares predictions on the "
                      "node's minibatch"));
  CHECK_THAT(refusal(with("\"kind\": \"exact_diffusion\", \"step_size\": 0.3",
                          "\"kind\": \"dsgd\", \"step_size\": 0.3, \"codistillation\": {}")),
             Contains("/problem/kind: codistillation compares a classifier's predictions"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co), R"(, "compression": {"kind": "topk",
                                     "ratio": 0.1, "error_feedback": true})")),
             Contains("/compression/error_feedback: codistillation sends whole models"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co), R"(, "faults": {"on_peer_loss": "continue"})")),
             Contains("/faults/on_peer_loss: codistillation does not restart"));
}

}  // namespace
}  // namespace starling::runtime

namespace starling::runtime {
namespace {

using namespace scenario_testing;
using Catch::Matchers::Contains;

TEST_CASE("transport: DiLoCo's overlap sends eagerly, every other run keeps UCX's rendezvous",
          "[runtime][unit]") {
  const auto eager = [](const std::string& algorithm) {
    const auto s = scenario::parseScenario(
        with(R"("algorithm": {"kind": "exact_diffusion", "step_size": 0.3}})",
             R"("algorithm": )" + algorithm + "}"),
        "s.json", ".");
    INFO(s.status().toString());
    REQUIRE(s.isOk());
    const auto no = scenario::networkOptions(*s, 0, {});
    INFO(no.status().toString());
    REQUIRE(no.isOk());
    return no->eagerSends;
  };
  CHECK(eager(R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 4, "overlap": true})"));
  CHECK_FALSE(eager(R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 4})"));
  CHECK_FALSE(eager(R"({"kind": "dsgd", "step_size": 0.1})"));
}

TEST_CASE("transport: busy_poll, its default and its refusals", "[runtime][unit]") {
  const std::string alg = R"("step_size": 0.3}})";
  const auto withTransport = [&](const std::string& t) {
    return with(alg, R"("step_size": 0.3}, "transport": )" + t + "}");
  };
  using BusyPoll = scenario::TransportConfig::BusyPoll;
  const auto plain = scenario::parseScenario(withTransport(R"({"kind": "ucx"})"), "s.json", ".");
  INFO(plain.status().toString());
  REQUIRE(plain.isOk());
  CHECK(plain->transport.busyPoll == BusyPoll::kAuto);
  CHECK(plain->transport.spinUs == 50);
  for (const auto& [text, want] : {std::pair{"auto", BusyPoll::kAuto}, std::pair{"on", BusyPoll::kOn},
                                   std::pair{"off", BusyPoll::kOff}}) {
    const auto s = scenario::parseScenario(
        withTransport(R"({"kind": "ucx", "busy_poll": ")" + std::string(text) + "\"}"), "s.json",
        ".");
    REQUIRE(s.isOk());
    CHECK(s->transport.busyPoll == want);
  }
  CHECK_THAT(refusal(withTransport(R"({"kind": "ucx", "busy_poll": "always"})")),
             Contains("s.json: /transport/busy_poll:"));
  CHECK_THAT(refusal(withTransport(R"({"kind": "ucx", "busy_poll": true})")),
             Contains("s.json: /transport/busy_poll:"));
}

}  // namespace
}  // namespace starling::runtime

