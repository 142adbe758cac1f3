// /algorithm/adascale and /algorithm/leader: the large-batch training methods that change what
// a dsgd round sends (docs/algorithms.md §22, §24; scenarios/README.md, `algorithm`).
#include "scenario/scenario_reader.h"

namespace starling::scenario::scenario_detail {

namespace {

using AK = optim::AlgorithmKind;

void needsDsgd(const Obj& alg, const Scenario& s, const std::string& key) {
  if (s.algorithm.kind != AK::kDsgd) {
    throw ScenarioError{alg.at(key), "\"" + key + "\" is a dsgd method; \"kind\" is \"" +
                                         optim::algorithmKindName(s.algorithm.kind) + "\""};
  }
  if (s.algorithm.combine == optim::AlgorithmSpec::Combine::kAdasum) {
    throw ScenarioError{alg.at(key), "\"" + key + "\" and \"combine\": \"adasum\" each change "
                                         "what a round sends; use one of them"};
  }
}

// The sgd estimator's batch: AdaScale splits it, Leader SGD needs its losses.
void needsMinibatch(const Scenario& s, const std::string& what) {
  if (!s.hasProblem) return;  // a trainer's run: the trainer supplies them (api/)
  if (s.problem.estimator.kind != optim::EstimatorSpec::Kind::kSgd) {
    const std::string path = s.problem.estimator.kind == optim::EstimatorSpec::Kind::kFull
                                 ? "/problem"
                                 : "/problem/estimator/kind";
    throw ScenarioError{path, what + " needs the minibatch estimator: give \"estimator\": "
                                     "{\"kind\": \"sgd\", \"batch\": B} (or \"batch\": B)"};
  }
}

void parseAdaScale(Obj& alg, Scenario& s) {
  needsDsgd(alg, s, "adascale");
  Obj a = alg.object("adascale");
  optim::AdaScaleSpec spec;
  if (a.has("smoothing")) {
    spec.smoothing = a.number("smoothing", 0.0, 1.0, std::nullopt, false, /*openHi=*/true);
  }
  a.get("smoothing");
  if (!s.hasProblem) {
    // A trainer's run: the trainer draws its batches and passes AdaScale's estimates to step()
    // (StepStats), so only the scale S is the scenario's.
    spec.scale = a.number("scale", 1.0, 1e12, std::nullopt);
    a.finish();
    s.algorithm.adascale = spec;
    return;
  }
  if (a.has("scale")) {
    throw ScenarioError{a.at("scale"), "is derived for the built-in problems (nodes x batch / "
                                       "base_batch); give base_batch instead"};
  }
  spec.microBatches = a.integer<size_t>("micro_batches", 2, size_t{1} << 16, size_t{2});
  if (a.has("base_batch")) spec.baseBatch = a.number("base_batch", 0.0, 1e12, std::nullopt, true);
  a.get("base_batch");
  a.finish();
  needsMinibatch(s, "AdaScale");
  {
    const size_t batch = s.problem.estimator.batch;
    if (batch % spec.microBatches != 0) {
      throw ScenarioError{a.at("micro_batches"),
                          "must divide each node's batch (" + std::to_string(batch) + "), got " +
                              std::to_string(spec.microBatches)};
    }
    const double micro = static_cast<double>(batch / spec.microBatches);
    const double base = spec.baseBatch.value_or(micro);
    spec.scale = static_cast<double>(s.nodes) * static_cast<double>(batch) / base;
    if (spec.scale < 1.0) {
      throw ScenarioError{a.at("base_batch"),
                          "is larger than the network's batch (" + fmt(s.nodes * double(batch)) +
                              " = nodes x batch): AdaScale scales up, never down"};
    }
  }
  if (s.algorithm.stepSize.kind == optim::StepSizeSchedule::Kind::kLegw) {
    throw ScenarioError{"/algorithm/step_size/kind",
                        "AdaScale adapts the base run's schedule to the batch itself; give the "
                        "base schedule, not \"legw\""};
  }
  using LK = optim::LocalOptimizerSpec::Kind;
  if (const LK lk = s.algorithm.localOptimizer.kind; lk != LK::kSgd && lk != LK::kMomentum) {
    throw ScenarioError{"/algorithm/local_optimizer/kind",
                        "AdaScale's gain is derived for SGD (with or without momentum); \"" +
                            std::string(optim::localOptimizerKindName(lk)) +
                            "\" adapts its steps itself"};
  }
  s.algorithm.adascale = spec;
}

void parseLeader(Obj& alg, Scenario& s) {
  needsDsgd(alg, s, "leader");
  if (s.algorithm.adascale) {
    throw ScenarioError{alg.at("leader"), "\"leader\" and \"adascale\" each change what a round "
                                          "sends; use one of them"};
  }
  Obj l = alg.object("leader");
  optim::LeaderSpec spec;
  spec.pullLocal = l.number("pull_local", 0.0, 1.0, spec.pullLocal);
  spec.pullGlobal = l.number("pull_global", 0.0, 1.0, spec.pullGlobal);
  spec.proximalLocal = l.number("proximal_local", 0.0, 1.0, spec.proximalLocal);
  spec.proximalGlobal = l.number("proximal_global", 0.0, 1.0, spec.proximalGlobal);
  spec.localPeriod = l.integer<uint64_t>("local_period", 1, uint64_t{1} << 40, spec.localPeriod);
  spec.globalPeriod = l.integer<uint64_t>("global_period", 1, uint64_t{1} << 40, spec.globalPeriod);
  spec.lossWindow = l.integer<uint64_t>("loss_window", 1, uint64_t{1} << 20, spec.lossWindow);
  l.finish();
  needsMinibatch(s, "Leader SGD");
  if (s.topology.schedule.kind != topology::ScheduleKind::kStatic) {
    throw ScenarioError{"/topology/schedule", "Leader SGD elects its global leader over the "
                                              "static graph's diameter; use a static schedule"};
  }
  if (s.nodes >= (1 << 24)) {
    throw ScenarioError{alg.at("leader"), "ranks travel as float32 values: at most 2^24 nodes"};
  }
  s.algorithm.leader = spec;
}

}  // namespace

void parseTrainingMethodsOf(Obj& alg, Scenario& s) {
  if (alg.has("adascale")) {
    parseAdaScale(alg, s);
  } else {
    alg.get("adascale");
  }
  if (alg.has("leader")) {
    parseLeader(alg, s);
  } else {
    alg.get("leader");
  }
  parseSketchOf(alg, s);
}

void checkTrainingMethodsCompression(const Scenario& s) {
  checkSketch(s);
  if ((s.algorithm.adascale || s.algorithm.leader) &&
      !compression::sendsIdentityOnly(s.compression)) {
    throw ScenarioError{"/compression/kind",
                        std::string(s.algorithm.adascale ? "AdaScale" : "Leader SGD") +
                            " sends its statistics in the message, which a codec would distort; "
                            "leave compression out"};
  }
}

}  // namespace starling::scenario::scenario_detail
