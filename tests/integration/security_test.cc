// Real peers and the cluster's key (docs/security.md): runs with a key (and encryption) equal
// simulate; a peer holding another key is refused, named, and the run stops; a key file others
// can read is refused when the scenario is read; and no hostile byte sent to any listening socket
// of a running peer (its bootstrap port and UCX's own) stops it, with or without a key.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <set>
#include <thread>

#include "process_helpers.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_security_test {

using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

const std::string kLauncher = NODE_LAUNCHER;

std::string scenario(int nodes, int rounds, const std::string& transport, const std::string& extra) {
  return R"({"schema_version": 1, "name": "sec", "nodes": )" + std::to_string(nodes) +
         R"(, "seed": 5, "rounds": )" + std::to_string(rounds) +
         R"(, "log_every": 100, "topology": {"kind": "ring"}, "transport": )" + transport + extra + R"(,
    "problem": {"kind": "logistic", "l2": 0.05,
                "data": {"synthetic": {"samples": 400, "features": 12, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.5}})";
}

fs::path makeKey(const fs::path& path, unsigned mode = 0600) {
  REQUIRE(std::system(("head -c 32 /dev/urandom > '" + path.string() + "'").c_str()) == 0);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

// TCP ports `pid` listens on, from its socket inodes and /proc/net/tcp{,6}.
std::set<uint16_t> listeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const fs::path fds = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fds, ec)) {
    const auto target = fs::read_symlink(e.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<uint16_t> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, tr, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode)) {
        ports.insert(static_cast<uint16_t>(std::stoul(local.substr(local.rfind(':') + 1), nullptr, 16)));
      }
    }
  }
  return ports;
}

bool sendBytes(uint16_t port, const std::vector<unsigned char>& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (ok) (void)!write(fd, bytes.data(), bytes.size());
  close(fd);
  return ok;
}

// "127.0.0.1:P" for each port, as the items of a JSON array.
std::string loopbackList(const std::vector<uint16_t>& ports) {
  std::string out;
  for (uint16_t p : ports) {
    out += (out.empty() ? "" : ", ") + std::string("\"127.0.0.1:") + std::to_string(p) + "\"";
  }
  return out;
}

// Idle connections to every port: 80 each that never send a byte, each one opened again as soon as
// the peer closes it, until finish() (at most 60 s). Returns how many were opened.
class Flood {
 public:
  explicit Flood(std::vector<uint16_t> ports) : ports_(std::move(ports)), thread_([this] { run(); }) {}
  ~Flood() { finish(); }
  uint64_t finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return opened_;
  }

 private:
  void run() {
    std::vector<std::vector<int>> fds(ports_.size());
    const auto end = std::chrono::steady_clock::now() + 60s;
    while (!stop_ && std::chrono::steady_clock::now() < end) {
      for (size_t k = 0; k < ports_.size(); ++k) {
        auto& open = fds[k];
        // Drop the ones the peer closed (a read of 0 bytes, without blocking).
        for (auto it = open.begin(); it != open.end();) {
          char b;
          const ssize_t n = recv(*it, &b, 1, MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            close(*it);
            it = open.erase(it);
          } else {
            ++it;
          }
        }
        while (open.size() < 80) {
          const int fd = socket(AF_INET, SOCK_STREAM, 0);
          sockaddr_in a{};
          a.sin_family = AF_INET;
          a.sin_port = htons(ports_[k]);
          a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            close(fd);
            break;  // not listening (yet, or any more)
          }
          open.push_back(fd);
          ++opened_;
        }
      }
      std::this_thread::sleep_for(20ms);
    }
    for (auto& open : fds) {
      for (int fd : open) close(fd);
    }
  }

  std::vector<uint16_t> ports_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> opened_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("peers with the cluster's key (and encryption) train as simulate does",
          "[integration][security]") {
  const auto dir = tempDir("security-keyed");
  makeKey(dir / "cluster.key");
  struct Case {
    std::string name, transport, security;
  };
  const std::vector<Case> cases = {
      {"tcp-key", R"({"kind": "ucx"})", R"({"key_file": "cluster.key"})"},
      {"tcp-encrypt", R"({"kind": "ucx"})", R"({"key_file": "cluster.key", "encrypt": true})"},
      {"shm-key", R"({"kind": "ucx", "tls": "shm", "shm_threshold_bytes": 0})",
       R"({"key_file": "cluster.key"})"},
      {"shm-encrypt", R"({"kind": "ucx", "tls": "shm", "shm_threshold_bytes": 0})",
       R"({"key_file": "cluster.key", "encrypt": true})"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const auto file = dir / (c.name + ".json");
    writeFile(file, scenario(4, 300, c.transport, R"(, "security": )" + c.security));
    const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / c.name).string()},
                                 dir / (c.name + ".log"));
    REQUIRE(run.exit == 0);
    const auto sim = runLauncher(
        {kLauncher, "simulate", file.string(), "--out", (dir / (c.name + "-sim")).string()},
        dir / (c.name + "-sim.log"));
    REQUIRE(sim.exit == 0);
    const auto metrics = metricsWithoutWall(dir / c.name / "metrics.jsonl");
    REQUIRE(metrics.size() == 4);
    CHECK(metrics == metricsWithoutWall(dir / (c.name + "-sim") / "metrics.jsonl"));
    CHECK(metrics.back()["corrupt_messages"] == 0);
  }
}

TEST_CASE("a peer holding another key is refused and named; the run stops",
          "[integration][security]") {
  const auto dir = tempDir("security-wrong-key");
  const auto good = makeKey(dir / "good.key"), other = makeKey(dir / "other.key");
  const auto file = dir / "s.json";
  writeFile(file, scenario(2, 200, R"({"kind": "ucx", "connect_timeout_ms": 3000, "round_timeout_ms": 4000})", ""));
  const auto ports = freePorts(2);
  std::vector<std::unique_ptr<Process>> peers;
  for (int r = 0; r < 2; ++r) {
    peers.push_back(spawn({kLauncher, "peer", file.string(), "--rank", std::to_string(r), "--out",
                           (dir / "out").string(), "--peers", peerList(ports)},
                          dir / ("peer" + std::to_string(r) + ".log"),
                          {{"STARLING_KEY_FILE", (r == 0 ? good : other).string()}}));
  }
  std::string all;
  for (auto& p : peers) {
    REQUIRE(p->waitFor(60s));
    CHECK(p->exitCode() != 0);
    all += p->output();
  }
  INFO(all);
  CHECK_THAT(all, Catch::Matchers::Contains("does not prove the cluster's key"));
  CHECK_THAT(all, Catch::Matchers::Contains("refused a connection from 127.0.0.1:"));
  CHECK_THAT(all, Catch::Matchers::Contains("different cluster keys"));
}

TEST_CASE("a key file others may read, or a key in the scenario, is refused with its JSON path",
          "[integration][security]") {
  const auto dir = tempDir("security-key-file");
  makeKey(dir / "open.key", 0644);
  const auto file = dir / "s.json";
  writeFile(file, scenario(2, 10, R"({"kind": "ucx"})", R"(, "security": {"key_file": "open.key"})"));
  auto v = runLauncher({kLauncher, "validate", file.string()}, dir / "v.log");
  CHECK(v.exit == 2);
  CHECK_THAT(v.output, Catch::Matchers::Contains("/security/key_file"));
  CHECK_THAT(v.output, Catch::Matchers::Contains("too open"));
  writeFile(file, scenario(2, 10, R"({"kind": "ucx"})", R"(, "security": {"key": "hunter2hunter2"})"));
  v = runLauncher({kLauncher, "validate", file.string()}, dir / "v2.log");
  CHECK(v.exit == 2);
  CHECK_THAT(v.output, Catch::Matchers::Contains("/security/key"));
}

TEST_CASE("17 zero bytes (and other junk) at every listener of every running peer stop nothing",
          "[integration][security]") {
  const bool withKey = GENERATE(false, true);
  CAPTURE(withKey);
  const auto dir = tempDir(withKey ? "security-17-key" : "security-17");
  makeKey(dir / "cluster.key");
  const auto file = dir / "s.json";
  writeFile(file, scenario(3, 3000, R"({"kind": "ucx"})",
                           withKey ? R"(, "security": {"key_file": "cluster.key"})" : ""));
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "out").string()},
                        dir / "launcher.log");
  const std::vector<std::vector<unsigned char>> junk = {
      std::vector<unsigned char>(17, 0), std::vector<unsigned char>(4096, 0),
      std::vector<unsigned char>(64, 0xff), {'S', 'T', 'B', '1', 1, 0, 1, 0}};
  std::set<uint16_t> hit;
  size_t peersSeen = 0;
  for (int i = 0; i < 60 && !launcher->waitFor(30ms); ++i) {
    const auto peers = childrenOf(launcher->pid);
    peersSeen = std::max(peersSeen, peers.size());
    for (pid_t pid : peers) {
      for (uint16_t port : listeningPorts(pid)) {
        for (const auto& bytes : junk) {
          if (sendBytes(port, bytes)) hit.insert(port);
        }
      }
    }
  }
  INFO(launcher->output());
  REQUIRE(launcher->waitFor(120s));
  CHECK(launcher->exitCode() == 0);
  CHECK(peersSeen == 3);
  // Each peer's bootstrap port and UCX's own listener.
  CHECK(hit.size() >= 6);
  const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()},
                               dir / "sim.log");
  REQUIRE(sim.exit == 0);
  CHECK(metricsWithoutWall(dir / "out" / "metrics.jsonl") ==
        metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
}

TEST_CASE("a flood of idle connections at every peer's bootstrap port costs the run nothing",
          "[integration][security]") {
  const auto dir = tempDir("security-flood");
  makeKey(dir / "cluster.key");
  const auto ports = freePorts(4);
  const std::string addresses = loopbackList(ports);
  const auto file = dir / "s.json";
  writeFile(file, scenario(4, 3000, R"({"kind": "ucx"})",
                           R"(, "security": {"key_file": "cluster.key"}, "peers": {"addresses": [)" +
                               addresses + "]}"));
  // 80 connections to each peer that never send a byte, each one opened again as soon as the
  // peer closes it, from before the peers listen until the run ends (at most 60 s).
  Flood flood(ports);
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "out").string()},
                        dir / "launcher.log");
  const bool ended = launcher->waitFor(120s);
  const uint64_t opened = flood.finish();
  INFO(launcher->output());
  REQUIRE(ended);
  CHECK(launcher->exitCode() == 0);
  CHECK(opened > 4 * 80);  // the flood reached the peers and kept at it
  // Each peer said what happened, briefly (at most a line a second about it), in the output
  // the launcher keeps for it.
  for (int r = 0; r < 4; ++r) {
    const std::string out = readFile(dir / "out" / "peers" / ("rank-" + std::to_string(r) + ".out"));
    size_t lines = 0;
    for (char c : out) lines += c == '\n';
    INFO("rank " << r << ":\n" << out.substr(0, 4000));
    CHECK(lines < 100);
  }
  const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out",
                                (dir / "sim").string()},
                               dir / "sim.log");
  REQUIRE(sim.exit == 0);
  CHECK(metricsWithoutWall(dir / "out" / "metrics.jsonl") ==
        metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
}

// The same flood while a peer is killed: the survivors find the real loss (their pings get
// through the flood: a new connection takes the place of the oldest idle one) and nothing else;
// a flooded port is never taken for a lost peer.
TEST_CASE("a flood of idle connections and a real loss: only the killed peer leaves",
          "[integration][security]") {
  const auto dir = tempDir("security-flood-loss");
  makeKey(dir / "cluster.key");
  const auto ports = freePorts(6);
  const std::string addresses = loopbackList(ports);
  const auto file = dir / "s.json";
  writeFile(file, scenario(6, 3000, R"({"kind": "ucx", "round_timeout_ms": 3000})",
                           R"(, "security": {"key_file": "cluster.key"}, "peers": {"addresses": [)" +
                               addresses + R"(]}, "faults": {"on_peer_loss": "continue",
                               "script": [{"kill": 2, "at_round": 1000}]})"));
  Flood flood(ports);
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "out").string()},
                        dir / "launcher.log");
  const bool ended = launcher->waitFor(120s);
  const uint64_t opened = flood.finish();
  INFO(launcher->output());
  REQUIRE(ended);
  CHECK(launcher->exitCode() == 0);
  CHECK(opened > 6 * 80);
  const std::string changes = readFile(dir / "out" / "membership.jsonl");
  INFO(changes);
  std::set<int> left;
  std::istringstream in(changes);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("membership")) {
      for (int r : j["membership"]["left"]) left.insert(r);
    }
  }
  CHECK(left == std::set<int>{2});
  // One loss: the run is simulate's bit for bit (the survivors' optimum at the end).
  const auto sim = runLauncher({kLauncher, "simulate", file.string(), "--out",
                                (dir / "sim").string()},
                               dir / "sim.log");
  REQUIRE(sim.exit == 0);
  const auto run = metricsWithoutWall(dir / "out" / "metrics.jsonl");
  CHECK(run == metricsWithoutWall(dir / "sim" / "metrics.jsonl"));
  REQUIRE(!run.empty());
  CHECK(run.back()["rel_error"].get<double>() < 1e-6);
}

}  // namespace starling_security_test
