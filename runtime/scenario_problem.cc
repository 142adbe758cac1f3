// The /problem section of a scenario: data, loss, regularizer, estimator (and the step-size
// schedule the algorithm section shares). See scenario_reader.h.
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/scenario_reader.h"

namespace starling::runtime::scenario_detail {

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
namespace {

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

}  // namespace

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
    sp.features = syn.integer<int>("features", 1, kMaxFeatures);
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
    if (d.has("features")) p.data.features = d.integer<int>("features", 1, kMaxFeatures);
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

}  // namespace starling::runtime::scenario_detail
