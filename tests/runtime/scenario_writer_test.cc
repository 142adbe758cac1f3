// resolvedScenarioJson: every shipped scenario and one of every kind written back, parsed again
// and written again gives the same text; the hash ignores spelling and sees every change.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/scenario.h"
#include "runtime/scenario_writer.h"

namespace fs = std::filesystem;
using namespace starling::runtime;

namespace {

Scenario parse(const std::string& text, const std::string& file = "t.json") {
  auto s = parseScenario(text, file, SCENARIO_DIR);
  INFO(text);
  if (!s) FAIL(s.status().message());
  return *s;
}

// Writes, parses the result and writes again: the two texts must be equal.
void requireFixpoint(const Scenario& s) {
  const std::string once = resolvedScenarioJson(s);
  const Scenario again = parse(once, s.file);
  INFO(once);
  REQUIRE(resolvedScenarioJson(again) == once);
  CHECK(scenarioHash(again) == scenarioHash(s));
  CHECK(again.nodes == s.nodes);
  CHECK(again.seed == s.seed);
  CHECK(again.rounds == s.rounds);
  CHECK(again.logEvery == s.logEvery);
  CHECK(again.algorithm.kind == s.algorithm.kind);
  CHECK(again.algorithm.stepSize.value == s.algorithm.stepSize.value);
  CHECK(again.algorithm.gamma == s.algorithm.gamma);
  CHECK(again.compression.kind == s.compression.kind);
  CHECK(again.compression.bits == s.compression.bits);
  CHECK(again.compression.k == s.compression.k);
  CHECK(again.compression.ratio == s.compression.ratio);
  CHECK(again.topology.base.kind == s.topology.base.kind);
  CHECK(again.topology.schedule.kind == s.topology.schedule.kind);
  CHECK(again.problem.data.path == s.problem.data.path);
  CHECK(again.problem.estimator.kind == s.problem.estimator.kind);
  CHECK(again.problem.estimator.batch == s.problem.estimator.batch);
  CHECK(again.problem.spec.regularizer.l1 == s.problem.spec.regularizer.l1);
  CHECK(again.problem.spec.regularizer.lower == s.problem.spec.regularizer.lower);
}

std::string scenario(const std::string& topology, const std::string& algorithm,
                     const std::string& extra = "", const std::string& problem = "") {
  return R"({"schema_version": 1, "name": "w", "nodes": 8, "seed": 3, "rounds": 10,
    "topology": )" + topology + R"(, "algorithm": )" + algorithm + R"(,
    "problem": )" + (problem.empty() ? R"({"kind": "logistic", "l2": 0.1,
      "data": {"synthetic": {"samples": 80, "features": 6}}})" : problem) + extra + "}";
}

}  // namespace

TEST_CASE("every shipped scenario is a fixpoint of write and parse", "[runtime][unit][writer]") {
  int count = 0;
  // (scenarios/compare/ holds specs for tools/compare.py, not scenarios.)
  for (const auto& entry : fs::directory_iterator(SCENARIO_DIR)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    DYNAMIC_SECTION(entry.path().filename().string()) {
      auto s = parseScenario(text.str(), entry.path().string(), entry.path().parent_path());
      if (!s) FAIL(s.status().message());
      requireFixpoint(*s);
    }
    ++count;
  }
  CHECK(count >= 18);
}

TEST_CASE("every kind of topology, algorithm, codec, estimator and regularizer writes back",
          "[runtime][unit][writer]") {
  const std::vector<std::string> topologies = {
      R"({"kind": "ring", "weights": "max_degree"})",
      R"({"kind": "grid", "rows": 2, "cols": 4, "torus": true})",
      R"({"kind": "random", "p": 0.9})",
      R"({"kind": "exponential"})",
      R"({"kind": "star", "weights": "uniform"})",
      R"({"kind": "ring", "schedule": {"kind": "cycle", "graphs": [{"kind": "ring"}, {"kind": "line"}]}})",
      R"({"kind": "ring", "schedule": {"kind": "one_peer_exponential"}})",
      R"({"kind": "complete", "schedule": {"kind": "random_matching"}})",
      R"({"kind": "ring", "schedule": {"kind": "edge_dropout", "p": 0.25}})",
  };
  for (const auto& t : topologies) {
    DYNAMIC_SECTION(t) { requireFixpoint(parse(scenario(t, R"({"kind": "dsgd", "step_size": 0.1})"))); }
  }
  const std::vector<std::string> algorithms = {
      R"({"kind": "dsgd", "step_size": 0.1, "gamma": 0.5})",
      R"({"kind": "exact_diffusion", "step_size": {"kind": "inverse_time", "value": 0.5, "tau": 30}})",
      R"({"kind": "gradient_tracking", "step_size": {"kind": "step", "value": 0.2, "every": 10, "factor": 0.5}})",
      R"({"kind": "nids", "step_size": 0.3})",
      R"({"kind": "choco", "step_size": 0.1, "gamma": 0.3})",
      R"({"kind": "lead", "step_size": 0.1, "gamma": 0.7, "alpha": 0.25})",
      R"({"kind": "prox_lead", "step_size": 0.1})",
  };
  for (const auto& a : algorithms) {
    DYNAMIC_SECTION(a) { requireFixpoint(parse(scenario(R"({"kind": "ring"})", a))); }
  }
  const std::vector<std::string> codecs = {
      R"({"kind": "fp16"})", R"({"kind": "bf16"})", R"({"kind": "topk", "k": 3})",
      R"({"kind": "randk", "ratio": 0.5, "scaled": false})", R"({"kind": "sign"})",
      R"({"kind": "qsgd", "bits": 3, "norm": "linf", "bucket": 16})",
      R"({"kind": "nuqsgd", "bits": 5})", R"({"kind": "natural"})",
      R"({"kind": "natural_dithering", "levels": 3, "norm": "linf"})",
      R"({"kind": "topk_dithering", "ratio": 0.25, "levels": 2})",
      R"({"kind": "countsketch", "rows": 3, "cols": 64, "k": 4})",
      R"({"kind": "countsketch", "cols": 64, "threshold": 0.1})",
      R"({"kind": "countsketch", "cols": 64, "estimate": "mean"})",
      R"({"kind": "dqsgd", "min_bits": 3, "max_bits": 6, "target": 0.5})",
  };
  for (const auto& c : codecs) {
    DYNAMIC_SECTION(c) {
      requireFixpoint(parse(scenario(R"({"kind": "ring"})", R"({"kind": "choco", "step_size": 0.1})",
                                     R"(, "compression": )" + c)));
    }
  }
  // Codecs that need error feedback's residue: DSGD.
  requireFixpoint(parse(scenario(R"({"kind": "ring"})", R"({"kind": "dsgd", "step_size": 0.1})",
                                 R"(, "compression": {"kind": "adacomp", "bin": 40})")));
  requireFixpoint(parse(scenario(R"({"kind": "ring"})", R"({"kind": "dsgd", "step_size": 0.1})",
                                 R"(, "compression": {"kind": "topk", "ratio": 0.1, "error_feedback": true})")));
  const std::vector<std::string> problems = {
      R"({"kind": "least_squares", "l2": 0.1, "partition": "random", "batch": 4,
          "data": {"synthetic": {"samples": 80, "features": 6, "heterogeneity": 2, "noise": 0.3, "density": 0.5}}})",
      R"({"kind": "logistic", "estimator": {"kind": "lsvrg", "batch": 2, "p": 0.2},
          "data": {"synthetic": {"samples": 80, "features": 6}}})",
      R"({"kind": "logistic", "estimator": {"kind": "saga", "batch": 3},
          "regularizer": {"l1": 0.01, "box": {"lower": -1, "upper": 2}},
          "data": {"synthetic": {"samples": 80, "features": 6}}})",
      R"({"kind": "logistic", "regularizer": {"nonneg": true},
          "data": {"format": "libsvm", "path": "data/sparse-logistic.svm", "features": 200}})",
  };
  for (const auto& p : problems) {
    DYNAMIC_SECTION(p) {
      requireFixpoint(parse(scenario(R"({"kind": "ring"})", R"({"kind": "prox_lead", "step_size": 0.1})",
                                     "", p)));
    }
  }
  const std::vector<std::string> extras = {
      R"(, "transport": {"kind": "inproc"})",
      R"(, "transport": {"kind": "ucx", "tls": "shm", "ucx_tls": "tcp,sysv", "round_timeout_ms": 5, "spin_us": 0})",
      R"(, "peers": {"hosts": ["a", "b"], "base_port": 4000})",
      R"(, "precision": "float32", "log_every": 3, "description": "d", "divergence": {"max_abs": 5})",
  };
  for (const auto& x : extras) {
    DYNAMIC_SECTION(x) {
      requireFixpoint(parse(scenario(R"({"kind": "ring"})", R"({"kind": "dsgd", "step_size": 0.1})", x)));
    }
  }
}

TEST_CASE("the scenario hash ignores spelling and sees every change", "[runtime][unit][writer]") {
  const auto base = parse(scenario(R"({"kind": "ring"})", R"({"kind": "lead", "step_size": 0.1})",
                                   R"(, "compression": {"kind": "qsgd", "bits": 3})"));
  // The same run spelled differently: other key order, whitespace, defaults written out.
  const auto same = parse(R"({"algorithm": {"step_size": 0.1, "kind": "lead", "alpha": 0.5},
      "compression": {"bits": 3, "kind": "qsgd", "bucket": 512},
      "seed": 3, "rounds": 10, "nodes": 8, "name": "w", "schema_version": 1,
      "topology": {"weights": "metropolis", "kind": "ring", "schedule": {"kind": "static"}},
      "problem": {"data": {"synthetic": {"features": 6, "samples": 80}}, "l2": 0.1, "kind": "logistic"}})");
  CHECK(scenarioHash(same) == scenarioHash(base));
  CHECK(scenarioHashHex(scenarioHash(base)).size() == 16);
  CHECK(scenarioHashHex(0x0123456789abcdefULL) == "0123456789abcdef");

  auto changed = [&](auto&& edit) {
    Scenario s = base;
    edit(s);
    return scenarioHash(s) != scenarioHash(base);
  };
  CHECK(changed([](Scenario& s) { s.seed = 4; }));
  CHECK(changed([](Scenario& s) { s.rounds = 11; }));
  CHECK(changed([](Scenario& s) { s.algorithm.stepSize.value = 0.1000001; }));
  CHECK(changed([](Scenario& s) { s.algorithm.alpha = 0.25; }));
  CHECK(changed([](Scenario& s) { s.compression.bits = 4; }));
  CHECK(changed([](Scenario& s) { s.compression.bucket = 256; }));
  CHECK(changed([](Scenario& s) { s.problem.spec.l2 = 0.2; }));
  CHECK(changed([](Scenario& s) { s.problem.data.synthetic.samples = 81; }));
  CHECK(changed([](Scenario& s) { s.topology.base.weights = starling::topology::WeightRule::kUniform; }));
  // Not part of the run: where the file was.
  CHECK_FALSE(changed([](Scenario& s) { s.file = "elsewhere.json"; }));
}
