// Peer loss over real processes (faults.on_peer_loss "continue", docs/algorithms.md §18): a
// scripted kill is a real SIGKILL of a peer process; the survivors finish every round, end at
// the optimum of their own data, agree with `simulate` of the same scenario bit for bit, record
// the change in membership.jsonl, and the launcher exits 0 and leaves no process behind.
#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>

#include "process_helpers.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_peer_loss_test {

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

namespace {

// Starts `file` under the launcher, waits until rank 2 has logged `afterLines` lines, stops it
// (SIGSTOP) for `stall`, lets it go on, and waits for the launcher.
std::unique_ptr<Process> runWithStall(const fs::path& dir, const fs::path& file,
                                      std::chrono::milliseconds stall) {
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                        dir / "run.log");
  const auto log2 = dir / "run" / "peers" / "rank-2.jsonl";
  pid_t rank2 = -1;
  for (int i = 0; i < 1000 && rank2 < 0; ++i) {
    for (pid_t p : childrenOf(launcher->pid)) {
      std::string cmd = readFile("/proc/" + std::to_string(p) + "/cmdline");
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (contains(cmd, " --rank 2 ")) rank2 = p;
    }
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(rank2 > 0);
  for (int i = 0; i < 1000 && !contains(readFile(log2), R"("round":1000,)"); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(contains(readFile(log2), R"("round":1000,)"));
  ::kill(rank2, SIGSTOP);
  std::this_thread::sleep_for(stall);
  ::kill(rank2, SIGCONT);
  REQUIRE(launcher->waitFor(180s));
  return launcher;
}

}  // namespace

TEST_CASE("a straggler: a 2 s stall with a 5 s round timeout changes nothing",
          "[integration][peers][faults]") {
  const std::string transport = R"({"kind": "ucx", "round_timeout_ms": 5000})";
  const auto dir = tempDir("straggler-short");
  const auto file = dir / "short.json";
  writeFile(file, lossScenario("short", R"({"kind": "ring"})", R"({"on_peer_loss": "continue"})",
                               6000, transport));
  auto launcher = runWithStall(dir, file, 2s);
  INFO(launcher->output());
  CHECK(launcher->exitCode() == 0);
  CHECK_FALSE(fs::exists(dir / "run" / "membership.jsonl"));
  const auto sim = runLauncher(
      {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  REQUIRE(sim.exit == 0);
  CHECK(metricsWithoutWall(dir / "run" / "metrics.jsonl") ==
        metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
}

// The stopped peer's neighbours declare it lost after the timeout; the peers whose waits this
// delays (a wave around the ring) are kept by the liveness notices, so it costs exactly one peer.
TEST_CASE("a straggler: a 30 s stall is a loss and only that",
          "[integration][peers][faults][straggler30]") {
  const std::string transport = R"({"kind": "ucx", "round_timeout_ms": 5000})";
  const auto dir = tempDir("straggler-long");
  const auto file = dir / "long.json";
  writeFile(file, lossScenario("long", R"({"kind": "ring"})", R"({"on_peer_loss": "continue"})",
                               6000, transport));
  auto launcher = runWithStall(dir, file, 30s);
  const std::string out = launcher->output();
  INFO(out);
  CHECK(launcher->exitCode() == 0);
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  INFO(changes);
  CHECK(contains(changes, R"("left":[2])"));
  CHECK_FALSE(contains(changes, R"("rank":1,)"));
  CHECK_FALSE(contains(changes, R"("rank":3,)"));
  const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(a.size() == 121);  // 0 to 6000 every 50
  CHECK(a.back()["rel_error"].get<double>() < 1e-8);  // the survivors' optimum
}

TEST_CASE("scripted link faults: corrupted copies are counted and rejected, delays below the "
          "timeout change nothing; run equals simulate", "[integration][peers][faults]") {
  const auto dir = tempDir("link-faults");
  const auto faulty = dir / "faulty.json";
  const auto clean = dir / "clean.json";
  writeFile(faulty, lossScenario("faulty", R"({"kind": "ring"})",
                                 R"({"script": [{"corrupt": 0.1, "from_round": 10, "to_round": 200},
                                     {"delay_ms": 300, "link": [0, 1], "from_round": 20,
                                      "to_round": 23}]})", 400));
  writeFile(clean, lossScenario("clean", R"({"kind": "ring"})", "{}", 400));
  const auto run = runLauncher(
      {kLauncher, "run", faulty.string(), "--out", (dir / "run").string()}, dir / "run.log");
  INFO(run.output);
  REQUIRE(run.exit == 0);
  const auto sim = runLauncher(
      {kLauncher, "simulate", faulty.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  REQUIRE(sim.exit == 0);
  const auto ref = runLauncher(
      {kLauncher, "simulate", clean.string(), "--out", (dir / "ref").string()}, dir / "ref.log");
  REQUIRE(ref.exit == 0);
  const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  const auto b = metricsWithoutWall(dir / "sim" / "metrics.jsonl");
  auto c = metricsWithoutWall(dir / "ref" / "metrics.jsonl");
  CHECK(a == b);
  REQUIRE(a.size() == c.size());
  // About 10% of 8 x 2 messages a round for 190 rounds: 304 expected.
  const auto corrupt = a.back()["corrupt_messages"].get<uint64_t>();
  CHECK(corrupt > 200);
  CHECK(corrupt < 420);
  CHECK(a[0]["corrupt_messages"] == 0);
  for (size_t k = 0; k < a.size(); ++k) {
    auto x = a[k];
    x.erase("corrupt_messages");
    c[k].erase("corrupt_messages");
    CHECK(x == c[k]);  // the genuine messages came through: the same run as without faults
  }
}

TEST_CASE("scripted duplicates and reorders: run equals the clean run and simulate",
          "[integration][peers][faults]") {
  const auto dir = tempDir("dup-reorder");
  const auto faulty = dir / "faulty.json";
  const auto clean = dir / "clean.json";
  writeFile(faulty, lossScenario("faulty", R"({"kind": "ring"})",
                                 R"({"script": [{"duplicate": 0.3}, {"reorder": 0.3},
                                     {"duplicate": 1, "link": [4, 5], "from_round": 100,
                                      "to_round": 200}]})", 400));
  writeFile(clean, lossScenario("clean", R"({"kind": "ring"})", "{}", 400));
  const auto run = runLauncher(
      {kLauncher, "run", faulty.string(), "--out", (dir / "run").string()}, dir / "run.log");
  INFO(run.output);
  REQUIRE(run.exit == 0);
  const auto sim = runLauncher(
      {kLauncher, "simulate", faulty.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  REQUIRE(sim.exit == 0);
  const auto ref = runLauncher(
      {kLauncher, "simulate", clean.string(), "--out", (dir / "ref").string()}, dir / "ref.log");
  REQUIRE(ref.exit == 0);
  const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(a.size() == 9);
  CHECK(a == metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
  CHECK(a == metricsWithoutWall(dir / "ref" / "metrics.jsonl"));
  CHECK(a.back()["corrupt_messages"] == 0);  // the spare copies were collected, not refused
}

TEST_CASE("a dropped message with \"continue\": its sender leaves, run and simulate agree",
          "[integration][peers][faults]") {
  const auto dir = tempDir("drop-continue");
  const auto file = dir / "drop.json";
  // (This seed's coins drop rank 3's message to rank 2 in round 61, not the one back.)
  writeFile(file, lossScenario("drop", R"({"kind": "ring"})",
                               R"({"on_peer_loss": "continue", "script": [{"drop": 0.5,
                                   "link": [2, 3], "from_round": 61, "to_round": 62}]})"));
  const auto run = runLauncher(
      {kLauncher, "run", file.string(), "--out", (dir / "run").string()}, dir / "run.log");
  INFO(run.output);
  CHECK(run.exit == 0);
  CHECK(contains(run.output, "peer 3 exited with status 3; the others carry on without it"));
  const auto sim = runLauncher(
      {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  INFO(sim.output);
  REQUIRE(sim.exit == 0);
  const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(a.size() == 17);  // every logged round, 0 to 800
  CHECK(a == metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
  CHECK(a.back()["rel_error"].get<double>() < 1e-8);  // the survivors' optimum
  // The loss and the change, the same in both (the reasons are worded apart: the run's
  // receiver saw its sender go, the simulation knows why).
  const std::string runChanges = readFile(dir / "run" / "membership.jsonl");
  const std::string simChanges = readFile(dir / "sim" / "membership.jsonl");
  INFO(runChanges);
  INFO(simChanges);
  CHECK(contains(runChanges, R"({"lost":{"round":61,"rank":3,)"));
  CHECK(contains(simChanges, R"x({"lost":{"round":61,"rank":3,"why":"the fault script dropped )x"
                             R"x(rank 3's model message to rank 2 in round 61 (link 2-3)"}})x"));
  const auto changeOf = [](const std::string& text) {
    const auto from = text.find(R"({"membership")");
    return from == std::string::npos ? text : text.substr(from, text.find('\n', from) - from);
  };
  CHECK(contains(runChanges, R"("left":[3])"));
  CHECK(changeOf(runChanges) == changeOf(simChanges));
  // The sender's log ends at its last logged round before it left; it says why it left.
  const std::string log3 = readFile(dir / "run" / "peers" / "rank-3.jsonl");
  CHECK(contains(log3, R"("round":50,)"));
  CHECK_FALSE(contains(log3, R"("round":100,)"));
  CHECK(contains(log3, "takes this peer for lost, so it leaves the run"));
}

TEST_CASE("messages dropped both ways: both ends leave in that round, run and simulate agree",
          "[integration][peers][faults]") {
  const auto dir = tempDir("drop-both");
  const auto file = dir / "both.json";
  // Round 49, so the next logged round (50) is the first without them; nobody who stays notices
  // them before round 50, so each says in its own log and gossip that it leaves in round 49.
  writeFile(file, lossScenario("both", R"({"kind": "ring"})",
                               R"({"on_peer_loss": "continue", "script": [{"drop": 1,
                                   "link": [2, 3], "from_round": 49, "to_round": 50}]})", 400));
  const auto run = runLauncher(
      {kLauncher, "run", file.string(), "--out", (dir / "run").string()}, dir / "run.log");
  INFO(run.output);
  CHECK(run.exit == 0);
  const auto sim = runLauncher(
      {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  REQUIRE(sim.exit == 0);
  const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(a.size() == 9);
  CHECK(a == metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  INFO(changes);
  // The changes are the same; the loss lines too (each leaver's own, in both), but a slow
  // neighbour could word one of its own first, so only their round and rank are checked.
  const auto changeLines = [](const std::string& text) {
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (contains(line, R"({"membership")")) out += line + "\n";
    }
    return out;
  };
  CHECK(changeLines(changes) == changeLines(readFile(dir / "sim" / "membership.jsonl")));
  CHECK(contains(changes, R"({"lost":{"round":49,"rank":2,)"));
  CHECK(contains(changes, R"({"lost":{"round":49,"rank":3,)"));
  CHECK(contains(changes, R"("left":[2,3])"));
}

TEST_CASE("a dropped message with \"stop\" stops the run, naming the link",
          "[integration][peers][faults]") {
  const auto dir = tempDir("drop-stop");
  const auto file = dir / "stop.json";
  writeFile(file, lossScenario("stop", R"({"kind": "ring"})",
                               R"({"script": [{"drop": 0.5, "link": [2, 3], "from_round": 61,
                                               "to_round": 62}]})",
                               800, R"({"kind": "ucx", "round_timeout_ms": 1000})"));
  const auto run = runLauncher(
      {kLauncher, "run", file.string(), "--out", (dir / "run").string()}, dir / "run.log");
  INFO(run.output);
  CHECK(run.exit == 1);
  CHECK(contains(run.output, "peer 3 failed first, at round 61"));
  CHECK(contains(run.output, "the fault script dropped rank 3's model message to rank 2 in "
                             "round 61 (link 2-3)"));
  const auto sim = runLauncher(
      {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  CHECK(sim.exit == 1);
  CHECK(contains(sim.output, "the fault script dropped rank 3's model message to rank 2 in "
                             "round 61 (link 2-3)"));
}

TEST_CASE("drops at a rate: each costs its sender; run and simulate agree round for round",
          "[integration][peers][faults]") {
  const auto dir = tempDir("drop-rate");
  const auto file = dir / "rate.json";
  // This seed's coins drop four messages: ranks 2, 0, 4 and 1 leave in rounds 139, 144, 163 and
  // 228. Round 150 is logged between rank 0's loss and its change: the metrics then measure the
  // six still running against their own optimum, in both.
  writeFile(file, lossScenario("rate", R"({"kind": "ring"})",
                               R"({"on_peer_loss": "continue",
                                   "script": [{"drop": 0.0005, "to_round": 400}]})", 2500));
  const auto run = runLauncher(
      {kLauncher, "run", file.string(), "--out", (dir / "run").string()}, dir / "run.log");
  INFO(run.output);
  CHECK(run.exit == 0);
  const auto sim = runLauncher(
      {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  REQUIRE(sim.exit == 0);
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  INFO(changes);
  for (const char* left : {R"("left":[2])", R"("left":[0])", R"("left":[4])", R"("left":[1])"}) {
    CHECK(contains(changes, left));
  }
  const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(a.size() == 51);
  CHECK(a == metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
  CHECK(a.back()["rel_error"].get<double>() < 1e-8);
}

// Faults that overlap (docs/algorithms.md §18, "Losses found together"). Both neighbours of a
// healthy peer die in the same round: it pings them (refused: dead) and the peers behind them
// (alive), so it stays, and the run is simulate's bit for bit. A block of adjacent peers dies at
// once: the ends of the block ping through it, so the inner ranks, which no live peer talks to,
// are found in the same round as the outer ones, as simulate finds them.
TEST_CASE("overlapping kills: a peer whose neighbours both die stays; a dead block is found at "
          "once; run equals simulate", "[integration][peers][faults]") {
  struct Case {
    const char* name;
    const char* kills;
    const char* left;
    uint64_t logEvery;
  };
  const Case cases[] = {
      {"neighbours", R"([{"kill": 2, "at_round": 100}, {"kill": 4, "at_round": 100}])",
       R"("left":[2,4])", 50},
      {"block", R"([{"kill": 1, "at_round": 100}, {"kill": 2, "at_round": 100},
                    {"kill": 3, "at_round": 100}])",
       R"("left":[1,2,3])", 1},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const auto dir = tempDir(std::string("overlap-") + c.name);
      const auto file = dir / "s.json";
      std::string text = lossScenario(c.name, R"({"kind": "ring"})",
                                      std::string(R"({"on_peer_loss": "continue", "script": )") +
                                          c.kills + "}",
                                      800, R"({"kind": "ucx", "round_timeout_ms": 3000})");
      const std::string every = R"("log_every": 50)";
      text.replace(text.find(every), every.size(),
                   "\"log_every\": " + std::to_string(c.logEvery));
      writeFile(file, text);
      const auto run = runLauncher({kLauncher, "run", file.string(), "--out",
                                    (dir / "run").string()},
                                   dir / "run.log", 180s);
      INFO(run.output);
      CHECK(run.exit == 0);
      const auto sim = runLauncher(
          {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()},
          dir / "sim.log");
      INFO(sim.output);
      REQUIRE(sim.exit == 0);
      const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
      const auto b = metricsWithoutWall(dir / "sim" / "metrics.jsonl");
      CHECK(a.size() == 800 / c.logEvery + 1);  // every logged round, none lost at the kill
      CHECK(a == b);
      REQUIRE(!a.empty());
      CHECK(a.back()["rel_error"].get<double>() < 1e-8);  // the survivors' optimum
      const std::string changes = readFile(dir / "run" / "membership.jsonl");
      INFO(changes);
      CHECK(contains(changes, c.left));
      const auto summary = nlohmann::json::parse(readFile(dir / "run" / "summary.json"));
      CHECK(summary["rounds"] == 800);
    }
  }
}

TEST_CASE("a neighbour new since a change and rounds behind on a slow link is waited for, and only "
          "the killed peer leaves", "[integration][peers][faults]") {
  // Ring of 8, rank 3 killed at round 15; the change comes at round 23, and from then on ranks 2
  // and 4 are neighbours. Until round 40 every message on the link 4-5 takes 540 ms (under the
  // 600 ms round timeout: slow, not lost), so the ranks on that side run at its pace and the old
  // ring let rank 2 run six hops, six rounds, ahead of rank 4. At round 23 rank 2 waits for rank
  // 4, which needs over three seconds, five round timeouts, to get there. Rank 4's liveness
  // notices (it waits long on the slow link) go to its neighbours-to-be and show it advancing,
  // so rank 2 waits; before, rank 2 took it for lost at its first timeout (and rank 4 then took
  // rank 2), two healthy peers dropped.
  const auto dir = tempDir("fresh-neighbour");
  const auto file = dir / "s.json";
  std::string text = lossScenario(
      "fresh", R"({"kind": "ring"})",
      R"({"on_peer_loss": "continue", "script": [{"kill": 3, "at_round": 15},
          {"delay_ms": 540, "link": [5, 4], "from_round": 10, "to_round": 40}]})",
      80, R"({"kind": "ucx", "round_timeout_ms": 600})");
  const std::string every = R"("log_every": 50)";
  text.replace(text.find(every), every.size(), R"("log_every": 5)");
  writeFile(file, text);
  const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                               dir / "run.log", 180s);
  INFO(run.output);
  CHECK(run.exit == 0);
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  INFO(changes);
  CHECK(contains(changes, R"("left":[3])"));
  for (int healthy : {0, 1, 2, 4, 5, 6, 7}) {
    CHECK_FALSE(contains(changes, R"("rank":)" + std::to_string(healthy) + ","));
  }
  const auto sim = runLauncher(
      {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  INFO(sim.output);
  REQUIRE(sim.exit == 0);
  const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  const auto b = metricsWithoutWall(dir / "sim" / "metrics.jsonl");
  CHECK(a.size() == 80 / 5 + 1);
  CHECK(a == b);
}

}  // namespace starling_peer_loss_test
