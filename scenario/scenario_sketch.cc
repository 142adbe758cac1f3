// /algorithm/sketch: dsgd with the model's Count-Sketch on the wire and momentum and error
// feedback in sketch space (docs/algorithms.md §27; scenarios/README.md, `algorithm`).
#include "core/rng.h"
#include "scenario/scenario_reader.h"

namespace starling::scenario::scenario_detail {

namespace {

using AK = optim::AlgorithmKind;

// The hashes' seed: derived from the seed the codecs share (equal at every node), salted so that
// a codec's per-round hashes never coincide with the algorithm's fixed ones.
constexpr uint64_t kSharedCodecSalt = 0x7368617265;  // runtime/node_stack.cc, api/peer.cc
constexpr uint64_t kSketchGossipSalt = 0x736b676f;   // "skgo"

std::string whyNot(AK kind) {
  switch (kind) {
    case AK::kChoco:
      return "CHOCO's compressed differences against its reference points must decode exactly "
             "per sender; for a Count-Sketch there, use \"compression\": {\"kind\": "
             "\"countsketch\", \"estimate\": \"mean\"} (docs/algorithms.md §27)";
    case AK::kLead:
    case AK::kProxLead:
      return "LEAD's per-neighbour reference points must decode exactly per sender, which the "
             "top-k of a summed sketch does not give (docs/algorithms.md §27)";
    default:
      return "its correction terms assume every node applies its whole update every round, "
             "which error feedback delays (docs/algorithms.md §27)";
  }
}

}  // namespace

void parseSketchOf(Obj& alg, Scenario& s) {
  if (!alg.has("sketch")) {
    alg.get("sketch");
    return;
  }
  if (s.algorithm.kind != AK::kDsgd) {
    throw ScenarioError{alg.at("sketch"), "\"sketch\" is a dsgd method; \"kind\" is \"" +
                                              std::string(optim::algorithmKindName(
                                                  s.algorithm.kind)) +
                                              "\": " + whyNot(s.algorithm.kind)};
  }
  if (s.algorithm.combine == optim::AlgorithmSpec::Combine::kAdasum) {
    throw ScenarioError{alg.at("sketch"), "\"sketch\" and \"combine\": \"adasum\" each change "
                                          "what a round sends; use one of them"};
  }
  for (const auto& [on, key] : {std::pair{s.algorithm.adascale.has_value(), "adascale"},
                                std::pair{s.algorithm.leader.has_value(), "leader"}}) {
    if (on) {
      throw ScenarioError{alg.at("sketch"), std::string("\"sketch\" and \"") + key +
                                                "\" each change what a round sends; use one of "
                                                "them"};
    }
  }
  Obj o = alg.object("sketch");
  optim::SketchGossipSpec spec;
  spec.rows = o.integer<uint32_t>("rows", 1, 64, spec.rows);
  spec.cols = o.integer<uint32_t>("cols", 1, uint32_t{1} << 31);
  if (o.has("k") == o.has("ratio")) {
    throw ScenarioError{o.path(), "give exactly one of \"k\" (coordinates applied per round) or "
                                  "\"ratio\""};
  }
  if (o.has("k")) spec.k = o.integer<uint64_t>("k", 1, uint64_t{1} << 40);
  if (o.has("ratio")) spec.ratio = o.number("ratio", 0.0, 1.0, std::nullopt, /*openLo=*/true);
  spec.momentum = o.number("momentum", 0.0, 1.0, spec.momentum, false, /*openHi=*/true);
  o.finish();
  using LK = optim::LocalOptimizerSpec::Kind;
  if (const LK lk = s.algorithm.localOptimizer.kind; lk != LK::kSgd) {
    throw ScenarioError{"/algorithm/local_optimizer/kind",
                        "\"sketch\" keeps its momentum in sketch space and needs the plain "
                        "gradient; \"" +
                            std::string(optim::localOptimizerKindName(lk)) +
                            "\" would change it first (use \"sgd\", and sketch.momentum)"};
  }
  spec.seed = core::deriveSeed(core::deriveSeed(s.seed, kSharedCodecSalt), kSketchGossipSalt);
  s.algorithm.sketch = spec;
}

void checkSketch(const Scenario& s) {
  if (!s.algorithm.sketch) return;
  if (s.algorithm.codistillation) {
    throw ScenarioError{"/algorithm/codistillation",
                        "codistillation exchanges no models to sketch; leave out \"sketch\" or "
                        "\"codistillation\""};
  }
  if (s.asynchronous.enabled) {
    throw ScenarioError{"/algorithm/asynchronous",
                        "\"sketch\" sums the neighbours' sketches of one round against its own; "
                        "asynchronous gossip mixes messages out of their round"};
  }
  if (s.compression.kind != compression::CompressorSpec::Kind::kIdentity) {
    throw ScenarioError{"/compression/kind",
                        "\"sketch\" already compresses: its message is the model's r x c sketch, "
                        "whose consensus term needs the neighbours' sketches exactly; leave "
                        "compression out"};
  }
}

}  // namespace starling::scenario::scenario_detail
