// Real peer processes over UCX on loopback: node-launcher run, node-launcher peer under
// srun/mpirun-style environments, failures, signals and hostile bytes on the wire.
#include <catch2/catch.hpp>

#include "process_helpers.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_peers_test {

using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

const std::string kLauncher = NODE_LAUNCHER;

// A scenario with `nodes` nodes; `topology` and `transport` are JSON objects.
std::string scenario(const std::string& name, int nodes, int rounds, int logEvery,
                     const std::string& topology, const std::string& transport,
                     const std::string& extra = "") {
  return R"({"schema_version": 1, "name": ")" + name + R"(", "nodes": )" + std::to_string(nodes) +
         R"(, "seed": 5, "rounds": )" + std::to_string(rounds) + R"(, "log_every": )" +
         std::to_string(logEvery) + R"(, "topology": )" + topology + R"(, "transport": )" +
         transport + extra + R"(,
    "problem": {"kind": "logistic", "l2": 0.05,
                "data": {"synthetic": {"samples": 400, "features": 12, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.5}})";
}

// Starts `n` peers of `file` with `node-launcher peer --rank R`, on free loopback ports, writing to
// dir/out; each one's output goes to dir/peerR.log.
std::vector<std::unique_ptr<Process>> startPeers(int n, const fs::path& file, const fs::path& dir) {
  const auto ports = freePorts(n);
  std::vector<std::unique_ptr<Process>> peers;
  for (int r = 0; r < n; ++r) {
    peers.push_back(spawn({kLauncher, "peer", file.string(), "--rank", std::to_string(r), "--out",
                           (dir / "out").string(), "--peers", peerList(ports)},
                          dir / ("peer" + std::to_string(r) + ".log")));
  }
  return peers;
}

// Merges the peers' logs in dir/out and simulates the same scenario into dir/sim; returns the
// merged metrics (without wall times).
std::vector<nlohmann::json> mergeAndSimulate(const fs::path& file, const fs::path& dir) {
  const auto merged = runLauncher({kLauncher, "merge", file.string(), "--out", (dir / "out").string()},
                                  dir / "merge.log");
  REQUIRE(merged.exit == 0);
  const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()},
                               dir / "sim.log");
  REQUIRE(sim.exit == 0);
  return metricsWithoutWall(dir / "out" / "metrics.jsonl");
}

}  // namespace

TEST_CASE("node-launcher run gives the same metrics as simulate", "[integration][peers]") {
  const auto dir = tempDir("peers-same");
  struct Case {
    std::string name, topology, transport;
    int nodes;
  };
  const std::vector<Case> cases = {
      {"ring-tcp", R"({"kind": "ring"})", R"({"kind": "ucx", "tls": "tcp"})", 6},
      {"grid-shm", R"({"kind": "grid", "rows": 2, "cols": 4})", R"({"kind": "ucx", "tls": "shm"})",
       8},
      {"dropout-tcp", R"({"kind": "ring", "schedule": {"kind": "edge_dropout", "p": 0.3}})",
       R"({"kind": "ucx"})", 5},
      {"onepeer-shm", R"({"kind": "ring", "schedule": {"kind": "one_peer_exponential"}})",
       R"({"kind": "ucx", "tls": "shm"})", 8},
      {"matching-tcp", R"({"kind": "complete", "schedule": {"kind": "random_matching"}})",
       R"({"kind": "ucx", "max_endpoints": 2})", 4},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const auto file = dir / (c.name + ".json");
      writeFile(file, scenario(c.name, c.nodes, 300, 20, c.topology, c.transport));
      const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / (c.name + "-run")).string()},
                                   dir / (c.name + "-run.log"));
      INFO(run.output);
      REQUIRE(run.exit == 0);
      CHECK(run.output.find("peer processes") != std::string::npos);
      const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out",
                                    (dir / (c.name + "-sim")).string()},
                                   dir / (c.name + "-sim.log"));
      REQUIRE(sim.exit == 0);
      const auto a = metricsWithoutWall(dir / (c.name + "-run") / "metrics.jsonl");
      const auto b = metricsWithoutWall(dir / (c.name + "-sim") / "metrics.jsonl");
      REQUIRE(a.size() == 16);  // rounds 0, 20, ..., 300
      // float64 state and combining in neighbour order: bit-identical, no tolerance needed.
      CHECK(a == b);
      const auto summary = nlohmann::json::parse(readFile(dir / (c.name + "-run") / "summary.json"));
      CHECK(summary["mode"] == "run");
      CHECK(summary["rel_error"].get<double>() < 1e-3);
    }
  }
}

TEST_CASE("the seeds' methods on real peers equal simulate: local optimizers, LEGW, Adasum, "
          "AdaScale, Leader SGD, sketched gossip",
          "[integration][peers]") {
  const auto dir = tempDir("peers-methods");
  const auto problemWith = [](const std::string& batch) {
    return R"("problem": {"kind": "logistic", "l2": 0.01, "batch": )" + batch + R"(,
      "data": {"synthetic": {"samples": 500, "features": 8, "heterogeneity": 1.0}}})";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"adasum-momentum", R"({"kind": "dsgd", "step_size": 0.2, "combine": "adasum",
                             "local_optimizer": {"kind": "momentum"}})"},
      {"lamb-legw", R"({"kind": "dsgd", "step_size": {"kind": "legw", "base_lr": 0.05,
                        "base_batch": 100, "warmup_epochs": 1},
                        "local_optimizer": {"kind": "lamb", "weight_decay": 0.001}})"},
      {"choco-adam", R"({"kind": "choco", "step_size": 0.01, "gamma": 0.5,
                        "local_optimizer": {"kind": "adam"}})"},
      // These two send statistics in the message and log their own metrics (adascale_gain,
      // leader_global, ...), which the merge must average as simulate does.
      {"adascale-momentum", R"({"kind": "dsgd", "step_size": 0.05,
                               "adascale": {"micro_batches": 2, "base_batch": 4},
                               "local_optimizer": {"kind": "momentum"}})"},
      {"leader", R"({"kind": "dsgd", "step_size": 0.1,
                    "leader": {"local_period": 2, "global_period": 4, "pull_global": 0.3}})"},
      // The model's sketch on the wire, momentum and error in sketch space (§27).
      {"sketch", R"({"kind": "dsgd", "step_size": 0.1, "gamma": 0.3,
                    "sketch": {"rows": 3, "cols": 4, "k": 2, "momentum": 0.5}})"},
  };
  for (const auto& [name, algorithm] : cases) {
    DYNAMIC_SECTION(name) {
      const std::string problem =
          problemWith(name == "adascale-momentum" || name == "leader" ? "8" : "0");
      const auto file = dir / (name + ".json");
      writeFile(file, R"({"schema_version": 1, "name": ")" + name + R"(", "nodes": 5, "seed": 4,
        "rounds": 100, "log_every": 10, "topology": {"kind": "ring"}, "transport": {"kind": "ucx"},
        )" + problem + R"(, "algorithm": )" + algorithm + "}");
      const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / (name + "-run")).string()},
                                   dir / (name + "-run.log"));
      INFO(run.output);
      REQUIRE(run.exit == 0);
      const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out",
                                    (dir / (name + "-sim")).string()},
                                   dir / (name + "-sim.log"));
      REQUIRE(sim.exit == 0);
      const auto a = metricsWithoutWall(dir / (name + "-run") / "metrics.jsonl");
      REQUIRE(a.size() == 11);
      CHECK(a == metricsWithoutWall(dir / (name + "-sim") / "metrics.jsonl"));
      if (name == "adascale-momentum") CHECK(a.back().contains("adascale_gain"));
      if (name == "leader") CHECK(a.back().contains("leader_global"));
      if (name == "sketch") CHECK(a.back().contains("sketch_scale"));
    }
  }
}

TEST_CASE("LGC over real peers: decoder versions shipped and used across updates, equal to simulate",
          "[integration][peers]") {
  // CHOCO with the learned codec (docs/algorithms.md §28): 20 warm-up rounds that ship the
  // network every 3 rounds, then a new decoder version every 30 rounds (rounds 20, 50, 80). Every
  // receiver must decode each neighbour's frames with exactly the version they name, or run and
  // simulate would part (and a frame naming a version not held would be counted as corrupt).
  const auto dir = tempDir("peers-lgc");
  for (const std::string tls : {"tcp", "shm"}) {
    DYNAMIC_SECTION(tls) {
      const auto file = dir / ("lgc-" + tls + ".json");
      writeFile(file, R"({"schema_version": 1, "name": "lgc", "nodes": 5, "seed": 4,
        "rounds": 100, "log_every": 10, "topology": {"kind": "ring"},
        "transport": {"kind": "ucx", "tls": ")" + tls + R"("},
        "problem": {"kind": "logistic", "l2": 0.01, "batch": 0,
                    "data": {"synthetic": {"samples": 500, "features": 16, "heterogeneity": 1.0}}},
        "algorithm": {"kind": "choco", "step_size": 0.2, "gamma": 0.3},
        "compression": {"kind": "lgc", "ratio": 0.5, "chunk": 4, "hidden": 6, "latent": 2,
                        "warmup": 20, "refresh": 30, "share_every": 3, "learning_rate": 0.01}})");
      const auto run = runLauncher({kLauncher, "run", file.string(), "--out",
                                    (dir / (tls + "-run")).string()},
                                   dir / (tls + "-run.log"));
      INFO(run.output);
      REQUIRE(run.exit == 0);
      const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out",
                                    (dir / (tls + "-sim")).string()},
                                   dir / (tls + "-sim.log"));
      REQUIRE(sim.exit == 0);
      const auto a = metricsWithoutWall(dir / (tls + "-run") / "metrics.jsonl");
      REQUIRE(a.size() == 11);
      CHECK(a == metricsWithoutWall(dir / (tls + "-sim") / "metrics.jsonl"));
      CHECK(a.back()["corrupt_messages"].get<uint64_t>() == 0);
      // The codes carry something: the coded rounds' error is below top-k's zeros (1) ...
      CHECK(a.back()["compression_error"].get<double>() < 1.0);
      // ... and the run converges toward the optimum.
      CHECK(a.back()["rel_error"].get<double>() < a[2]["rel_error"].get<double>());
    }
  }
}

TEST_CASE("peers started by srun or mpirun take their rank from the environment",
          "[integration][peers]") {
  const auto dir = tempDir("peers-env");
  const auto file = dir / "env.json";
  writeFile(file, scenario("env", 3, 100, 10, R"({"kind": "ring"})", R"({"kind": "ucx"})"));
  const auto ports = freePorts(3);
  const char* vars[] = {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"};
  std::vector<std::unique_ptr<Process>> peers;
  for (int r = 0; r < 3; ++r) {
    peers.push_back(spawn({kLauncher, "peer", file.string(), "--out", (dir / "out").string(),
                           "--peers", peerList(ports)},
                          dir / ("peer" + std::to_string(r) + ".log"),
                          {{vars[r], std::to_string(r)}}));
  }
  for (auto& p : peers) {
    INFO(p->output());
    REQUIRE(p->waitFor(60s));
    CHECK(p->exitCode() == 0);
  }
  const auto merged = mergeAndSimulate(file, dir);
  CHECK(merged == metricsWithoutWall(dir / "sim" / "metrics.jsonl"));

  // Without --rank and without a launcher's environment, a peer refuses to guess.
  const auto none = runLauncher({kLauncher, "peer", file.string()}, dir / "none.log");
  CHECK(none.exit == 2);
  CHECK(none.output.find("SLURM_PROCID") != std::string::npos);
}

TEST_CASE("peers on one host exchange frames through shared memory and match simulate",
          "[integration][peers]") {
  const auto dir = tempDir("peers-shm-frames");
  const auto file = dir / "shm.json";
  // Threshold 0: every frame after the handshake goes through a segment, not a UCX message.
  writeFile(file, scenario("shm", 4, 200, 20, R"({"kind": "ring"})",
                           R"({"kind": "ucx", "tls": "shm", "shm_threshold_bytes": 0})"));
  auto peers = startPeers(4, file, dir);
  for (auto& p : peers) {
    INFO(p->output());
    REQUIRE(p->waitFor(60s));
    CHECK(p->exitCode() == 0);
    // Both ring neighbours accepted the handshake.
    const std::string out = p->output();
    size_t accepted = 0;
    for (size_t at = out.find("go through shared memory"); at != std::string::npos;
         at = out.find("go through shared memory", at + 1)) {
      ++accepted;
    }
    CHECK(accepted == 2);
  }
  const auto a = mergeAndSimulate(file, dir);
  REQUIRE(a.size() == 11);
  CHECK(a == metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
}

TEST_CASE("a killed peer stops its neighbours with an error naming it", "[integration][peers]") {
  // Over TCP, and over shared-memory frames (the survivors still map the dead peer's segments).
  const auto transport = GENERATE(std::string(R"({"kind": "ucx", "round_timeout_ms": 2000})"),
                                  std::string(R"({"kind": "ucx", "tls": "shm", "round_timeout_ms": 2000, )"
                                              R"("shm_threshold_bytes": 0})"));
  const auto dir = tempDir("peers-kill");
  const auto file = dir / "kill.json";
  // Long enough to be mid-run when the peer is killed; a short round timeout.
  writeFile(file, scenario("kill", 4, 2000000, 1000, R"({"kind": "ring"})", transport));
  auto peers = startPeers(4, file, dir);
  // Wait until the peers have logged a few rounds (a header line, then rounds 0, 1000, 2000), then
  // kill rank 2.
  const auto logFile = dir / "out" / "peers" / "rank-2.jsonl";
  auto lines = [&logFile] {
    const std::string text = readFile(logFile);
    return std::count(text.begin(), text.end(), '\n');
  };
  for (int i = 0; i < 500 && lines() < 4; ++i) std::this_thread::sleep_for(20ms);
  REQUIRE(lines() >= 4);
  peers[2]->kill(SIGKILL);
  REQUIRE(peers[2]->waitFor(5s));
  const auto killedAt = std::chrono::steady_clock::now();
  // Its neighbours (1 and 3) stop within the round timeout (plus process teardown), naming it.
  for (int r : {1, 3}) {
    INFO("rank " << r << ": " << peers[r]->output());
    REQUIRE(peers[r]->waitFor(15s));
    CHECK(peers[r]->exitCode() == 1);
    CHECK(peers[r]->output().find("rank 2") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - killedAt < 15s);
  // Rank 0 loses both neighbours in turn and stops too; nobody hangs.
  REQUIRE(peers[0]->waitFor(15s));
  CHECK(peers[0]->exitCode() == 1);
  // What was computed before the failure is on disk: merge writes the complete rounds and says
  // the run is incomplete.
  const auto merged = runLauncher({kLauncher, "merge", file.string(), "--out", (dir / "out").string()},
                                  dir / "merge.log");
  CHECK(merged.exit == 1);
  const auto metrics = metricsWithoutWall(dir / "out" / "metrics.jsonl");
  REQUIRE(metrics.size() >= 3);
  CHECK(metrics[2]["round"] == 2000);
}

TEST_CASE("the launcher stops every peer when one fails, and reports which", "[integration][peers]") {
  const auto dir = tempDir("peers-launcher-kill");
  const auto file = dir / "lk.json";
  writeFile(file, scenario("lk", 4, 2000000, 1000, R"({"kind": "ring"})",
                           R"({"kind": "ucx", "round_timeout_ms": 2000})"));
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "out").string()},
                        dir / "launcher.log");
  std::vector<pid_t> peers;
  for (int i = 0; i < 500 && peers.size() < 4; ++i) {
    std::this_thread::sleep_for(20ms);
    peers = childrenOf(launcher->pid);
  }
  REQUIRE(peers.size() == 4);
  std::this_thread::sleep_for(500ms);
  // Kill one peer; the launcher must notice, stop the rest and exit non-zero.
  kill(peers[1], SIGKILL);
  INFO(launcher->output());
  REQUIRE(launcher->waitFor(30s));
  CHECK(launcher->exitCode() == 1);
  CHECK(launcher->output().find("was killed by signal 9") != std::string::npos);
  for (pid_t p : peers) CHECK_FALSE(processAlive(p));
  // The rounds merged before the failure are on disk.
  CHECK(metricsWithoutWall(dir / "out" / "metrics.jsonl").size() >= 1);
}

TEST_CASE("SIGTERM to the launcher stops every peer and leaves no orphan", "[integration][peers]") {
  const auto dir = tempDir("peers-term");
  const auto file = dir / "term.json";
  writeFile(file, scenario("term", 3, 2000000, 1000, R"({"kind": "ring"})", R"({"kind": "ucx"})"));
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "out").string()},
                        dir / "launcher.log");
  std::vector<pid_t> peers;
  for (int i = 0; i < 500 && peers.size() < 3; ++i) {
    std::this_thread::sleep_for(20ms);
    peers = childrenOf(launcher->pid);
  }
  REQUIRE(peers.size() == 3);
  std::this_thread::sleep_for(300ms);
  launcher->kill(SIGTERM);
  INFO(launcher->output());
  REQUIRE(launcher->waitFor(20s));
  CHECK(launcher->exitCode() == 1);
  CHECK(launcher->output().find("stopped by a signal") != std::string::npos);
  for (pid_t p : peers) CHECK_FALSE(processAlive(p));

  // And when the launcher itself is killed outright, its peers die with it (PR_SET_PDEATHSIG).
  auto second = spawn({kLauncher, "run", file.string(), "--out", (dir / "out2").string()},
                      dir / "launcher2.log");
  peers.clear();
  for (int i = 0; i < 500 && peers.size() < 3; ++i) {
    std::this_thread::sleep_for(20ms);
    peers = childrenOf(second->pid);
  }
  REQUIRE(peers.size() == 3);
  second->kill(SIGKILL);
  REQUIRE(second->waitFor(5s));
  bool anyAlive = true;
  for (int i = 0; i < 250 && anyAlive; ++i) {
    std::this_thread::sleep_for(20ms);
    anyAlive = false;
    for (pid_t p : peers) anyAlive = anyAlive || processAlive(p);
  }
  CHECK_FALSE(anyAlive);
}

TEST_CASE("an unreachable neighbour fails the peer with its rank and address",
          "[integration][peers]") {
  const auto dir = tempDir("peers-unreachable");
  const auto file = dir / "un.json";
  writeFile(file, scenario("un", 2, 100, 10, R"({"kind": "line"})",
                           R"({"kind": "ucx", "connect_timeout_ms": 1000})"));
  const auto ports = freePorts(2);
  const auto start = std::chrono::steady_clock::now();
  const auto out = runLauncher({kLauncher, "peer", file.string(), "--rank", "0", "--out",
                                (dir / "out").string(), "--peers", peerList(ports)},
                               dir / "peer0.log", 30s);
  INFO(out.output);
  CHECK(out.exit == 1);
  CHECK(out.output.find("rank 1 (127.0.0.1:" + std::to_string(ports[1]) + ")") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 20s);
}

TEST_CASE("garbage sent to a peer's listener does not disturb the run", "[integration][peers]") {
  const auto dir = tempDir("peers-garbage");
  const auto file = dir / "g.json";
  const auto ports = freePorts(3);
  std::string peers = R"(, "peers": {"addresses": [)";
  for (size_t i = 0; i < ports.size(); ++i) {
    peers += (i ? ", \"" : "\"") + std::string("127.0.0.1:") + std::to_string(ports[i]) + "\"";
  }
  peers += "]}";
  writeFile(file, scenario("g", 3, 3000, 100, R"({"kind": "ring"})", R"({"kind": "ucx"})", peers));
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "out").string()},
                        dir / "launcher.log");
  // Blast every listener with random bytes while the run goes on.
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  int connections = 0;
  for (int i = 0; i < 40 && !launcher->waitFor(50ms); ++i) {
    for (uint16_t port : ports) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        ++connections;
        std::vector<unsigned char> junk(2048);
        for (auto& b : junk) {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          b = static_cast<unsigned char>(x);
        }
        (void)!write(fd, junk.data(), junk.size());
      }
      close(fd);
    }
  }
  INFO(launcher->output());
  REQUIRE(launcher->waitFor(120s));
  CHECK(launcher->exitCode() == 0);
  CHECK(connections > 0);
  const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()},
                               dir / "sim.log");
  REQUIRE(sim.exit == 0);
  CHECK(metricsWithoutWall(dir / "out" / "metrics.jsonl") ==
        metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
}

}  // namespace starling_peers_test
