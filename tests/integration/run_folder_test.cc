// The run folder when more than one actor touches it, and the launcher's children when the
// launcher dies: nothing Starling did not write is deleted, one launcher holds a folder at a time,
// merge refuses logs it cannot merge honestly (two runs mixed, a trainer's), every file Starling
// reads back is untrusted (a mistyped field, a FIFO, /dev/zero), and no trainer outlives its
// launcher however the launcher ends. Real node-launcher processes.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "process_helpers.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_run_folder_test {

using namespace starling::testing;
using namespace std::chrono_literals;

namespace {

const std::string kLauncher = NODE_LAUNCHER;

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::string leastSquares(int rounds, const std::string& extra = "") {
  return R"({"schema_version": 1, "name": "rf", "nodes": 4, "seed": 1, "rounds": )" +
         std::to_string(rounds) + R"(, "log_every": 10, "topology": {"kind": "ring"},
    "problem": {"kind": "least_squares", "l2": 0.1,
                "data": {"synthetic": {"samples": 40, "features": 3}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.3})" + extra + "}";
}

// A scenario for a trainer (no problem, no rounds): the launcher starts COMMAND per node.
std::string trainerScenario(int nodes) {
  return R"({"schema_version": 1, "name": "tr", "nodes": )" + std::to_string(nodes) +
         R"(, "seed": 1, "topology": {"kind": "ring"},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.5}})";
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

void writeLines(const fs::path& path, const std::vector<std::string>& ls) {
  std::string text;
  for (const auto& l : ls) text += l + "\n";
  writeFile(path, text);
}

// Waits (at most `timeout`) until none of `pids` is alive.
bool allGone(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool any = false;
    for (pid_t p : pids) any = any || processAlive(p);
    if (!any) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(50ms);
  }
}

// The pids the trainers wrote into `dir` (one file per rank, "shell sleeper"), once all are there.
std::vector<pid_t> trainerPids(const fs::path& dir, int nodes, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<pid_t> pids;
    for (int r = 0; r < nodes; ++r) {
      std::istringstream in(readFile(dir / ("pids-" + std::to_string(r))));
      pid_t a = 0, b = 0;
      if (in >> a >> b) pids.insert(pids.end(), {a, b});
    }
    if (static_cast<int>(pids.size()) == 2 * nodes) return pids;
    if (std::chrono::steady_clock::now() >= end) return pids;
    std::this_thread::sleep_for(50ms);
  }
}

}  // namespace

TEST_CASE("a fresh run deletes nothing Starling did not write", "[integration][run_folder]") {
  const auto dir = tempDir("rf-fresh");
  const auto file = dir / "s.json";
  writeFile(file, leastSquares(30));

  SECTION("a non-empty folder that is not a run folder is refused, untouched") {
    const auto out = dir / "mine";
    fs::create_directories(out / "checkpoints");
    writeFile(out / "notes.txt", "my notes");
    writeFile(out / "checkpoints" / "model.pt", "my model");
    const auto r = runLauncher({kLauncher, "run", file.string(), "--out", out.string()},
                               dir / "mine.log");
    INFO(r.output);
    CHECK(r.exit == 2);
    CHECK(contains(r.output, "--out " + out.string()));
    CHECK(contains(r.output, "not a Starling run folder"));
    CHECK(readFile(out / "notes.txt") == "my notes");
    CHECK(readFile(out / "checkpoints" / "model.pt") == "my model");
    CHECK_FALSE(fs::exists(out / "metrics.jsonl"));
    // simulate and a trainer's run refuse it the same way.
    CHECK(runLauncher({kLauncher, "simulate", file.string(), "--out", out.string()},
                      dir / "mine-sim.log").exit == 2);
    writeFile(dir / "t.json", trainerScenario(2));
    CHECK(runLauncher({kLauncher, "run", (dir / "t.json").string(), "--out", out.string(), "--",
                       "/bin/true"},
                      dir / "mine-tr.log").exit == 2);
    CHECK(readFile(out / "checkpoints" / "model.pt") == "my model");
  }

  SECTION("in a run folder, only Starling's own files go") {
    const auto out = dir / "run";
    REQUIRE(runLauncher({kLauncher, "run", file.string(), "--out", out.string()}, dir / "a.log")
                .exit == 0);
    const auto run = nlohmann::json::parse(readFile(out / "run.json"));
    REQUIRE(run["files"].is_array());
    CHECK(std::find(run["files"].begin(), run["files"].end(), "peers/rank-*.jsonl") !=
          run["files"].end());
    // The user's files beside the run's, a stale Starling checkpoint, and a run.json doctored
    // to list a file outside Starling's patterns.
    fs::create_directories(out / "checkpoints" / "rank-0");
    writeFile(out / "checkpoints" / "rank-0" / "round-000000005.ckpt", "stale");
    writeFile(out / "checkpoints" / "best.pt", "mine");
    writeFile(out / "peers" / "notes.txt", "mine");
    writeFile(out / "plot.png", "mine");
    auto doctored = run;
    doctored["files"].push_back("plot.png");
    doctored["files"].push_back("../victim");
    writeFile(out / "run.json", doctored.dump());
    writeFile(dir / "victim", "mine");
    const auto again = runLauncher({kLauncher, "run", file.string(), "--out", out.string()},
                                   dir / "b.log");
    INFO(again.output);
    REQUIRE(again.exit == 0);
    CHECK_FALSE(fs::exists(out / "checkpoints" / "rank-0" / "round-000000005.ckpt"));
    CHECK_FALSE(fs::exists(out / "checkpoints" / "rank-0"));  // it held only Starling's file
    CHECK(readFile(out / "checkpoints" / "best.pt") == "mine");
    CHECK(readFile(out / "peers" / "notes.txt") == "mine");
    CHECK(readFile(out / "plot.png") == "mine");
    CHECK(readFile(dir / "victim") == "mine");
    CHECK(fs::exists(out / "peers" / "rank-3.jsonl"));
    CHECK(lines(readFile(out / "metrics.jsonl")).size() == 4);  // rounds 0, 10, 20, 30
  }
}

TEST_CASE("one launcher holds a run folder at a time", "[integration][run_folder]") {
  const auto dir = tempDir("rf-lock");
  writeFile(dir / "t.json", trainerScenario(2));
  const auto out = dir / "out";
  // Trainers that only sleep: the first launcher holds the folder while they do.
  auto first = spawn({kLauncher, "run", (dir / "t.json").string(), "--out", out.string(), "--",
                      "/bin/sleep", "30"},
                     dir / "first.log");
  // The lock file names the holder once the launcher has it.
  const auto end = std::chrono::steady_clock::now() + 20s;
  while (!contains(readFile(out / ".starling.lock"), "pid " + std::to_string(first->pid)) &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(contains(readFile(out / ".starling.lock"), "pid " + std::to_string(first->pid)));
  writeFile(dir / "s.json", leastSquares(30, R"(, "checkpoint": {"every": 10})"));
  const std::vector<std::vector<std::string>> others = {
      {kLauncher, "run", (dir / "s.json").string(), "--out", out.string()},
      {kLauncher, "run", (dir / "s.json").string(), "--resume", out.string()},
      {kLauncher, "simulate", (dir / "s.json").string(), "--out", out.string()},
      {kLauncher, "merge", (dir / "s.json").string(), "--out", out.string()},
  };
  for (const auto& args : others) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = runLauncher(args, dir / "other.log");
    INFO(args[1] << ": " << r.output);
    CHECK(r.exit == 2);
    CHECK(contains(r.output, "in use by node-launcher pid " + std::to_string(first->pid)));
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  }
  CHECK(first->waitStatus == std::nullopt);  // untouched by the refused ones
  first->kill(SIGTERM);
  REQUIRE(first->waitFor(30s));
  // Released with its holder: the folder can be used again.
  writeFile(dir / "fresh.json", leastSquares(20));
  const auto next = runLauncher({kLauncher, "simulate", (dir / "fresh.json").string(), "--out",
                                 out.string()},
                                dir / "next.log");
  INFO(next.output);
  CHECK(next.exit == 0);
}

TEST_CASE("merge refuses logs it cannot merge honestly, and names what is wrong",
          "[integration][run_folder]") {
  const auto dir = tempDir("rf-merge");
  const auto file = dir / "s.json";
  writeFile(file, leastSquares(30));
  const auto a = dir / "a", b = dir / "b";
  REQUIRE(runLauncher({kLauncher, "run", file.string(), "--out", a.string()}, dir / "a.log").exit ==
          0);
  REQUIRE(runLauncher({kLauncher, "run", file.string(), "--out", b.string()}, dir / "b.log").exit ==
          0);
  const auto headerOf = [](const fs::path& log) {
    return nlohmann::json::parse(lines(readFile(log)).front());
  };
  const auto ha = headerOf(a / "peers" / "rank-0.jsonl");
  const auto hb = headerOf(b / "peers" / "rank-0.jsonl");
  CHECK(ha["run_id"].get<std::string>().size() == 16);
  CHECK(ha["run_id"] != hb["run_id"]);
  CHECK(ha["trainer"] == false);
  CHECK(headerOf(a / "peers" / "rank-3.jsonl")["run_id"] == ha["run_id"]);
  // The untouched folder merges.
  CHECK(runLauncher({kLauncher, "merge", file.string(), "--out", a.string()}, dir / "m0.log")
            .exit == 0);

  SECTION("the peer logs of two runs mixed in one folder") {
    fs::copy_file(b / "peers" / "rank-2.jsonl", a / "peers" / "rank-2.jsonl",
                  fs::copy_options::overwrite_existing);
    const std::string before = readFile(a / "metrics.jsonl");
    const auto r = runLauncher({kLauncher, "merge", file.string(), "--out", a.string()},
                               dir / "m1.log");
    INFO(r.output);
    CHECK(r.exit == 1);
    CHECK(contains(r.output, "different runs of the same scenario"));
    CHECK(contains(r.output, hb["run_id"].get<std::string>()));
    CHECK(readFile(a / "metrics.jsonl") == before);  // nothing written
  }
  SECTION("a trainer's logs with a scenario's problem") {
    for (int r = 0; r < 4; ++r) {
      auto ls = lines(readFile(a / "peers" / ("rank-" + std::to_string(r) + ".jsonl")));
      auto h = nlohmann::json::parse(ls.front());
      h["trainer"] = true;
      ls.front() = h.dump();
      writeLines(a / "peers" / ("rank-" + std::to_string(r) + ".jsonl"), ls);
    }
    const std::string before = readFile(a / "metrics.jsonl");
    const auto r = runLauncher({kLauncher, "merge", file.string(), "--out", a.string()},
                               dir / "m2.log");
    INFO(r.output);
    CHECK(r.exit == 2);
    CHECK(contains(r.output, "is a trainer's log"));
    CHECK(readFile(a / "metrics.jsonl") == before);
  }
  SECTION("a field of the wrong type names the file and the line") {
    const auto log = a / "peers" / "rank-1.jsonl";
    auto ls = lines(readFile(log));
    REQUIRE(ls.size() > 3);
    auto j = nlohmann::json::parse(ls[2]);
    j["bytes_sent"] = "7";
    ls[2] = j.dump();
    writeLines(log, ls);
    const auto r = runLauncher({kLauncher, "merge", file.string(), "--out", a.string()},
                               dir / "m3.log");
    INFO(r.output);
    CHECK(r.exit == 1);  // not 134: no uncaught exception
    CHECK(contains(r.output, log.string() + ":3: a field of the wrong type"));
    // In a failure line too, and in the header (where --resume reads seed and rounds).
    ls[2] = R"({"failed": {"round": "7", "code": "timeout", "message": "m"}})";
    writeLines(log, ls);
    const auto f = runLauncher({kLauncher, "merge", file.string(), "--out", a.string()},
                               dir / "m4.log");
    INFO(f.output);
    CHECK(f.exit == 1);
    CHECK(contains(f.output, log.string() + ":3: a field of the wrong type"));
    auto h = nlohmann::json::parse(ls[0]);
    h["seed"] = "1";
    ls[0] = h.dump();
    writeLines(log, ls);
    const auto g = runLauncher({kLauncher, "merge", file.string(), "--out", a.string()},
                               dir / "m5.log");
    INFO(g.output);
    CHECK(g.exit == 1);
    CHECK(contains(g.output, log.string() + ":1: malformed header"));
  }
  SECTION("a FIFO in place of a peer log is refused at once") {
    const auto log = a / "peers" / "rank-1.jsonl";
    fs::remove(log);
    REQUIRE(mkfifo(log.c_str(), 0644) == 0);
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = runLauncher({kLauncher, "merge", file.string(), "--out", a.string()},
                               dir / "m6.log", 30s);
    INFO(r.output);
    CHECK(r.exit != 0);
    CHECK(contains(r.output, "a FIFO, not a regular file"));
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  }
}

TEST_CASE("--resume takes checkpoints and logs as untrusted input", "[integration][run_folder]") {
  const auto dir = tempDir("rf-resume");
  const auto file = dir / "s.json";
  writeFile(file, leastSquares(40, R"(, "checkpoint": {"every": 10, "keep": 2})"));
  const auto out = dir / "out";
  REQUIRE(runLauncher({kLauncher, "run", file.string(), "--out", out.string()}, dir / "a.log")
              .exit == 0);
  // The newest checkpoint of rank 0 becomes a link to /dev/zero and rank 1's a FIFO: each is
  // skipped at once, with its name, and the run resumes from the round before.
  const auto ck0 = out / "checkpoints" / "rank-0" / "round-000000040.ckpt";
  const auto ck1 = out / "checkpoints" / "rank-1" / "round-000000040.ckpt";
  REQUIRE(fs::exists(ck0));
  fs::remove(ck0);
  fs::create_symlink("/dev/zero", ck0);
  fs::remove(ck1);
  REQUIRE(mkfifo(ck1.c_str(), 0644) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = runLauncher({kLauncher, "run", file.string(), "--resume", out.string()},
                             dir / "b.log", 60s);
  INFO(r.output);
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);
  CHECK(contains(r.output, ck0.string() + ": a character device, not a regular file"));
  CHECK(contains(r.output, ck1.string() + ": a FIFO, not a regular file"));
  CHECK(contains(r.output, "resuming " + out.string() + " at round 30"));
  CHECK(r.exit == 0);
}

TEST_CASE("a trainer's output is streamed with its rank and kept in the run folder",
          "[integration][run_folder]") {
  const auto dir = tempDir("rf-output");
  writeFile(dir / "t.json", trainerScenario(3));
  const auto out = dir / "out";
  const auto r = runLauncher({kLauncher, "run", (dir / "t.json").string(), "--out", out.string(),
                              "--", "/bin/sh", "-c",
                              "echo epoch 1 of rank $STARLING_RANK; echo warn $STARLING_RANK >&2"},
                             dir / "a.log");
  INFO(r.output);
  CHECK(r.exit == 0);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string k = std::to_string(rank);
    CHECK(contains(r.output, "[rank " + k + "] epoch 1 of rank " + k + "\n"));
    CHECK(contains(r.output, "[rank " + k + "] warn " + k + "\n"));
    const std::string kept = readFile(out / "peers" / ("rank-" + k + ".out"));
    CHECK(contains(kept, "epoch 1 of rank " + k + "\n"));
    CHECK(contains(kept, "warn " + k + "\n"));
  }
}

TEST_CASE("nothing of a run survives its launcher", "[integration][run_folder]") {
  const auto dir = tempDir("rf-orphans");
  writeFile(dir / "t.json", trainerScenario(2));
  // Each trainer is a shell that ignores SIGTERM (and so does the child it starts: an ignored
  // signal stays ignored across exec), records both pids, and waits: the worst case of
  // `bash -c "python3 w.py; echo done"` with a trainer that ignores SIGTERM.
  const std::string script = "trap '' TERM; sleep 300 & echo $$ $! > " + dir.string() +
                             "/pids-$STARLING_RANK; wait; wait; echo done";
  const auto launch = [&](const std::string& name) {
    for (int r = 0; r < 2; ++r) fs::remove(dir / ("pids-" + std::to_string(r)));
    return spawn({kLauncher, "run", (dir / "t.json").string(), "--out", (dir / name).string(),
                  "--", "/bin/bash", "-c", script},
                 dir / (name + ".log"));
  };
  for (int signo : {SIGKILL, SIGTERM, SIGINT}) {
    INFO("the launcher gets signal " << signo);
    auto p = launch("out-" + std::to_string(signo));
    const auto pids = trainerPids(dir, 2, 30s);
    REQUIRE(pids.size() == 4);
    for (pid_t pid : pids) CHECK(processAlive(pid));
    p->kill(signo);
    // The launcher ends within its grace periods (3 s + 3 s), and takes everything with it.
    CHECK(p->waitFor(20s));
    INFO(p->output());
    CHECK(allGone(pids, 20s));
    if (signo != SIGKILL) CHECK(p->exitCode() == 1);
  }
}

TEST_CASE("configuration that would stop the peers is refused before any starts",
          "[integration][run_folder]") {
  const auto dir = tempDir("rf-preflight");
  const auto withEnv = [&](const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env, const std::string& log) {
    auto p = spawn(args, dir / log, env);
    REQUIRE(p->waitFor(60s));
    return Outcome{p->exitCode(), p->output()};
  };
  const auto expectRefused = [&](const fs::path& file, const std::string& words,
                                 const std::map<std::string, std::string>& env = {}) {
    INFO(file.filename().string() << ": " << words);
    const auto v = withEnv({kLauncher, "validate", file.string()}, env, "v.log");
    INFO(v.output);
    CHECK(v.exit == 2);
    CHECK(contains(v.output, words));
    const auto out = dir / ("out-" + file.stem().string());
    const auto r = withEnv({kLauncher, "run", file.string(), "--out", out.string()}, env, "r.log");
    INFO(r.output);
    CHECK(r.exit == 2);
    CHECK(contains(r.output, words));
    CHECK_FALSE(fs::exists(out / "peers"));  // no peer started
  };
  // encrypt without a key, in the scenario or the environment.
  writeFile(dir / "encrypt.json", leastSquares(20, R"(, "security": {"encrypt": true})"));
  expectRefused(dir / "encrypt.json", "/security/encrypt: needs the cluster's key");
  // STARLING_KEY_FILE that names no file, or a file others may read.
  writeFile(dir / "plain.json", leastSquares(20));
  expectRefused(dir / "plain.json", "STARLING_KEY_FILE: key file " + (dir / "none.key").string(),
                {{"STARLING_KEY_FILE", (dir / "none.key").string()}});
  writeFile(dir / "open.key", std::string(32, 'k'));
  REQUIRE(::chmod((dir / "open.key").c_str(), 0644) == 0);
  expectRefused(dir / "plain.json", "are too open", {{"STARLING_KEY_FILE", (dir / "open.key").string()}});
  // Two ranks on one host:port.
  writeFile(dir / "twice.json",
            leastSquares(20, R"(, "peers": {"addresses": ["127.0.0.1:24001", "127.0.0.1:24002",
                                  "127.0.0.1:24001", "127.0.0.1:24003"]})"));
  expectRefused(dir / "twice.json",
                "/peers/addresses/2: rank 2 and rank 0 would both listen on 127.0.0.1:24001");
  // An address no interface of this machine holds: `validate` cannot know where the peers will
  // run, `run` starts them all here.
  writeFile(dir / "away.json",
            leastSquares(20, R"(, "peers": {"addresses": ["127.0.0.1:24001", "198.18.255.254:24002",
                                  "127.0.0.1:24003", "127.0.0.1:24004"]})"));
  CHECK(withEnv({kLauncher, "validate", (dir / "away.json").string()}, {}, "v2.log").exit == 0);
  const auto away = withEnv({kLauncher, "run", (dir / "away.json").string(), "--out",
                             (dir / "out-away").string()},
                            {}, "r2.log");
  INFO(away.output);
  CHECK(away.exit == 2);
  CHECK(contains(away.output, "/peers/addresses/1: 198.18.255.254:24002: no interface of this "
                              "machine holds 198.18.255.254"));
  CHECK_FALSE(fs::exists(dir / "out-away" / "peers"));
}

}  // namespace starling_run_folder_test
