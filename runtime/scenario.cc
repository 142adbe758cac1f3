#include "runtime/scenario.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

namespace starling::runtime {
namespace {

using nlohmann::json;

// Thrown inside this file only; parseScenario converts it to a Status.
struct ScenarioError {
  std::string path;
  std::string message;
};

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

std::string typeName(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "something else";
  }
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A JSON object being read: every key it hands out is marked used, and finish() rejects the rest.
class Obj {
 public:
  Obj(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j.is_object()) throw ScenarioError{pathOr(), "expected an object, got " + typeName(j)};
  }

  const std::string& path() const { return path_; }
  std::string at(const std::string& key) const { return path_ + "/" + key; }
  bool has(const std::string& key) const { return j_.contains(key); }

  const json* get(const std::string& key) {
    allowed_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  const json& require(const std::string& key) {
    const json* v = get(key);
    if (!v) throw ScenarioError{path_.empty() ? "/" : path_, "missing required key \"" + key + "\""};
    return *v;
  }

  template <typename Int>
  Int integer(const std::string& key, Int lo, Int hi, std::optional<Int> def = std::nullopt) {
    const json* v = def ? get(key) : &require(key);
    if (!v) return *def;
    if (!v->is_number_integer()) {
      throw ScenarioError{at(key), "expected an integer, got " + typeName(*v)};
    }
    bool inRange;
    Int value{};
    if (v->is_number_unsigned()) {
      const auto u = v->get<uint64_t>();
      inRange = u <= static_cast<uint64_t>(hi) && (lo <= 0 || u >= static_cast<uint64_t>(lo));
      value = static_cast<Int>(u);
    } else {
      const auto s = v->get<int64_t>();
      inRange = s >= static_cast<int64_t>(lo) &&
                (hi > static_cast<Int>(std::numeric_limits<int64_t>::max()) ||
                 s <= static_cast<int64_t>(hi));
      value = static_cast<Int>(s);
    }
    if (!inRange) {
      throw ScenarioError{at(key), "must be between " + std::to_string(lo) + " and " +
                                       std::to_string(hi) + ", got " + v->dump()};
    }
    return value;
  }

  // A finite number in [lo, hi] (or (lo, hi] when openLo).
  double number(const std::string& key, double lo, double hi, std::optional<double> def,
                bool openLo = false, bool openHi = false) {
    const json* v = def ? get(key) : &require(key);
    if (!v) return *def;
    if (!v->is_number()) throw ScenarioError{at(key), "expected a number, got " + typeName(*v)};
    const double x = v->get<double>();
    const bool ok = std::isfinite(x) && (openLo ? x > lo : x >= lo) && (openHi ? x < hi : x <= hi);
    if (!ok) {
      throw ScenarioError{at(key), std::string("must be in ") + (openLo ? "(" : "[") + fmt(lo) +
                                       ", " + fmt(hi) + (openHi ? ")" : "]") + ", got " +
                                       v->dump()};
    }
    return x;
  }

  std::string string(const std::string& key, std::optional<std::string> def = std::nullopt) {
    const json* v = def ? get(key) : &require(key);
    if (!v) return *def;
    if (!v->is_string()) throw ScenarioError{at(key), "expected a string, got " + typeName(*v)};
    return v->get<std::string>();
  }

  bool boolean(const std::string& key, bool def) {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) throw ScenarioError{at(key), "expected true or false, got " + typeName(*v)};
    return v->get<bool>();
  }

  // One of `names`; returns its index.
  size_t choice(const std::string& key, const std::string& what,
                const std::vector<std::string>& names, std::optional<size_t> def = std::nullopt) {
    const json* v = def ? get(key) : &require(key);
    if (!v) return *def;
    if (!v->is_string()) {
      throw ScenarioError{at(key), "expected a string (one of " + joinNames(names) + "), got " +
                                       typeName(*v)};
    }
    const auto s = v->get<std::string>();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == s) return i;
    }
    throw ScenarioError{at(key), "unknown " + what + " \"" + s + "\"; expected one of " +
                                     joinNames(names)};
  }

  Obj object(const std::string& key) { return Obj(require(key), at(key)); }

  // Rejects every key that was not asked for.
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!allowed_.count(it.key())) {
        std::vector<std::string> names(allowed_.begin(), allowed_.end());
        throw ScenarioError{at(it.key()),
                            "unknown key; expected one of " + joinNames(names)};
      }
    }
  }

 private:
  std::string pathOr() const { return path_.empty() ? "/" : path_; }

  const json& j_;
  std::string path_;
  std::set<std::string> allowed_;
};

const std::vector<std::string> kGraphKinds = {"ring",        "line",     "grid", "random",
                                              "exponential", "complete", "star"};
const std::vector<std::string> kWeightRules = {"metropolis", "max_degree", "uniform"};
const std::vector<std::string> kScheduleKinds = {"static", "cycle", "one_peer_exponential",
                                                 "random_matching", "edge_dropout"};
const std::vector<std::string> kAlgorithms = {"dsgd", "exact_diffusion", "gradient_tracking",
                                              "choco", "nids",           "lead",
                                              "prox_lead"};
const std::vector<std::string> kCodecs = {"identity", "fp16",   "bf16",
                                          "topk",     "randk",  "sign",
                                          "qsgd",     "nuqsgd", "natural",
                                          "natural_dithering",  "topk_dithering",
                                          "countsketch",        "adacomp",
                                          "dqsgd"};

void parseKeep(Obj& o, compression::CompressorSpec& c) {
  if (o.has("k") == o.has("ratio")) {
    throw ScenarioError{o.path(), "give exactly one of \"k\" (elements kept) or \"ratio\""};
  }
  if (o.has("k")) c.k = o.integer<uint64_t>("k", 1, uint64_t{1} << 40);
  if (o.has("ratio")) c.ratio = o.number("ratio", 0.0, 1.0, std::nullopt, /*openLo=*/true);
}

void parseCompression(Obj& o, Scenario& s) {
  using Kind = compression::CompressorSpec::Kind;
  auto& c = s.compression;
  c.kind = static_cast<Kind>(o.choice("kind", "codec", kCodecs));
  switch (c.kind) {
    case Kind::kTopK:
    case Kind::kRandK:
      parseKeep(o, c);
      if (c.kind == Kind::kRandK) c.scaled = o.boolean("scaled", true);
      break;
    case Kind::kQsgd:
      c.bits = o.integer<int>("bits", 2, 8, 4);
      c.linf = o.choice("norm", "norm", {"l2", "linf"}, 0) == 1;
      c.bucket = o.integer<uint64_t>("bucket", 1, (uint64_t{1} << 32) - 1, uint64_t{512});
      break;
    case Kind::kNuqsgd:
      c.bits = o.integer<int>("bits", 2, 8, 4);
      c.bucket = o.integer<uint64_t>("bucket", 1, (uint64_t{1} << 32) - 1, uint64_t{512});
      break;
    case Kind::kNaturalDithering:
      c.levels = o.integer<int>("levels", 1, 30, 4);
      c.linf = o.choice("norm", "norm", {"l2", "linf"}, 0) == 1;
      break;
    case Kind::kTopKDithering:
      parseKeep(o, c);
      c.levels = o.integer<int>("levels", 1, 30, 4);
      break;
    case Kind::kCountSketch: {
      c.rows = o.integer<uint64_t>("rows", 1, 64, uint64_t{5});
      c.cols = o.integer<uint64_t>("cols", 1, uint64_t{1} << 31);
      c.meanEstimate = o.choice("estimate", "estimate", {"median", "mean"}, 0) == 1;
      if (c.meanEstimate) {
        if (o.has("k") || o.has("ratio") || o.has("threshold")) {
          throw ScenarioError{o.path(), "\"estimate\": \"mean\" decodes every coordinate; "
                                        "\"k\", \"ratio\" and \"threshold\" apply to "
                                        "\"median\" only"};
        }
      } else if (o.has("threshold")) {
        if (o.has("k") || o.has("ratio")) {
          throw ScenarioError{o.path(), "give one of \"k\", \"ratio\" or \"threshold\""};
        }
        c.threshold = o.number("threshold", 0.0, 1.0, std::nullopt, /*openLo=*/true);
      } else {
        parseKeep(o, c);
      }
      break;
    }
    case Kind::kAdaComp:
      c.bin = o.integer<uint64_t>("bin", 1, (uint64_t{1} << 32) - 1, uint64_t{500});
      break;
    case Kind::kDqsgd:
      c.minBits = o.integer<int>("min_bits", 2, 8, 2);
      c.maxBits = o.integer<int>("max_bits", c.minBits, 8, 8);
      c.target = o.number("target", 0.0, 1e6, 1.0, /*openLo=*/true);
      c.bucket = o.integer<uint64_t>("bucket", 1, (uint64_t{1} << 32) - 1, uint64_t{512});
      break;
    default:
      break;
  }
  c.errorFeedback = o.boolean("error_feedback", false);
  o.finish();
  const bool differences = optim::sendsCompressedDifferences(s.algorithm.kind);
  const char* alg = optim::algorithmKindName(s.algorithm.kind);
  if (differences && (c.errorFeedback || c.kind == Kind::kAdaComp)) {
    throw ScenarioError{c.errorFeedback ? o.at("error_feedback") : std::string("/compression/kind"),
                        std::string(alg) +
                            " already sends compressed differences against reference points it "
                            "tracks; error feedback (or adacomp's residue) on top would count the "
                            "same error twice"};
  }
  if (c.kind == Kind::kIdentity || differences) return;
  if (s.algorithm.kind == optim::AlgorithmKind::kDsgd &&
      (c.errorFeedback || c.kind == Kind::kAdaComp)) {
    return;
  }
  throw ScenarioError{"/compression/kind",
                      std::string(alg) +
                          " sends raw vectors, so a lossy codec's error would accumulate; use "
                          "\"choco\" (which sends compressed differences), \"dsgd\" with "
                          "\"error_feedback\": true, or \"identity\""};
}

topology::GraphSpec parseGraph(Obj& o, topology::WeightRule defaultWeights) {
  topology::GraphSpec g;
  g.kind = static_cast<topology::GraphKind>(o.choice("kind", "topology", kGraphKinds));
  g.weights = static_cast<topology::WeightRule>(
      o.choice("weights", "weight rule", kWeightRules, static_cast<size_t>(defaultWeights)));
  if (g.kind == topology::GraphKind::kGrid) {
    g.rows = o.integer<int>("rows", 1, 1 << 20);
    g.cols = o.integer<int>("cols", 1, 1 << 20);
    g.torus = o.boolean("torus", false);
  } else if (g.kind == topology::GraphKind::kRandom) {
    g.p = o.number("p", 0.0, 1.0, std::nullopt, /*openLo=*/true);
  }
  return g;
}

void parseTopology(Obj& o, Scenario& s) {
  auto& t = s.topology;
  t.nodes = s.nodes;
  t.seed = s.seed;
  t.base = parseGraph(o, topology::WeightRule::kMetropolis);
  if (t.base.kind == topology::GraphKind::kGrid &&
      static_cast<int64_t>(t.base.rows) * t.base.cols != s.nodes) {
    throw ScenarioError{o.at("rows"), "grid " + std::to_string(t.base.rows) + " x " +
                                          std::to_string(t.base.cols) + " does not have " +
                                          std::to_string(s.nodes) + " nodes (/nodes)"};
  }
  if (!o.has("schedule")) {
    o.get("schedule");
    o.finish();
    return;
  }
  Obj sch = o.object("schedule");
  t.schedule.kind =
      static_cast<topology::ScheduleKind>(sch.choice("kind", "schedule", kScheduleKinds));
  switch (t.schedule.kind) {
    case topology::ScheduleKind::kCycle: {
      const json& list = sch.require("graphs");
      if (!list.is_array() || list.empty()) {
        throw ScenarioError{sch.at("graphs"), "expected a non-empty array of topologies"};
      }
      for (size_t i = 0; i < list.size(); ++i) {
        Obj entry(list[i], sch.at("graphs") + "/" + std::to_string(i));
        t.schedule.cycle.push_back(parseGraph(entry, t.base.weights));
        const auto& g = t.schedule.cycle.back();
        if (g.kind == topology::GraphKind::kGrid &&
            static_cast<int64_t>(g.rows) * g.cols != s.nodes) {
          throw ScenarioError{entry.at("rows"), "grid does not have " + std::to_string(s.nodes) +
                                                    " nodes (/nodes)"};
        }
        entry.finish();
      }
      break;
    }
    case topology::ScheduleKind::kEdgeDropout:
      t.schedule.p = sch.number("p", 0.0, 1.0, std::nullopt, false, /*openHi=*/true);
      break;
    default: break;
  }
  sch.finish();
  o.finish();
}

optim::StepSizeSchedule parseStepSize(Obj& o) {
  optim::StepSizeSchedule st;
  const json& v = o.require("step_size");
  if (v.is_number()) {
    st.value = o.number("step_size", 0.0, 1e6, std::nullopt, /*openLo=*/true);
    return st;
  }
  Obj so(v, o.at("step_size"));
  st.kind = static_cast<optim::StepSizeSchedule::Kind>(
      so.choice("kind", "step-size schedule", {"constant", "inverse_time", "step"}));
  st.value = so.number("value", 0.0, 1e6, std::nullopt, true);
  if (st.kind == optim::StepSizeSchedule::Kind::kInverseTime) {
    st.tau = so.number("tau", 0.0, 1e12, std::nullopt, true);
  } else if (st.kind == optim::StepSizeSchedule::Kind::kStep) {
    st.every = so.integer<uint64_t>("every", 1, uint64_t{1} << 40);
    st.factor = so.number("factor", 0.0, 1.0, std::nullopt, true);
  }
  so.finish();
  return st;
}

// The non-smooth term r: {"l1": c}, {"box": {"lower": a, "upper": b}}, {"nonneg": true}, or l1
// together with one of box / nonneg.
optim::RegularizerSpec parseRegularizer(Obj& o) {
  constexpr double kBig = 1e300;  // JSON has no infinities; an omitted box side is unbounded
  optim::RegularizerSpec r;
  r.l1 = o.number("l1", 0.0, 1e6, 0.0);
  if (o.has("box") && o.has("nonneg")) {
    throw ScenarioError{o.at("nonneg"),
                        "cannot be combined with \"box\" (nonneg is the box "
                        "[0, inf)); give one of them"};
  }
  if (o.has("box")) {
    Obj box = o.object("box");
    if (!box.has("lower") && !box.has("upper")) {
      throw ScenarioError{box.path(), "expected at least one of \"lower\", \"upper\""};
    }
    if (box.has("lower")) r.lower = box.number("lower", -kBig, kBig, std::nullopt);
    if (box.has("upper")) r.upper = box.number("upper", -kBig, kBig, std::nullopt);
    box.get("lower");
    box.get("upper");
    if (!(r.lower < r.upper)) {
      throw ScenarioError{box.at("upper"),
                          "must be greater than lower (" + fmt(r.lower) + "), got " + fmt(r.upper)};
    }
    box.finish();
  } else {
    o.get("box");
  }
  if (o.boolean("nonneg", false)) r.lower = 0.0;
  o.finish();
  if (!o.has("l1") && !o.has("box") && !o.has("nonneg")) {
    throw ScenarioError{o.path(), "expected at least one of \"l1\", \"box\", \"nonneg\""};
  }
  return r;
}

// How each node estimates its gradient: {"kind": "full" | "sgd" | "lsvrg" | "saga", "batch", "p"}.
optim::EstimatorSpec parseEstimator(Obj& o) {
  using Kind = optim::EstimatorSpec::Kind;
  optim::EstimatorSpec e;
  e.kind =
      static_cast<Kind>(o.choice("kind", "gradient estimator", {"full", "sgd", "lsvrg", "saga"}));
  if (e.kind != Kind::kFull) {
    e.batch = o.integer<uint64_t>("batch", 1, uint64_t{1} << 32, uint64_t{1});
  }
  if (e.kind == Kind::kLsvrg && o.has("p")) {
    e.p = o.number("p", 0.0, 1.0, std::nullopt, /*openLo=*/true);
  }
  if (e.kind == Kind::kLsvrg) o.get("p");
  o.finish();
  return e;
}

void parseProblem(Obj& o, Scenario& s, const std::filesystem::path& baseDir) {
  auto& p = s.problem;
  p.spec.loss =
      static_cast<optim::LossKind>(o.choice("kind", "problem", {"least_squares", "logistic"}));
  p.spec.l2 = o.number("l2", 0.0, 1e6, 0.0);
  p.partition =
      static_cast<PartitionKind>(o.choice("partition", "partition", {"contiguous", "random"}, 0));
  if (o.has("regularizer")) {
    Obj reg = o.object("regularizer");
    p.spec.regularizer = parseRegularizer(reg);
  } else {
    o.get("regularizer");
  }
  if (o.has("estimator")) {
    if (o.has("batch")) {
      throw ScenarioError{o.at("batch"),
                          "cannot be combined with \"estimator\"; give the batch "
                          "size as estimator/batch"};
    }
    Obj est = o.object("estimator");
    p.estimator = parseEstimator(est);
    p.batchPath = est.at("batch");
  } else {
    o.get("estimator");
    // The older form: "batch": B > 0 is {"kind": "sgd", "batch": B}, 0 full gradients.
    const auto batch = o.integer<uint64_t>("batch", 0, uint64_t{1} << 32, uint64_t{0});
    p.estimator.kind =
        batch > 0 ? optim::EstimatorSpec::Kind::kSgd : optim::EstimatorSpec::Kind::kFull;
    p.estimator.batch = batch > 0 ? batch : 1;
    p.batchPath = o.at("batch");
  }

  Obj d = o.object("data");
  if (d.has("synthetic")) {
    p.data.kind = DataSource::Kind::kSynthetic;
    Obj syn = d.object("synthetic");
    auto& sp = p.data.synthetic;
    sp.samples = syn.integer<uint64_t>("samples", 1, uint64_t{1} << 32);
    sp.features = syn.integer<int>("features", 1, 1 << 28);
    sp.heterogeneity = syn.number("heterogeneity", 0.0, 1e6, 0.0);
    sp.noise = p.spec.loss == optim::LossKind::kLogistic
                   ? syn.number("noise", 0.0, 0.5, 0.0, false, /*openHi=*/true)
                   : syn.number("noise", 0.0, 1e6, 0.1);
    sp.density = syn.number("density", 0.0, 1.0, 1.0, /*openLo=*/true);
    syn.finish();
    if (sp.samples < static_cast<uint64_t>(s.nodes)) {
      throw ScenarioError{syn.at("samples"), "must be at least /nodes (" +
                                                 std::to_string(s.nodes) +
                                                 ") so every node holds a sample"};
    }
  } else if (d.has("format")) {
    d.choice("format", "data format", {"libsvm"});
    p.data.kind = DataSource::Kind::kLibsvm;
    const std::string raw = d.string("path");
    if (raw.empty()) throw ScenarioError{d.at("path"), "must not be empty"};
    std::filesystem::path path(raw);
    p.data.path = (path.is_absolute() ? path : baseDir / path).lexically_normal().string();
    if (d.has("features")) p.data.features = d.integer<int>("features", 1, 1 << 28);
  } else {
    throw ScenarioError{d.path(), "expected {\"synthetic\": {...}} or {\"format\": \"libsvm\", "
                                  "\"path\": ...}"};
  }
  d.finish();
  if (p.usesBatch() && p.data.kind == DataSource::Kind::kSynthetic &&
      p.estimator.batch > p.data.synthetic.samples) {
    throw ScenarioError{p.batchPath, "larger than the number of samples"};
  }
  o.finish();
}

void parseTransport(Obj& o, Scenario& s) {
  auto& t = s.transport;
  t.kind = o.choice("kind", "transport", {"ucx", "inproc"}) == 0 ? TransportConfig::Kind::kUcx
                                                               : TransportConfig::Kind::kInproc;
  if (t.kind == TransportConfig::Kind::kUcx) {
    t.tls = o.choice("tls", "UCX transport selection", {"tcp", "shm"}, 0) == 0 ? "tcp" : "shm";
    t.ucxTls = o.string("ucx_tls", "");
    if (!t.ucxTls.empty() && t.ucxTls.find("tcp") == std::string::npos) {
      throw ScenarioError{o.at("ucx_tls"), "must include tcp (it carries connection setup), got \"" +
                                               t.ucxTls + "\""};
    }
    t.connectTimeoutMs = o.integer<uint64_t>("connect_timeout_ms", 1, 3600000, uint64_t{10000});
    t.roundTimeoutMs = o.integer<uint64_t>("round_timeout_ms", 1, 86400000, uint64_t{30000});
    t.maxEndpoints = o.integer<uint64_t>("max_endpoints", 1, 1 << 20, uint64_t{64});
    t.shmFrames = o.boolean("shm_frames", true);
    t.shmThresholdBytes =
        o.integer<uint64_t>("shm_threshold_bytes", 0, uint64_t{1} << 40, uint64_t{16384});
    t.spinUs = o.integer<uint64_t>("spin_us", 0, 1000000, uint64_t{50});
  }
  o.finish();
}

void parsePeers(Obj& o, Scenario& s) {
  auto& p = s.peers;
  p.explicitAddresses = true;
  auto checkHostPort = [](const std::string& path, const std::string& text) {
    const auto colon = text.rfind(':');
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < text.size() &&
              colon + 6 >= text.size();
    unsigned long port = 0;
    for (size_t i = colon + 1; ok && i < text.size(); ++i) {
      ok = text[i] >= '0' && text[i] <= '9';
      port = port * 10 + static_cast<unsigned long>(text[i] - '0');
    }
    if (!ok || port == 0 || port > 65535) {
      throw ScenarioError{path, "expected \"host:port\", got \"" + text + "\""};
    }
  };
  if (o.has("addresses")) {
    const json& list = o.require("addresses");
    if (!list.is_array()) throw ScenarioError{o.at("addresses"), "expected an array of \"host:port\""};
    if (static_cast<int>(list.size()) != s.nodes) {
      throw ScenarioError{o.at("addresses"), "has " + std::to_string(list.size()) +
                                                 " entries for " + std::to_string(s.nodes) +
                                                 " nodes (/nodes)"};
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = o.at("addresses") + "/" + std::to_string(i);
      if (!list[i].is_string()) throw ScenarioError{path, "expected a string \"host:port\""};
      checkHostPort(path, list[i].get<std::string>());
      p.addresses.push_back(list[i].get<std::string>());
    }
  } else {
    const json& hosts = o.require("hosts");
    if (!hosts.is_array() || hosts.empty()) {
      throw ScenarioError{o.at("hosts"), "expected a non-empty array of host names"};
    }
    const auto base = o.integer<int>("base_port", 1, 65535, int{kDefaultBasePort});
    if (base + s.nodes - 1 > 65535) {
      throw ScenarioError{o.at("base_port"), "base_port + nodes - 1 exceeds 65535"};
    }
    for (size_t i = 0; i < hosts.size(); ++i) {
      if (!hosts[i].is_string() || hosts[i].get<std::string>().empty()) {
        throw ScenarioError{o.at("hosts") + "/" + std::to_string(i), "expected a host name"};
      }
    }
    // Ranks fill the hosts in contiguous blocks: with 2 hosts and 8 nodes, ranks 0-3 on the
    // first host and 4-7 on the second; rank r listens on base_port + r.
    for (int r = 0; r < s.nodes; ++r) {
      const size_t h = static_cast<size_t>(r) * hosts.size() / static_cast<size_t>(s.nodes);
      p.addresses.push_back(hosts[h].get<std::string>() + ":" + std::to_string(base + r));
    }
  }
  o.finish();
}

Scenario parseRoot(const json& root, const std::string& file, const std::filesystem::path& baseDir) {
  Obj o(root, "");
  Scenario s;
  s.file = file;
  const int version = o.integer<int>("schema_version", 0, 1 << 20);
  if (version != kScenarioSchemaVersion) {
    throw ScenarioError{"/schema_version", "unsupported schema version " + std::to_string(version) +
                                               "; this build reads version " +
                                               std::to_string(kScenarioSchemaVersion)};
  }
  s.name = o.string("name", std::filesystem::path(file).stem().string());
  if (s.name.empty() || s.name.find_first_of("/\\") != std::string::npos || s.name == "." ||
      s.name == "..") {
    throw ScenarioError{"/name", "must be a non-empty name usable as a folder (no slashes)"};
  }
  s.description = o.string("description", "");
  s.nodes = o.integer<int>("nodes", 1, 1 << 20);
  s.seed = o.integer<uint64_t>("seed", 0, std::numeric_limits<uint64_t>::max(), uint64_t{0});
  s.rounds = o.integer<uint64_t>("rounds", 1, uint64_t{1} << 40);
  s.logEvery = o.integer<uint64_t>("log_every", 1, uint64_t{1} << 40,
                                   std::max<uint64_t>(1, s.rounds / 100));
  s.precision = o.choice("precision", "precision", {"float32", "float64"}, 1) == 0
                    ? Precision::kFloat32
                    : Precision::kFloat64;

  Obj topo = o.object("topology");
  parseTopology(topo, s);
  Obj prob = o.object("problem");
  parseProblem(prob, s, baseDir);
  Obj alg = o.object("algorithm");
  s.algorithm.kind = static_cast<optim::AlgorithmKind>(alg.choice("kind", "algorithm", kAlgorithms));
  s.algorithm.stepSize = parseStepSize(alg);
  using AK = optim::AlgorithmKind;
  const AK kind = s.algorithm.kind;
  if (kind == AK::kChoco || kind == AK::kDsgd || kind == AK::kLead || kind == AK::kProxLead) {
    s.algorithm.gamma = alg.number("gamma", 0.0, 1.0, 1.0, /*openLo=*/true);
  }
  if (kind == AK::kLead || kind == AK::kProxLead) {
    s.algorithm.alpha = alg.number("alpha", 0.0, 1.0, 0.5, /*openLo=*/true);
  }
  s.algorithm.regularizer = s.problem.spec.regularizer;
  if (!s.algorithm.regularizer.none() && !optim::handlesRegularizer(kind)) {
    throw ScenarioError{"/problem/regularizer",
                        std::string(optim::algorithmKindName(kind)) +
                            " has no proximal step for a non-smooth regularizer; use "
                            "\"prox_lead\" or \"nids\""};
  }
  s.algorithm.timeVarying = s.topology.schedule.kind != topology::ScheduleKind::kStatic;
  alg.finish();
  if (o.has("compression")) {
    Obj co = o.object("compression");
    parseCompression(co, s);
  } else {
    o.get("compression");
  }
  if (o.has("transport")) {
    Obj tr = o.object("transport");
    parseTransport(tr, s);
  } else {
    o.get("transport");
  }
  if (o.has("peers")) {
    Obj pe = o.object("peers");
    parsePeers(pe, s);
  } else {
    o.get("peers");
  }
  o.finish();
  return s;
}

}  // namespace

const char* precisionName(Precision p) { return p == Precision::kFloat32 ? "float32" : "float64"; }

core::Result<Scenario> parseScenario(std::string_view text, const std::string& file,
                                     const std::filesystem::path& baseDir) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    // Turn the byte offset into a line and column a person can find.
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    if (auto pos = what.find("parse error"); pos != std::string::npos) what = what.substr(pos);
    return core::invalidArgument(file + ":" + std::to_string(line) + ":" + std::to_string(col) +
                                 ": invalid JSON: " + what);
  }
  try {
    return parseRoot(root, file, baseDir);
  } catch (const ScenarioError& e) {
    return core::invalidArgument(file + ": " + (e.path.empty() ? "/" : e.path) + ": " + e.message);
  } catch (const json::exception& e) {
    return core::invalidArgument(file + ": " + e.what());
  }
}

core::Result<Scenario> loadScenario(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return std::filesystem::exists(path) ? core::ioError(path + ": cannot read the scenario file")
                                         : core::notFound(path + ": no such scenario file");
  }
  std::stringstream buf;
  buf << in.rdbuf();
  return parseScenario(buf.str(), path, std::filesystem::path(path).parent_path());
}

std::vector<std::string> peerAddresses(const Scenario& s) {
  if (s.peers.explicitAddresses) return s.peers.addresses;
  std::vector<std::string> out;
  for (int r = 0; r < s.nodes; ++r) out.push_back("127.0.0.1:" + std::to_string(kDefaultBasePort + r));
  return out;
}

void applyOverrides(Scenario& s, std::optional<uint64_t> rounds, std::optional<uint64_t> seed) {
  if (rounds) s.rounds = *rounds;
  if (seed) {
    s.seed = *seed;
    s.topology.seed = *seed;
  }
}

}  // namespace starling::runtime
