// Rejoining over real processes (faults.restart, docs/algorithms.md §19): a peer killed with
// SIGKILL is restarted by the launcher with --rejoin, asks its neighbours to take it back, and
// comes back at a round the survivors agree on with a neighbour's model. The run must end at the
// optimum of everyone's data again (checked against a fault-free `simulate`, an independent run
// of the same problem), the returned rank must be back in consensus within a bounded number of
// rounds, every logged round must be on disk, and no process may be left behind.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>

#include "process_helpers.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_rejoin_test {

using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

const std::string kLauncher = NODE_LAUNCHER;

// A 1 ms delay on every message keeps each round at a millisecond or more, so that the restarted
// process (half a second later) finds the run still going whatever the machine's load.
std::string scenario(const std::string& name, const std::string& topology, const std::string& faults,
                     uint64_t rounds) {
  return R"({"schema_version": 1, "name": ")" + name + R"(", "nodes": 8, "seed": 5, "rounds": )" +
         std::to_string(rounds) + R"(, "log_every": 50, "topology": )" + topology +
         R"(, "transport": {"kind": "ucx"},
    "problem": {"kind": "logistic", "l2": 0.05, "partition": "random",
                "data": {"synthetic": {"samples": 803, "features": 12, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.5}, "faults": )" + faults + "}";
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::vector<nlohmann::json> lines(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::istringstream in(readFile(file));
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

double relDistance(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    d += (a[k] - b[k]) * (a[k] - b[k]);
    n += b[k] * b[k];
  }
  return std::sqrt(d / n);
}

// Every child of the launcher seen while it ran (restarted peers included).
std::vector<pid_t> watch(Process& launcher) {
  std::vector<pid_t> seen;
  while (!launcher.waitFor(5ms)) {
    for (pid_t p : childrenOf(launcher.pid)) {
      if (std::find(seen.begin(), seen.end(), p) == seen.end()) seen.push_back(p);
    }
  }
  return seen;
}

}  // namespace

TEST_CASE("a killed peer restarts, rejoins, and the run ends at everyone's optimum",
          "[integration][peers][faults][rejoin]") {
  for (const std::string topology : {R"({"kind": "ring"})", R"({"kind": "random", "p": 0.4})"}) {
    DYNAMIC_SECTION(topology) {
      const auto dir = tempDir("rejoin");
      const auto file = dir / "rejoin.json";
      const auto clean = dir / "clean.json";
      writeFile(file, scenario("rejoin", topology, R"({"on_peer_loss": "continue",
          "restart": true, "script": [{"kill": 3, "at_round": 60},
                                      {"delay_ms": 1, "from_round": 0, "to_round": 3000}]})",
                               3000));
      writeFile(clean, scenario("clean", topology, "{}", 3000));
      auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                            dir / "run.log");
      const auto seen = watch(*launcher);
      REQUIRE(launcher->waitFor(180s));
      const std::string out = launcher->output();
      INFO(out);
      CHECK(launcher->exitCode() == 0);
      CHECK(contains(out, "peer 3 was killed by signal 9"));
      CHECK(contains(out, "peer 3 restarted (1 of 3); it rejoins"));
      CHECK(seen.size() >= 9);  // eight peers and the restarted one
      for (pid_t p : seen) CHECK_FALSE(processAlive(p));  // no orphans

      // The changes: lost at 60, out a few rounds later, back at an agreed round.
      const std::string changes = readFile(dir / "run" / "membership.jsonl");
      INFO(changes);
      uint64_t left = 0, back = 0;
      for (const auto& j : lines(dir / "run" / "membership.jsonl")) {
        if (!j.contains("membership")) continue;
        const auto& m = j["membership"];
        if (m["left"] == nlohmann::json::array({3})) left = m["round"].get<uint64_t>();
        if (m.contains("joined") && m["joined"] == nlohmann::json::array({3})) {
          back = m["round"].get<uint64_t>();
          CHECK(m["epoch"].get<uint64_t>() == 2);
        }
      }
      // (Its neighbours notice in round 59 or 60: its delayed messages of round 59 die with it.)
      CHECK((contains(changes, R"("lost":{"round":60,"rank":3,)") ||
             contains(changes, R"("lost":{"round":59,"rank":3,)")));
      REQUIRE(left > 60);
      REQUIRE(back > left);
      REQUIRE(back + 300 < 3000);

      // Every logged round is on disk; the returned rank's log has a gap where it was out.
      const auto metrics = metricsWithoutWall(dir / "run" / "metrics.jsonl");
      REQUIRE(metrics.size() == 61);
      std::vector<uint64_t> logged3;
      std::vector<double> x3;
      for (const auto& j : lines(dir / "run" / "peers" / "rank-3.jsonl")) {
        if (!j.contains("round") || !j.contains("x")) continue;
        logged3.push_back(j["round"].get<uint64_t>());
        x3 = j["x"].get<std::vector<double>>();
      }
      CHECK(std::find(logged3.begin(), logged3.end(), 50) != logged3.end());
      CHECK(std::none_of(logged3.begin(), logged3.end(),
                         [&](uint64_t r) { return r > 60 && r < back; }));
      CHECK(logged3.back() == 3000);

      // Back in consensus within 300 rounds of its return: the mixing of everyone, rank 3
      // included, is as tight as the fault-free run's at that point.
      for (const auto& m : metrics) {
        if (m["round"].get<uint64_t>() < back + 300) continue;
        INFO("round " << m["round"]);
        CHECK(m["consensus_distance"].get<double>() < 1e-16);
        CHECK(m["rel_error"].get<double>() < 1e-6);
        break;
      }
      // The end: everyone's optimum, as the fault-free simulation of the same problem has it.
      CHECK(metrics.back()["rel_error"].get<double>() < 1e-8);
      const auto sim = runLauncher(
          {kLauncher, "simulate", clean.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
      REQUIRE(sim.exit == 0);
      const auto runSummary = nlohmann::json::parse(readFile(dir / "run" / "summary.json"));
      const auto simSummary = nlohmann::json::parse(readFile(dir / "sim" / "summary.json"));
      const auto xRun = runSummary["x_mean"].get<std::vector<double>>();
      const auto xSim = simSummary["x_mean"].get<std::vector<double>>();
      CHECK(relDistance(xRun, xSim) < 1e-8);
      CHECK(relDistance(x3, xSim) < 1e-8);  // the returned rank's own last model
    }
  }
}

// Over shared memory UCX does not tell a neighbour that a killed process is gone (the loss is
// found by the round timeout), so the neighbours still hold endpoints to the old process when the
// new one says hello. Without a key they confirm the restart by asking the rank's address which
// process listens there, and replace the endpoint. Before, the join state and the acks went to the
// old process: the returned rank was lost again at the round of its return, and the run ended
// with exit 0 on 15 peers' data.
TEST_CASE("a peer restarted over shared memory gets back in and stays",
          "[integration][peers][faults][rejoin]") {
  const auto dir = tempDir("rejoin-shm");
  const auto file = dir / "shm.json";
  const auto clean = dir / "clean.json";
  const std::string head = R"({"schema_version": 1, "name": "rejoin-shm", "nodes": 16, "seed": 1,
    "rounds": 1500, "log_every": 100, "topology": {"kind": "random", "p": 0.25},
    "transport": {"kind": "ucx", "tls": "shm", "round_timeout_ms": 5000},
    "problem": {"kind": "logistic", "l2": 0.05, "partition": "random",
                "data": {"synthetic": {"samples": 3200, "features": 400, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.5}, "faults": )";
  writeFile(file, head + R"({"on_peer_loss": "continue", "restart": true,
                            "script": [{"kill": 14, "at_round": 428}]}})");
  writeFile(clean, head + "{}}");
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                        dir / "run.log");
  const auto seen = watch(*launcher);
  REQUIRE(launcher->waitFor(180s));
  const std::string out = launcher->output();
  INFO(out);
  CHECK(launcher->exitCode() == 0);
  CHECK(contains(out, "peer 14 restarted (1 of 3); it rejoins"));
  for (pid_t p : seen) CHECK_FALSE(processAlive(p));
  // Out once, back once, and never out again.
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  INFO(changes);
  int left = 0, joined = 0;
  for (const auto& j : lines(dir / "run" / "membership.jsonl")) {
    if (!j.contains("membership")) continue;
    const auto& m = j["membership"];
    if (m["left"] == nlohmann::json::array({14})) ++left;
    if (m.contains("joined") && m["joined"] == nlohmann::json::array({14})) ++joined;
  }
  CHECK(left == 1);
  CHECK(joined == 1);
  // The returned rank reached the last round, at everyone's optimum.
  std::vector<double> x14;
  uint64_t last14 = 0;
  for (const auto& j : lines(dir / "run" / "peers" / "rank-14.jsonl")) {
    if (!j.contains("round") || !j.contains("x")) continue;
    last14 = j["round"].get<uint64_t>();
    x14 = j["x"].get<std::vector<double>>();
  }
  CHECK(last14 == 1500);
  const auto sim = runLauncher(
      {kLauncher, "simulate", clean.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  REQUIRE(sim.exit == 0);
  const auto xRun =
      nlohmann::json::parse(readFile(dir / "run" / "summary.json"))["x_mean"].get<std::vector<double>>();
  const auto xSim =
      nlohmann::json::parse(readFile(dir / "sim" / "summary.json"))["x_mean"].get<std::vector<double>>();
  CHECK(relDistance(xRun, xSim) < 1e-8);
  REQUIRE(x14.size() == xSim.size());
  CHECK(relDistance(x14, xSim) < 1e-8);
}

TEST_CASE("a peer restarted when the run is ending has nothing to rejoin; the run finishes",
          "[integration][peers][faults][rejoin]") {
  const auto dir = tempDir("rejoin-late");
  const auto file = dir / "late.json";
  writeFile(file, scenario("late", R"({"kind": "ring"})", R"({"on_peer_loss": "continue",
      "restart": true, "script": [{"kill": 5, "at_round": 395},
                                  {"delay_ms": 1, "from_round": 0, "to_round": 400}]})", 400));
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                        dir / "run.log");
  const auto seen = watch(*launcher);
  REQUIRE(launcher->waitFor(120s));
  const std::string out = launcher->output();
  INFO(out);
  CHECK(launcher->exitCode() == 0);
  for (pid_t p : seen) CHECK_FALSE(processAlive(p));
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  CHECK_FALSE(contains(changes, R"("joined")"));
  const auto metrics = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(metrics.size() == 9);  // 0 to 400 every 50
  CHECK(metrics.back()["round"].get<uint64_t>() == 400);
}

TEST_CASE("restart needs on_peer_loss continue", "[integration][faults][rejoin]") {
  const auto dir = tempDir("rejoin-bad");
  const auto file = dir / "bad.json";
  writeFile(file, scenario("bad", R"({"kind": "ring"})", R"({"restart": true})", 100));
  const auto v = runLauncher({kLauncher, "validate", file.string()}, dir / "v.log");
  CHECK(v.exit == 2);
  CHECK(contains(v.output, "/faults/restart"));
  CHECK(contains(v.output, file.filename().string()));
}

}  // namespace starling_rejoin_test
