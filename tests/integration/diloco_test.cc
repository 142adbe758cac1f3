// DiLoCo over gossip (`"kind": "diloco"`, docs/algorithms.md §29) through the scenario: what the
// reader refuses, naming the JSON path; that its scenarios write back as they were read; the
// exact_diffusion outer step at the central solver's optimum of a heterogeneous logistic problem
// where nesterov stays biased (simulate); and real peers over UCX equal to simulate, metric for
// metric, for every outer step, with a codec, and with a peer killed during a run.
#include <catch2/catch.hpp>

#include <cmath>

#include "process_helpers.h"
#include "run_helpers.h"
#include "scenario/scenario_writer.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_diloco_test {

using namespace starling;
using namespace starling::testing;

namespace {

const std::string kLauncher = NODE_LAUNCHER;

std::string scenarioWith(const std::string& algorithm, const std::string& extra = "",
                         int nodes = 5, int rounds = 60, const std::string& problem = "") {
  const std::string p =
      problem.empty() ? R"({"kind": "logistic", "l2": 0.01, "batch": 8,
        "data": {"synthetic": {"samples": 500, "features": 8, "heterogeneity": 1.0}}})"
                      : problem;
  return R"({"schema_version": 1, "name": "diloco", "nodes": )" + std::to_string(nodes) +
         R"(, "seed": 4, "rounds": )" + std::to_string(rounds) + R"(, "log_every": 10,
    "topology": {"kind": "ring"}, "transport": {"kind": "ucx"},
    "problem": )" + p + R"(, "algorithm": )" + algorithm + extra + "}";
}

std::string errorOf(const std::string& json) {
  auto s = scenario::parseScenario(json, "test.json", ".");
  if (!s) return s.status().message();
  auto e = scenario::prepareExperiment(*s);
  return e ? std::string("accepted") : e.status().message();
}

std::string diloco(const std::string& keys) {
  return R"({"kind": "diloco", "step_size": 0.1)" + keys + "}";
}

}  // namespace

TEST_CASE("diloco's keys: what the reader refuses, naming the JSON path, and what it writes",
          "[integration][diloco]") {
  CHECK(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4)"))) == "accepted");
  CHECK_THAT(errorOf(scenarioWith(diloco(""))),
             Catch::Contains("test.json") && Catch::Contains("inner_steps"));
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 0)"))),
             Catch::Contains("/algorithm/inner_steps"));
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4, "outer": {"kind": "adam"})"))),
             Catch::Contains("/algorithm/outer/kind") && Catch::Contains("nesterov"));
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4, "outer": {"lr": 0})"))),
             Catch::Contains("/algorithm/outer/lr"));
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4, "outer": {"momentum": 1})"))),
             Catch::Contains("/algorithm/outer/momentum"));
  CHECK_THAT(errorOf(scenarioWith(
                 diloco(R"(, "inner_steps": 4, "outer": {"kind": "sgd", "momentum": 0.5})"))),
             Catch::Contains("/algorithm/outer/momentum"));
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4,
                                           "local_optimizer": {"kind": "adam"})"))),
             Catch::Contains("/algorithm/local_optimizer") && Catch::Contains("\"inner\""));
  // The exact_diffusion outer step corrects plain gradients only.
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4, "inner": {"kind": "adam"},
                                           "outer": {"kind": "exact_diffusion"})"))),
             Catch::Contains("/algorithm/inner/kind") && Catch::Contains("§29"));
  // A lossy codec: error feedback (the model as the message) or compressed differences against
  // reference points, which need a fixed W.
  CHECK(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4)"),
                             R"(, "compression": {"kind": "qsgd", "bits": 3})")) == "accepted");
  CHECK_THAT(errorOf(R"({"schema_version": 1, "name": "d", "nodes": 4,
    "topology": {"kind": "ring", "schedule": {"kind": "edge_dropout", "p": 0.2}},
    "algorithm": {"kind": "diloco", "step_size": 0.1, "inner_steps": 2},
    "compression": {"kind": "topk", "ratio": 0.1}})"),
             Catch::Contains("/compression/kind") && Catch::Contains("error_feedback"));
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4, "outer": {"kind": "noloco"})"),
                                  R"(, "compression": {"kind": "topk", "ratio": 0.1})")),
             Catch::Contains("/compression/kind") && Catch::Contains("noloco"));
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4,
                                           "outer": {"kind": "nesterov", "pull": 0.5})"))),
             Catch::Contains("/algorithm/outer/pull"));
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4, "fragments": 3)"))),
             Catch::Contains("/algorithm/fragments") && Catch::Contains("multiple"));
  // by_time: its keys, and what it does not take.
  const std::string byTime = R"(, "inner_steps": {"kind": "by_time", "seconds": 0.01})";
  CHECK(errorOf(scenarioWith(diloco(byTime))) == "accepted");
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": {"kind": "by_time"})"))),
             Catch::Contains("/algorithm/inner_steps") && Catch::Contains("seconds"));
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": {"kind": "by_time", "seconds": 1,
                                           "speeds": [1, 2]})"))),
             Catch::Contains("/algorithm/inner_steps/speeds") && Catch::Contains("5"));
  for (const std::string more : {R"(, "outer": {"kind": "exact_diffusion"})",
                                  R"(, "outer": {"kind": "noloco"})", R"(, "overlap": true)",
                                  R"(, "fragments": 2)"}) {
    CHECK(errorOf(scenarioWith(diloco(byTime + more))) == "accepted");
  }
  // Error feedback in fragments keeps a residual per fragment; lgc's receivers follow one
  // sequence of frames.
  CHECK(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4, "fragments": 2)"),
                             R"(, "compression": {"kind": "topk", "k": 1,
                                                  "error_feedback": true})")) == "accepted");
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4, "fragments": 2)"),
                                  R"(, "compression": {"kind": "lgc", "ratio": 0.05,
                                                       "error_feedback": true})")),
             Catch::Contains("/compression/error_feedback") && Catch::Contains("lgc"));
  // The speeds of simulate's by_time from "asynchronous" (its rounds stay synchronous).
  const std::string speeds = R"(, "asynchronous": {"speeds": [1, 2, 1, 1, 0.5]})";
  CHECK(errorOf(scenarioWith(diloco(byTime + speeds))) == "accepted");
  CHECK_THAT(errorOf(scenarioWith(diloco(R"(, "inner_steps": 4)" + speeds))),
             Catch::Contains("/algorithm/asynchronous") && Catch::Contains("by_time"));
  CHECK_THAT(errorOf(scenarioWith(diloco(
                 byTime + R"(, "asynchronous": {"max_staleness": 2, "speeds": [1, 1, 1, 1, 1]})"))),
             Catch::Contains("/algorithm/asynchronous/max_staleness") &&
                 Catch::Contains("synchronous"));
  CHECK_THAT(errorOf(scenarioWith(diloco(byTime + R"(, "asynchronous": {"compute_ms": 5})"))),
             Catch::Contains("/algorithm/asynchronous/compute_ms"));
  CHECK_THAT(errorOf(scenarioWith(diloco(
                 R"(, "inner_steps": {"kind": "by_time", "seconds": 1, "speeds": [1, 1, 1, 1, 1]})" +
                 speeds))),
             Catch::Contains("/algorithm/asynchronous/speeds") && Catch::Contains("once"));
  CHECK_THAT(errorOf(scenarioWith(diloco(byTime),
                                  R"(, "compression": {"kind": "int8", "error_feedback": true})")),
             Catch::Contains("/compression/kind") && Catch::Contains("by_time"));
  // diloco's keys under another kind.
  CHECK_THAT(errorOf(scenarioWith(R"({"kind": "dsgd", "step_size": 0.1, "inner_steps": 4})")),
             Catch::Contains("/algorithm/inner_steps") && Catch::Contains("diloco"));
  CHECK_THAT(errorOf(scenarioWith(R"({"kind": "dsgd", "step_size": 0.1,
                                      "outer": {"kind": "sgd"}})")),
             Catch::Contains("/algorithm/outer") && Catch::Contains("diloco"));

  // Defaults: nesterov at DiLoCo's lr 0.7 and momentum 0.9; adamw is adam with weight decay 0.01.
  auto s = scenario::parseScenario(
      scenarioWith(diloco(R"(, "inner_steps": 4, "inner": {"kind": "adamw"})")), "t.json", ".");
  REQUIRE(s.isOk());
  CHECK(s->algorithm.diloco.innerSteps == 4);
  CHECK(s->algorithm.diloco.outer == optim::DilocoSpec::Outer::kNesterov);
  CHECK(s->algorithm.diloco.outerLr == 0.7);
  CHECK(s->algorithm.diloco.outerMomentum == 0.9);
  CHECK(s->algorithm.localOptimizer.kind == optim::LocalOptimizerSpec::Kind::kAdam);
  CHECK(s->algorithm.localOptimizer.weightDecay == 0.01);
  // What the writer writes reads back to the same scenario, written the same.
  for (const std::string keys :
       {R"(, "inner_steps": 4, "inner": {"kind": "adamw"})",
        R"(, "inner_steps": 7, "outer": {"kind": "sgd", "lr": 1})",
        R"(, "inner_steps": 2, "outer": {"kind": "exact_diffusion", "lr": 0.5})",
        R"(, "inner_steps": 2, "outer": {"kind": "noloco", "lr": 0.6, "pull": 0.4})",
        R"(, "inner_steps": 6, "fragments": 3, "overlap": true)",
        R"(, "inner_steps": {"kind": "by_time", "seconds": 0.5, "max_steps": 40,
                             "step_seconds": 0.1, "speeds": [1, 2, 1, 1, 0.5]})",
        R"(, "inner_steps": {"kind": "by_time", "seconds": 0.5, "max_steps": 40},
            "fragments": 4, "overlap": true, "outer": {"kind": "noloco", "pull": 0.5})",
        R"(, "inner_steps": 3, "inner": {"kind": "momentum", "momentum": 0.5},
            "outer": {"kind": "nesterov", "lr": 0.9, "momentum": 0.6})"}) {
    INFO(keys);
    auto a = scenario::parseScenario(scenarioWith(diloco(keys)), "t.json", ".");
    REQUIRE(a.isOk());
    const std::string written = scenario::resolvedScenarioJson(*a);
    auto b = scenario::parseScenario(written, "t.json", ".");
    REQUIRE(b.isOk());
    CHECK(scenario::resolvedScenarioJson(*b) == written);
    CHECK(b->algorithm.diloco.innerSteps == a->algorithm.diloco.innerSteps);
    CHECK(b->algorithm.diloco.outer == a->algorithm.diloco.outer);
    CHECK(b->algorithm.diloco.outerLr == a->algorithm.diloco.outerLr);
    CHECK(b->algorithm.diloco.outerMomentum == a->algorithm.diloco.outerMomentum);
    CHECK(b->algorithm.diloco.fragments == a->algorithm.diloco.fragments);
    CHECK(b->algorithm.diloco.overlap == a->algorithm.diloco.overlap);
    CHECK(b->algorithm.diloco.seconds == a->algorithm.diloco.seconds);
    CHECK(b->algorithm.diloco.speeds == a->algorithm.diloco.speeds);
    CHECK(b->algorithm.localOptimizer.kind == a->algorithm.localOptimizer.kind);
    CHECK(b->algorithm.localOptimizer.weightDecay == a->algorithm.localOptimizer.weightDecay);
  }
}

TEST_CASE("the exact_diffusion outer step reaches the central optimum on heterogeneous shards; "
          "nesterov over the same graph stays biased",
          "[integration][diloco]") {
  // Eight nodes on a ring, each a contiguous block of a heterogeneous logistic problem, ten full-
  // gradient inner steps a round; rel_error is against the central solver's optimum.
  const std::string problem = R"({"kind": "logistic", "l2": 0.01, "partition": "contiguous",
      "batch": 0, "data": {"synthetic": {"samples": 2000, "features": 20, "heterogeneity": 1.0}}})";
  // The third run is exact_diffusion with by_time inner steps: in simulate node i takes
  // 0.1 s * speed / 0.01 s steps a round (5 to 20), and the mix is not weighted by them.
  const auto dir = tempDir("diloco-exact");
  double error[3] = {0, 0, 0};
  const std::string outers[3] = {"exact_diffusion", "nesterov", "exact_diffusion"};
  const std::string steps[3] = {
      "10", "10", R"({"kind": "by_time", "seconds": 0.1, "step_seconds": 0.01, "max_steps": 20,
                     "speeds": [1, 2, 1, 0.5, 1, 2, 1.5, 1]})"};
  const double innerSteps[3] = {3000, 3000, 300.0 * (10 + 20 + 10 + 5 + 10 + 20 + 15 + 10) / 8};
  for (int k = 0; k < 3; ++k) {
    const std::string name = outers[k] + (k == 2 ? "-by-time" : "");
    const auto file = dir / (name + ".json");
    writeFile(file, scenarioWith(R"({"kind": "diloco", "step_size": 0.3, "inner_steps": )" +
                                     steps[k] + R"(, "outer": {"kind": ")" + outers[k] + R"("}})",
                                 "", 8, 300, problem));
    const auto sim = runLauncher(
        {kLauncher, "simulate", file.string(), "--out", (dir / name).string()},
        dir / (name + ".log"));
    INFO(sim.output);
    REQUIRE(sim.exit == 0);
    const auto m = metricsWithoutWall(dir / name / "metrics.jsonl");
    REQUIRE(m.size() == 31);
    error[k] = m.back()["rel_error"].get<double>();
    CHECK(m.back()["outer_round"].get<double>() == 300);
    CHECK(m.back()["inner_steps"].get<double>() == innerSteps[k]);
  }
  INFO("rel_error: exact_diffusion " << error[0] << ", nesterov " << error[1]
                                     << ", exact_diffusion by_time " << error[2]);
  CHECK(error[0] <= 1e-8);
  CHECK(error[1] >= 1e-2);
  CHECK(error[2] <= 1e-8);
}

TEST_CASE("diloco over real peers equals simulate for every outer step, with a codec, and with "
          "a peer killed",
          "[integration][peers][diloco]") {
  const auto dir = tempDir("diloco-peers");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nesterov", diloco(R"(, "inner_steps": 4, "inner": {"kind": "adamw"})")},
      {"sgd", diloco(R"(, "inner_steps": 3, "outer": {"kind": "sgd", "lr": 1})")},
      {"exact-diffusion", diloco(R"(, "inner_steps": 5, "outer": {"kind": "exact_diffusion"})")},
      {"noloco", diloco(R"(, "inner_steps": 4, "outer": {"kind": "noloco", "pull": 0.5})")},
      {"overlap", diloco(R"(, "inner_steps": 4, "fragments": 2, "overlap": true)")},
      {"fragments", diloco(R"(, "inner_steps": 4, "fragments": 2)") +
                        R"(, "compression": {"kind": "topk_2bit", "chunk": 4, "per_chunk": 1})"},
      {"topk", diloco(R"(, "inner_steps": 4)") +
                   R"(, "compression": {"kind": "topk", "ratio": 0.5, "error_feedback": true})"},
      {"fragments-feedback",
       diloco(R"(, "inner_steps": 4, "fragments": 2)") +
           R"(, "compression": {"kind": "topk", "ratio": 0.5, "error_feedback": true})"},
      {"topk-differences", diloco(R"(, "inner_steps": 4)") +
                               R"(, "compression": {"kind": "topk", "ratio": 0.3})"},
      {"kill", diloco(R"(, "inner_steps": 4)") +
                   R"(, "faults": {"on_peer_loss": "continue",
                                   "script": [{"kill": 2, "at_round": 25}]})"},
  };
  for (const auto& [name, algorithm] : cases) {
    DYNAMIC_SECTION(name) {
      const auto file = dir / (name + ".json");
      writeFile(file, scenarioWith(algorithm));
      const auto run = runLauncher(
          {kLauncher, "run", file.string(), "--out", (dir / (name + "-run")).string()},
          dir / (name + "-run.log"));
      INFO(run.output);
      REQUIRE(run.exit == 0);
      CHECK(run.output.find("peer processes") != std::string::npos);
      const auto sim = runLauncher(
          {kLauncher, "simulate", file.string(), "--out", (dir / (name + "-sim")).string()},
          dir / (name + "-sim.log"));
      INFO(sim.output);
      REQUIRE(sim.exit == 0);
      const auto a = metricsWithoutWall(dir / (name + "-run") / "metrics.jsonl");
      REQUIRE(a.size() == 7);
      CHECK(a == metricsWithoutWall(dir / (name + "-sim") / "metrics.jsonl"));
      CHECK(a.back()["outer_round"].get<double>() == 60);
      CHECK(a.back()["pseudo_gradient_norm"].get<double>() > 0);
      if (name == "kill") {
        CHECK(run.output.find("peer 2 was killed by signal 9") != std::string::npos);
        // Lost at round 25 and left at the same agreed round in both (the reasons' words
        // differ: a process gone, a rank closed).
        const std::string ran = readFile(dir / (name + "-run") / "membership.jsonl");
        const std::string simulated = readFile(dir / (name + "-sim") / "membership.jsonl");
        for (const std::string& changes : {ran, simulated}) {
          CHECK(changes.find(R"({"lost":{"round":25,"rank":2,)") != std::string::npos);
        }
        const auto change = ran.find(R"({"membership")");
        REQUIRE(change != std::string::npos);
        CHECK(simulated.find(ran.substr(change)) != std::string::npos);
      }
    }
  }
}

TEST_CASE("diloco by_time: simulate takes each node's steps from its speed, real peers from the "
          "clock", "[integration][peers][diloco]") {
  const auto dir = tempDir("diloco-by-time");
  const auto file = dir / "by-time.json";
  // 0.05 s a round at 0.01 s a step: 5 steps at speed 1, 10 at 2, 20 at 4; 60 rounds. The
  // speeds from "asynchronous" (as the issue names them; inner_steps' "speeds" are the same).
  writeFile(file, scenarioWith(diloco(R"(, "inner_steps": {"kind": "by_time", "seconds": 0.05,
      "step_seconds": 0.01, "max_steps": 50}, "asynchronous": {"speeds": [1, 2, 1, 4, 1]})")));
  const auto sim = runLauncher(
      {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  INFO(sim.output);
  REQUIRE(sim.exit == 0);
  const auto m = metricsWithoutWall(dir / "sim" / "metrics.jsonl");
  REQUIRE(m.size() == 7);
  CHECK(m.back()["inner_steps"].get<double>() == 60.0 * (5 + 10 + 5 + 20 + 5) / 5);
  CHECK(m.back()["outer_round"].get<double>() == 60);
  // Real peers: as many steps as fit in 2 ms each round (at least one); the run completes.
  writeFile(file, scenarioWith(diloco(R"(, "inner_steps": {"kind": "by_time", "seconds": 0.002})")));
  const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                               dir / "run.log");
  INFO(run.output);
  REQUIRE(run.exit == 0);
  const auto r = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(r.size() == 7);
  CHECK(r.back()["inner_steps"].get<double>() >= 60);
  CHECK(std::isfinite(r.back()["rel_error"].get<double>()));
  // And with noloco in 2 fragments with overlap: each of the 60 rounds mixes one fragment
  // ([theta, h x, h] of it) while the next round's steps run.
  writeFile(file, scenarioWith(diloco(R"(, "inner_steps": {"kind": "by_time", "seconds": 0.004,
      "max_steps": 40}, "fragments": 2, "overlap": true, "outer": {"kind": "noloco"})")));
  const auto streamed = runLauncher(
      {kLauncher, "run", file.string(), "--out", (dir / "streamed").string()},
      dir / "streamed.log");
  INFO(streamed.output);
  REQUIRE(streamed.exit == 0);
  const auto t = metricsWithoutWall(dir / "streamed" / "metrics.jsonl");
  REQUIRE(t.size() == 7);
  CHECK(t.back()["outer_round"].get<double>() == 60);
  CHECK(t.back()["inner_steps"].get<double>() >= 61);
  CHECK(std::isfinite(t.back()["rel_error"].get<double>()));
}

TEST_CASE("a diloco peer killed during its inner steps restarts and rejoins; the run ends at "
          "everyone's optimum", "[integration][peers][faults][rejoin][diloco]") {
  // 8 peers on a ring, the exact_diffusion outer step on a heterogeneous logistic problem, 4 inner
  // steps a round; rank 3 is killed at round 60 and restarted. A 1 ms delay on every message
  // keeps the run going while the restarted process starts (as tests/integration/rejoin_test.cc).
  const auto dir = tempDir("diloco-rejoin");
  const auto file = dir / "rejoin.json";
  writeFile(file, R"({"schema_version": 1, "name": "diloco-rejoin", "nodes": 8, "seed": 5,
    "rounds": 2500, "log_every": 50, "topology": {"kind": "ring"}, "transport": {"kind": "ucx"},
    "problem": {"kind": "logistic", "l2": 0.05, "partition": "random",
                "data": {"synthetic": {"samples": 803, "features": 12, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "diloco", "step_size": 0.3, "inner_steps": 4,
                  "outer": {"kind": "exact_diffusion"}},
    "faults": {"on_peer_loss": "continue", "restart": true,
               "script": [{"kill": 3, "at_round": 60},
                          {"delay_ms": 1, "from_round": 0, "to_round": 2500}]}})");
  const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                               dir / "run.log");
  INFO(run.output);
  REQUIRE(run.exit == 0);
  CHECK(run.output.find("peer 3 restarted (1 of 3); it rejoins") != std::string::npos);
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  INFO(changes);
  CHECK(changes.find(R"("joined":[3])") != std::string::npos);
  // Back with everyone: the outer step restarted at the return, and exact_diffusion's correction
  // reaches the optimum of all eight shards again.
  const auto metrics = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(metrics.size() == 51);
  CHECK(metrics.back()["outer_round"].get<double>() == 2500);
  CHECK(metrics.back()["rel_error"].get<double>() < 1e-8);
}

TEST_CASE("a diloco peer that rejoins takes its neighbour's outer momentum with its model",
          "[integration][peers][faults][rejoin][diloco]") {
  // Rank 2 of 5 is killed at round 40 and restarted; it takes its sponsor's model and outer
  // momentum (the join state's carried values: one per parameter) and says so. On the complete
  // graph every node takes the same outer step from the same mean, so the outer models theta_i
  // agree to rounding again at the end. (Right after the loss they differ a
  // little: each survivor stands in for the lost peer with its own model until the change
  // applies, for as many rounds as noticing the loss takes, so the test does not look there.)
  const auto dir = tempDir("diloco-rejoin-momentum");
  const auto file = dir / "rejoin.json";
  writeFile(file, R"({"schema_version": 1, "name": "diloco-rejoin-momentum", "nodes": 5,
    "seed": 6, "rounds": 1500, "log_every": 50, "topology": {"kind": "complete"},
    "transport": {"kind": "ucx"},
    "problem": {"kind": "logistic", "l2": 0.05, "partition": "random",
                "data": {"synthetic": {"samples": 500, "features": 8, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "diloco", "step_size": 0.2, "inner_steps": 3,
                  "outer": {"kind": "nesterov", "lr": 0.7, "momentum": 0.9}},
    "faults": {"on_peer_loss": "continue", "restart": true,
               "script": [{"kill": 2, "at_round": 40},
                          {"delay_ms": 1, "from_round": 0, "to_round": 1500}]}})");
  const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                               dir / "run.log");
  INFO(run.output);
  REQUIRE(run.exit == 0);
  CHECK(run.output.find("peer 2 restarted (1 of 3); it rejoins") != std::string::npos);
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  INFO(changes);
  REQUIRE(changes.find(R"("joined":[2])") != std::string::npos);
  // The restarted process's own output: the join state carried one value per parameter.
  const std::string rejoined = readFile(dir / "run" / "peers" / "rank-2.out");
  INFO(rejoined);
  CHECK(rejoined.find("rejoined at round") != std::string::npos);
  CHECK(rejoined.find("with its neighbour's carried state (8 values)") != std::string::npos);
  const auto metrics = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(metrics.size() == 31);
  CHECK(metrics.back()["outer_round"].get<double>() == 1500);
  CHECK(metrics.back()["consensus_distance"].get<double>() < 1e-12);
}

}  // namespace starling_diloco_test
