// Checkpoint and resume over real processes (README.md "Checkpoint and resume"): a run with a
// "checkpoint" section is killed (SIGKILL of the launcher, which takes its peers down; or of the
// launcher and every peer at once, as a machine going away would), `run --resume` continues it,
// and metrics.jsonl equals the uninterrupted run's line by line (wall_s aside). A damaged newest
// checkpoint (one flipped byte, one cut short) is skipped with a message naming it and the one
// before it used, with the same result. And the comparison can fail: the same resume from state
// one checkpoint older, labelled as the newer round, ends elsewhere.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "process_helpers.h"
#include "runtime/checkpoint.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_checkpoint_test {

using namespace starling::testing;
using namespace std::chrono_literals;
namespace rt = starling::runtime;

namespace {

const std::string kLauncher = NODE_LAUNCHER;
constexpr int kNodes = 4;
constexpr uint64_t kRounds = 200;

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// A scenario of 4 peers on a ring whose link 0-1 is held back 12 ms a round (so that the run
// lasts long enough to be killed in the middle; a delay changes no number, peer_loss_test shows
// it), with `extra` keys and, when `every` > 0, checkpoints. `problem` (without its closing brace)
// replaces the logistic one.
std::string scenario(const std::string& name, const std::string& problemExtra,
                     const std::string& algorithm, const std::string& extra, uint64_t every,
                     const std::string& faults = "", const std::string& problem = "") {
  std::string s = R"({"schema_version": 1, "name": ")" + name + R"(", "nodes": 4, "seed": 9,
    "rounds": )" + std::to_string(kRounds) + R"(, "log_every": 10, "topology": {"kind": "ring"},
    "problem": )" + (problem.empty() ? R"({"kind": "logistic", "l2": 0.05, "partition": "random",
                "data": {"synthetic": {"samples": 400, "features": 10, "heterogeneity": 1.0}})" :
                  problem) + problemExtra + R"(},
    "algorithm": )" + algorithm + extra + R"(,
    "faults": {"script": [{"delay_ms": 12, "link": [0, 1]})" + faults + "]}";
  if (every > 0) s += R"(, "checkpoint": {"every": )" + std::to_string(every) + R"(, "keep": 3})";
  return s + "}";
}

// The newest round rank r has a checkpoint file of (0: none).
uint64_t newestRound(const fs::path& out, int rank) {
  const auto rounds = rt::checkpointRounds(rt::checkpointDir(out, rank));
  return rounds.empty() ? 0 : rounds.front();
}

// Starts `run file --out out`, waits until every rank has a checkpoint of round `atLeast` or
// later, then kills: the launcher alone (its peers get SIGTERM through PR_SET_PDEATHSIG), or the
// launcher and every peer with SIGKILL. Waits until no peer is left.
void runAndKill(const fs::path& file, const fs::path& out, uint64_t atLeast, bool killPeersToo,
                int waitRanks = kNodes) {
  auto launcher = spawn({kLauncher, "run", file.string(), "--out", out.string()},
                        out.string() + ".log");
  std::vector<pid_t> peers;
  bool ready = false;
  for (int i = 0; i < 3000 && !ready; ++i) {
    REQUIRE_FALSE(launcher->waitFor(0ms));  // still running
    for (pid_t p : childrenOf(launcher->pid)) {
      if (std::find(peers.begin(), peers.end(), p) == peers.end()) peers.push_back(p);
    }
    ready = true;
    for (int r = 0; r < waitRanks; ++r) ready = ready && newestRound(out, r) >= atLeast;
    if (!ready) std::this_thread::sleep_for(5ms);
  }
  REQUIRE(ready);
  REQUIRE(peers.size() == kNodes);
  launcher->kill(SIGKILL);
  if (killPeersToo) {
    for (pid_t p : peers) ::kill(p, SIGKILL);
  }
  REQUIRE(launcher->waitFor(10s));
  for (int i = 0; i < 500; ++i) {
    bool any = false;
    for (pid_t p : peers) any = any || processAlive(p);
    if (!any) break;
    std::this_thread::sleep_for(10ms);
  }
  for (pid_t p : peers) REQUIRE_FALSE(processAlive(p));
  // Killed in the middle: the peers' logs stop short of the last round.
  CHECK_FALSE(contains(readFile(out / "peers" / "rank-0.jsonl"),
                       "\"round\":" + std::to_string(kRounds) + ","));
}

// `run --resume out`, which must succeed; returns its output.
std::string resume(const fs::path& file, const fs::path& out) {
  const auto r = runLauncher({kLauncher, "run", file.string(), "--resume", out.string()},
                             out.string() + ".resume.log");
  INFO(r.output);
  REQUIRE(r.exit == 0);
  return r.output;
}

// The round a resume's output says it resumed at.
uint64_t resumedAt(const std::string& output) {
  const std::string key = "at round ";
  const auto at = output.find(key);
  REQUIRE(at != std::string::npos);
  return std::stoull(output.substr(at + key.size()));
}

void copyDir(const fs::path& from, const fs::path& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

// Checkpoint file of rank r at `round`, rewritten with the state of `stateRound` (its header,
// peer-log length included, stays `round`'s).
void relabel(const fs::path& out, int rank, uint64_t round, uint64_t stateRound) {
  auto at = rt::readCheckpoint(rt::checkpointPath(out, rank, round));
  auto older = rt::readCheckpoint(rt::checkpointPath(out, rank, stateRound));
  REQUIRE(at);
  REQUIRE(older);
  writeFile(rt::checkpointPath(out, rank, round), rt::encodeCheckpoint(at->header, older->payload));
}

// The whole check for one scenario.
void checkKillAndResume(const std::string& name, const std::string& problemExtra,
                        const std::string& algorithm, const std::string& extra,
                        const std::string& faults, bool killPeersToo,
                        const std::string& problem = "") {
  const auto dir = tempDir("checkpoint-" + name);
  const auto plain = dir / "plain.json";
  const auto ckpt = dir / "ckpt.json";
  writeFile(plain, scenario(name, problemExtra, algorithm, extra, 0, faults, problem));
  writeFile(ckpt, scenario(name, problemExtra, algorithm, extra, 20, faults, problem));

  // The uninterrupted run (no checkpoint section: checkpoints change no number).
  const auto ref = runLauncher({kLauncher, "run", plain.string(), "--out", (dir / "ref").string()},
                               dir / "ref.log");
  INFO(ref.output);
  REQUIRE(ref.exit == 0);
  const auto expected = metricsWithoutWall(dir / "ref" / "metrics.jsonl");
  REQUIRE(expected.size() == kRounds / 10 + 1);
  CHECK_FALSE(fs::exists(dir / "ref" / "checkpoints"));

  const auto out = dir / "out";
  runAndKill(ckpt, out, 80, killPeersToo);
  copyDir(out, dir / "damaged");
  copyDir(out, dir / "wrong");
  const std::string logBefore = readFile(out / "peers" / "rank-2.jsonl");

  {  // resume continues the run bit for bit
    const std::string said = resume(ckpt, out);
    INFO(said);
    const uint64_t r = resumedAt(said);
    CHECK(r >= 80);
    CHECK(r % 20 == 0);
    CHECK(r < kRounds);
    CHECK(metricsWithoutWall(out / "metrics.jsonl") == expected);
    // The rounds before r were not run again: the peer log up to r is the killed run's, bytes
    // and wall times and all.
    const std::string logAfter = readFile(out / "peers" / "rank-2.jsonl");
    const auto upTo = logBefore.find("{\"round\":" + std::to_string(r) + ",");
    REQUIRE(upTo != std::string::npos);
    const auto lineEnd = logBefore.find('\n', upTo) + 1;
    CHECK(logAfter.compare(0, lineEnd, logBefore, 0, lineEnd) == 0);
    CHECK(logAfter.size() > lineEnd);
    const auto summary = nlohmann::json::parse(readFile(out / "summary.json"));
    CHECK(summary["final"]["round"] == kRounds);
    // Every rank went on writing checkpoints, to the last round.
    for (int rank = 0; rank < kNodes; ++rank) CHECK(newestRound(out, rank) == kRounds);

    // Resuming a finished run starts nothing and merges its logs again.
    const std::string again = resume(ckpt, out);
    CHECK(contains(again, "had finished"));
    CHECK(metricsWithoutWall(out / "metrics.jsonl") == expected);
  }

  {  // a damaged newest checkpoint is skipped and the one before it used
    const auto d = dir / "damaged";
    const uint64_t n0 = newestRound(d, 0), n1 = newestRound(d, 1);
    const auto bad0 = rt::checkpointPath(d, 0, n0), bad1 = rt::checkpointPath(d, 1, n1);
    std::string bytes = readFile(bad0);
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x40);
    writeFile(bad0, bytes);
    fs::resize_file(bad1, fs::file_size(bad1) / 2);
    const std::string said = resume(ckpt, d);
    INFO(said);
    CHECK(contains(said, "skipping checkpoint " + bad0.string() + ": checksum mismatch"));
    CHECK(contains(said, "skipping checkpoint " + bad1.string() + ": truncated"));
    CHECK(resumedAt(said) < std::min(n0, n1));
    CHECK(metricsWithoutWall(d / "metrics.jsonl") == expected);
  }

  {  // state from a round before, labelled as the round resumed at, ends elsewhere
    // What a resume that loaded the wrong state would give: the comparison above catches it.
    const auto w = dir / "wrong";
    uint64_t common = kRounds;
    for (int rank = 0; rank < kNodes; ++rank) common = std::min(common, newestRound(w, rank));
    for (int rank = 0; rank < kNodes; ++rank) relabel(w, rank, common, common - 20);
    const std::string said = resume(ckpt, w);
    REQUIRE(resumedAt(said) == common);
    const auto got = metricsWithoutWall(w / "metrics.jsonl");
    REQUIRE(got.size() == expected.size());
    const size_t k = common / 10;  // the line of round `common`: from the killed run's logs
    CHECK(std::equal(got.begin(), got.begin() + static_cast<long>(k) + 1, expected.begin()));
    CHECK(got.back() != expected.back());
  }
}

}  // namespace

TEST_CASE("exact diffusion killed with its launcher resumes bit for bit",
          "[integration][peers][checkpoint]") {
  checkKillAndResume("ed", "", R"({"kind": "exact_diffusion", "step_size": 0.5})", "", "",
                     /*killPeersToo=*/false);
}

TEST_CASE("CHOCO with QSGD, minibatches and corrupted links, every process killed, resumes "
          "bit for bit", "[integration][peers][checkpoint]") {
  checkKillAndResume(
      "choco", R"(, "estimator": {"kind": "sgd", "batch": 8})",
      R"({"kind": "choco", "step_size": 0.3, "gamma": 0.5})",
      R"(, "compression": {"kind": "qsgd", "bits": 3, "bucket": 4})",
      R"(, {"corrupt": 0.05})", /*killPeersToo=*/true);
}

TEST_CASE("diloco (outer momentum, the inner Adam's moments, error feedback's residual per "
          "fragment) resumes bit for bit", "[integration][peers][checkpoint][diloco]") {
  checkKillAndResume(
      "diloco", R"(, "estimator": {"kind": "sgd", "batch": 8})",
      R"({"kind": "diloco", "step_size": 0.05, "inner_steps": 4, "fragments": 2,
          "inner": {"kind": "adamw"}})",
      R"(, "compression": {"kind": "topk", "ratio": 0.5, "error_feedback": true})", "",
      /*killPeersToo=*/false);
}

TEST_CASE("codistillation (the neighbours' copies are state) resumes bit for bit",
          "[integration][peers][checkpoint][codistillation]") {
  if (::access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) != 0) {
    WARN("dataset-fashion-mnist is not installed: skipped");
    return;
  }
  // Exchanges every 7 rounds, so a checkpoint (every 20) falls between two: the copies it holds
  // are up to 6 rounds old and must come back for the rounds after the resume.
  checkKillAndResume(
      "codistil", "",
      R"({"kind": "dsgd", "step_size": 0.1,
          "codistillation": {"alpha": 0.5, "period": 7, "burn_in": 10}})",
      "", "", false,
      R"({"kind": "mlp", "layers": [784, 8, 10], "partition": "iid",
          "estimator": {"kind": "sgd", "batch": 8},
          "data": {"dataset": "fashion-mnist", "train_samples": 800, "test_samples": 200})");
}

TEST_CASE("with on_peer_loss \"continue\" a run resumed after a loss goes on without the lost "
          "rank, bit for bit", "[integration][peers][checkpoint][faults]") {
  // Rank 3 is killed by the script before round 60; the run is killed after the survivors'
  // checkpoints of round 100. Rank 3's newest checkpoint is of round 60, and the survivors' say
  // it is lost: the resume restarts ranks 0-2 only, with the membership they had.
  const auto dir = tempDir("checkpoint-loss");
  const auto plain = dir / "plain.json", ckpt = dir / "ckpt.json";
  const std::string loss = R"(, {"kill": 3, "at_round": 60})";
  std::string text = scenario("loss", "", R"({"kind": "exact_diffusion", "step_size": 0.5})", "",
                              0, loss);
  text.replace(text.find("\"faults\": {"), 11, R"("faults": {"on_peer_loss": "continue", )");
  writeFile(plain, text);
  text.replace(text.rfind('}'), 1, R"(, "checkpoint": {"every": 20}})");
  writeFile(ckpt, text);
  const auto ref = runLauncher({kLauncher, "run", plain.string(), "--out", (dir / "ref").string()},
                               dir / "ref.log");
  INFO(ref.output);
  REQUIRE(ref.exit == 0);
  const auto out = dir / "out";
  runAndKill(ckpt, out, 100, /*killPeersToo=*/false, /*waitRanks=*/3);
  CHECK(newestRound(out, 3) == 60);
  const std::string said = resume(ckpt, out);
  INFO(said);
  CHECK(resumedAt(said) >= 100);
  CHECK(contains(said, "rank 3, lost before it, stay out"));
  CHECK(metricsWithoutWall(out / "metrics.jsonl") ==
        metricsWithoutWall(dir / "ref" / "metrics.jsonl"));
  const std::string changes = readFile(out / "membership.jsonl");
  CHECK(contains(changes, R"("lost":{"round":60,"rank":3,)"));
  CHECK(contains(changes, R"("left":[3])"));
  for (int rank = 0; rank < 3; ++rank) CHECK(newestRound(out, rank) == kRounds);
}

TEST_CASE("run --resume refuses a folder without checkpoints and another scenario's",
          "[integration][checkpoint]") {
  const auto dir = tempDir("checkpoint-refuse");
  const auto file = dir / "s.json";
  writeFile(file, scenario("refuse", "", R"({"kind": "exact_diffusion", "step_size": 0.5})", "",
                           20));
  fs::create_directories(dir / "empty");
  auto r = runLauncher({kLauncher, "run", file.string(), "--resume", (dir / "empty").string()},
                       dir / "empty.log");
  CHECK(r.exit == 2);
  CHECK(contains(r.output, "holds no checkpoint"));
  // Checkpoints of the same scenario with another seed.
  const auto out = dir / "out";
  rt::CheckpointHeader h;
  h.scenarioHash = 0x1234;
  h.round = 20;
  for (int rank = 0; rank < kNodes; ++rank) {
    h.rank = rank;
    REQUIRE(rt::writeCheckpoint(out, h, "", 2).isOk());
  }
  r = runLauncher({kLauncher, "run", file.string(), "--resume", out.string()}, dir / "other.log");
  CHECK(r.exit == 2);
  CHECK(contains(r.output, "belong to another scenario"));
  r = runLauncher({kLauncher, "run", file.string(), "--resume", (dir / "none").string()},
                  dir / "none.log");
  CHECK(r.exit == 2);
  // A bad checkpoint section is refused like any scenario error: file, JSON path, exit 2.
  const auto bad = dir / "bad.json";
  std::string text = readFile(file);
  text.replace(text.find("\"keep\": 3"), 9, "\"keep\": 1");
  writeFile(bad, text);
  r = runLauncher({kLauncher, "validate", bad.string()}, dir / "bad.log");
  CHECK(r.exit == 2);
  CHECK(contains(r.output, bad.string() + ": /checkpoint/keep: must be between 2 and"));
}

}  // namespace starling_checkpoint_test
