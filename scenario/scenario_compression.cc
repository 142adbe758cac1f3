// /compression: the codec's keys, its layer rules and what each algorithm accepts
// (docs/compression.md; scenarios/README.md, `compression`).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "compression/codec_keys.h"
#include "scenario/scenario_limits.h"
#include "scenario/scenario_reader.h"

namespace starling::scenario::scenario_detail {
namespace {

// The names come from the compression module's one table (compression::compressorKinds()).
std::vector<std::string> codecNames() {
  std::vector<std::string> names;
  for (const auto& k : compression::compressorKinds()) names.emplace_back(k.name);
  return names;
}

void parseKeep(Obj& o, compression::CompressorSpec& c) {
  if (o.has("k") == o.has("ratio")) {
    throw ScenarioError{o.path(), "give exactly one of \"k\" (elements kept) or \"ratio\""};
  }
  if (o.has("k")) c.k = o.integer<uint64_t>("k", 1, uint64_t{1} << 40);
  if (o.has("ratio")) c.ratio = o.number("ratio", 0.0, 1.0, std::nullopt, /*openLo=*/true);
}

// countsketch's heavy hitters: with the median estimate exactly one of k, ratio or threshold;
// with the mean estimate (every coordinate decoded) none.
void parseSketchKeep(Obj& o, compression::CompressorSpec& c) {
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
}

// One codec's keys (kind, its parameters from the codec key table, error_feedback) into c; the
// caller finishes o.
void parseCodecKeys(Obj& o, compression::CompressorSpec& c) {
  using Kind = compression::CompressorSpec::Kind;
  using Type = compression::CodecKey::Type;
  static const std::vector<std::string> kCodecs = codecNames();
  c.kind = compression::compressorKinds()[o.choice("kind", "codec", kCodecs)].kind;
  for (const compression::CodecKey& key : compression::codecKeys(c.kind)) {
    switch (key.type) {
      case Type::kKeep:
        parseKeep(o, c);
        break;
      case Type::kSketchKeep:
        parseSketchKeep(o, c);
        break;
      case Type::kInteger: {
        const auto bound = [&](const char* other) {
          return static_cast<uint64_t>(*compression::codecKeyValue(c, other));
        };
        const uint64_t lo = key.loKey ? bound(key.loKey) : static_cast<uint64_t>(key.lo);
        const uint64_t hi = key.hiKey ? bound(key.hiKey) - 1 : static_cast<uint64_t>(key.hi);
        std::optional<uint64_t> def;
        if (key.def) def = std::min(static_cast<uint64_t>(*key.def), hi);
        key.set(c, static_cast<double>(o.integer<uint64_t>(key.name, lo, hi, def)));
        break;
      }
      case Type::kNumber:
        key.set(c, o.number(key.name, key.lo, key.hi, key.def, key.openLo));
        break;
      case Type::kBoolean:
        key.set(c, o.boolean(key.name, key.def.value_or(0) != 0) ? 1 : 0);
        break;
      case Type::kChoice: {
        const std::vector<std::string> names(key.choices.begin(), key.choices.end());
        std::optional<size_t> def;
        if (key.def) def = static_cast<size_t>(*key.def);
        key.set(c, static_cast<double>(o.choice(key.name, key.name, names, def)));
        break;
      }
    }
  }
  c.errorFeedback = o.boolean("error_feedback", false);
  if (c.kind == Kind::kAdaComp && c.errorFeedback) {
    // The codec would refuse it when the run starts; say so while validating.
    throw ScenarioError{o.at("error_feedback"),
                        "adacomp keeps its own residue (its error feedback); leave "
                        "\"error_feedback\" out"};
  }
}

// Whether the algorithm takes codec c (docs/compression.md, "Which algorithm takes which
// codec"); the same rules for the top-level codec and for each layers rule's.
void checkCodecForAlgorithm(const Obj& o, const compression::CompressorSpec& c,
                            const Scenario& s) {
  using Kind = compression::CompressorSpec::Kind;
  const bool differences = optim::sendsCompressedDifferences(s.algorithm.kind);
  const char* alg = optim::algorithmKindName(s.algorithm.kind);
  if (differences && (c.errorFeedback || c.kind == Kind::kAdaComp)) {
    throw ScenarioError{c.errorFeedback ? o.at("error_feedback") : o.at("kind"),
                        std::string(alg) +
                            " already sends compressed differences against reference points it "
                            "tracks; error feedback (or adacomp's residue) on top would count the "
                            "same error twice"};
  }
  if (c.kind == Kind::kIdentity || differences) return;
  if (s.algorithm.codistillation) {
    // Each exchange replaces a neighbour's copy whole, so a codec's error never accumulates; a
    // residual carried into the next model (error feedback) would only add noise to it.
    if (!c.errorFeedback && c.kind != Kind::kAdaComp) return;
    throw ScenarioError{c.errorFeedback ? o.at("error_feedback") : o.at("kind"),
                        "codistillation sends whole models, each replacing the last copy: a "
                        "codec's error does not accumulate, and error feedback (or adacomp's "
                        "residue) would carry one model's error into the next; leave it out"};
  }
  if (s.algorithm.kind == optim::AlgorithmKind::kDiloco && s.algorithm.diloco.seconds > 0) {
    throw ScenarioError{o.at("kind"),
                        "inner_steps by_time sends each local model weighted by its steps, "
                        "uncompressed; leave compression out"};
  }
  // DSGD and DiLoCo keep their exact message and add only the mixed differences (the
  // DeepSqueeze form), so error feedback carries each round's codec error into the next message.
  if ((s.algorithm.kind == optim::AlgorithmKind::kDsgd ||
       s.algorithm.kind == optim::AlgorithmKind::kDiloco) &&
      (c.errorFeedback || c.kind == Kind::kAdaComp)) {
    return;
  }
  // Without error feedback DiLoCo sends the change of its local model against a reference
  // point every node tracks (docs/algorithms.md §29), which needs a fixed mixing matrix.
  if (s.algorithm.kind == optim::AlgorithmKind::kDiloco) {
    if (s.algorithm.diloco.outer == optim::DilocoSpec::Outer::kNoloco) {
      throw ScenarioError{o.at("kind"),
                          "the noloco outer step mixes outer and local models as they are; with "
                          "a lossy codec use \"error_feedback\": true"};
    }
    if (s.topology.schedule.kind != topology::ScheduleKind::kStatic) {
      throw ScenarioError{o.at("kind"),
                          "diloco sends compressed differences against reference points summed "
                          "with a fixed W; on a time-varying topology use \"error_feedback\": "
                          "true"};
    }
    return;
  }
  throw ScenarioError{o.at("kind"),
                      std::string(alg) +
                          " sends raw vectors, so a lossy codec's error would accumulate; use "
                          "\"choco\" (which sends compressed differences), \"dsgd\" or \"diloco\" "
                          "with \"error_feedback\": true, or \"identity\""};
}

// /compression/layers/i/tensors: a non-empty array of integers.
std::vector<int64_t> parseTensorList(const json& v, const std::string& at) {
  if (!v.is_array() || v.empty()) {
    throw ScenarioError{at, "expected a non-empty array of tensor indices (0 is the first tensor "
                            "of the model's layout, -1 the last), got " +
                                (v.is_array() ? std::string("an empty array") : typeName(v))};
  }
  std::vector<int64_t> tensors;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    if (!e.is_number_integer() ||
        (e.is_number_unsigned() && e.get<uint64_t>() > (uint64_t{1} << 32))) {
      throw ScenarioError{at + "/" + std::to_string(i),
                          "expected a tensor index (an integer), got " + e.dump()};
    }
    const auto t = e.get<int64_t>();
    if (t < -(int64_t{1} << 32)) {
      throw ScenarioError{at + "/" + std::to_string(i),
                          "expected a tensor index (an integer), got " + e.dump()};
    }
    tensors.push_back(t);
  }
  return tensors;
}

// "uncompressed": ["first", "last"]: the first layer is tensors 0 and 1 (W_1, b_1), the last is
// tensors -2 and -1 (W_L, b_L), sent with identity (docs/compression.md).
compression::LayerRule parseUncompressed(const json& v, const std::string& at) {
  if (!v.is_array() || v.empty()) {
    throw ScenarioError{at, "expected a non-empty array of \"first\" and \"last\", got " +
                                typeName(v)};
  }
  bool first = false, last = false;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = at + "/" + std::to_string(i);
    if (!v[i].is_string()) throw ScenarioError{where, "expected \"first\" or \"last\""};
    const auto name = v[i].get<std::string>();
    bool& flag = name == "first" ? first : last;
    if (name != "first" && name != "last") {
      throw ScenarioError{where, "unknown layer \"" + name + "\"; expected first, last"};
    }
    if (flag) throw ScenarioError{where, "\"" + name + "\" is named twice"};
    flag = true;
  }
  compression::LayerRule rule;
  if (first) rule.tensors = {0, 1};
  if (last) rule.tensors.insert(rule.tensors.end(), {-2, -1});
  return rule;  // identity, the spec's default
}

// The rules against the model's layout, where the scenario knows it: the mlp problem's tensors
// (W_1, b_1, ..., W_L, b_L), a linear model's one tensor. A trainer's layout arrives with its
// first step, and createCompressor checks the rules then.
void checkLayerRules(const compression::CompressorSpec& c, const Scenario& s,
                     const std::vector<std::string>& rulePaths) {
  if (c.layers.empty()) return;
  // A trainer: only what holds for every layout (no positive index meets a negative one).
  int64_t widest = 0;
  for (const auto& rule : c.layers) {
    for (int64_t t : rule.tensors) widest = std::max(widest, t < 0 ? -t : t + 1);
  }
  size_t tensors = 2 * static_cast<size_t>(widest) + 2;
  std::string model;
  if (s.hasProblem && s.problem.isMlp()) {
    tensors = 2 * (s.problem.layers.size() - 1);
    model = " (the mlp problem's layout: W_1, b_1, ..., W_L, b_L)";
  } else if (s.hasProblem) {
    tensors = 1;
    model = " (this problem's model has no layers: it is one tensor, 0 or -1)";
  }
  compression::LayerRuleFault fault;
  auto groups = compression::layerGroups(c, tensors, &fault);
  if (groups) return;
  std::string at = rulePaths[fault.rule];
  const bool shorthand = at.ends_with("/uncompressed");
  if (fault.position == compression::LayerRuleFault::npos) {
    if (!shorthand) at += "/tensors";
  } else if (!shorthand) {
    at += "/tensors/" + std::to_string(fault.position);
  }
  std::string message = groups.status().message();
  if (shorthand) {
    message = "\"first\" is tensors 0 and 1 (W_1, b_1), \"last\" tensors -2 and -1: " + message;
  }
  throw ScenarioError{at, message + model};
}

// lgc as the top-level codec or in a layers rule.
bool usesLgc(const compression::CompressorSpec& c) {
  using Kind = compression::CompressorSpec::Kind;
  if (c.kind == Kind::kLgc) return true;
  return std::any_of(c.layers.begin(), c.layers.end(),
                     [](const compression::LayerRule& r) { return r.codec.kind == Kind::kLgc; });
}

}  // namespace

void parseCompression(Obj& o, Scenario& s) {
  auto& c = s.compression;
  parseCodecKeys(o, c);
  std::vector<std::string> rulePaths;
  if (const json* layers = o.get("layers")) {
    if (!layers->is_array() || layers->empty()) {
      throw ScenarioError{o.at("layers"), "expected a non-empty array of rules {\"tensors\": "
                                          "[...], \"kind\": ...}, got " +
                                              typeName(*layers)};
    }
    for (size_t i = 0; i < layers->size(); ++i) {
      Obj r((*layers)[i], o.at("layers") + "/" + std::to_string(i));
      compression::LayerRule rule;
      rule.tensors = parseTensorList(r.require("tensors"), r.at("tensors"));
      parseCodecKeys(r, rule.codec);
      r.finish();
      checkCodecForAlgorithm(r, rule.codec, s);
      c.layers.push_back(std::move(rule));
      rulePaths.push_back(r.path());
    }
  }
  if (const json* un = o.get("uncompressed")) {
    c.layers.push_back(parseUncompressed(*un, o.at("uncompressed")));
    rulePaths.push_back(o.at("uncompressed"));
  }
  o.finish();
  checkCodecForAlgorithm(o, c, s);
  checkLayerRules(c, s, rulePaths);
  // The layered codec hands receiver state to one group only (compression/codecs/layered.cc).
  bool lgc = c.kind == compression::CompressorSpec::Kind::kLgc;
  for (size_t r = 0; r < c.layers.size(); ++r) {
    if (c.layers[r].codec.kind != compression::CompressorSpec::Kind::kLgc) continue;
    if (lgc) throw ScenarioError{rulePaths[r] + "/kind", "at most one group may use lgc"};
    lgc = true;
  }
}

void checkLgc(const Scenario& s) {
  if (!usesLgc(s.compression)) return;
  // Error feedback keeps a residual per fragment (engine::Node::setCodecStreams); LGC's frames
  // are one sequence that its receivers follow, which fragments' streams would break.
  if (s.algorithm.kind == optim::AlgorithmKind::kDiloco && s.algorithm.diloco.fragments > 1 &&
      s.compression.errorFeedback) {
    throw ScenarioError{"/compression/error_feedback",
                        "error feedback in fragments keeps a residual per fragment, and lgc's "
                        "receivers follow one sequence of frames; leave error_feedback out (the "
                        "compressed differences keep reference points per fragment)"};
  }
  // Receivers hold each sender's decoders (docs/compression.md "LGC"); neither a checkpoint nor
  // a restarted or repaired membership carries them yet.
  if (s.checkpoint.every > 0) {
    throw ScenarioError{"/checkpoint", "lgc's receivers keep their neighbours' decoder versions, "
                                       "which checkpoints do not save yet; leave \"checkpoint\" "
                                       "out or use another codec"};
  }
  if (s.faults.onPeerLoss == engine::OnPeerLoss::kContinue || s.faults.restart) {
    throw ScenarioError{s.faults.restart ? "/faults/restart" : "/faults/on_peer_loss",
                        "lgc's decoder versions do not survive a membership change yet: a "
                        "restarted or new neighbour holds none; use \"on_peer_loss\": "
                        "\"stop\" without restarts, or another codec"};
  }
}

}  // namespace starling::scenario::scenario_detail
