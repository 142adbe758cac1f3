// starling::Peer (include/starling/peer.h): 4 Peers on 4 threads of this process, over the
// in-process transport and over UCX loopback. step() fed with the gradient a "trainer" computes
// from the same local objective the simulator uses must give the simulator's iterates bit for bit
// for every algorithm (so every oracle call is at the current model, once per round); mix() is
// checked against sums written out by hand in peer_mix_test.cc.
#include <starling/peer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "optim/problem.h"
#include "peer_testing.h"
#include "runtime/launcher.h"
#include "runtime/simulator.h"
#include "runtime/trainer_merge.h"
#include "scenario/experiment.h"
#include "scenario/scenario.h"

using namespace starling;
using Catch::Matchers::Contains;
using namespace starling::peer_testing;

namespace {

// Each rank trains `steps` steps with the gradient of its own shard of `e` (what the simulator's
// node computes) through Peer::step of the Peer `make(rank)` returns (checked to say its rank and
// the node count), and returns its final model.
std::vector<std::vector<double>> trainRanks(
    const scenario::Experiment& e, uint64_t steps,
    const std::function<Result<std::unique_ptr<Peer>>(int rank)>& make) {
  const scenario::Scenario& s = e.scenario;
  std::vector<std::vector<double>> models(s.nodes);
  const auto statuses = onThreads(s.nodes, [&](int rank) -> Status {
    auto peer = make(rank);
    if (!peer) return peer.status();
    if ((*peer)->rank() != rank || (*peer)->nodes() != s.nodes) {
      return Status(StatusCode::kInternal, "rank or nodes wrong");
    }
    auto objective = optim::LocalObjective<double>::create(
        s.problem.spec, e.data.subset(e.parts[rank]), e.data.samples(), s.nodes);
    std::vector<double> x(static_cast<size_t>(e.data.features), 0.0), g(x.size());
    for (uint64_t t = 0; t < steps; ++t) {
      objective->gradient(x, g);  // the trainer's own backward pass
      STARLING_RETURN_IF_ERROR((*peer)->step(std::span<double>(x), std::span<const double>(g)));
    }
    models[rank] = x;
    return (*peer)->close();
  });
  for (const auto& st : statuses) {
    INFO(st.toString());
    REQUIRE(st.isOk());
  }
  return models;
}

// trainRanks with Peers made from the scenario file at `path`.
std::vector<std::vector<double>> trainWithPeers(const scenario::Experiment& e,
                                                const std::string& path, uint64_t steps,
                                                const std::vector<std::string>& addresses = {}) {
  return trainRanks(e, steps, [&](int rank) {
    PeerOptions po;
    po.addresses = addresses;
    return Peer::fromScenario(path, rank, po);
  });
}

scenario::Experiment experiment(const std::filesystem::path& path) {
  auto s = scenario::loadScenario(path.string());
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  auto e = scenario::prepareExperiment(*s);
  INFO(e.status().toString());
  REQUIRE(e.isOk());
  return std::move(*e);
}

}  // namespace

TEST_CASE("step with the trainer's gradient gives the simulator's iterates bit for bit",
          "[api][unit]") {
  const uint64_t kRounds = 25;
  const std::vector<std::pair<const char*, const char*>> algorithms = {
      {"dsgd", R"({"kind": "dsgd", "step_size": 0.1})"},
      {"exact_diffusion", R"({"kind": "exact_diffusion", "step_size": 0.1})"},
      {"gradient_tracking", R"({"kind": "gradient_tracking", "step_size": 0.05})"},
      {"choco", R"({"kind": "choco", "step_size": 0.1, "gamma": 0.8})"},
      {"nids", R"({"kind": "nids", "step_size": 0.1})"},
      {"lead", R"({"kind": "lead", "step_size": 0.1, "gamma": 1, "alpha": 0.5})"},
      {"prox_lead", R"({"kind": "prox_lead", "step_size": 0.1, "gamma": 1, "alpha": 0.5})"},
  };
  for (const auto& [name, algorithm] : algorithms) {
    DYNAMIC_SECTION(name) {
      const auto path = writeScenario(name, ring4(algorithm, kRounds, kInproc));
      const auto e = experiment(path);
      auto sim = runtime::simulate(e, {});
      REQUIRE(sim.isOk());
      // nids, lead and prox_lead: the first step is their local step from x0 (no round).
      const std::string n = name;
      const bool warmup = n == "nids" || n == "lead" || n == "prox_lead";
      const auto models = trainWithPeers(e, path.string(), kRounds + (warmup ? 1 : 0));
      for (int r = 0; r < 4; ++r) {
        CAPTURE(r);
        REQUIRE(models[r].size() == sim->models[r].size());
        for (size_t k = 0; k < models[r].size(); ++k) {
          CAPTURE(k);
          CHECK(models[r][k] == sim->models[r][k]);  // bit for bit
        }
      }
    }
  }
}

TEST_CASE("step over UCX loopback gives the simulator's iterates", "[api][unit][ucx]") {
  auto ports = runtime::freeLoopbackPorts(4);
  REQUIRE(ports.isOk());
  std::vector<std::string> addresses;
  for (uint16_t p : *ports) addresses.push_back("127.0.0.1:" + std::to_string(p));
  const auto path = writeScenario(
      "ucx", ring4(R"({"kind": "exact_diffusion", "step_size": 0.1})", 20, R"({"kind": "ucx"})"));
  const auto e = experiment(path);
  auto sim = runtime::simulate(e, {});
  REQUIRE(sim.isOk());
  const auto models = trainWithPeers(e, path.string(), 20, addresses);
  for (int r = 0; r < 4; ++r) CHECK(models[r] == sim->models[r]);
}

TEST_CASE("Peer refuses what it cannot do, with Starling's messages", "[api][unit]") {
  const auto path = writeScenario(
      "errors", ring4(R"({"kind": "exact_diffusion", "step_size": 0.1})", 1, kInproc,
                      R"(, "peers": {"addresses": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"]})"));
  SECTION("a rank outside the scenario") {
    auto peer = Peer::fromScenario(path.string(), 4);
    REQUIRE_FALSE(peer);
    CHECK(peer.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(peer.status().toString(), Contains("rank 4 is not in 0..3"));
  }
  SECTION("a missing scenario") {
    auto peer = Peer::fromScenario("/nonexistent/s.json", 0);
    REQUIRE_FALSE(peer);
    CHECK_THAT(peer.status().toString(), Contains("/nonexistent/s.json"));
  }
  SECTION("another element type or dimension after the first call") {
    auto peer = Peer::fromScenario(path.string(), 0);
    REQUIRE(peer);
    std::vector<double> x(3, 0.0);
    std::vector<float> xf(3, 0.0f);
    // mixStart only starts the round: nothing waits for the neighbours here.
    REQUIRE((*peer)->mixStart(std::span<double>(x)).isOk());
    const Status typed = (*peer)->mixStart(std::span<float>(xf));
    CHECK(typed.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(typed.message(), Contains("float32"));
    std::vector<double> y(4, 0.0);
    const Status sized = (*peer)->mixStart(std::span<double>(y));
    CHECK(sized.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(sized.message(), Contains("4 parameters"));
  }
  SECTION("step with mismatched gradient length") {
    auto peer = Peer::fromScenario(path.string(), 0);
    REQUIRE(peer);
    std::vector<double> x(3, 0.0), g(2, 0.0);
    const Status st = (*peer)->step(std::span<double>(x), std::span<const double>(g));
    CHECK(st.code() == StatusCode::kInvalidArgument);
  }
  SECTION("metric names") {
    auto peer = Peer::fromScenario(path.string(), 0);
    REQUIRE(peer);
    CHECK((*peer)->log("loss", 0.5).isOk());
    CHECK((*peer)->log("rel_error", 0.5).code() == StatusCode::kInvalidArgument);
    CHECK((*peer)->log("bad name", 0.5).code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("a neighbour with another dimension is named in the error", "[api][unit][ucx]") {
  auto ports = runtime::freeLoopbackPorts(2);
  REQUIRE(ports.isOk());
  const auto path = writeScenario("mismatch", R"({"schema_version": 1, "name": "mismatch",
      "nodes": 2, "topology": {"kind": "line"},
      "algorithm": {"kind": "dsgd", "step_size": 0.1},
      "transport": {"kind": "ucx", "round_timeout_ms": 1500},
      "peers": {"addresses": ["127.0.0.1:)" + std::to_string((*ports)[0]) +
                                                   R"(", "127.0.0.1:)" +
                                                   std::to_string((*ports)[1]) + R"("]}})");
  std::vector<Status> st = onThreads(2, [&](int rank) -> Status {
    auto peer = Peer::fromScenario(path.string(), rank);
    if (!peer) return peer.status();
    std::vector<double> x(rank == 0 ? 5 : 6, 1.0), g(x.size(), 0.0);
    return (*peer)->step(std::span<double>(x), std::span<const double>(g));
  });
  for (int r = 0; r < 2; ++r) {
    INFO(st[r].toString());
    // The receive timed out (a well-formed frame of another size could be a forgery, so it never
    // fails a round by itself); the error says why.
    CHECK(st[r].code() == StatusCode::kTimeout);
    CHECK_THAT(st[r].message(), Contains("rank " + std::to_string(1 - r) + " sent " +
                                         std::to_string(r == 0 ? 6 : 5) + " values"));
  }
}

// With the cluster's key every frame's MAC is verified, so a frame of another size is the
// neighbour's own: the round fails at once, naming both sizes, instead of at the round timeout.
TEST_CASE("with a key, a neighbour with another dimension fails the round at once",
          "[api][unit][ucx]") {
  auto ports = runtime::freeLoopbackPorts(2);
  REQUIRE(ports.isOk());
  const auto key = std::filesystem::temp_directory_path() /
                   ("starling-mismatch-" + std::to_string(::getpid()) + ".key");
  {
    std::ofstream(key) << std::string(32, 'k');
  }
  REQUIRE(::chmod(key.c_str(), 0600) == 0);
  const auto path = writeScenario("mismatch-key", R"({"schema_version": 1, "name": "mismatch-key",
      "nodes": 2, "topology": {"kind": "line"},
      "algorithm": {"kind": "dsgd", "step_size": 0.1},
      "transport": {"kind": "ucx", "round_timeout_ms": 10000},
      "security": {"key_file": ")" + key.string() + R"("},
      "peers": {"addresses": ["127.0.0.1:)" + std::to_string((*ports)[0]) +
                                                   R"(", "127.0.0.1:)" +
                                                   std::to_string((*ports)[1]) + R"("]}})");
  std::vector<std::chrono::steady_clock::duration> took(2);
  std::vector<Status> st = onThreads(2, [&](int rank) -> Status {
    const auto t0 = std::chrono::steady_clock::now();
    auto peer = Peer::fromScenario(path.string(), rank);
    if (!peer) return peer.status();
    std::vector<double> x(rank == 0 ? 5 : 6, 1.0), g(x.size(), 0.0);
    const Status s = (*peer)->step(std::span<double>(x), std::span<const double>(g));
    took[rank] = std::chrono::steady_clock::now() - t0;
    return s;
  });
  // The rank that gets the other's frame first fails at once, naming both sizes (the other may
  // have closed before its own frame went: it then waits for it as before).
  int named = 0;
  for (int r = 0; r < 2; ++r) {
    INFO(st[r].toString());
    CHECK_FALSE(st[r].isOk());
    if (st[r].code() != StatusCode::kInvalidArgument) continue;
    ++named;
    CHECK_THAT(st[r].message(), Contains("rank " + std::to_string(1 - r) + " sent " +
                                         std::to_string(r == 0 ? 6 : 5) + " values"));
    CHECK_THAT(st[r].message(), Contains("the transport vouches for it"));
    CHECK(took[r] < std::chrono::seconds(5));  // not the 10 s round timeout
  }
  CHECK(named >= 1);
  std::filesystem::remove(key);
}

TEST_CASE("step refuses parameters changed behind its back", "[api][unit]") {
  const auto path = writeScenario(
      "changed", R"({"schema_version": 1, "name": "changed", "nodes": 1,
      "topology": {"kind": "ring"}, "algorithm": {"kind": "dsgd", "step_size": 0.5},
      "transport": {"kind": "inproc"}})");
  auto peer = Peer::fromScenario(path.string(), 0);
  REQUIRE(peer);
  std::vector<double> x = {1.0, 2.0}, g = {1.0, 1.0};
  REQUIRE((*peer)->step(std::span<double>(x), std::span<const double>(g)).isOk());
  CHECK(x == std::vector<double>{0.5, 1.5});  // one node: x - eta g
  CHECK((*peer)->round() == 1);
  x[1] = 7.0;
  const Status st = (*peer)->step(std::span<double>(x), std::span<const double>(g));
  CHECK(st.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(st.message(), Contains("element 1"));
}

TEST_CASE("a non-finite gradient given to step() is named as the trainer's, not a step size",
          "[api][unit]") {
  const auto path = writeScenario(
      "nan-grad", R"({"schema_version": 1, "name": "nan-grad", "nodes": 1,
      "topology": {"kind": "ring"}, "algorithm": {"kind": "dsgd", "step_size": 0.5},
      "transport": {"kind": "inproc"}})");
  auto peer = Peer::fromScenario(path.string(), 0);
  REQUIRE(peer);
  std::vector<double> x = {1.0, 2.0, 3.0}, g = {1.0, std::nan(""), 1.0};
  const Status st = (*peer)->step(std::span<double>(x), std::span<const double>(g));
  INFO(st.toString());
  CHECK(st.code() == StatusCode::kDiverged);
  CHECK_THAT(st.message(), Contains("the gradient given to step() was not finite (element 1 is "
                                    "nan)"));
  // A finite gradient that makes the model diverge keeps the step-size advice.
  auto other = Peer::fromScenario(path.string(), 0);
  REQUIRE(other);
  std::vector<double> y = {1.0}, big = {1e308};
  const Status huge = (*other)->step(std::span<double>(y), std::span<const double>(big), 1e10);
  INFO(huge.toString());
  CHECK(huge.code() == StatusCode::kDiverged);
  CHECK_THAT(huge.message(), !Contains("the gradient given to step()"));
}

TEST_CASE("a trainer's peer logs merge into consensus distance and averaged metrics",
          "[api][unit]") {
  // d above kFullModelLogMaxDim: the peers log the consensus sketch, and merge estimates the
  // consensus distance from it (relative standard deviation sqrt(2/256) = 8.8%).
  const size_t d = 5000;
  const auto out = std::filesystem::temp_directory_path() /
                   ("starling-peer-test-log-" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  const auto path = writeScenario(
      "logged", ring4(R"({"kind": "dsgd", "step_size": 0.1})", 1, kInproc));
  auto start = [&](int rank) {
    std::vector<float> x(d);
    for (size_t k = 0; k < d; ++k) x[k] = static_cast<float>(std::cos(0.37 * k + 1.3 * rank));
    return x;
  };
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    PeerOptions po;
    po.outDir = out.string();
    auto peer = Peer::fromScenario(path.string(), rank, po);
    if (!peer) return peer.status();
    auto x = start(rank);
    STARLING_RETURN_IF_ERROR((*peer)->log("loss", 10.0 + rank));  // round 0
    for (int t = 0; t < 3; ++t) {
      STARLING_RETURN_IF_ERROR((*peer)->mix(std::span<float>(x)));
      STARLING_RETURN_IF_ERROR((*peer)->log({{"loss", double(rank) * (t + 1)}}));
    }
    return (*peer)->close();
  });
  for (const auto& st : statuses) {
    INFO(st.toString());
    REQUIRE(st.isOk());
  }
  auto s = scenario::loadScenario(path.string());
  REQUIRE(s.isOk());
  auto merger = runtime::TrainerLogMerger::create(*s, out);
  REQUIRE(merger.isOk());
  auto merged = (*merger)->poll();
  INFO(merged.status().toString());
  REQUIRE(merged.isOk());
  CHECK(*merged == 4);  // rounds 0..3
  REQUIRE((*merger)->writeSummary().isOk());

  // The exact consensus distance of the starting models.
  std::vector<double> mean(d, 0.0);
  for (int r = 0; r < 4; ++r) {
    const auto x = start(r);
    for (size_t k = 0; k < d; ++k) mean[k] += x[k] / 4.0;
  }
  double exact = 0;
  for (int r = 0; r < 4; ++r) {
    const auto x = start(r);
    for (size_t k = 0; k < d; ++k) exact += (x[k] - mean[k]) * (x[k] - mean[k]) / 4.0;
  }
  std::ifstream in(out / "metrics.jsonl");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() == 4);
  // One JSON line per round; the numbers read back with a tiny scanner to keep json out.
  auto field = [](const std::string& line, const std::string& key) {
    const auto at = line.find("\"" + key + "\":");
    REQUIRE(at != std::string::npos);
    return std::stod(line.substr(at + key.size() + 3));
  };
  const double c0 = field(lines[0], "consensus_distance");
  CHECK(std::abs(c0 - exact) < 0.35 * exact);  // 4 standard deviations of the sketch
  CHECK(field(lines[0], "loss") == Approx(11.5));  // (10 + 11 + 12 + 13) / 4
  CHECK(field(lines[3], "loss") == Approx(4.5));   // 3 * (0 + 1 + 2 + 3) / 4
  CHECK(field(lines[3], "consensus_distance") < c0 / 4);  // 3 rounds of averaging on a ring
}

namespace {

// trainRanks with Peers made from `c` (its rank set to each's).
std::vector<std::vector<double>> trainWithConfig(const PeerConfig& c, const scenario::Experiment& e,
                                                 uint64_t steps) {
  return trainRanks(e, steps, [&](int rank) {
    PeerConfig mine = c;
    mine.rank = rank;
    return Peer::fromConfig(mine);
  });
}

}  // namespace

TEST_CASE("Peer::fromConfig is the scenario it stands for", "[api][unit]") {
  SECTION("a bad value is refused with the scenario parser's message") {
    PeerConfig c;
    c.nodes = 0;
    auto peer = Peer::fromConfig(c);
    REQUIRE_FALSE(peer);
    CHECK(peer.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(peer.status().message(), Contains("/nodes"));
  }
  SECTION("exact diffusion on a ring of 4 in process equals the scenario file's run") {
    PeerConfig c;
    c.nodes = 4;
    c.algorithm = PeerConfig::Algorithm::kExactDiffusion;
    c.stepSize = 0.1;
    c.transport = PeerConfig::Transport::kInProcess;
    const auto path = writeScenario(
        "config", ring4(R"({"kind": "exact_diffusion", "step_size": 0.1})", 12, kInproc));
    const auto e = experiment(path);
    auto sim = runtime::simulate(e, {});
    REQUIRE(sim.isOk());
    const auto models = trainWithConfig(c, e, 12);
    for (int r = 0; r < 4; ++r) CHECK(models[r] == sim->models[r]);
  }
}

TEST_CASE("PeerConfig::overrides: any scenario key, merged in and validated as a file's",
          "[api][unit]") {
  SECTION("CHOCO with int8 frames (a codec PeerConfig's enum leaves out) equals the file's run") {
    PeerConfig c;
    c.nodes = 4;
    c.algorithm = PeerConfig::Algorithm::kChoco;
    c.stepSize = 0.1;
    c.gamma = 0.5;
    c.transport = PeerConfig::Transport::kInProcess;
    c.overrides = R"({"compression": {"kind": "int8", "chunk": 3}, "name": "merged"})";
    const auto path = writeScenario(
        "overrides", ring4(R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5},
                              "compression": {"kind": "int8", "chunk": 3})",
                           10, kInproc));
    const auto e = experiment(path);
    auto sim = runtime::simulate(e, {});
    REQUIRE(sim.isOk());
    const auto models = trainWithConfig(c, e, 10);
    // int8 rounds deterministically, so the codec streams' seeds do not matter: bit for bit.
    for (int r = 0; r < 4; ++r) CHECK(models[r] == sim->models[r]);
  }
  SECTION("a bad key in the overrides is named by its JSON path; a non-object is refused") {
    PeerConfig c;
    c.nodes = 4;
    c.transport = PeerConfig::Transport::kInProcess;
    c.overrides = R"({"compression": {"kind": "int8", "chunk": 0}})";
    auto peer = Peer::fromConfig(c);
    REQUIRE_FALSE(peer);
    CHECK(peer.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(peer.status().message(), Contains("/compression/chunk"));
    c.overrides = "[1, 2]";
    peer = Peer::fromConfig(c);
    REQUIRE_FALSE(peer);
    CHECK_THAT(peer.status().message(), Contains("PeerConfig::overrides: not a JSON object"));
    c.overrides = R"({"nodes": null})";  // null removes a key: the parser then names it missing
    peer = Peer::fromConfig(c);
    REQUIRE_FALSE(peer);
    CHECK_THAT(peer.status().message(), Contains("nodes"));
  }
}

TEST_CASE("codistillation: step() exchanges every period steps and neighbourModels() gives the "
          "copies", "[api][unit][codistillation]") {
  // Ring of 4, every trainer's gradient 1 everywhere: rank i's parameters after t steps are
  // i - 0.1 t. period 3, burn-in 4: exchanges in rounds 3, 6, 9 (round 0's copies would be
  // replaced unused), so before round 4 there is nothing to distil from and then the copies are
  // the neighbours' parameters after steps 4 and 7.
  PeerConfig c;
  c.nodes = 4;
  c.stepSize = 0.1;
  c.transport = PeerConfig::Transport::kInProcess;
  c.codistillation = true;
  c.codistillationAlpha = 0.25;
  c.codistillationKl = true;
  c.codistillationPeriod = 3;
  c.codistillationBurnIn = 4;
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    PeerConfig mine = c;
    mine.rank = rank;
    auto made = Peer::fromConfig(mine);
    if (!made) return made.status();
    Peer& peer = **made;
    const auto info = peer.codistillation();
    if (!info || info->alpha != 0.25 || !info->kl || info->period != 3 || info->burnIn != 4) {
      return Status(StatusCode::kInternal, "codistillation() is not the config's");
    }
    std::vector<double> x(3, static_cast<double>(rank));
    const std::vector<double> g(3, 1.0);
    const int left = (rank + 3) % 4, right = (rank + 1) % 4;
    for (int t = 0; t < 9; ++t) {
      std::vector<std::span<const double>> teachers;
      STARLING_RETURN_IF_ERROR(peer.neighbourModels(teachers));
      const int taken = t < 4 ? -1 : (t <= 6 ? 4 : 7);  // steps the copies' owners had made
      if ((taken < 0) != teachers.empty()) {
        return Status(StatusCode::kInternal, "round " + std::to_string(t) + ": " +
                                                 std::to_string(teachers.size()) + " copies");
      }
      if (taken > 0) {
        // What `taken` steps of x <- x - 0.1 * 1 leave, in the same order of operations.
        const auto after = [taken](int start) {
          double v = start;
          for (int k = 0; k < taken; ++k) v -= 0.1;
          return v;
        };
        const int lo = std::min(left, right), hi = std::max(left, right);
        if (teachers.size() != 2 || teachers[0][0] != after(lo) || teachers[1][2] != after(hi)) {
          return Status(StatusCode::kInternal, "round " + std::to_string(t) + ": wrong copies");
        }
      }
      STARLING_RETURN_IF_ERROR(peer.step(std::span<double>(x), std::span<const double>(g)));
    }
    // Never averaged: the trainer's own steps alone.
    double own = rank;
    for (int k = 0; k < 9; ++k) own -= 0.1;
    if (x[0] != own) {
      return Status(StatusCode::kInternal, "the model was averaged");
    }
    std::vector<double> copy = x;
    if (peer.mix(std::span<double>(copy)).code() != StatusCode::kFailedPrecondition) {
      return Status(StatusCode::kInternal, "mix() averaged a codistilling run");
    }
    std::vector<std::span<const float>> wrongType;
    const Status typed = peer.neighbourModels(wrongType);
    if (typed.code() != StatusCode::kFailedPrecondition) {
      return Status(StatusCode::kInternal, "float copies of double steps: " + typed.toString());
    }
    return peer.close();
  });
  for (const auto& st : statuses) {
    INFO(st.toString());
    CHECK(st.isOk());
  }
  // Without codistillation there are no copies to ask for.
  PeerConfig plain;
  plain.nodes = 1;
  plain.transport = PeerConfig::Transport::kInProcess;
  auto peer = Peer::fromConfig(plain);
  REQUIRE(peer);
  CHECK_FALSE((*peer)->codistillation().has_value());
  std::vector<std::span<const double>> none;
  CHECK((*peer)->neighbourModels(none).code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("a peer says where the run ends and whether it is rejoining", "[api][unit]") {
  const auto bounded = writeScenario(
      "bounded", R"({"schema_version": 1, "name": "bounded", "nodes": 1, "rounds": 37,
      "topology": {"kind": "ring"}, "algorithm": {"kind": "dsgd", "step_size": 0.5},
      "transport": {"kind": "inproc"}})");
  const auto open = writeScenario(
      "open", R"({"schema_version": 1, "name": "open", "nodes": 1,
      "topology": {"kind": "ring"}, "algorithm": {"kind": "dsgd", "step_size": 0.5},
      "transport": {"kind": "inproc"}})");
  auto a = Peer::fromScenario(bounded.string(), 0);
  REQUIRE(a);
  CHECK((*a)->lastRound() == 37);
  CHECK_FALSE((*a)->rejoining());
  auto b = Peer::fromScenario(open.string(), 0);
  REQUIRE(b);
  CHECK((*b)->lastRound() == 0);  // the trainer decides
  // A restarted trainer is rejoining until it has asked (a one-node run has nobody to ask, and
  // refuses without on_peer_loss "continue"; the flag is what the trainer reads before).
  PeerOptions options;
  options.rejoin = true;
  auto c = Peer::fromScenario(open.string(), 0, options);
  REQUIRE(c);
  CHECK((*c)->rejoining());
}
