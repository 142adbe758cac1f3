// What a user sees when a multi-process run goes wrong: `merge` reads what the peers ran from
// their logs and refuses what does not fit, the launcher names the root cause of a cascade, a
// diverging run stops at the round it diverged, local runs listen on loopback only, and peers
// say when they start and end.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "process_helpers.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_failures_test {

using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

const std::string kLauncher = NODE_LAUNCHER;

std::string scenario(const std::string& name, int nodes, long rounds, int logEvery,
                     const std::string& transport, double step = 0.5,
                     const std::string& problem = "logistic") {
  return R"({"schema_version": 1, "name": ")" + name + R"(", "nodes": )" + std::to_string(nodes) +
         R"(, "seed": 5, "rounds": )" + std::to_string(rounds) + R"(, "log_every": )" +
         std::to_string(logEvery) + R"(, "topology": {"kind": "ring"}, "transport": )" +
         transport + R"(,
    "problem": {"kind": ")" + problem + R"(", "l2": 0.05,
                "data": {"synthetic": {"samples": 400, "features": 12, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": )" + std::to_string(step) + "}}";
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// The peer process of `rank` among the launcher's children (from its command line).
pid_t peerPid(const std::vector<pid_t>& peers, int rank) {
  for (pid_t p : peers) {
    std::string cmd = readFile("/proc/" + std::to_string(p) + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (contains(cmd, " --rank " + std::to_string(rank) + " ")) return p;
  }
  return -1;
}

std::vector<pid_t> waitForChildren(const Process& launcher, size_t n) {
  std::vector<pid_t> peers;
  for (int i = 0; i < 500 && peers.size() < n; ++i) {
    std::this_thread::sleep_for(20ms);
    peers = childrenOf(launcher.pid);
  }
  return peers;
}

size_t lineCount(const fs::path& file) {
  const std::string text = readFile(file);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("merge reads seed and rounds from the peer logs and refuses what does not fit",
          "[integration][peers]") {
  const auto dir = tempDir("merge-checks");
  const auto file = dir / "m.json";
  writeFile(file, scenario("m", 4, 1000, 20, R"({"kind": "ucx"})"));
  // The peers run with a seed and rounds other than the file's.
  const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / "out").string(),
                                "--seed", "9", "--rounds", "120"},
                               dir / "run.log");
  INFO(run.output);
  REQUIRE(run.exit == 0);
  const auto fromRun = metricsWithoutWall(dir / "out" / "metrics.jsonl");
  REQUIRE(fromRun.size() == 7);  // rounds 0, 20, ..., 120

  // merge without --seed/--rounds: the same numbers as the run itself and as simulate.
  const auto merged =
      runLauncher({kLauncher, "merge", file.string(), "--out", (dir / "out").string()},
                  dir / "merge.log");
  INFO(merged.output);
  CHECK(merged.exit == 0);
  CHECK(metricsWithoutWall(dir / "out" / "metrics.jsonl") == fromRun);
  const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out",
                                (dir / "sim").string(), "--seed", "9", "--rounds", "120"},
                               dir / "sim.log");
  REQUIRE(sim.exit == 0);
  CHECK(metricsWithoutWall(dir / "sim" / "metrics.jsonl") == fromRun);

  SECTION("a --seed or --rounds that contradicts the logs") {
    auto bad = runLauncher({kLauncher, "merge", file.string(), "--out", (dir / "out").string(),
                            "--seed", "3"},
                           dir / "merge-seed.log");
    CHECK(bad.exit == 2);
    CHECK(contains(bad.output, "the peers ran with seed 9"));
    bad = runLauncher({kLauncher, "merge", file.string(), "--out", (dir / "out").string(),
                       "--rounds", "1000"},
                      dir / "merge-rounds.log");
    CHECK(bad.exit == 2);
    CHECK(contains(bad.output, "the peers ran 120 rounds"));
  }
  SECTION("a scenario file other than the one the peers ran") {
    const auto other = dir / "other.json";
    writeFile(other, scenario("m", 4, 1000, 20, R"({"kind": "ucx"})", 0.25));
    const auto bad = runLauncher({kLauncher, "merge", other.string(), "--out",
                                  (dir / "out").string()},
                                 dir / "merge-other.log");
    CHECK(bad.exit == 2);
    CHECK(contains(bad.output, "not the scenario the peers"));
  }
  SECTION("a missing log names its rank") {
    fs::remove(dir / "out" / "peers" / "rank-2.jsonl");
    const auto bad = runLauncher({kLauncher, "merge", file.string(), "--out",
                                  (dir / "out").string()},
                                 dir / "merge-missing.log");
    CHECK(bad.exit == 1);
    CHECK(contains(bad.output, "no peer log for rank 2 "));
  }
  SECTION("a log that stops short names its rank and where it stops") {
    const auto log = dir / "out" / "peers" / "rank-1.jsonl";
    std::istringstream in(readFile(log));
    std::string kept, line;
    for (int i = 0; i < 4 && std::getline(in, line); ++i) kept += line + "\n";  // header, 0, 20, 40
    writeFile(log, kept);
    const auto bad = runLauncher({kLauncher, "merge", file.string(), "--out",
                                  (dir / "out").string()},
                                 dir / "merge-short.log");
    CHECK(bad.exit == 1);
    CHECK(contains(bad.output, "rank 1: log ends at round 40 of 120"));
    CHECK(metricsWithoutWall(dir / "out" / "metrics.jsonl").size() == 3);  // what is complete
  }
}

TEST_CASE("the launcher names the peer the others lost first, not the first to exit",
          "[integration][peers]") {
  const auto dir = tempDir("root-cause");
  const auto file = dir / "rc.json";
  writeFile(file, scenario("rc", 4, 2000000, 1000, R"({"kind": "ucx", "round_timeout_ms": 1500})"));
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "out").string()},
                        dir / "launcher.log");
  const auto peers = waitForChildren(*launcher, 4);
  REQUIRE(peers.size() == 4);
  const auto log1 = dir / "out" / "peers" / "rank-1.jsonl";
  for (int i = 0; i < 500 && lineCount(log1) < 3; ++i) std::this_thread::sleep_for(20ms);
  // Rank 1 hangs (stopped, not dead): 0 and 2 time out waiting for it; 3 then loses them.
  const pid_t stopped = peerPid(peers, 1);
  REQUIRE(stopped > 0);
  kill(stopped, SIGSTOP);
  INFO(launcher->output());
  REQUIRE(launcher->waitFor(60s));
  CHECK(launcher->exitCode() == 1);
  const std::string out = launcher->output();
  const auto headline = out.substr(out.find("node-launcher: run failed:"));
  // Usually "peers 0, 2"; if rank 1 stopped half-way through its sends, one of them got that
  // round's message and loses rank 1 a round later.
  const auto first = headline.substr(0, headline.find('\n'));
  INFO(first);
  CHECK((contains(first, "peer 1 was lost first: peers 0, 2 ") ||
         contains(first, "peer 1 was lost first: peer 0 ") ||
         contains(first, "peer 1 was lost first: peer 2 ")));
  for (pid_t p : peers) CHECK_FALSE(processAlive(p));
}

TEST_CASE("a diverging run stops at the round it diverges, naming the rank, with a hint",
          "[integration][peers]") {
  const auto dir = tempDir("diverge-peers");
  const auto file = dir / "d.json";
  writeFile(file, scenario("d", 4, 400, 10, R"({"kind": "ucx"})", 50, "least_squares"));
  const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out",
                                (dir / "sim").string()},
                               dir / "sim.log");
  INFO(sim.output);
  REQUIRE(sim.exit == 1);
  const auto at = sim.output.find("diverged at round ");
  REQUIRE(at != std::string::npos);
  const std::string round = sim.output.substr(at, sim.output.find(' ', at + 18) - at);
  CHECK(contains(sim.output, "step_size (now 50)"));

  const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                               dir / "run.log");
  INFO(run.output);
  CHECK(run.exit == 1);
  // The peers compute what the simulator computes: the same round, named in the headline.
  const auto headline = run.output.substr(run.output.find("node-launcher: run failed:"));
  CHECK(contains(headline.substr(0, headline.find('\n')), "failed first, at round"));
  CHECK(contains(headline.substr(0, headline.find('\n')), round + " (rank "));
  CHECK(contains(headline, "step_size"));
}

TEST_CASE("a local run listens on loopback only", "[integration][peers]") {
  const auto dir = tempDir("loopback");
  const auto file = dir / "lo.json";
  writeFile(file, scenario("lo", 3, 2000000, 1000, R"({"kind": "ucx"})"));
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "out").string()},
                        dir / "launcher.log");
  const auto peers = waitForChildren(*launcher, 3);
  REQUIRE(peers.size() == 3);
  for (int i = 0; i < 500 && lineCount(dir / "out" / "peers" / "rank-0.jsonl") < 3; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  // The socket inodes of the peers, then their listening sockets in /proc/net/tcp{,6}.
  std::set<std::string> inodes;
  for (pid_t p : peers) {
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(p) + "/fd", ec)) {
      const auto target = fs::read_symlink(fd.path(), ec).string();
      if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  int listening = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream in(readFile(table));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;  // 0A: LISTEN
      ++listening;
      const std::string host = local.substr(0, local.find(':'));
      INFO(table << " " << local);
      // 127.x.x.x is stored little-endian: the last byte pair is 7F. ::1 in tcp6.
      const bool loopback = host.size() == 8 ? host.substr(6) == "7F"
                                             : host == "00000000000000000000000001000000";
      CHECK(loopback);
    }
  }
  CHECK(listening >= 3);
  launcher->kill(SIGTERM);
  REQUIRE(launcher->waitFor(20s));
}

TEST_CASE("each peer prints one line when it starts and one when it ends", "[integration][peers]") {
  const auto dir = tempDir("peer-lines");
  const auto file = dir / "p.json";
  writeFile(file, scenario("p", 3, 100, 10, R"({"kind": "ucx"})"));
  const auto ports = freePorts(3);
  std::vector<std::unique_ptr<Process>> peers;
  for (int r = 0; r < 3; ++r) {
    peers.push_back(spawn({kLauncher, "peer", file.string(), "--rank", std::to_string(r), "--out",
                           (dir / "out").string(), "--peers", peerList(ports)},
                          dir / ("peer" + std::to_string(r) + ".log")));
  }
  for (int r = 0; r < 3; ++r) {
    INFO(peers[r]->output());
    REQUIRE(peers[r]->waitFor(60s));
    CHECK(peers[r]->exitCode() == 0);
    const std::string out = peers[r]->output();
    const std::string me = "node-launcher peer " + std::to_string(r) + ": ";
    CHECK(contains(out, me + "listening on 127.0.0.1:" + std::to_string(ports[r]) + " (3 nodes"));
    CHECK(contains(out, me + "done, 100 rounds"));
  }
}

}  // namespace starling_failures_test
