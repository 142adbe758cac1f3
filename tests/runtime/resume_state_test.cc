// A node's whole state through a checkpoint, in process, for every algorithm of optim/: n nodes
// run 2R rounds; the same nodes built afresh, loaded with the state saved at round R, run rounds
// R..2R and end with the same models, counters and streams, bit for bit. And every part of the
// state matters: leaving any one of them out (the algorithm, the codec's stream or state, the
// oracle's stream and tables, the fault injector's stream) ends elsewhere, so a checkpoint that
// forgot one would fail here.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/fault_injection.h"
#include "runtime/checkpoint.h"
#include "runtime/node_stack.h"
#include "scenario/experiment.h"
#include "transport/inproc/inproc_transport.h"

namespace starling::runtime {
namespace {

using transport::Clock;

// n nodes of a scenario on the in-process transport, driven round by round as the simulator
// does (no peer loss).
template <typename T>
struct Swarm {
  const scenario::Experiment& e;
  std::unique_ptr<transport::inproc::InprocHub> hub;
  std::vector<std::unique_ptr<transport::Transport>> owned;
  std::vector<engine::FaultInjector*> faults;
  std::vector<NodeStack<T>> stacks;

  explicit Swarm(const scenario::Experiment& ex)
      : e(ex), hub(transport::inproc::createHub(ex.scenario.nodes)) {
    for (int i = 0; i < e.scenario.nodes; ++i) {
      owned.push_back(transport::inproc::createTransport(*hub, i));
      faults.push_back(nullptr);
      if (engine::FaultInjector::wanted(e.scenario.faults.script)) {
        auto f = std::make_unique<engine::FaultInjector>(
            *owned.back(), e.scenario.faults.script, e.scenario.seed, engine::kModelChannel, false);
        faults.back() = f.get();
        owned.push_back(std::move(f));
      }
      auto stack = buildNode<T>(e, i, *owned.back());
      REQUIRE(stack);
      stacks.push_back(std::move(*stack));
    }
  }

  void run(uint64_t from, uint64_t to) {
    const int n = e.scenario.nodes;
    for (uint64_t r = from; r < to; ++r) {
      const auto topo = e.schedule->at(r);
      const auto deadline = Clock::now() + std::chrono::seconds(30);
      for (int i = 0; i < n; ++i) {
        REQUIRE(stacks[i].node->startRound(r, *topo, e.scenario.algorithm.stepSize.at(r), deadline)
                    .isOk());
      }
      for (int i = 0; i < n; ++i) {
        const size_t t = faults[i] ? 2 * i + 1 : i;
        while (!stacks[i].node->roundComplete()) REQUIRE(owned[t]->progress(deadline));
        const auto st = stacks[i].node->finishRound();
        INFO(st.toString());
        REQUIRE(st.isOk());
      }
    }
  }

  void visit(int i, core::StateVisitor& v) {
    {
      core::StateVisitor::Scope scope(v, "node");
      stacks[i].node->visitState(v);
    }
    {
      core::StateVisitor::Scope scope(v, "oracle");
      stacks[i].oracle->visitState(v);
    }
    if (faults[i]) {
      core::StateVisitor::Scope scope(v, "faults");
      faults[i]->visitState(v);
    }
  }

  std::vector<std::string> save() {
    std::vector<std::string> out;
    for (int i = 0; i < e.scenario.nodes; ++i) {
      CheckpointWriter w;
      visit(i, w);
      INFO(w.status().toString());
      REQUIRE(w.status().isOk());
      // Through the file format, as a peer's checkpoint goes.
      auto back = decodeCheckpoint(encodeCheckpoint(CheckpointHeader{}, w.payload()), "mem");
      REQUIRE(back);
      out.push_back(back->payload);
    }
    return out;
  }

  // Loads every node; fields whose name starts with `skip` are read but not applied (the part
  // of the state a broken checkpoint would have left out).
  void load(const std::vector<std::string>& saved, const std::string& skip = "");

  // Everything observable: the models, the counters a peer logs, and the next draws of the
  // codec streams (through one more round's bytes).
  std::vector<std::vector<T>> models() const {
    std::vector<std::vector<T>> out;
    for (const auto& s : stacks) out.emplace_back(s.node->model().begin(), s.node->model().end());
    return out;
  }
  std::vector<double> counters() const {
    std::vector<double> out;
    for (const auto& s : stacks) {
      out.push_back(static_cast<double>(s.node->bytesSent()));
      out.push_back(static_cast<double>(s.node->corruptMessages()));
      out.push_back(s.node->compressionErrorSum());
      out.push_back(static_cast<double>(s.node->compressionErrorCount()));
    }
    return out;
  }
};

// Forwards to a loading visitor, but reads fields under `skip` into scratch (left unapplied).
class SkippingLoader final : public core::StateVisitor {
 public:
  SkippingLoader(core::StateVisitor& inner, std::string skip)
      : inner_(inner), skip_(std::move(skip)) {}
  bool loading() const override { return true; }
  void values(std::string_view n, std::span<float> v) override {
    std::vector<float> s(v.size());
    inner_.values(qualified(n), skipped(n) ? std::span<float>(s) : v);
  }
  void values(std::string_view n, std::span<double> v) override {
    std::vector<double> s(v.size());
    inner_.values(qualified(n), skipped(n) ? std::span<double>(s) : v);
  }
  void sized(std::string_view n, std::vector<float>& v) override { fwd(n, v); }
  void sized(std::string_view n, std::vector<double>& v) override { fwd(n, v); }
  void sized(std::string_view n, std::vector<uint64_t>& v) override {
    // Lengths and keys (per-peer maps, lists of ranks) are always applied: the structure must
    // stay readable; only the values are withheld.
    inner_.sized(qualified(n), v);
  }
  void scalar(std::string_view n, uint64_t& v) override { fwd(n, v); }
  void scalar(std::string_view n, double& v) override { fwd(n, v); }
  void text(std::string_view n, std::string& v) override { fwd(n, v); }
  using core::StateVisitor::scalar;
  bool skippedAny() const { return skippedAny_; }

 private:
  // `skip` ending in '/' names a part (every field under it), otherwise one field.
  bool skipped(std::string_view n) {
    const std::string q = qualified(n);
    const bool s = !skip_.empty() &&
                   (q == skip_ || (skip_.back() == '/' && q.rfind(skip_, 0) == 0));
    skippedAny_ = skippedAny_ || s;
    return s;
  }
  template <typename V>
  void fwd(std::string_view n, V& v) {
    if (skipped(n)) {
      V scratch = v;
      forward(qualified(n), scratch);
      resizeLike(v, scratch);
    } else {
      forward(qualified(n), v);
    }
  }
  // A withheld vector keeps the saved length (zeros), so that the state stays consistent.
  template <typename E>
  static void resizeLike(std::vector<E>& v, const std::vector<E>& saved) {
    if (v.size() != saved.size()) v.assign(saved.size(), E(0));
  }
  template <typename V>
  static void resizeLike(V&, const V&) {}
  void forward(const std::string& n, std::vector<float>& v) { inner_.sized(n, v); }
  void forward(const std::string& n, std::vector<double>& v) { inner_.sized(n, v); }
  void forward(const std::string& n, uint64_t& v) { inner_.scalar(n, v); }
  void forward(const std::string& n, double& v) { inner_.scalar(n, v); }
  void forward(const std::string& n, std::string& v) { inner_.text(n, v); }
  core::StateVisitor& inner_;
  std::string skip_;
  bool skippedAny_ = false;
};

template <typename T>
void Swarm<T>::load(const std::vector<std::string>& saved, const std::string& skip) {
  bool anySkipped = false;
  for (int i = 0; i < e.scenario.nodes; ++i) {
    CheckpointReader reader(saved[i], "node " + std::to_string(i));
    SkippingLoader loader(reader, skip);
    visit(i, loader);
    INFO(loader.status().toString() << " / " << reader.status().toString());
    REQUIRE(loader.status().isOk());
    REQUIRE(reader.finish().isOk());
    anySkipped = anySkipped || loader.skippedAny();
  }
  if (!skip.empty()) REQUIRE(anySkipped);  // the part named really is in the state
}

template <typename T>
bool sameBits(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(T)) != 0) {
      return false;
    }
  }
  return true;
}

scenario::Experiment experiment(const std::string& topology, const std::string& problemExtra,
                                const std::string& algorithm, const std::string& extra,
                                const std::string& precision = "float64") {
  const std::string json =
      R"({"schema_version": 1, "name": "state", "nodes": 6, "seed": 11, "rounds": 40,
          "precision": ")" + precision + R"(", "topology": )" + topology + R"(,
          "problem": {"kind": "logistic", "l2": 0.05,
                      "data": {"synthetic": {"samples": 240, "features": 9,
                                             "heterogeneity": 1.0}})" + problemExtra + R"(},
          "algorithm": )" + algorithm + extra + "}";
  auto s = scenario::parseScenario(json, "state.json", ".");
  INFO(s.status().toString());
  REQUIRE(s);
  auto e = scenario::prepareExperiment(*s, {.solve = false});
  INFO(e.status().toString());
  REQUIRE(e);
  return std::move(*e);
}

// Runs the check of the file comment; `parts` are the state's parts that must each matter.
template <typename T>
void checkResume(const scenario::Experiment& e, const std::vector<std::string>& parts) {
  constexpr uint64_t R = 12, end = 30;
  Swarm<T> a(e);
  a.run(0, R);
  const auto saved = a.save();
  a.run(R, end);

  Swarm<T> b(e);
  b.load(saved);
  b.run(R, end);
  CHECK(sameBits(a.models(), b.models()));
  CHECK(a.counters() == b.counters());
  CHECK(a.save() == b.save());  // every stream and table too

  // Without the state (a fresh start at round R) the run ends elsewhere.
  Swarm<T> fresh(e);
  fresh.run(R, end);
  CHECK_FALSE(sameBits(a.models(), fresh.models()));

  for (const std::string& part : parts) {
    INFO("left out: " << part);
    Swarm<T> c(e);
    c.load(saved, part);
    c.run(R, end);
    CHECK((!sameBits(a.models(), c.models()) || a.counters() != c.counters()));
  }
}

const std::string kRing = R"({"kind": "ring"})";
const std::string kDropout = R"({"kind": "ring", "schedule": {"kind": "edge_dropout", "p": 0.3}})";
const std::string kSgd = R"(, "estimator": {"kind": "sgd", "batch": 4})";
const std::string kQsgd = R"(, "compression": {"kind": "qsgd", "bits": 3, "bucket": 4})";

}  // namespace

TEST_CASE("every algorithm resumes from its checkpointed state bit for bit",
          "[runtime][unit][checkpoint]") {
  SECTION("dsgd, sgd, error feedback on top-k") {
    checkResume<double>(
        experiment(kRing, kSgd, R"({"kind": "dsgd", "step_size": 0.3})",
                   R"(, "compression": {"kind": "topk", "ratio": 0.3, "error_feedback": true})"),
        {"node/algorithm/", "node/codec_state/", "oracle/rng/"});
  }
  SECTION("dsgd with adacomp's residue") {
    checkResume<double>(experiment(kRing, "", R"({"kind": "dsgd", "step_size": 0.3})",
                                   R"(, "compression": {"kind": "adacomp", "bin": 3})"),
                        {"node/algorithm/", "node/codec_state/"});
  }
  SECTION("dsgd with dqsgd's norm history") {
    checkResume<double>(
        experiment(kRing, "", R"({"kind": "dsgd", "step_size": 0.3})",
                   R"(, "compression": {"kind": "dqsgd", "error_feedback": true, "target": 0.05})"),
        {"node/algorithm/", "node/codec_state/residual", "node/codec_rng/"});
  }
  SECTION("exact diffusion, full gradients") {
    checkResume<double>(
        experiment(kRing, "", R"({"kind": "exact_diffusion", "step_size": 0.5})", ""),
        {"node/algorithm/w", "node/algorithm/psi_prev"});
  }
  SECTION("exact diffusion in float32 with lsvrg") {
    checkResume<float>(experiment(kRing, R"(, "estimator": {"kind": "lsvrg", "batch": 3})",
                                  R"({"kind": "exact_diffusion", "step_size": 0.5})", "",
                                  "float32"),
                       {"node/algorithm/", "oracle/rng/", "oracle/w", "oracle/grad_w"});
  }
  SECTION("gradient tracking with saga") {
    checkResume<double>(
        experiment(kRing, R"(, "estimator": {"kind": "saga", "batch": 3})",
                   R"({"kind": "gradient_tracking", "step_size": 0.2})", ""),
        {"node/algorithm/x", "node/algorithm/y", "node/algorithm/g_prev", "oracle/rng/",
         "oracle/table", "oracle/average"});
  }
  SECTION("nids with an l1 regularizer") {
    checkResume<double>(
        experiment(kRing, R"(, "regularizer": {"l1": 0.01})",
                   R"({"kind": "nids", "step_size": 0.5})", ""),
        {"node/algorithm/x", "node/algorithm/x_prev", "node/algorithm/z",
         "node/algorithm/g_prev"});
  }
  SECTION("choco, qsgd, sgd, corrupted links") {
    checkResume<double>(
        experiment(kRing, kSgd, R"({"kind": "choco", "step_size": 0.3, "gamma": 0.5})",
                   kQsgd + R"(, "faults": {"script": [{"corrupt": 0.3}]})"),
        {"node/algorithm/x", "node/algorithm/x_hat", "node/algorithm/s", "node/codec_rng/",
         "oracle/rng/", "faults/rng/"});
  }
  SECTION("choco on a time-varying graph (every neighbour's x-hat)") {
    checkResume<double>(
        experiment(kDropout, "", R"({"kind": "choco", "step_size": 0.3, "gamma": 0.5})", kQsgd),
        {"node/algorithm/x_hat_peers/", "node/codec_rng/"});
  }
  SECTION("lead, qsgd, sgd") {
    checkResume<double>(
        experiment(kRing, kSgd, R"({"kind": "lead", "step_size": 0.3, "alpha": 0.3})", kQsgd),
        {"node/algorithm/x", "node/algorithm/z", "node/algorithm/d", "node/algorithm/h",
         "node/algorithm/e", "node/codec_rng/", "oracle/rng/"});
  }
  SECTION("prox_lead on a time-varying graph (every neighbour's h)") {
    checkResume<double>(
        experiment(kDropout, R"(, "regularizer": {"l1": 0.01})",
                   R"({"kind": "prox_lead", "step_size": 0.3, "alpha": 0.3})", kQsgd),
        {"node/algorithm/h_peers/", "node/algorithm/d", "node/codec_rng/"});
  }
}

}  // namespace starling::runtime
