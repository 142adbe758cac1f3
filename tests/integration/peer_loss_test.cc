// Peer loss over real processes (faults.on_peer_loss "continue", docs/algorithms.md §18): a
// scripted kill is a real SIGKILL of a peer process; the survivors finish every round, end at
// the optimum of their own data, agree with `simulate` of the same scenario bit for bit, record
// the change in membership.jsonl, and the launcher exits 0 and leaves no process behind.
#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>

#include "process_helpers.h"

using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

const std::string kLauncher = NODE_LAUNCHER;

std::string lossScenario(const std::string& name, const std::string& topology,
                         const std::string& faults, uint64_t rounds = 800,
                         const std::string& transport = R"({"kind": "ucx"})") {
  return R"({"schema_version": 1, "name": ")" + name + R"(", "nodes": 8, "seed": 5, "rounds": )" +
         std::to_string(rounds) + R"(, "log_every": 50, "topology": )" + topology +
         R"(, "transport": )" + transport + R"(,
    "problem": {"kind": "logistic", "l2": 0.05, "partition": "random",
                "data": {"synthetic": {"samples": 803, "features": 12, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.5}, "faults": )" + faults + "}";
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("kill -9 of one peer: the survivors finish at their optimum, as simulate does",
          "[integration][peers][faults]") {
  for (const std::string topology : {R"({"kind": "ring"})", R"({"kind": "random", "p": 0.4})"}) {
    DYNAMIC_SECTION(topology) {
      const auto dir = tempDir("peer-loss");
      const auto file = dir / "loss.json";
      writeFile(file, lossScenario("loss", topology,
                                   R"({"on_peer_loss": "continue",
                                       "script": [{"kill": 3, "at_round": 60}]})"));
      auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                            dir / "run.log");
      std::vector<pid_t> peers;
      for (int i = 0; i < 500 && peers.size() < 8 && !launcher->waitFor(0ms); ++i) {
        const auto now = childrenOf(launcher->pid);
        for (pid_t p : now) {
          if (std::find(peers.begin(), peers.end(), p) == peers.end()) peers.push_back(p);
        }
        std::this_thread::sleep_for(5ms);
      }
      REQUIRE(launcher->waitFor(120s));
      const std::string out = launcher->output();
      INFO(out);
      CHECK(launcher->exitCode() == 0);
      CHECK(contains(out, "peer 3 was killed by signal 9"));
      CHECK(contains(out, "the others carry on without it"));
      for (pid_t p : peers) CHECK_FALSE(processAlive(p));  // no orphans

      const auto sim = runLauncher(
          {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
      INFO(sim.output);
      REQUIRE(sim.exit == 0);
      const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
      const auto b = metricsWithoutWall(dir / "sim" / "metrics.jsonl");
      REQUIRE(a.size() == 17);  // every logged round is on disk, 0 to 800
      CHECK(a == b);
      CHECK(a.back()["rel_error"].get<double>() < 1e-8);  // against the survivors' optimum
      const auto summary = nlohmann::json::parse(readFile(dir / "run" / "summary.json"));
      CHECK(summary["rel_error"].get<double>() < 1e-8);
      // The membership change: who, when, why; the same in both.
      const std::string runChanges = readFile(dir / "run" / "membership.jsonl");
      const std::string simChanges = readFile(dir / "sim" / "membership.jsonl");
      CHECK(contains(runChanges, R"("lost":{"round":60,"rank":3,)"));
      CHECK(contains(runChanges, R"("membership":{"round":)"));
      CHECK(contains(runChanges, R"("left":[3])"));
      const auto changeOf = [](const std::string& text) {
        const auto from = text.find(R"({"membership")");
        return from == std::string::npos ? text : text.substr(from, text.find('\n', from) - from);
      };
      CHECK(changeOf(runChanges) == changeOf(simChanges));
      // The killed peer's log ends where it died.
      const std::string log3 = readFile(dir / "run" / "peers" / "rank-3.jsonl");
      CHECK(contains(log3, R"("round":50,)"));
      CHECK_FALSE(contains(log3, R"("round":100,)"));
    }
  }
}

TEST_CASE("with on_peer_loss \"stop\" the same kill stops the run and names the rank",
          "[integration][peers][faults]") {
  const auto dir = tempDir("peer-loss-stop");
  const auto file = dir / "stop.json";
  writeFile(file, lossScenario("stop", R"({"kind": "ring"})",
                               R"({"script": [{"kill": 5, "at_round": 30}]})", 800,
                               R"({"kind": "ucx", "round_timeout_ms": 3000})"));
  const auto run =
      runLauncher({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                  dir / "run.log");
  CHECK(run.exit == 1);
  CHECK(contains(run.output, "peer 5"));
}
