// PeerLogMerger on hand-written peer logs: which peer a failed run's root cause is, and logs that
// belong to another run.
#include "runtime/merge.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "runtime/peer.h"
#include "scenario/compile.h"
#include "scenario/scenario.h"

namespace fs = std::filesystem;
using namespace starling;
using engine::PeerFailure;

namespace {

const char* kScenario = R"({"schema_version": 1, "name": "m", "nodes": 4, "seed": 3, "rounds": 20,
  "log_every": 10, "topology": {"kind": "ring"},
  "problem": {"kind": "least_squares", "l2": 0.1,
              "data": {"synthetic": {"samples": 40, "features": 3}}},
  "algorithm": {"kind": "exact_diffusion", "step_size": 0.3}})";

scenario::Experiment experiment() {
  auto s = scenario::parseScenario(kScenario, "m.json", ".");
  REQUIRE(s);
  auto e = scenario::prepareExperiment(*s);
  REQUIRE(e);
  return std::move(*e);
}

struct Logs {
  fs::path dir;
  explicit Logs(const std::string& name)
      : dir(fs::temp_directory_path() /
            ("starling-merge-" + name + "-" + std::to_string(getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir / "peers");
  }
  void write(int rank, const std::string& header, const std::vector<std::string>& lines) {
    std::ofstream out(engine::peerLogPath(dir, rank));
    out << header << "\n";
    for (const auto& l : lines) out << l << "\n";
  }
};

// A merger over the logs in `dir`, with the metrics log it writes to.
struct Merged {
  std::unique_ptr<runtime::MetricsLog> log;
  std::unique_ptr<runtime::PeerLogMerger> merger;
};

Merged merge(const scenario::Experiment& e, const fs::path& dir) {
  auto log = runtime::MetricsLog::create(dir);
  REQUIRE(log);
  Merged m{std::move(*log), nullptr};
  m.merger = std::make_unique<runtime::PeerLogMerger>(e, dir, *m.log);
  return m;
}

std::string roundLine(uint64_t round) {
  return R"({"round": )" + std::to_string(round) + R"(, "bytes_sent": 0, "x": [0, 0, 0]})";
}

std::string failed(int rank, uint64_t round, std::optional<int> lost, const std::string& code) {
  return engine::peerFailureLine(
      PeerFailure{rank, round, code, lost, code + " at " + std::to_string(round)});
}

}  // namespace

TEST_CASE("the root cause is the peer the others lost first, not the first to fail",
          "[runtime][unit]") {
  const auto e = experiment();
  Logs logs("hang");
  // Rank 1 hangs in round 12: 0 and 2 time out waiting for it; 3 then waits in vain for 2 and 0
  // in round 13 (and may well be the first to exit).
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> lines = {roundLine(0), roundLine(10)};
    if (r == 0 || r == 2) lines.push_back(failed(r, 12, 1, "timeout"));
    if (r == 3) lines.push_back(failed(r, 13, 2, "peer gone"));
    if (r == 1) lines.push_back(failed(r, 12, std::nullopt, "cancelled"));  // stopped later
    logs.write(r, scenario::peerLogHeader(e.scenario, r, "127.0.0.1:1"), lines);
  }
  auto merged = merge(e, logs.dir);
  auto& merger = *merged.merger;
  REQUIRE(merger.poll().isOk());
  const auto root = merger.rootCause();
  REQUIRE(root);
  CHECK(root->rank == 1);
  CHECK(root->round == 12);
  CHECK(root->lostByOthers);
  CHECK(root->lostBy == std::vector<int>{0, 2});
  CHECK(root->describe().find("peer 1 was lost first: peers 0, 2 stopped at round 12") == 0);
  CHECK(merger.last()->round == 10);
  CHECK(merger.shortLogs().find("rank 3: log ends at round 10 of 20; it failed at round 13") !=
        std::string::npos);
}

TEST_CASE("a peer that fails on its own is the root cause, even at the round it is lost",
          "[runtime][unit]") {
  const auto e = experiment();
  const auto round = GENERATE(uint64_t{7}, uint64_t{8});  // neighbours lose it then or a round later
  Logs logs("own");
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> lines = {roundLine(0)};
    if (r == 2) lines.push_back(failed(r, 7, std::nullopt, "diverged"));
    if (r == 1 || r == 3) lines.push_back(failed(r, round, 2, "timeout"));
    if (r == 0) lines.push_back(failed(r, round + 1, 1, "peer gone"));
    logs.write(r, scenario::peerLogHeader(e.scenario, r, "127.0.0.1:1"), lines);
  }
  auto merged = merge(e, logs.dir);
  auto& merger = *merged.merger;
  REQUIRE(merger.poll().isOk());
  const auto root = merger.rootCause();
  REQUIRE(root);
  CHECK(root->rank == 2);
  CHECK_FALSE(root->lostByOthers);
  CHECK(root->describe() == "peer 2 failed first, at round 7: diverged at 7");
}

TEST_CASE("stopped peers are no root cause", "[runtime][unit]") {
  const auto e = experiment();
  Logs logs("cancel");
  for (int r = 0; r < 4; ++r) {
    logs.write(r, scenario::peerLogHeader(e.scenario, r, "127.0.0.1:1"),
               {roundLine(0), failed(r, 3, std::nullopt, "cancelled")});
  }
  auto merged = merge(e, logs.dir);
  auto& merger = *merged.merger;
  REQUIRE(merger.poll().isOk());
  CHECK_FALSE(merger.rootCause());
}

TEST_CASE("a peer log of another run is refused, naming the file", "[runtime][unit]") {
  const auto e = experiment();
  auto other = e.scenario;
  other.seed = 4;
  Logs logs("other");
  for (int r = 0; r < 4; ++r) {
    logs.write(r, scenario::peerLogHeader(r == 2 ? other : e.scenario, r, "127.0.0.1:1"),
               {roundLine(0)});
  }
  auto merged = merge(e, logs.dir);
  auto& merger = *merged.merger;
  const auto polled = merger.poll();
  REQUIRE_FALSE(polled);
  CHECK(polled.status().message().find("rank-2.jsonl:1: written by a different run") !=
        std::string::npos);
  CHECK(polled.status().message().find("seed 4") != std::string::npos);

  // readPeerLogHeaders names the ranks without a log.
  fs::remove(engine::peerLogPath(logs.dir, 1));
  fs::remove(engine::peerLogPath(logs.dir, 3));
  const auto headers = runtime::readPeerLogHeaders(logs.dir, 4);
  REQUIRE_FALSE(headers);
  CHECK(headers.status().message().find("no peer log for ranks 1, 3 in") == 0);
}

TEST_CASE("a rank lost in a logged round whose line never came is counted out once every peer "
          "has exited", "[runtime][unit]") {
  // A straggler stopped after finishing round 9 and before writing round 10's line: its
  // neighbours lose it in round 10 and finish the run. A rank lost in round L normally logs L, so
  // poll() waits for that line; finalPoll() (every peer has exited) knows it will not come.
  const auto e = experiment();
  Logs logs("lost-unlogged");
  const std::string lost = R"({"lost": {"round": 10, "rank": 2, "why": "no message from rank 2"}})";
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> lines = {roundLine(0)};
    if (r != 2) {
      if (r == 1 || r == 3) lines.push_back(lost);
      lines.push_back(roundLine(10));
      lines.push_back(roundLine(20));
    }
    logs.write(r, scenario::peerLogHeader(e.scenario, r, "127.0.0.1:1"), lines);
  }
  auto merged = merge(e, logs.dir);
  auto& merger = *merged.merger;
  const auto polled = merger.poll();
  INFO(polled.status().toString());
  REQUIRE(polled);
  CHECK(*polled == 1);  // round 0 only: rank 2's line for round 10 may still come
  REQUIRE(merger.last());
  CHECK(merger.last()->round == 0);
  const auto last = merger.finalPoll();
  INFO(last.status().toString());
  REQUIRE(last);
  CHECK(*last == 2);  // rounds 10 and 20, without rank 2
  REQUIRE(merger.last());
  CHECK(merger.last()->round == 20);
  fs::remove_all(logs.dir);
}
