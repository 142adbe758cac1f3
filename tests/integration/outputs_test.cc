// node-launcher's outputs and refusals outside the happy path: command-line numbers checked like
// the scenario's, runs that diverge stop at the round they do, a run folder that says what ran,
// and a full disk that leaves whole lines.
#include <catch2/catch.hpp>

#include "process_helpers.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_outputs_test {

using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

const std::string kLauncher = NODE_LAUNCHER;

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::string leastSquares(const std::string& name, const std::string& algorithm,
                         const std::string& extra = "", int rounds = 200) {
  return R"({"schema_version": 1, "name": ")" + name + R"(", "nodes": 4, "seed": 1, "rounds": )" +
         std::to_string(rounds) + R"(, "log_every": 10, "topology": {"kind": "ring"},
    "problem": {"kind": "least_squares", "l2": 0.1,
                "data": {"synthetic": {"samples": 40, "features": 3}}},
    "algorithm": )" + algorithm + extra + "}";
}

}  // namespace

TEST_CASE("command-line numbers are checked like the scenario's", "[integration][cli]") {
  const auto dir = tempDir("cli-numbers");
  const auto file = dir / "s.json";
  writeFile(file, leastSquares("s", R"({"kind": "exact_diffusion", "step_size": 0.3})"));
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string f = file.string();
  const std::vector<Case> cases = {
      {{"simulate", f, "--rounds", "18446744073709551616"},
       "--rounds: must be between 1 and 1099511627776, got 18446744073709551616"},
      {{"simulate", f, "--rounds", "1099511627777"},
       "--rounds: must be between 1 and 1099511627776, got 1099511627777"},
      {{"simulate", f, "--rounds", "0"}, "--rounds: must be between 1 and 1099511627776, got 0"},
      {{"run", f, "--rounds", "-5"}, "--rounds: must be between 1 and 1099511627776, got \"-5\""},
      {{"simulate", f, "--seed", "-1"},
       "--seed: must be between 0 and 18446744073709551615, got \"-1\""},
      {{"simulate", f, "--seed", "18446744073709551616"},
       "--seed: must be between 0 and 18446744073709551615, got 18446744073709551616"},
      {{"simulate", f, "--seed", "0x10"}, "--seed: must be between 0 and 18446744073709551615"},
      {{"topology", f, "--round", "-1"}, "--round: must be between 0 and 1099511627776, got \"-1\""},
      {{"peer", f, "--rank", "-1"}, "--rank: must be between 0 and 1048575, got \"-1\""},
      {{"merge", f, "--out", (dir / "none").string(), "--rounds", "1e3"},
       "--rounds: must be between 1 and 1099511627776, got \"1e3\""},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {kLauncher};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto out = runLauncher(args, dir / "out.log");
    INFO(out.output);
    CHECK(out.exit == 2);
    CHECK(contains(out.output, c.message));
    CHECK(out.output.size() < 400);  // one line, no 309-digit numbers
  }
  // The largest values are accepted.
  const auto topo = runLauncher({kLauncher, "topology", f, "--round", "1099511627776"}, dir / "t.log");
  CHECK(topo.exit == 0);
  CHECK(contains(topo.output, "1099511627776"));
}

TEST_CASE("a diverging simulation stops at the round it diverges, with a hint",
          "[integration][cli]") {
  const auto dir = tempDir("cli-diverge");
  SECTION("exact diffusion with a step far too large") {
    const auto file = dir / "ed.json";
    writeFile(file, leastSquares("ed", R"({"kind": "exact_diffusion", "step_size": 50})"));
    const auto out = runLauncher({kLauncher, "simulate", file.string(), "--out", (dir / "ed").string()},
                            dir / "ed.log");
    INFO(out.output);
    CHECK(out.exit == 1);
    CHECK(contains(out.output, "node-launcher: diverged at round "));
    CHECK(contains(out.output, "(rank "));
    CHECK(contains(out.output, "lower /algorithm/step_size (now 50)"));
    // Everything logged before is on disk and finite (no null metrics).
    const auto metrics = metricsWithoutWall(dir / "ed" / "metrics.jsonl");
    REQUIRE(!metrics.empty());
    for (const auto& m : metrics) CHECK(m["objective"].is_number());
  }
  SECTION("CHOCO with a quantizer: a divergence, not a corrupt frame") {
    const auto file = dir / "choco.json";
    writeFile(file, leastSquares("choco", R"({"kind": "choco", "step_size": 40, "gamma": 1.0})",
                                 R"(, "compression": {"kind": "qsgd", "bits": 2})", 2000));
    const auto out = runLauncher({kLauncher, "simulate", file.string(), "--out",
                             (dir / "choco").string()},
                            dir / "choco.log");
    INFO(out.output);
    CHECK(out.exit == 1);
    CHECK(contains(out.output, "diverged at round "));
    CHECK(contains(out.output, "/algorithm/gamma (now 1"));
    CHECK_FALSE(contains(out.output, "corruption"));
  }
  SECTION("the magnitude limit is configurable") {
    // x* of this problem has coordinates of order 0.1-1: a limit of 1e-3 is crossed at once.
    const auto file = dir / "limit.json";
    writeFile(file, leastSquares("limit", R"({"kind": "exact_diffusion", "step_size": 0.3})",
                                 R"(, "divergence": {"max_abs": 0.001})"));
    const auto out = runLauncher({kLauncher, "simulate", file.string(), "--out",
                             (dir / "limit").string()},
                            dir / "limit.log");
    INFO(out.output);
    CHECK(out.exit == 1);
    CHECK(contains(out.output, "diverged at round 0 (rank "));
    CHECK(contains(out.output, "beyond divergence.max_abs 0.001"));
    CHECK(contains(out.output, "raise /divergence/max_abs"));
    // And the same run without the limit converges.
    const auto fine = dir / "fine.json";
    writeFile(fine, leastSquares("fine", R"({"kind": "exact_diffusion", "step_size": 0.3})"));
    CHECK(runLauncher({kLauncher, "simulate", fine.string(), "--out", (dir / "fine").string()},
                 dir / "fine.log")
              .exit == 0);
  }
}

TEST_CASE("a run folder says what ran: the resolved scenario and run.json", "[integration][cli]") {
  const auto dir = tempDir("cli-run-folder");
  const auto file = dir / "s.json";
  writeFile(file, leastSquares("s", R"({"kind": "exact_diffusion", "step_size": 0.3})"));
  const auto first = runLauncher({kLauncher, "simulate", file.string(), "--out", (dir / "a").string(),
                             "--seed", "4", "--rounds", "50"},
                            dir / "a.log");
  REQUIRE(first.exit == 0);
  const auto run = nlohmann::json::parse(readFile(dir / "a" / "run.json"));
  CHECK(run["mode"] == "simulate");
  CHECK(run["seed"] == 4);
  CHECK(run["rounds"] == 50);
  CHECK(run["command"] == nlohmann::json::array({kLauncher, "simulate", file.string(), "--out",
                                                  (dir / "a").string(), "--seed", "4",
                                                  "--rounds", "50"}));
  CHECK_FALSE(run["starling_version"].get<std::string>().empty());
  CHECK(run["scenario_hash"].get<std::string>().size() == 16);
  // The resolved scenario has the defaults filled in and the overrides applied, and running it
  // as it is reproduces the run.
  const auto resolved = nlohmann::json::parse(readFile(dir / "a" / "scenario.resolved.json"));
  CHECK(resolved["seed"] == 4);
  CHECK(resolved["rounds"] == 50);
  CHECK(resolved.contains("precision"));
  const auto again = runLauncher({kLauncher, "simulate", (dir / "a" / "scenario.resolved.json").string(),
                             "--out", (dir / "b").string()},
                            dir / "b.log");
  REQUIRE(again.exit == 0);
  CHECK(metricsWithoutWall(dir / "a" / "metrics.jsonl") ==
        metricsWithoutWall(dir / "b" / "metrics.jsonl"));
  CHECK(nlohmann::json::parse(readFile(dir / "b" / "run.json"))["scenario_hash"] ==
        run["scenario_hash"]);
}

TEST_CASE("a full disk leaves metrics.jsonl with whole lines and fails the run",
          "[integration][cli]") {
  const auto dir = tempDir("cli-full-disk");
  const auto file = dir / "s.json";
  writeFile(file, leastSquares("s", R"({"kind": "exact_diffusion", "step_size": 0.3})", "", 2000));
  // RLIMIT_FSIZE stands in for a full disk: a write past it fails part-way (EFBIG) exactly as
  // one past the last free block does (ENOSPC). 200 logged rounds need ~50 KB.
  const auto out = runLauncher({"/usr/bin/prlimit", "--fsize=6000", kLauncher, "simulate",
                           file.string(), "--out", (dir / "out").string()},
                          dir / "out.log");
  INFO(out.output);
  CHECK(out.exit == 1);
  CHECK(contains(out.output, "metrics.jsonl"));
  CHECK(contains(out.output, "File too large"));
  const std::string text = readFile(dir / "out" / "metrics.jsonl");
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n');
  const auto lines = metricsWithoutWall(dir / "out" / "metrics.jsonl");  // each one parses
  CHECK(lines.size() > 5);
  CHECK(lines.size() < 201);
  CHECK(text.size() <= 6000);
}

}  // namespace starling_outputs_test
