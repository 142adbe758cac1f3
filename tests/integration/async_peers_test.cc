// Asynchronous gossip (docs/algorithms.md §26) with real peer processes over UCX (tcp): 4 peers
// on a ring, rank 3 four times slower (it sleeps 4x as long per round). Against the same run with
// max_staleness 0 (the synchronous round, every peer paced by rank 3), the fast peers finish
// their rounds sooner, no peer mixes a message more than s rounds old, and the average model is
// as accurate.
#include <catch2/catch.hpp>
#include <cstdio>

#include "process_helpers.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_async_peers_test {

using namespace starling::testing;

namespace {

const std::string kLauncher = NODE_LAUNCHER;
constexpr int kRounds = 60;
constexpr int kStaleness = 15;
constexpr double kComputeMs = 30;  // a speed-1 round sleeps 30 ms, rank 3's 120 ms

std::string scenario(const std::string& name, int staleness) {
  return R"({"schema_version": 1, "name": ")" + name + R"(", "nodes": 4, "seed": 3, "rounds": )" +
         std::to_string(kRounds) + R"(, "log_every": 10, "topology": {"kind": "ring"},
    "transport": {"kind": "ucx", "tls": "tcp"},
    "problem": {"kind": "least_squares", "l2": 0.05,
                "data": {"synthetic": {"samples": 400, "features": 8, "heterogeneity": 1.0}}},
    "algorithm": {"kind": "dsgd", "step_size": 0.2, "asynchronous": {"max_staleness": )" +
         std::to_string(staleness) + R"(, "speeds": [1, 1, 1, 0.25], "compute_ms": )" +
         std::to_string(kComputeMs) + "}}}";
}

nlohmann::json runScenario(const fs::path& dir, const std::string& name, int staleness) {
  const auto file = dir / (name + ".json");
  writeFile(file, scenario(name, staleness));
  const auto out = dir / name;
  const auto run =
      runLauncher({kLauncher, "run", file.string(), "--out", out.string()}, dir / (name + ".log"));
  INFO(run.output);
  REQUIRE(run.exit == 0);
  return nlohmann::json::parse(readFile(out / "summary.json"));
}

}  // namespace

TEST_CASE(
    "real peers: with one peer 4x slower, asynchronous gossip lets the others finish "
    "sooner than synchronous, within the staleness bound, as accurately",
    "[integration][async]") {
  const auto dir = tempDir("async-peers");
  const auto sync = runScenario(dir, "sync", 0);
  const auto async = runScenario(dir, "async", kStaleness);
  const auto& sf = sync["asynchronous"]["finish"];
  const auto& af = async["asynchronous"]["finish"];
  REQUIRE(sf.size() == 4);
  REQUIRE(af.size() == 4);
  std::printf(
      "4 peers, rank 3 4x slower, %d rounds: finish (s) synchronous %s, asynchronous "
      "(s = %d) %s; rel_error %.6g vs %.6g; max staleness %s\n",
      kRounds, sf.dump().c_str(), kStaleness, af.dump().c_str(), sync["rel_error"].get<double>(),
      async["rel_error"].get<double>(), async["asynchronous"]["max_staleness_seen"].dump().c_str());
  INFO("finish (s): synchronous " << sf.dump() << ", asynchronous " << af.dump());
  // Synchronous: rank 3 sleeps 60 x 120 ms = 7.2 s and paces everyone. With s = 15 its
  // neighbours (ranks 0 and 2) end when it has done 45 rounds (5.4 s of its sleep), rank 1 when it
  // has done 30 (3.6 s; rank 1's own 60 x 30 ms is 1.8 s). Measured (20 ms rounds, 2/3 of these
  // times): synchronous 4.80-4.88 s for every peer, asynchronous 3.66, 2.38, 3.64 and 4.85 s.
  // Start-up, connection and compute add about the same time d to both runs; the fast peers'
  // ratio (5.4 + d) / (7.2 + d) stays below the 0.85 asked for while d < 4 s, and a loaded
  // machine that stretches every round alike keeps the ratio.
  double syncFastMin = 1e9, asyncFastMax = 0;
  for (int r = 0; r < 3; ++r) {
    syncFastMin = std::min(syncFastMin, sf[r].get<double>());
    asyncFastMax = std::max(asyncFastMax, af[r].get<double>());
  }
  CHECK(asyncFastMax < 0.85 * syncFastMin);
  CHECK(sf[3].get<double>() >= kRounds * 4 * kComputeMs / 1000);
  CHECK(sync["asynchronous"]["max_staleness_seen"] == 0);
  const auto seen = async["asynchronous"]["max_staleness_seen"].get<uint64_t>();
  CHECK(seen <= static_cast<uint64_t>(kStaleness));
  CHECK(seen >= 1);
  // Every peer log's round lines say the same of each round.
  for (int r = 0; r < 4; ++r) {
    std::istringstream in(
        readFile(dir / "async" / "peers" / ("rank-" + std::to_string(r) + ".jsonl")));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("staleness")) CHECK(j["staleness"].get<uint64_t>() <= kStaleness);
    }
  }
  // The average model: the synchronous run's is the same at every try (s = 0 mixes exactly each
  // round's messages: rel_error 0.0129964, as `simulate` has it); the asynchronous one's depends
  // on timing. Both head for the same fixed point (§26: at rest a stale message equals the
  // current one). The peer furthest ahead ends when the slow one has done 30 rounds, having mixed
  // models from rounds 30 to 60; the synchronous run is within 3.5% of the fixed point from round
  // 30 on (0.01345) and within 0.4% from round 40. Measured: 0.01304 (`simulate`: 0.01303); 10%
  // is 3x the worst gap that reasoning allows.
  // `merge` of the same peer logs writes the same account.
  const auto merged = runLauncher(
      {kLauncher, "merge", (dir / "async.json").string(), "--out", (dir / "async").string()},
      dir / "merge.log");
  REQUIRE(merged.exit == 0);
  CHECK(nlohmann::json::parse(readFile(dir / "async" / "summary.json"))["asynchronous"] ==
        async["asynchronous"]);
  const double syncErr = sync["rel_error"].get<double>();
  const double asyncErr = async["rel_error"].get<double>();
  INFO("rel_error synchronous " << syncErr << ", asynchronous " << asyncErr);
  CHECK(asyncErr <= 1.1 * syncErr);
  fs::remove_all(dir);
}

}  // namespace starling_async_peers_test
