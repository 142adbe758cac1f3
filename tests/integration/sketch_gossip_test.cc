// Sketched gossip (`"sketch"` under dsgd, docs/algorithms.md §27) through the scenario: what it
// refuses, naming the JSON path; that its scenarios write back as they were read; and, run whole
// by simulate, that its messages are exactly the r x c sketch on the wire.
#include <catch2/catch.hpp>

#include "compression/compressor.h"
#include "run_helpers.h"
#include "scenario/scenario_writer.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_sketch_gossip_test {

using namespace starling;
using namespace starling::testing;

namespace {

std::string lineScenario(const std::string& algorithm, const std::string& extra = "",
                         int nodes = 3, int rounds = 20) {
  return R"({"schema_version": 1, "name": "sketch_gossip", "nodes": )" + std::to_string(nodes) +
         R"(, "seed": 21, "rounds": )" + std::to_string(rounds) + R"(, "log_every": 5,
    "topology": {"kind": "line", "weights": "metropolis"},
    "problem": {"kind": "logistic", "l2": 0.01,
                "data": {"synthetic": {"samples": 240, "features": 30, "heterogeneity": 2.0}},
                "batch": 8},
    "algorithm": )" + algorithm + extra + "}";
}

std::string errorOf(const std::string& json) {
  auto s = scenario::parseScenario(json, "test.json", ".");
  if (!s) return s.status().message();
  auto e = scenario::prepareExperiment(*s);
  return e ? std::string("accepted") : e.status().message();
}

std::string dsgd(const std::string& sketch, const std::string& extra = "") {
  return R"({"kind": "dsgd", "step_size": 0.1, "gamma": 0.5, "sketch": )" + sketch + extra + "}";
}

const std::string kSketch = R"({"rows": 3, "cols": 12, "k": 3})";

}  // namespace

TEST_CASE("sketched gossip refuses what it cannot do, naming the JSON path",
          "[integration][sketch]") {
  CHECK(errorOf(lineScenario(dsgd(kSketch))) == "accepted");
  CHECK(errorOf(lineScenario(dsgd(R"({"cols": 30, "ratio": 0.1, "momentum": 0})"))) == "accepted");
  // Not a dsgd: each bias-corrected algorithm says why.
  for (const char* kind : {"choco", "lead", "prox_lead", "exact_diffusion", "gradient_tracking",
                           "nids"}) {
    INFO(kind);
    CHECK_THAT(errorOf(lineScenario(R"({"kind": ")" + std::string(kind) +
                                    R"(", "step_size": 0.1, "sketch": )" + kSketch + "}")),
               Catch::Contains("test.json") && Catch::Contains("/algorithm/sketch") &&
                   Catch::Contains("dsgd") && Catch::Contains("§27"));
  }
  CHECK_THAT(errorOf(lineScenario(R"({"kind": "choco", "step_size": 0.1, "sketch": )" + kSketch +
                                  "}")),
             Catch::Contains("countsketch"));
  // Its parameters.
  CHECK_THAT(errorOf(lineScenario(dsgd(R"({"rows": 0, "cols": 12, "k": 3})"))),
             Catch::Contains("/algorithm/sketch/rows"));
  CHECK_THAT(errorOf(lineScenario(dsgd(R"({"rows": 65, "cols": 12, "k": 3})"))),
             Catch::Contains("/algorithm/sketch/rows"));
  CHECK_THAT(errorOf(lineScenario(dsgd(R"({"rows": 3, "k": 3})"))),
             Catch::Contains("/algorithm/sketch") && Catch::Contains("\"cols\""));
  CHECK_THAT(errorOf(lineScenario(dsgd(R"({"cols": 12})"))),
             Catch::Contains("/algorithm/sketch") && Catch::Contains("\"ratio\""));
  CHECK_THAT(errorOf(lineScenario(dsgd(R"({"cols": 12, "k": 3, "ratio": 0.1})"))),
             Catch::Contains("/algorithm/sketch") && Catch::Contains("exactly one"));
  CHECK_THAT(errorOf(lineScenario(dsgd(R"({"cols": 12, "k": 3, "momentum": 1})"))),
             Catch::Contains("/algorithm/sketch/momentum"));
  CHECK_THAT(errorOf(lineScenario(dsgd(R"({"cols": 12, "k": 3, "hashes": "fresh"})"))),
             Catch::Contains("/algorithm/sketch/hashes"));
  // The model has 30 values (synthetic features): more columns or more kept is refused.
  CHECK_THAT(errorOf(lineScenario(dsgd(R"({"cols": 31, "k": 3})"))),
             Catch::Contains("/algorithm/sketch/cols") && Catch::Contains("30"));
  CHECK_THAT(errorOf(lineScenario(dsgd(R"({"cols": 12, "k": 31})"))),
             Catch::Contains("/algorithm/sketch/k") && Catch::Contains("30"));
  // What it cannot go with.
  CHECK_THAT(errorOf(lineScenario(dsgd(kSketch, R"(, "local_optimizer": {"kind": "momentum"})"))),
             Catch::Contains("/algorithm/local_optimizer/kind"));
  CHECK(errorOf(lineScenario(dsgd(kSketch, R"(, "local_optimizer": {"kind": "sgd",
                                               "weight_decay": 0.001})"))) == "accepted");
  CHECK_THAT(errorOf(lineScenario(R"({"kind": "dsgd", "step_size": 0.1, "combine": "adasum",
                                      "sketch": )" + kSketch + "}")),
             Catch::Contains("/algorithm/sketch") && Catch::Contains("adasum"));
  CHECK_THAT(errorOf(lineScenario(dsgd(kSketch, R"(, "adascale": {"micro_batches": 2})"))),
             Catch::Contains("/algorithm/sketch") && Catch::Contains("adascale"));
  CHECK_THAT(errorOf(lineScenario(dsgd(kSketch, R"(, "leader": {"global_period": 4})"))),
             Catch::Contains("/algorithm/sketch") && Catch::Contains("leader"));
  CHECK_THAT(errorOf(lineScenario(dsgd(kSketch, R"(, "asynchronous": {"max_staleness": 2})"))),
             Catch::Contains("/algorithm/asynchronous"));
  for (const char* codec : {R"({"kind": "topk", "ratio": 0.1})", R"({"kind": "fp16"})",
                            R"({"kind": "countsketch", "cols": 4, "estimate": "mean"})"}) {
    INFO(codec);
    CHECK_THAT(errorOf(lineScenario(dsgd(kSketch), std::string(R"(, "compression": )") + codec)),
               Catch::Contains("/compression/kind"));
  }
  // A schedule that changes the graph every round is fine: each round mixes with its own weights.
  std::string dropout = lineScenario(dsgd(kSketch));
  const std::string line = R"("weights": "metropolis"})";
  dropout.replace(dropout.find(line), line.size(),
                  R"("weights": "metropolis", "schedule": {"kind": "edge_dropout", "p": 0.3}})");
  CHECK(errorOf(dropout) == "accepted");
}

TEST_CASE("sketched gossip scenarios write back as they were read", "[integration][sketch]") {
  for (const std::string sketch : {R"({"rows": 3, "cols": 12, "k": 3})",
                                   R"({"cols": 20, "ratio": 0.05, "momentum": 0.5})"}) {
    INFO(sketch);
    auto s = scenario::parseScenario(lineScenario(dsgd(sketch)), "test.json", ".");
    REQUIRE(s.isOk());
    const std::string written = scenario::resolvedScenarioJson(*s);
    auto again = scenario::parseScenario(written, "test.json", ".");
    INFO(written);
    REQUIRE(again.isOk());
    CHECK(scenario::resolvedScenarioJson(*again) == written);
    REQUIRE(again->algorithm.sketch.has_value());
    const auto &a = *again->algorithm.sketch, &b = *s->algorithm.sketch;
    CHECK(a.rows == b.rows);
    CHECK(a.cols == b.cols);
    CHECK(a.k == b.k);
    CHECK(a.ratio == b.ratio);
    CHECK(a.momentum == b.momentum);
    CHECK(a.seed == b.seed);
    CHECK(again->algorithm.gamma == s->algorithm.gamma);
  }
  // The hashes' seed follows the scenario's seed.
  auto s1 = scenario::parseScenario(lineScenario(dsgd(kSketch)), "a.json", ".");
  std::string other = lineScenario(dsgd(kSketch));
  other.replace(other.find(R"("seed": 21)"), 10, R"("seed": 22)");
  auto s2 = scenario::parseScenario(other, "a.json", ".");
  REQUIRE(s1.isOk());
  REQUIRE(s2.isOk());
  CHECK(s1->algorithm.sketch->seed != s2->algorithm.sketch->seed);
}

TEST_CASE("sketched gossip sends the r x c sketch every round and trains", "[integration][sketch]") {
  const int rounds = 400;
  const auto e = experimentFrom(lineScenario(
      R"({"kind": "dsgd", "step_size": 0.2, "gamma": 0.2,
          "sketch": {"rows": 3, "cols": 15, "k": 3, "momentum": 0.5}})", "", 4, rounds));
  const auto r = run(e);
  // A line of 4 has 3 edges, 6 messages a round, each one frame of 3 x 15 float64 values.
  auto identity = compression::createCompressor<double>(compression::CompressorSpec{});
  REQUIRE(identity.isOk());
  const uint64_t frame = (*identity)->maxEncodedBytes(3 * 15);
  CHECK(r.last.bytesSent == uint64_t(rounds) * 6 * frame);
  const auto plain = run(experimentFrom(lineScenario(R"({"kind": "dsgd", "step_size": 0.2})", "",
                                                     4, rounds)));
  INFO("sketched objective " << r.last.objective << ", dsgd " << plain.last.objective);
  CHECK(r.last.methods.size() == 3);  // sketch_update_norm, sketch_error_left, sketch_scale
  // Gossip at half the model's size still trains, to within a few percent of DSGD's objective.
  CHECK(r.last.objective <= plain.last.objective * 1.05);
  CHECK(r.last.objective < 0.69);  // log 2 at the initial model 0
}

}  // namespace starling_sketch_gossip_test
