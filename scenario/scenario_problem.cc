// The /problem section of a scenario: data, loss, regularizer, estimator (and the step-size
// schedule the algorithm section shares). See scenario_reader.h.
#include <filesystem>
#include <string>
#include <vector>

#include "optim/mlp.h"
#include "scenario/scenario_reader.h"

namespace starling::scenario::scenario_detail {

namespace {
using StepKind = optim::StepSizeSchedule::Kind;

// The decay part of a schedule (constant, inverse_time, step) from the keys of `so`.
void parseDecay(Obj& so, optim::StepSizeSchedule& st, StepKind kind) {
  if (kind == StepKind::kInverseTime) {
    st.tau = so.number("tau", 0.0, 1e12, std::nullopt, true);
  } else if (kind == StepKind::kStep) {
    st.every = so.integer<uint64_t>("every", 1, uint64_t{1} << 40);
    st.factor = so.number("factor", 0.0, 1.0, std::nullopt, true);
  }
}
}  // namespace

optim::StepSizeSchedule parseStepSize(Obj& o) {
  optim::StepSizeSchedule st;
  const json& v = o.require("step_size");
  if (v.is_number()) {
    st.value = o.number("step_size", 0.0, 1e6, std::nullopt, /*openLo=*/true);
    return st;
  }
  Obj so(v, o.at("step_size"));
  st.kind = static_cast<StepKind>(
      so.choice("kind", "step-size schedule", {"constant", "inverse_time", "step", "legw"}));
  if (st.kind != StepKind::kLegw) {
    st.value = so.number("value", 0.0, 1e6, std::nullopt, true);
    parseDecay(so, st, st.kind);
    so.finish();
    return st;
  }
  // LEGW (docs/algorithms.md §21): the peak grows with sqrt(batch / base_batch), the linear
  // warm-up with batch / base_batch epochs; `batch` defaults to nodes x the per-node batch and
  // `rounds_per_epoch` to the rounds the network needs to see the training data once (both
  // filled in once the data is known: scenario/experiment.cc).
  st.baseLr = so.number("base_lr", 0.0, 1e6, std::nullopt, true);
  st.baseBatch = so.number("base_batch", 0.0, 1e12, std::nullopt, true);
  st.batchGiven = so.has("batch");
  if (st.batchGiven) st.batch = so.number("batch", 0.0, 1e12, std::nullopt, true);
  st.warmupEpochs = so.number("warmup_epochs", 0.0, 1e6, std::nullopt);
  st.roundsPerEpochGiven = so.has("rounds_per_epoch");
  if (st.roundsPerEpochGiven) {
    st.roundsPerEpoch = so.number("rounds_per_epoch", 0.0, 1e12, std::nullopt, true);
  }
  st.decay = StepKind::kConstant;
  if (so.has("decay")) {
    Obj d = so.object("decay");
    st.decay = static_cast<StepKind>(
        d.choice("kind", "decay schedule", {"constant", "inverse_time", "step"}));
    parseDecay(d, st, st.decay);
    d.finish();
  } else {
    so.get("decay");
  }
  so.finish();
  return st;
}

namespace {
optim::LocalOptimizerSpec parseLocalOptimizer(Obj& o) {
  using K = optim::LocalOptimizerSpec::Kind;
  optim::LocalOptimizerSpec l;
  // "adamw" is adam with its decoupled weight decay, PyTorch's default 0.01 unless given.
  const size_t choice =
      o.choice("kind", "local optimizer", {"sgd", "momentum", "adam", "lamb", "adamw"});
  l.kind = choice == 4 ? K::kAdam : static_cast<K>(choice);
  l.weightDecay = o.number("weight_decay", 0.0, 1e6, choice == 4 ? 0.01 : 0.0);
  if (l.kind == K::kMomentum) {
    l.momentum = o.number("momentum", 0.0, 1.0, 0.9, false, /*openHi=*/true);
    l.nesterov = o.boolean("nesterov", false);
  }
  if (l.kind == K::kAdam || l.kind == K::kLamb) {
    l.beta1 = o.number("beta1", 0.0, 1.0, 0.9, false, /*openHi=*/true);
    l.beta2 = o.number("beta2", 0.0, 1.0, 0.999, false, /*openHi=*/true);
    // LAMB's paper uses 1e-6, Adam's 1e-8.
    l.eps = o.number("eps", 0.0, 1.0, l.kind == K::kLamb ? 1e-6 : 1e-8, /*openLo=*/true);
    l.biasCorrection = o.boolean("bias_correction", true);
  }
  o.finish();
  return l;
}
}  // namespace

void parseLocalOptimizerOf(Obj& alg, Scenario& s) {
  using AK = optim::AlgorithmKind;
  if (s.algorithm.kind == AK::kDiloco) {
    // diloco's local optimizer is its inner one (parseDilocoOf).
    if (alg.has("local_optimizer")) {
      throw ScenarioError{alg.at("local_optimizer"),
                          "diloco's local optimizer is \"inner\" (the optimizer of its inner "
                          "steps)"};
    }
    return;
  }
  if (!alg.has("local_optimizer")) {
    alg.get("local_optimizer");
    return;
  }
  Obj lo = alg.object("local_optimizer");
  s.algorithm.localOptimizer = parseLocalOptimizer(lo);
  const AK kind = s.algorithm.kind;
  if (s.algorithm.localOptimizer.kind != optim::LocalOptimizerSpec::Kind::kSgd &&
      kind != AK::kDsgd && kind != AK::kChoco) {
    throw ScenarioError{lo.at("kind"),
                        std::string(optim::localOptimizerKindName(s.algorithm.localOptimizer.kind)) +
                            " changes the gradients " + optim::algorithmKindName(kind) +
                            " corrects, which breaks its exactness; use it with \"dsgd\" or "
                            "\"choco\" (docs/algorithms.md §20)"};
  }
}

void parseDilocoOf(Obj& alg, Scenario& s) {
  using AK = optim::AlgorithmKind;
  if (s.algorithm.kind != AK::kDiloco) {
    for (const char* key : {"inner_steps", "inner", "outer", "fragments", "overlap"}) {
      if (alg.has(key)) {
        throw ScenarioError{alg.at(key), std::string("\"") + key + "\" is a key of \"kind\": "
                                         "\"diloco\"; \"kind\" is \"" +
                                         optim::algorithmKindName(s.algorithm.kind) + "\""};
      }
    }
    return;
  }
  optim::DilocoSpec& d = s.algorithm.diloco;
  const json* steps = alg.get("inner_steps");
  if (steps != nullptr && steps->is_object()) {
    // {"kind": "by_time", "seconds": s, "max_steps": M, "step_seconds": t, "speeds": [...]}
    Obj bt = alg.object("inner_steps");
    bt.choice("kind", "inner_steps kind", {"by_time"});
    d.seconds = bt.number("seconds", 0.0, 3600.0, std::nullopt, /*openLo=*/true);
    d.innerSteps = bt.integer<uint64_t>("max_steps", 1, uint64_t{1} << 20, uint64_t{10000});
    d.stepSeconds = bt.number("step_seconds", 0.0, 3600.0, 1e-3, /*openLo=*/true);
    if (bt.has("speeds")) {
      const json& sp = bt.require("speeds");
      if (!sp.is_array() || static_cast<int>(sp.size()) != s.nodes) {
        throw ScenarioError{bt.at("speeds"), "expected an array of " + std::to_string(s.nodes) +
                                                 " numbers, one per node (/nodes)"};
      }
      for (size_t i = 0; i < sp.size(); ++i) {
        const std::string at = bt.at("speeds") + "/" + std::to_string(i);
        if (!sp[i].is_number() || !(sp[i].get<double>() >= 1e-6 && sp[i].get<double>() <= 1e6)) {
          throw ScenarioError{at, "expected a relative speed in [1e-6, 1e6]"};
        }
        d.speeds.push_back(sp[i].get<double>());
      }
    }
    bt.finish();
  } else {
    d.innerSteps = alg.integer<uint64_t>("inner_steps", 1, uint64_t{1} << 20);
  }
  d.fragments = alg.integer<uint64_t>("fragments", 1, 4096, uint64_t{1});
  d.overlap = alg.boolean("overlap", false);
  if (d.innerSteps % d.fragments != 0) {
    throw ScenarioError{alg.at("fragments"),
                        "each of the " + std::to_string(d.fragments) +
                            " fragments is exchanged after inner_steps / fragments inner steps; "
                            "inner_steps (" + std::to_string(d.innerSteps) +
                            ") must be a multiple of it"};
  }
  if (alg.has("inner")) {
    Obj in = alg.object("inner");
    s.algorithm.localOptimizer = parseLocalOptimizer(in);
  } else {
    alg.get("inner");
  }
  using Outer = optim::DilocoSpec::Outer;
  if (alg.has("outer")) {
    Obj out = alg.object("outer");
    d.outer = static_cast<Outer>(out.choice(
        "kind", "outer optimizer", {"sgd", "nesterov", "exact_diffusion", "noloco"}, 1));
    // DiLoCo's lr 0.7 and momentum 0.9 for nesterov; NoLoCo's lr 0.7, momentum 0.5 and a pull
    // as strong as the lr; plain averaging (lr 1) otherwise.
    const bool momentum = d.outer == Outer::kNesterov || d.outer == Outer::kNoloco;
    d.outerLr = out.number("lr", 0.0, 2.0, momentum ? 0.7 : 1.0, /*openLo=*/true);
    if (momentum) {
      d.outerMomentum = out.number("momentum", 0.0, 1.0, d.outer == Outer::kNoloco ? 0.5 : 0.9,
                                   false, /*openHi=*/true);
    }
    if (d.outer == Outer::kNoloco) d.pull = out.number("pull", 0.0, 2.0, d.outerLr, true);
    out.finish();
  } else {
    alg.get("outer");
  }
  const optim::LocalOptimizerSpec& l = s.algorithm.localOptimizer;
  if (d.outer == Outer::kExactDiffusion &&
      (l.kind != optim::LocalOptimizerSpec::Kind::kSgd || l.weightDecay != 0.0)) {
    throw ScenarioError{alg.at("inner") + "/kind",
                        "the exact_diffusion outer step corrects the inner steps' gradients, "
                        "which a stateful inner optimizer (or weight decay) changes; use \"sgd\" "
                        "inside it (docs/algorithms.md §29)"};
  }
}

void parseCodistillationOf(Obj& alg, Scenario& s) {
  using AK = optim::AlgorithmKind;
  if (!alg.has("codistillation")) {
    alg.get("codistillation");
    return;
  }
  if (s.algorithm.kind != AK::kDsgd) {
    throw ScenarioError{alg.at("codistillation"),
                        std::string("codistillation replaces dsgd's averaging of models; it goes "
                                    "with \"kind\": \"dsgd\", not \"") +
                            optim::algorithmKindName(s.algorithm.kind) + "\""};
  }
  Obj co = alg.object("codistillation");
  optim::CodistillationConfig c;
  c.loss.alpha = co.number("alpha", 0.0, 1e6, 1.0);
  const size_t distance =
      co.choice("distance", "codistillation distance", {"cross_entropy", "kl"}, 0);
  c.loss.distance = distance == 1 ? optim::CodistillationSpec::Distance::kKl
                                  : optim::CodistillationSpec::Distance::kCrossEntropy;
  c.period = co.integer<uint64_t>("period", 1, kMaxRounds, uint64_t{1});
  c.burnIn = co.integer<uint64_t>("burn_in", 0, kMaxRounds, uint64_t{0});
  co.finish();
  // The term needs the network's logits on the node's batch: the built-in mlp, or a trainer's
  // own model (a scenario without a problem, run through starling::Peer).
  if (s.hasProblem && !s.problem.isMlp()) {
    throw ScenarioError{"/problem/kind",
                        "codistillation compares a classifier's predictions: it needs the "
                        "\"mlp\" problem (or a trainer's own model through starling::Peer)"};
  }
  if (s.hasProblem && s.problem.estimator.kind != optim::EstimatorSpec::Kind::kSgd) {
    throw ScenarioError{s.problem.batchPath,
                        "codistillation compares predictions on the node's minibatch; give a "
                        "batch size (the sgd estimator)"};
  }
  if (alg.has("combine")) {
    throw ScenarioError{alg.at("combine"),
                        "codistillation never combines models or updates; leave \"combine\" out"};
  }
  if (alg.has("gamma")) {
    throw ScenarioError{alg.at("gamma"),
                        "codistillation never averages models, so there is no consensus step; "
                        "leave \"gamma\" out"};
  }
  s.algorithm.codistillation = c;
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

std::vector<int> parseLayers(Obj& o) {
  const json& v = o.require("layers");
  if (!v.is_array()) throw ScenarioError{o.at("layers"), "expected an array of layer sizes, got " + typeName(v)};
  std::vector<int> layers;
  for (size_t k = 0; k < v.size(); ++k) {
    const std::string at = o.at("layers") + "/" + std::to_string(k);
    if (!v[k].is_number_integer()) throw ScenarioError{at, "expected an integer, got " + typeName(v[k])};
    const auto x = v[k].get<int64_t>();
    if (x < 1 || x > optim::kMaxMlpWidth) {
      throw ScenarioError{at, "must be between 1 and " + std::to_string(optim::kMaxMlpWidth) +
                                  ", got " + v[k].dump()};
    }
    layers.push_back(static_cast<int>(x));
  }
  if (auto st = optim::checkMlpLayers(layers); !st.isOk()) {
    throw ScenarioError{o.at("layers"), st.message()};
  }
  return layers;
}

// "partition": "contiguous" | "random" | "iid", or {"kind": ..., "alpha", "shards_per_node"}.
void parsePartition(Obj& o, ProblemConfig& p) {
  const std::vector<std::string> names = {"contiguous", "random", "iid", "dirichlet", "shards"};
  const PartitionKind kinds[] = {PartitionKind::kContiguous, PartitionKind::kRandom,
                                 PartitionKind::kIid, PartitionKind::kDirichlet,
                                 PartitionKind::kShards};
  const json* v = o.get("partition");
  if (!v || !v->is_object()) {
    p.partition = kinds[o.choice("partition", "partition", {"contiguous", "random", "iid"}, 0)];
    return;
  }
  Obj po(*v, o.at("partition"));
  p.partition = kinds[po.choice("kind", "partition", names)];
  if (p.partition == PartitionKind::kDirichlet) {
    p.partitionAlpha = po.number("alpha", 0.0, 1e6, 0.5, /*openLo=*/true);
  }
  if (p.partition == PartitionKind::kShards) {
    p.shardsPerNode = po.integer<int>("shards_per_node", 1, 1 << 20, 2);
  }
  po.finish();
}

// {"format": "idx", "images", "labels", "test_images", "test_labels"} or
// {"dataset": "fashion-mnist"}; both take "train_samples" and "test_samples".
void parseIdxSource(Obj& d, DataSource& src, const std::filesystem::path& baseDir) {
  src.kind = DataSource::Kind::kIdx;
  if (d.has("dataset")) {
    if (d.has("format")) throw ScenarioError{d.at("format"), "cannot be combined with \"dataset\""};
    d.choice("dataset", "dataset", {"fashion-mnist"});
    src.dataset = "fashion-mnist";
    const std::string dir = kFashionMnistDir;
    src.images = dir + "/train-images-idx3-ubyte.gz";
    src.labels = dir + "/train-labels-idx1-ubyte.gz";
    src.testImages = dir + "/t10k-images-idx3-ubyte.gz";
    src.testLabels = dir + "/t10k-labels-idx1-ubyte.gz";
  } else {
    d.get("format");
    const auto path = [&](const char* key) {
      const std::string raw = d.string(key);
      if (raw.empty()) throw ScenarioError{d.at(key), "must not be empty"};
      std::filesystem::path pth(raw);
      return (pth.is_absolute() ? pth : baseDir / pth).lexically_normal().string();
    };
    src.images = path("images");
    src.labels = path("labels");
    src.testImages = path("test_images");
    src.testLabels = path("test_labels");
  }
  src.trainSamples = d.integer<uint64_t>("train_samples", 0, uint64_t{1} << 32, uint64_t{0});
  src.testSamples = d.integer<uint64_t>("test_samples", 0, uint64_t{1} << 32, uint64_t{0});
}

}  // namespace

void parseProblem(Obj& o, Scenario& s, const std::filesystem::path& baseDir) {
  auto& p = s.problem;
  const size_t kind = o.choice("kind", "problem", {"least_squares", "logistic", "mlp"});
  if (kind == 2) {
    p.model = ProblemConfig::Model::kMlp;
    p.layers = parseLayers(o);
  } else {
    p.spec.loss = static_cast<optim::LossKind>(kind);
    o.get("layers");
  }
  p.spec.l2 = o.number("l2", 0.0, 1e6, 0.0);
  parsePartition(o, p);
  if (p.isMlp() && o.has("regularizer")) {
    throw ScenarioError{o.at("regularizer"), "not available for the mlp problem (l2 is)"};
  }
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
    if (p.isMlp() && p.estimator.kind != optim::EstimatorSpec::Kind::kFull &&
        p.estimator.kind != optim::EstimatorSpec::Kind::kSgd) {
      throw ScenarioError{est.at("kind"), "the mlp problem takes \"full\" or \"sgd\" (lsvrg and "
                                          "saga need a linear model)"};
    }
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
  } else if (d.has("dataset") || (d.has("format") && d.require("format") == "idx")) {
    parseIdxSource(d, p.data, baseDir);
  } else if (d.has("format")) {
    d.choice("format", "data format", {"libsvm", "idx"});
    p.data.kind = DataSource::Kind::kLibsvm;
    const std::string raw = d.string("path");
    if (raw.empty()) throw ScenarioError{d.at("path"), "must not be empty"};
    std::filesystem::path path(raw);
    p.data.path = (path.is_absolute() ? path : baseDir / path).lexically_normal().string();
    if (d.has("features")) p.data.features = d.integer<int>("features", 1, kMaxFeatures);
  } else {
    throw ScenarioError{d.path(), "expected {\"synthetic\": {...}}, {\"format\": \"libsvm\", "
                                  "\"path\": ...}, {\"format\": \"idx\", \"images\": ...} or "
                                  "{\"dataset\": \"fashion-mnist\"}"};
  }
  d.finish();
  const bool idx = p.data.kind == DataSource::Kind::kIdx;
  if (p.isMlp() != idx) {
    throw ScenarioError{p.isMlp() ? d.path() : o.at("kind"),
                        p.isMlp() ? "the mlp problem needs image data: {\"format\": \"idx\", ...} "
                                    "or {\"dataset\": \"fashion-mnist\"}"
                                  : "idx data is for the mlp problem"};
  }
  if (!idx && (p.partition == PartitionKind::kDirichlet || p.partition == PartitionKind::kShards)) {
    throw ScenarioError{o.at("partition"), "dirichlet and shards partitions need labelled image "
                                           "data (idx)"};
  }
  if (p.usesBatch() && p.data.kind == DataSource::Kind::kSynthetic &&
      p.estimator.batch > p.data.synthetic.samples) {
    throw ScenarioError{p.batchPath, "larger than the number of samples"};
  }
  o.finish();
}

}  // namespace starling::scenario::scenario_detail
