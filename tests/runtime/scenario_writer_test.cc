// resolvedScenarioJson: every shipped scenario (and every run of every comparison spec) and one of
// every kind written back, parsed again and written again gives the same text and the same
// Scenario; defaults are spelled out, numbers round-trip bit for bit, data paths are absolute;
// the hash ignores spelling and labels and sees every change to the run.
#include "scenario/scenario_writer.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "scenario/scenario.h"

namespace fs = std::filesystem;
using namespace starling;
using nlohmann::json;

namespace {

scenario::Scenario parse(const std::string& text, const std::string& file = "t.json",
                         const fs::path& baseDir = SCENARIO_DIR) {
  auto s = scenario::parseScenario(text, file, baseDir);
  INFO(text);
  if (!s) FAIL(s.status().message());
  return *s;
}

std::string readText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Bit for bit: a value written as text must come back as the same double.
bool same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void requireSameGraph(const starling::topology::GraphSpec& a, const starling::topology::GraphSpec& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.weights == b.weights);
  CHECK(a.rows == b.rows);
  CHECK(a.cols == b.cols);
  CHECK(a.torus == b.torus);
  CHECK(same(a.p, b.p));
}

// Every field that changes a run, compared between a scenario and its written-back copy.
void requireSameRun(const scenario::Scenario& a, const scenario::Scenario& b) {
  CHECK(a.name == b.name);
  CHECK(a.description == b.description);
  CHECK(a.nodes == b.nodes);
  CHECK(a.seed == b.seed);
  CHECK(a.rounds == b.rounds);
  CHECK(a.logEvery == b.logEvery);
  CHECK(a.precision == b.precision);
  CHECK(same(a.divergenceMaxAbs, b.divergenceMaxAbs));
  CHECK(a.checkpoint.every == b.checkpoint.every);
  CHECK(a.checkpoint.keep == b.checkpoint.keep);
  // Topology.
  CHECK(a.topology.nodes == b.topology.nodes);
  CHECK(a.topology.seed == b.topology.seed);
  requireSameGraph(a.topology.base, b.topology.base);
  CHECK(a.topology.schedule.kind == b.topology.schedule.kind);
  CHECK(same(a.topology.schedule.p, b.topology.schedule.p));
  REQUIRE(a.topology.schedule.cycle.size() == b.topology.schedule.cycle.size());
  for (size_t i = 0; i < a.topology.schedule.cycle.size(); ++i) {
    requireSameGraph(a.topology.schedule.cycle[i], b.topology.schedule.cycle[i]);
  }
  // Problem.
  const auto& p = a.problem;
  const auto& q = b.problem;
  CHECK(p.spec.loss == q.spec.loss);
  CHECK(same(p.spec.l2, q.spec.l2));
  CHECK(same(p.spec.regularizer.l1, q.spec.regularizer.l1));
  CHECK(same(p.spec.regularizer.lower, q.spec.regularizer.lower));
  CHECK(same(p.spec.regularizer.upper, q.spec.regularizer.upper));
  CHECK(p.partition == q.partition);
  CHECK(p.estimator.kind == q.estimator.kind);
  CHECK(p.estimator.batch == q.estimator.batch);
  CHECK(same(p.estimator.p, q.estimator.p));
  CHECK(p.data.kind == q.data.kind);
  CHECK(p.data.synthetic.samples == q.data.synthetic.samples);
  CHECK(p.data.synthetic.features == q.data.synthetic.features);
  CHECK(same(p.data.synthetic.heterogeneity, q.data.synthetic.heterogeneity));
  CHECK(same(p.data.synthetic.noise, q.data.synthetic.noise));
  CHECK(same(p.data.synthetic.density, q.data.synthetic.density));
  if (p.data.kind == scenario::DataSource::Kind::kLibsvm) {
    CHECK(fs::path(q.data.path).is_absolute());
    CHECK(fs::absolute(p.data.path).lexically_normal() == fs::path(q.data.path));
  }
  CHECK(p.data.features == q.data.features);
  // Algorithm.
  const auto& x = a.algorithm;
  const auto& y = b.algorithm;
  CHECK(x.kind == y.kind);
  CHECK(x.stepSize.kind == y.stepSize.kind);
  CHECK(same(x.stepSize.value, y.stepSize.value));
  CHECK(same(x.stepSize.tau, y.stepSize.tau));
  CHECK(x.stepSize.every == y.stepSize.every);
  CHECK(same(x.stepSize.factor, y.stepSize.factor));
  CHECK(same(x.gamma, y.gamma));
  CHECK(same(x.alpha, y.alpha));
  CHECK(x.timeVarying == y.timeVarying);
  CHECK(same(x.regularizer.l1, y.regularizer.l1));
  CHECK(same(x.regularizer.lower, y.regularizer.lower));
  REQUIRE(x.codistillation.has_value() == y.codistillation.has_value());
  if (x.codistillation) {
    CHECK(same(x.codistillation->loss.alpha, y.codistillation->loss.alpha));
    CHECK(x.codistillation->loss.distance == y.codistillation->loss.distance);
    CHECK(x.codistillation->period == y.codistillation->period);
    CHECK(x.codistillation->burnIn == y.codistillation->burnIn);
  }
  // Compression.
  const auto& c = a.compression;
  const auto& d = b.compression;
  CHECK(c.kind == d.kind);
  CHECK(c.k == d.k);
  CHECK(same(c.ratio, d.ratio));
  CHECK(c.scaled == d.scaled);
  CHECK(c.bits == d.bits);
  CHECK(c.bucket == d.bucket);
  CHECK(c.linf == d.linf);
  CHECK(c.levels == d.levels);
  CHECK(c.rows == d.rows);
  CHECK(c.cols == d.cols);
  CHECK(same(c.threshold, d.threshold));
  CHECK(c.meanEstimate == d.meanEstimate);
  CHECK(c.bin == d.bin);
  CHECK(c.minBits == d.minBits);
  CHECK(c.maxBits == d.maxBits);
  CHECK(same(c.target, d.target));
  CHECK(c.errorFeedback == d.errorFeedback);
  REQUIRE(c.layers.size() == d.layers.size());
  for (size_t r = 0; r < c.layers.size(); ++r) {
    CHECK(c.layers[r].tensors == d.layers[r].tensors);
    CHECK(c.layers[r].codec.kind == d.layers[r].codec.kind);
    CHECK(c.layers[r].codec.k == d.layers[r].codec.k);
    CHECK(same(c.layers[r].codec.ratio, d.layers[r].codec.ratio));
    CHECK(c.layers[r].codec.bits == d.layers[r].codec.bits);
    CHECK(c.layers[r].codec.bucket == d.layers[r].codec.bucket);
    CHECK(c.layers[r].codec.linf == d.layers[r].codec.linf);
    CHECK(c.layers[r].codec.errorFeedback == d.layers[r].codec.errorFeedback);
  }
  // Transport and peers.
  const auto& t = a.transport;
  const auto& u = b.transport;
  CHECK(t.kind == u.kind);
  CHECK(t.tls == u.tls);
  CHECK(t.ucxTls == u.ucxTls);
  CHECK(t.connectTimeoutMs == u.connectTimeoutMs);
  CHECK(t.roundTimeoutMs == u.roundTimeoutMs);
  CHECK(t.maxEndpoints == u.maxEndpoints);
  CHECK(t.shmFrames == u.shmFrames);
  CHECK(t.shmThresholdBytes == u.shmThresholdBytes);
  CHECK(t.spinUs == u.spinUs);
  CHECK(t.busyPoll == u.busyPoll);
  CHECK(a.peers.explicitAddresses == b.peers.explicitAddresses);
  CHECK(a.peers.addresses == b.peers.addresses);
}

// Writes, parses the result (from another folder: the paths in it are absolute) and writes
// again: the two texts must be equal and the two Scenarios the same run.
std::string requireFixpoint(const scenario::Scenario& s) {
  const std::string once = scenario::resolvedScenarioJson(s);
  INFO(once);
  const scenario::Scenario again = parse(once, "elsewhere/resolved.json", "/nonexistent");
  REQUIRE(scenario::resolvedScenarioJson(again) == once);
  CHECK(scenario::scenarioHash(again) == scenario::scenarioHash(s));
  requireSameRun(s, again);
  return once;
}

// Every key and value of `input` is in the written-back JSON, unchanged, but for the data path
// (made absolute) and the other spellings the writer replaces: the "batch" shorthand (an
// estimator), "hosts" and "base_port" (addresses), "nonneg" (a box), a constant step-size object
// (a number), compression's "uncompressed" (a layers rule). A key the parser learns and the
// writer does not fails here.
void requireKeysKept(const std::string& input, const std::string& written) {
  const json in = json::parse(input).flatten();
  const json out = json::parse(written).flatten();
  for (auto it = in.begin(); it != in.end(); ++it) {
    const std::string& key = it.key();
    INFO(key);
    if (key == "/problem/batch" || key.rfind("/peers/hosts/", 0) == 0 ||
        key.rfind("/compression/uncompressed/", 0) == 0 ||
        key == "/peers/base_port" || key == "/problem/regularizer/nonneg" ||
        (key.rfind("/algorithm/step_size/", 0) == 0 && in.value("/algorithm/step_size/kind", "") == "constant")) {
      continue;
    }
    REQUIRE(out.contains(key));
    if (key == "/problem/data/path") {
      CHECK(fs::path(out[key].get<std::string>()).is_absolute());
    } else {
      CHECK(out[key] == it.value());
    }
  }
}

std::string scenarioJson(const std::string& topology, const std::string& algorithm,
                     const std::string& extra = "", const std::string& problem = "") {
  return R"({"schema_version": 1, "name": "w", "nodes": 8, "seed": 3, "rounds": 10,
    "topology": )" + topology + R"(, "algorithm": )" + algorithm + R"(,
    "problem": )" + (problem.empty() ? R"({"kind": "logistic", "l2": 0.1,
      "data": {"synthetic": {"samples": 80, "features": 6}}})" : problem) + extra + "}";
}

// tools/compare.py's merge of a run into the base: objects merge key by key, except "algorithm"
// and "compression", which the run replaces.
json mergeRun(json base, const json& run) {
  for (auto it = run.begin(); it != run.end(); ++it) {
    const bool replaced = it.key() == "algorithm" || it.key() == "compression";
    if (it->is_object() && base.contains(it.key()) && base[it.key()].is_object() && !replaced) {
      base[it.key()] = mergeRun(base[it.key()], *it);
    } else {
      base[it.key()] = *it;
    }
  }
  return base;
}

}  // namespace

TEST_CASE("every shipped scenario is a fixpoint of write and parse", "[runtime][unit][writer]") {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(SCENARIO_DIR)) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path().string());
    auto s = scenario::loadScenario(entry.path().string());
    if (!s) FAIL(s.status().message());
    requireKeysKept(readText(entry.path()), requireFixpoint(*s));
    ++count;
  }
  CHECK(count >= 18);
}

TEST_CASE("every run of every comparison spec is a fixpoint of write and parse",
          "[runtime][unit][writer]") {
  const fs::path dir = fs::path(SCENARIO_DIR) / "compare";
  int specs = 0, runs = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++specs;
    const json spec = json::parse(readText(entry.path()));
    for (const json& run : spec.at("runs")) {
      json r = run;
      r.erase("label");
      json s = mergeRun(spec.at("base"), r);
      s["name"] = run.at("label");
      INFO(entry.path().filename().string() << ": " << s.dump());
      requireKeysKept(s.dump(), requireFixpoint(parse(s.dump(), (dir / "run.json").string(), dir)));
      ++runs;
    }
  }
  CHECK(specs >= 3);
  CHECK(runs >= 12);
}

TEST_CASE("every kind of topology, algorithm, codec, estimator and regularizer writes back",
          "[runtime][unit][writer]") {
  // Spelled the way the writer spells them, so every key must come back unchanged.
  std::vector<std::string> canonical;
  const std::string dsgd = R"({"kind": "dsgd", "step_size": 0.1})";
  const std::string ring = R"({"kind": "ring"})";
  for (const std::string t : {
           R"({"kind": "ring", "weights": "max_degree"})",
           R"({"kind": "line", "weights": "uniform"})",
           R"({"kind": "grid", "rows": 2, "cols": 4, "torus": true})",
           R"({"kind": "grid", "rows": 4, "cols": 2, "torus": false, "weights": "max_degree"})",
           R"({"kind": "random", "p": 0.9})",
           R"({"kind": "exponential"})",
           R"({"kind": "complete"})",
           R"({"kind": "star", "weights": "uniform"})",
           R"({"kind": "ring", "weights": "uniform", "schedule": {"kind": "cycle", "graphs": [
                {"kind": "ring"}, {"kind": "grid", "rows": 2, "cols": 4, "torus": true},
                {"kind": "random", "p": 0.75, "weights": "max_degree"}]}})",
           R"({"kind": "ring", "schedule": {"kind": "one_peer_exponential"}})",
           R"({"kind": "complete", "schedule": {"kind": "random_matching"}})",
           R"({"kind": "ring", "schedule": {"kind": "edge_dropout", "p": 0.25}})",
           R"({"kind": "exponential", "schedule": {"kind": "static"}})",
       }) {
    canonical.push_back(scenarioJson(t, dsgd));
  }
  for (const std::string a : {
           R"({"kind": "dsgd", "step_size": 0.1, "gamma": 0.5})",
           R"({"kind": "exact_diffusion", "step_size": {"kind": "inverse_time", "value": 0.5, "tau": 30}})",
           R"({"kind": "gradient_tracking", "step_size": {"kind": "step", "value": 0.2, "every": 10, "factor": 0.5}})",
           R"({"kind": "nids", "step_size": 0.3})",
           R"({"kind": "choco", "step_size": 0.1, "gamma": 0.3})",
           R"({"kind": "lead", "step_size": 0.1, "gamma": 0.7, "alpha": 0.25})",
           R"({"kind": "prox_lead", "step_size": 0.1})",
           // The seeds' methods (docs/algorithms.md §20-§23): LEGW with and without the keys
           // the runtime can derive, local optimizers, Adasum.
           R"({"kind": "dsgd", "step_size": {"kind": "legw", "base_lr": 0.1, "base_batch": 64, "warmup_epochs": 0.5, "decay": {"kind": "constant"}}, "gamma": 1.0})",
           R"({"kind": "dsgd", "step_size": {"kind": "legw", "base_lr": 0.1, "base_batch": 64, "batch": 512, "warmup_epochs": 1.0, "rounds_per_epoch": 100.0, "decay": {"kind": "step", "every": 50, "factor": 0.5}}, "gamma": 1.0})",
           R"({"kind": "dsgd", "step_size": 0.1, "gamma": 1.0, "local_optimizer": {"kind": "momentum", "weight_decay": 0.0, "momentum": 0.8, "nesterov": true}})",
           R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5, "local_optimizer": {"kind": "adam", "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.99, "eps": 1e-07, "bias_correction": false}})",
           R"({"kind": "dsgd", "step_size": 0.1, "combine": "adasum", "local_optimizer": {"kind": "lamb", "weight_decay": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-06, "bias_correction": true}})",
       }) {
    canonical.push_back(scenarioJson(ring, a));
  }
  // Every codec, on the algorithms that take it: CHOCO and LEAD send compressed differences;
  // DSGD needs error feedback (or adacomp's residue).
  for (const std::string c : {
           R"({"kind": "identity"})", R"({"kind": "fp16"})", R"({"kind": "bf16"})",
           R"({"kind": "topk", "k": 3})", R"({"kind": "topk", "ratio": 0.3})",
           R"({"kind": "randk", "ratio": 0.5, "scaled": false})", R"({"kind": "randk", "k": 2})",
           R"({"kind": "sign"})",
           R"({"kind": "qsgd", "bits": 3, "norm": "linf", "bucket": 16})",
           R"({"kind": "qsgd", "bits": 8, "norm": "l2"})",
           R"({"kind": "nuqsgd", "bits": 5, "bucket": 7})", R"({"kind": "natural"})",
           R"({"kind": "natural_dithering", "levels": 3, "norm": "linf"})",
           R"({"kind": "topk_dithering", "ratio": 0.25, "levels": 2})",
           R"({"kind": "topk_dithering", "k": 2, "levels": 5})",
           R"({"kind": "countsketch", "rows": 3, "cols": 64, "k": 4})",
           R"({"kind": "countsketch", "rows": 2, "cols": 64, "estimate": "median", "ratio": 0.5})",
           R"({"kind": "countsketch", "cols": 64, "threshold": 0.1})",
           R"({"kind": "countsketch", "cols": 64, "estimate": "mean"})",
           R"({"kind": "dqsgd", "min_bits": 3, "max_bits": 6, "target": 0.5, "bucket": 64})",
       }) {
    canonical.push_back(scenarioJson(ring, R"({"kind": "choco", "step_size": 0.1})", R"(, "compression": )" + c));
    canonical.push_back(scenarioJson(ring, R"({"kind": "lead", "step_size": 0.1})", R"(, "compression": )" + c));
    canonical.push_back(scenarioJson(ring, dsgd,
                                 R"(, "compression": )" + c.substr(0, c.size() - 1) +
                                     R"(, "error_feedback": true})"));
  }
  canonical.push_back(scenarioJson(ring, dsgd, R"(, "compression": {"kind": "adacomp", "bin": 40})"));
  for (const std::string p : {
           R"({"kind": "least_squares", "l2": 0.1, "partition": "random",
               "estimator": {"kind": "sgd", "batch": 4},
               "data": {"synthetic": {"samples": 80, "features": 6, "heterogeneity": 2, "noise": 0.3, "density": 0.5}}})",
           R"({"kind": "logistic", "estimator": {"kind": "lsvrg", "batch": 2, "p": 0.2},
               "data": {"synthetic": {"samples": 80, "features": 6, "noise": 0.25}}})",
           R"({"kind": "logistic", "estimator": {"kind": "lsvrg", "batch": 2},
               "data": {"synthetic": {"samples": 80, "features": 6}}})",
           R"({"kind": "logistic", "estimator": {"kind": "saga", "batch": 3},
               "regularizer": {"l1": 0.01, "box": {"lower": -1, "upper": 2}},
               "data": {"synthetic": {"samples": 80, "features": 6}}})",
           R"({"kind": "logistic", "estimator": {"kind": "full"}, "regularizer": {"box": {"upper": 3}},
               "data": {"format": "libsvm", "path": "data/sparse-logistic.svm"}})",
       }) {
    canonical.push_back(scenarioJson(ring, R"({"kind": "prox_lead", "step_size": 0.1})", "", p));
  }
  for (const std::string x : {
           R"(, "transport": {"kind": "inproc"})",
           R"(, "transport": {"kind": "ucx", "tls": "shm", "ucx_tls": "tcp,sysv", "connect_timeout_ms": 7,
                "round_timeout_ms": 5, "max_endpoints": 3, "shm_frames": false,
                "shm_threshold_bytes": 0, "spin_us": 0, "busy_poll": "off"})",
           R"(, "peers": {"addresses": ["h0:1", "h1:2", "h2:3", "h3:4", "h4:5", "h5:6", "h6:7", "h7:8"]})",
           R"(, "precision": "float32", "log_every": 3, "description": "d", "divergence": {"max_abs": 5})",
           R"(, "checkpoint": {"every": 7, "keep": 3})",
       }) {
    canonical.push_back(scenarioJson(ring, dsgd, x));
  }
  for (const auto& text : canonical) {
    INFO(text);
    requireKeysKept(text, requireFixpoint(parse(text)));
  }

  // Codistillation (docs/algorithms.md §25) needs the mlp problem and minibatches.
  const std::string mlp = R"({"kind": "mlp", "layers": [784, 16, 10], "partition": "iid",
      "estimator": {"kind": "sgd", "batch": 8}, "data": {"dataset": "fashion-mnist"}})";
  for (const std::string a : {
           R"({"kind": "dsgd", "step_size": 0.1, "codistillation": {"alpha": 0.5, "distance": "kl", "period": 10, "burn_in": 30}})",
           R"({"kind": "dsgd", "step_size": 0.1, "codistillation": {"alpha": 1.0, "distance": "cross_entropy", "period": 1, "burn_in": 0}, "local_optimizer": {"kind": "momentum", "weight_decay": 0.0, "momentum": 0.9, "nesterov": false}})",
       }) {
    const std::string text = scenarioJson(ring, a, "", mlp);
    INFO(text);
    const std::string written = requireFixpoint(parse(text));
    requireKeysKept(text, written);
    CHECK_FALSE(json::parse(written)["algorithm"].contains("gamma"));
  }
  // Layer-aware compression: rules with their codecs' keys, on the mlp's four tensors.
  for (const std::string c : {
           R"({"kind": "topk", "ratio": 0.05, "error_feedback": false, "layers": [{"tensors": [0, 1, -2, -1], "kind": "identity", "error_feedback": false}]})",
           R"({"kind": "identity", "error_feedback": false, "layers": [{"tensors": [2], "kind": "qsgd", "bits": 3, "norm": "linf", "bucket": 16, "error_feedback": false}, {"tensors": [-1, 0], "kind": "fp16", "error_feedback": false}]})",
       }) {
    const std::string text = scenarioJson(ring, R"({"kind": "choco", "step_size": 0.1})",
                                      R"(, "compression": )" + c, mlp);
    INFO(text);
    requireKeysKept(text, requireFixpoint(parse(text)));
  }
  // The "uncompressed" shorthand comes back as the identity rule it stands for.
  const std::string uncompressed = scenarioJson(
      ring, R"({"kind": "choco", "step_size": 0.1})",
      R"(, "compression": {"kind": "topk", "k": 5, "uncompressed": ["first", "last"]})", mlp);
  const auto uj = json::parse(requireFixpoint(parse(uncompressed)));
  CHECK(uj["compression"]["layers"] ==
        json::parse(R"([{"tensors": [0, 1, -2, -1], "kind": "identity", "error_feedback": false}])"));
  CHECK_FALSE(uj["compression"].contains("uncompressed"));

  // Other spellings of the same thing come back in the writer's spelling.
  const std::string shorthand = scenarioJson(ring, R"({"kind": "nids", "step_size": 0.1})", "",
      R"({"kind": "least_squares", "batch": 4, "regularizer": {"nonneg": true, "l1": 0.5},
          "data": {"synthetic": {"samples": 80, "features": 6}}})");
  auto j = json::parse(requireFixpoint(parse(shorthand)));
  CHECK(j["problem"]["estimator"] == json({{"kind", "sgd"}, {"batch", 4}}));
  CHECK(j["problem"]["regularizer"] == json({{"l1", 0.5}, {"box", {{"lower", 0.0}}}}));
  CHECK_FALSE(j["problem"].contains("batch"));
  requireKeysKept(shorthand, j.dump());
  const std::string hosts = scenarioJson(ring, R"({"kind": "nids", "step_size": {"kind": "constant", "value": 0.25}})",
                                     R"(, "peers": {"hosts": ["a", "b"], "base_port": 4000})");
  j = json::parse(requireFixpoint(parse(hosts)));
  CHECK(j["algorithm"]["step_size"] == 0.25);
  CHECK(j["peers"] == json({{"addresses", {"a:4000", "a:4001", "a:4002", "a:4003", "b:4004",
                                           "b:4005", "b:4006", "b:4007"}}}));
  requireKeysKept(hosts, j.dump());
}

TEST_CASE("the resolved scenario spells out every default", "[runtime][unit][writer]") {
  const auto s = parse(R"({"schema_version": 1, "nodes": 4, "rounds": 500,
      "topology": {"kind": "ring"}, "algorithm": {"kind": "lead", "step_size": 0.1},
      "problem": {"kind": "least_squares", "data": {"synthetic": {"samples": 40, "features": 3}}}})",
                       "/some/where/minimal.json");
  const auto j = json::parse(requireFixpoint(s));
  CHECK(j["name"] == "minimal");  // from the file name
  CHECK(j["description"] == "");
  CHECK(j["seed"] == 0);
  CHECK(j["log_every"] == 5);  // rounds / 100
  CHECK(j["precision"] == "float64");
  CHECK(j["topology"] == json::parse(R"({"kind": "ring", "weights": "metropolis",
                                          "schedule": {"kind": "static"}})"));
  CHECK(j["problem"] == json::parse(R"({"kind": "least_squares", "l2": 0.0,
      "partition": "contiguous", "regularizer": {"l1": 0.0}, "estimator": {"kind": "full"},
      "data": {"synthetic": {"samples": 40, "features": 3, "heterogeneity": 0.0, "noise": 0.1,
                             "density": 1.0}}})"));
  CHECK(j["algorithm"] == json::parse(R"({"kind": "lead", "step_size": 0.1, "gamma": 1.0,
                                           "alpha": 0.5})"));
  CHECK(j["compression"] == json::parse(R"({"kind": "identity", "error_feedback": false})"));
  CHECK(j["transport"] == json::parse(R"({"kind": "ucx", "tls": "tcp", "ucx_tls": "",
      "connect_timeout_ms": 10000, "round_timeout_ms": 30000, "max_endpoints": 64,
      "shm_frames": true, "shm_threshold_bytes": 16384, "spin_us": 50,
      "busy_poll": "auto"})"));
  CHECK_FALSE(j.contains("peers"));  // run picks free ports: no section can say that
  CHECK(j["divergence"]["max_abs"] == 1e8);
  // Codec defaults too.
  const auto q = json::parse(scenario::resolvedScenarioJson(
      parse(scenarioJson(R"({"kind": "ring"})", R"({"kind": "choco", "step_size": 0.1})",
                     R"(, "compression": {"kind": "qsgd"})"))));
  CHECK(q["compression"] == json::parse(R"({"kind": "qsgd", "bits": 4, "norm": "l2",
                                             "bucket": 512, "error_feedback": false})"));
  // The keys come in the parser's order, whatever the file's.
  const std::string text = scenario::resolvedScenarioJson(s);
  CHECK(text.find("\"schema_version\"") < text.find("\"name\""));
  CHECK(text.find("\"name\"") < text.find("\"nodes\""));
  CHECK(text.find("\"topology\"") < text.find("\"problem\""));
  CHECK(text.find("\"problem\"") < text.find("\"algorithm\""));
  CHECK(text.rfind("{\n  \"schema_version\": 1,\n", 0) == 0);  // 2-space indent
  CHECK(text.find("\n  \"nodes\": 4,") != std::string::npos);
}

TEST_CASE("the resolved scenario keeps numbers bit for bit and makes data paths absolute",
          "[runtime][unit][writer]") {
  // Doubles whose shortest decimal form has 17 digits, and a subnormal.
  const std::string text = scenarioJson(
      R"({"kind": "ring", "schedule": {"kind": "edge_dropout", "p": 0.30000000000000004}})",
      R"({"kind": "prox_lead", "step_size": 4.9406564584124654e-324, "gamma": 0.1234567890123456789,
          "alpha": 0.99999999999999989})",
      R"(, "divergence": {"max_abs": 1.7976931348623157e308})",
      R"({"kind": "logistic", "l2": 1e-300, "regularizer": {"box": {"lower": -1e300, "upper": 2.5e-8}},
          "data": {"synthetic": {"samples": 80, "features": 6, "noise": 0.49999999999999994,
                                 "heterogeneity": 123456.78901234567}}})");
  const scenario::Scenario s = parse(text);
  CHECK(same(s.algorithm.stepSize.value, 4.9406564584124654e-324));
  CHECK(same(s.topology.schedule.p, 0.1 + 0.2));
  requireFixpoint(s);  // compares every double bit for bit

  // A scenario read through a relative path has a relative folder, so the parser's data path
  // is relative too: the writer makes it absolute (against the working directory it was read
  // from, which a run does not change).
  const fs::path cwd = fs::current_path();
  fs::current_path(SCENARIO_DIR);
  auto rel = scenario::loadScenario("libsvm-ring8-logistic.json");
  const std::string written = rel ? scenario::resolvedScenarioJson(*rel) : "";
  fs::current_path(cwd);
  REQUIRE(rel);
  CHECK(fs::path(rel->problem.data.path).is_relative());
  const auto j = json::parse(written);
  const fs::path path = j["problem"]["data"]["path"].get<std::string>();
  CHECK(path.is_absolute());
  CHECK(fs::equivalent(path, fs::path(SCENARIO_DIR) / "data" / "sparse-logistic.svm"));
  CHECK(j["problem"]["data"]["format"] == "libsvm");
  CHECK(j["problem"]["data"]["features"] == 40);
  CHECK(j["problem"]["partition"] == "random");
}

TEST_CASE("the scenario hash ignores spelling and labels and sees every change",
          "[runtime][unit][writer]") {
  const auto base = parse(scenarioJson(R"({"kind": "ring"})", R"({"kind": "lead", "step_size": 0.1})",
                                   R"(, "compression": {"kind": "qsgd", "bits": 3})"));
  // The same run spelled differently: other key order, whitespace, defaults written out.
  const auto respelled = parse(R"({"algorithm": {"step_size": 0.1, "kind": "lead", "alpha": 0.5},
      "compression": {"bits": 3, "kind": "qsgd", "bucket": 512},
      "seed": 3, "rounds": 10, "nodes": 8, "name": "w", "schema_version": 1,
      "topology": {"weights": "metropolis", "kind": "ring", "schedule": {"kind": "static"}},
      "problem": {"data": {"synthetic": {"features": 6, "samples": 80}}, "l2": 0.1, "kind": "logistic"}})");
  CHECK(scenario::scenarioHash(respelled) == scenario::scenarioHash(base));
  CHECK(scenario::scenarioHashHex(scenario::scenarioHash(base)).size() == 16);
  CHECK(scenario::scenarioHashHex(0x0123456789abcdefULL) == "0123456789abcdef");
  CHECK(scenario::scenarioHashHex(0xfULL) == "000000000000000f");
  // FNV-1a 64 of the resolved text without name and description.
  uint64_t fnv = 0xcbf29ce484222325ULL;
  nlohmann::ordered_json o = nlohmann::ordered_json::parse(scenario::resolvedScenarioJson(base));
  o.erase("name");
  o.erase("description");
  for (const unsigned char c : o.dump(2)) fnv = (fnv ^ c) * 0x100000001b3ULL;
  CHECK(scenario::scenarioHash(base) == fnv);

  auto changed = [&](auto&& edit) {
    scenario::Scenario s = base;
    edit(s);
    return scenario::scenarioHash(s) != scenario::scenarioHash(base);
  };
  CHECK(changed([](scenario::Scenario& s) { s.seed = 4; }));
  CHECK(changed([](scenario::Scenario& s) { s.rounds = 11; }));
  CHECK(changed([](scenario::Scenario& s) { s.logEvery = 2; }));
  CHECK(changed([](scenario::Scenario& s) { s.nodes = 9; }));
  CHECK(changed([](scenario::Scenario& s) { s.precision = scenario::Precision::kFloat32; }));
  CHECK(changed([](scenario::Scenario& s) { s.algorithm.stepSize.value = 0.1000001; }));
  CHECK(changed([](scenario::Scenario& s) { s.algorithm.alpha = 0.25; }));
  CHECK(changed([](scenario::Scenario& s) { s.algorithm.gamma = 0.5; }));
  CHECK(changed([](scenario::Scenario& s) { s.compression.bits = 4; }));
  CHECK(changed([](scenario::Scenario& s) { s.compression.bucket = 256; }));
  CHECK(changed([](scenario::Scenario& s) { s.compression.linf = true; }));
  CHECK(changed([](scenario::Scenario& s) { s.compression.errorFeedback = true; }));
  CHECK(changed([](scenario::Scenario& s) {
    s.compression.layers.push_back({{0}, starling::compression::CompressorSpec{}});
  }));
  CHECK(changed([](scenario::Scenario& s) { s.problem.spec.l2 = 0.2; }));
  CHECK(changed([](scenario::Scenario& s) { s.problem.data.synthetic.samples = 81; }));
  CHECK(changed(
      [](scenario::Scenario& s) { s.problem.partition = scenario::PartitionKind::kRandom; }));
  CHECK(changed([](scenario::Scenario& s) {
    s.topology.base.weights = starling::topology::WeightRule::kUniform;
  }));
  CHECK(changed([](scenario::Scenario& s) { s.divergenceMaxAbs = 1e6; }));
  // Not part of the run: where the file was, what it is called, what it says about itself.
  CHECK_FALSE(changed([](scenario::Scenario& s) { s.file = "elsewhere.json"; }));
  CHECK_FALSE(changed([](scenario::Scenario& s) { s.name = "other"; }));
  CHECK_FALSE(changed([](scenario::Scenario& s) { s.description = "a note"; }));
  // Nor how often its state is saved: a run may be resumed with another checkpoint section.
  CHECK_FALSE(changed([](scenario::Scenario& s) { s.checkpoint.every = 7; }));
  CHECK_FALSE(changed([](scenario::Scenario& s) {
    s.checkpoint.every = 3;
    s.checkpoint.keep = 9;
  }));
  // A file without "name" hashes the same wherever it lies and whatever it is called.
  const std::string unnamed = R"({"schema_version": 1, "nodes": 4, "rounds": 10,
      "topology": {"kind": "ring"}, "algorithm": {"kind": "nids", "step_size": 0.1},
      "problem": {"kind": "least_squares", "data": {"synthetic": {"samples": 40, "features": 3}}}})";
  CHECK(scenario::scenarioHash(parse(unnamed, "a/first.json")) ==
        scenario::scenarioHash(parse(unnamed, "b/second.json")));

  // --rounds and --seed overrides change the hash; log_every stays what the file made it.
  scenario::Scenario over = base;
  scenario::applyOverrides(over, uint64_t{500}, uint64_t{9});
  CHECK(scenario::scenarioHash(over) != scenario::scenarioHash(base));
  const auto r = json::parse(scenario::resolvedScenarioJson(over));
  CHECK(r["rounds"] == 500);
  CHECK(r["seed"] == 9);
  CHECK(r["log_every"] == base.logEvery);
}
