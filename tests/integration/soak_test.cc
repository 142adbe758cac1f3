// The soak (suite `slow`, docs/testing.md): 16 real peers under `node-launcher run` for thousands
// of rounds of a small problem, with on_peer_loss "continue" and a fault script drawn from a seed:
// a few kills (real SIGKILLs), corrupted, duplicated, reordered and delayed messages. It checks
// that the run finishes (exit 0), that every logged round is on disk for every survivor and in
// metrics.jsonl, that the survivors end at the optimum of their own data and equal `simulate`,
// and that no peer's memory grows: VmRSS of every peer process is sampled while it runs (RssAnon) and the
// late samples must not stand much above the early ones.
//
// The second case restarts every killed peer (faults.restart): each must rejoin, every rank's log
// must reach the last round, and the run must end at the optimum of everyone's data (against a
// fault-free simulate, since the return's round depends on timing).
//
// Knobs (environment): STARLING_SOAK_SEED (default 1), STARLING_SOAK_ROUNDS (default 6000),
// STARLING_SOAK_TLS (the UCX transport, "tcp" or "shm"; default "tcp").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "process_helpers.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_soak_test {

using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

const std::string kLauncher = NODE_LAUNCHER;
constexpr int kNodes = 16;
constexpr uint64_t kLogEvery = 100;

uint64_t envOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

struct Soak {
  std::string json;
  std::vector<int> killed;
  std::string script;  // for the test's log
};

std::string tls() {
  const char* v = std::getenv("STARLING_SOAK_TLS");
  return v && *v ? v : "tcp";
}

// The scenario and its fault script, drawn from `seed`. Kills are at least 400 rounds apart (a
// change takes effect a few rounds after a loss; losses that overlap are another test's subject)
// and all before 45% of the run, so the survivors have the rest to converge.
Soak soakScenario(uint64_t seed, uint64_t rounds, bool restart = false) {
  std::mt19937_64 rng(seed);
  auto below = [&](uint64_t n) { return rng() % n; };
  Soak s;
  std::vector<int> ranks(kNodes);
  for (int r = 0; r < kNodes; ++r) ranks[r] = r;
  std::vector<std::string> events;
  const int kills = 3;
  std::set<int> chosen;
  uint64_t at = rounds / 10 + below(rounds / 20);
  for (int k = 0; k < kills; ++k) {
    int rank;
    do {
      rank = static_cast<int>(below(kNodes));
    } while (chosen.count(rank));
    chosen.insert(rank);
    s.killed.push_back(rank);
    events.push_back(R"({"kill": )" + std::to_string(rank) + R"(, "at_round": )" +
                     std::to_string(at) + "}");
    at += 400 + below(rounds / 10);
  }
  events.push_back(R"({"corrupt": 0.05})");
  events.push_back(R"({"duplicate": 0.1})");
  events.push_back(R"({"reorder": 0.1})");
  for (int k = 0; k < 3; ++k) {
    const int a = static_cast<int>(below(kNodes));
    const int b = (a + 1 + static_cast<int>(below(kNodes - 1))) % kNodes;
    const uint64_t from = below(rounds - 40);
    events.push_back(R"({"delay_ms": )" + std::to_string(10 + below(40)) + R"(, "link": [)" +
                     std::to_string(a) + ", " + std::to_string(b) + R"(], "from_round": )" +
                     std::to_string(from) + R"(, "to_round": )" + std::to_string(from + 20) + "}");
  }
  for (const auto& e : events) s.script += (s.script.empty() ? "" : ", ") + e;
  s.json = R"({"schema_version": 1, "name": "soak", "nodes": 16, "seed": )" +
           std::to_string(seed) + R"(, "rounds": )" + std::to_string(rounds) +
           R"(, "log_every": )" + std::to_string(kLogEvery) + R"(,
    "topology": {"kind": "random", "p": 0.25},
    "transport": {"kind": "ucx", "tls": ")" + tls() + R"(", "round_timeout_ms": 10000},
    "problem": {"kind": "logistic", "l2": 0.05, "partition": "random",
                "data": {"synthetic": {"samples": 3200, "features": 400, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.5},
    "faults": {"on_peer_loss": "continue", )" + (restart ? R"("restart": true, )" : "") +
           R"("script": [)" + s.script + "]}}";
  return s;
}

// The private resident memory of `pid` in KiB (RssAnon: its heap and stacks; not the shared
// memory segments and rings it maps from its neighbours, whose pages count in VmRSS as they are
// first touched, up to their fixed size), or -1 once it is gone.
long rssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("RssAnon:", 0) == 0) return std::strtol(line.c_str() + 8, nullptr, 10);
  }
  return -1;
}

int rankOf(pid_t pid) {
  std::string cmd = readFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::replace(cmd.begin(), cmd.end(), '\0', ' ');
  const auto at = cmd.find(" --rank ");
  if (at == std::string::npos) return -1;
  return std::atoi(cmd.c_str() + at + 8);
}

struct Sample {
  double t;  // seconds since the launcher started
  long kib;
};

// Whether sample `s` lies between fractions `from` and `to` of the time its process was watched
// (its first sample to its last: neither the launcher's start-up, which can take seconds, nor
// its merging after the peers exit is part of any stretch).
bool inStretch(const std::vector<Sample>& all, const Sample& s, double /*end*/, double from,
               double to) {
  const double t0 = all.front().t, span = all.back().t - t0;
  return s.t >= t0 + from * span && (to >= 1.0 || s.t < t0 + to * span);
}

long medianOf(std::vector<long> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct SoakRun {
  bool exited = false;
  int exit = -1;
  double seconds = 0;
  std::string output;
  std::map<int, std::vector<Sample>> samples;  // rank -> RssAnon over time
};

// Runs `file` under the launcher, sampling every peer's RssAnon, for at most 30 minutes.
SoakRun runSoak(const fs::path& dir, const fs::path& file) {
  SoakRun result;
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                        dir / "run.log");
  std::map<pid_t, int> ranks;                  // peer processes seen
  const auto limit = 30min;
  bool exited = false;
  while (!(exited = launcher->waitFor(0ms)) && seconds() < std::chrono::duration<double>(limit).count()) {
    for (pid_t p : childrenOf(launcher->pid)) {
      // (Asked again while it is -1: a child between fork and exec still has the launcher's
      // command line.)
      if (!ranks.count(p) || ranks[p] < 0) ranks[p] = rankOf(p);
    }
    for (const auto& [pid, rank] : ranks) {
      if (rank < 0) continue;
      if (const long kib = rssKiB(pid); kib > 0 && processAlive(pid)) {
        result.samples[rank].push_back(Sample{seconds(), kib});
      }
    }
    std::this_thread::sleep_for(200ms);
  }
  result.exited = exited;
  result.seconds = seconds();
  result.output = launcher->output();
  if (exited) result.exit = launcher->exitCode();
  return result;
}

}  // namespace

TEST_CASE("soak: 16 peers, thousands of rounds, kills and link faults; memory stays flat",
          "[slow][soak]") {
  const uint64_t seed = envOr("STARLING_SOAK_SEED", 1);
  const uint64_t rounds = envOr("STARLING_SOAK_ROUNDS", 6000);
  const Soak soak = soakScenario(seed, rounds);
  INFO("seed " << seed << ", " << rounds << " rounds; script: " << soak.script);
  const auto dir = tempDir("soak");
  const auto file = dir / "soak.json";
  writeFile(file, soak.json);

  const SoakRun run = runSoak(dir, file);
  REQUIRE(run.exited);
  const double total = run.seconds;
  const std::string& out = run.output;
  const auto& samples = run.samples;
  INFO(out.substr(out.size() > 4000 ? out.size() - 4000 : 0));
  CHECK(run.exit == 0);
  for (int k : soak.killed) {
    CHECK(out.find("peer " + std::to_string(k) + " was killed by signal 9") != std::string::npos);
  }

  // Every logged round is in metrics.jsonl, and in every survivor's own log.
  const auto metrics = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(metrics.size() == rounds / kLogEvery + 1);
  for (size_t k = 0; k < metrics.size(); ++k) CHECK(metrics[k]["round"] == k * kLogEvery);
  std::set<int> survivors;
  for (int r = 0; r < kNodes; ++r) {
    if (std::find(soak.killed.begin(), soak.killed.end(), r) == soak.killed.end()) {
      survivors.insert(r);
    }
  }
  for (int r : survivors) {
    std::set<uint64_t> logged;
    std::istringstream in(readFile(dir / "run" / "peers" / ("rank-" + std::to_string(r) + ".jsonl")));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("round") && j.contains("x")) logged.insert(j["round"].get<uint64_t>());
    }
    INFO("rank " << r);
    CHECK(logged.size() == rounds / kLogEvery + 1);
  }
  // The survivors' optimum, and the same numbers as `simulate`.
  CHECK(metrics.back()["rel_error"].get<double>() < 1e-8);
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  INFO(changes);
  for (int k : soak.killed) {
    CHECK(changes.find(R"("left":[)" + std::to_string(k) + "]") != std::string::npos);
  }
  const auto sim = runLauncher(
      {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  REQUIRE(sim.exit == 0);
  CHECK(metrics == metricsWithoutWall(dir / "sim" / "metrics.jsonl"));

  // Memory: for each survivor, the median RssAnon of its last fifth against that of the stretch
  // from 10% to 30% of the run (after start-up and the first rounds' allocations).
  std::string table = "rank  samples  early KiB  late KiB\n";
  for (int r : survivors) {
    std::vector<long> early, late;
    for (const Sample& s : samples.at(r)) {
      if (inStretch(samples.at(r), s, total, 0.1, 0.3)) early.push_back(s.kib);
      if (inStretch(samples.at(r), s, total, 0.8, 1.0)) late.push_back(s.kib);
    }
    const long e = medianOf(early), l = medianOf(late);
    table += std::to_string(r) + "  " + std::to_string(samples.at(r).size()) + "  " +
             std::to_string(e) + "  " + std::to_string(l) + "\n";
    INFO("rank " << r << ": early " << e << " KiB, late " << l << " KiB");
    REQUIRE(early.size() >= 3);
    REQUIRE(late.size() >= 3);
    CHECK(l <= e + std::max<long>(2048, e / 50));  // 2 MiB or 2%
  }
  std::printf("soak: seed %llu, %llu rounds, %.1f s; killed", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(rounds), total);
  for (int k : soak.killed) std::printf(" %d", k);
  std::printf("\nscript: %s\n%s(outputs in %s)\n", soak.script.c_str(), table.c_str(),
              dir.c_str());
}

TEST_CASE("soak with restarts: every killed peer rejoins and the run ends at everyone's optimum",
          "[slow][soak]") {
  const uint64_t seed = envOr("STARLING_SOAK_SEED", 1);
  const uint64_t rounds = envOr("STARLING_SOAK_ROUNDS", 6000);
  const Soak soak = soakScenario(seed, rounds, /*restart=*/true);
  INFO("seed " << seed << ", " << rounds << " rounds; script: " << soak.script);
  const auto dir = tempDir("soak-restart");
  const auto file = dir / "soak.json";
  writeFile(file, soak.json);
  const SoakRun run = runSoak(dir, file);
  REQUIRE(run.exited);
  const std::string& out = run.output;
  INFO(out.substr(out.size() > 4000 ? out.size() - 4000 : 0));
  CHECK(run.exit == 0);
  const std::string changes = readFile(dir / "run" / "membership.jsonl");
  INFO(changes);
  for (int k : soak.killed) {
    CHECK(out.find("peer " + std::to_string(k) + " restarted") != std::string::npos);
    CHECK(changes.find(R"("left":[)" + std::to_string(k) + "]") != std::string::npos);
    CHECK(changes.find(R"("joined":[)" + std::to_string(k) + "]") != std::string::npos);
  }
  // Every logged round is merged, and every rank, returned ones too, logged the last.
  const auto metrics = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  REQUIRE(metrics.size() == rounds / kLogEvery + 1);
  for (int r = 0; r < kNodes; ++r) {
    const std::string log = readFile(dir / "run" / "peers" / ("rank-" + std::to_string(r) + ".jsonl"));
    INFO("rank " << r);
    CHECK(log.find(R"({"round":)" + std::to_string(rounds) + ",") != std::string::npos);
  }
  // Everyone's optimum: the fault-free simulation of the same problem (no script, no loss).
  CHECK(metrics.back()["rel_error"].get<double>() < 1e-8);
  std::string clean = soak.json;
  clean.replace(clean.find(R"("faults")"), std::string::npos, R"("faults": {}})");
  writeFile(dir / "clean.json", clean);
  const auto sim = runLauncher({kLauncher, "simulate", (dir / "clean.json").string(), "--out",
                                (dir / "sim").string()},
                               dir / "sim.log", 600s);
  REQUIRE(sim.exit == 0);
  const auto a = nlohmann::json::parse(readFile(dir / "run" / "summary.json"))["x_mean"];
  const auto b = nlohmann::json::parse(readFile(dir / "sim" / "summary.json"))["x_mean"];
  double d = 0, n = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    d += std::pow(a[k].get<double>() - b[k].get<double>(), 2);
    n += std::pow(b[k].get<double>(), 2);
  }
  CHECK(std::sqrt(d / n) < 1e-8);
  // Memory of the peers never killed stays flat, as in the first case.
  for (int r = 0; r < kNodes; ++r) {
    if (std::find(soak.killed.begin(), soak.killed.end(), r) != soak.killed.end()) continue;
    std::vector<long> early, late;
    for (const Sample& s : run.samples.at(r)) {
      if (inStretch(run.samples.at(r), s, run.seconds, 0.1, 0.3)) early.push_back(s.kib);
      if (inStretch(run.samples.at(r), s, run.seconds, 0.8, 1.0)) late.push_back(s.kib);
    }
    const long e = medianOf(early), l = medianOf(late);
    std::string when;
    for (const Sample& s : run.samples.at(r)) when += " " + std::to_string(s.t);
    INFO("rank " << r << ": early " << e << " KiB, late " << l << " KiB; sampled at" << when
                 << " of " << run.seconds << " s");
    REQUIRE(early.size() >= 3);
    REQUIRE(late.size() >= 3);
    CHECK(l <= e + std::max<long>(2048, e / 50));
  }
  std::printf("soak with restarts: seed %llu, %llu rounds, %.1f s (outputs in %s)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(rounds),
              run.seconds, dir.c_str());
}

}  // namespace starling_soak_test
