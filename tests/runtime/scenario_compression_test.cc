// The compression object of a scenario: layer rules (docs/compression.md "Layer-aware
// compression") and LGC's keys and refusals (docs/algorithms.md §28), each refusal at its JSON
// path.
#include <catch2/catch.hpp>
#include <string>

#include "scenario/scenario.h"
#include "scenario/scenario_writer.h"
#include "tests/runtime/scenario_testing.h"

namespace starling::runtime {
namespace {

using namespace scenario_testing;
using Catch::Matchers::Contains;

// CHOCO on the mlp problem [784, 16, 10]: four tensors W_1, b_1, W_2, b_2.
std::string chocoMlp(const std::string& compression) {
  return mlpScenario(R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5})",
                     R"(, "compression": )" + compression);
}

TEST_CASE("compression layers: the rules and the uncompressed shorthand", "[runtime][unit]") {
  using Kind = compression::CompressorSpec::Kind;
  // Three layers: six tensors.
  const auto s =
      scenario::parseScenario(with(R"("layers": [784, 16, 10])", R"("layers": [784, 16, 16, 10])",
                                   chocoMlp(R"({"kind": "topk", "ratio": 0.05,
      "layers": [{"tensors": [2], "kind": "qsgd", "bits": 3},
                 {"tensors": [3], "kind": "fp16"}],
      "uncompressed": ["last", "first"]})")),
                              "s.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  const auto& c = s->compression;
  CHECK(c.kind == Kind::kTopK);
  REQUIRE(c.layers.size() == 3);
  CHECK(c.layers[0].tensors == std::vector<int64_t>{2});
  CHECK(c.layers[0].codec.kind == Kind::kQsgd);
  CHECK(c.layers[0].codec.bits == 3);
  CHECK(c.layers[1].codec.kind == Kind::kFp16);
  // The shorthand is the identity rule for the first and the last layer (W, b each).
  CHECK(c.layers[2].tensors == std::vector<int64_t>{0, 1, -2, -1});
  CHECK(c.layers[2].codec.kind == Kind::kIdentity);
  // A one-layer mlp: first and last are the same two tensors, named once.
  CHECK(scenario::parseScenario(with(R"("layers": [784, 16, 10])", R"("layers": [784, 10])",
                                     chocoMlp(R"({"kind": "topk", "ratio": 0.1,
                                        "uncompressed": ["first", "last"]})")),
                                "s.json", ".")
            .isOk());
  // A linear model is one tensor: 0 and -1 name it, and its rule is then the whole codec.
  CHECK(scenario::parseScenario(with("\"kind\": \"exact_diffusion\", \"step_size\": 0.3",
                                     "\"kind\": \"choco\", \"step_size\": 0.3",
                                     with("}}}", R"(}}}, "compression": {"kind": "topk", "k": 1,
                                 "layers": [{"tensors": [-1], "kind": "fp16"}]})")),
                                "s.json", ".")
            .isOk());
  // A trainer's layout is not known while validating: indices are checked at its first step.
  const std::string trainer = R"({"schema_version": 1, "nodes": 4, "topology": {"kind": "ring"},
      "algorithm": {"kind": "choco", "step_size": 0.1},
      "compression": {"kind": "topk", "ratio": 0.1, "layers": [{"tensors": [7, -9], "kind": "identity"}]}})";
  CHECK(scenario::parseScenario(trainer, "s.json", ".").isOk());
}

TEST_CASE("compression layers: every refusal names its JSON path", "[runtime][unit]") {
  const std::string top = R"({"kind": "topk", "ratio": 0.05, )";
  auto layers = [&](const std::string& rules) { return chocoMlp(top + R"("layers": )" + rules + "}"); };
  CHECK_THAT(refusal(layers(R"([{"tensors": [4], "kind": "identity"}])")),
             Contains("s.json: /compression/layers/0/tensors/0: compression layers rule 0: "
                      "tensor 4 is outside the model's layout of 4 tensors"));
  CHECK_THAT(refusal(layers(R"([{"tensors": [0, -5], "kind": "identity"}])")),
             Contains("s.json: /compression/layers/0/tensors/1: "));
  CHECK_THAT(refusal(layers(R"([{"tensors": [0], "kind": "identity"},
                                {"tensors": [2, -4], "kind": "fp16"}])")),
             Contains("s.json: /compression/layers/1/tensors/1: compression layers rule 1: "
                      "tensor -4 (tensor 0 of the layout) is named by rule 0 as well"));
  CHECK_THAT(refusal(layers(R"([{"tensors": [1, 1], "kind": "identity"}])")),
             Contains("s.json: /compression/layers/0/tensors/1: compression layers rule 0: "
                      "tensor 1 is named twice"));
  CHECK_THAT(refusal(layers(R"([{"tensors": [], "kind": "identity"}])")),
             Contains("s.json: /compression/layers/0/tensors: expected a non-empty array"));
  CHECK_THAT(refusal(layers(R"([{"kind": "identity"}])")),
             Contains("s.json: /compression/layers/0: missing required key \"tensors\""));
  CHECK_THAT(refusal(layers(R"([{"tensors": [0.5], "kind": "identity"}])")),
             Contains("s.json: /compression/layers/0/tensors/0: expected a tensor index"));
  CHECK_THAT(refusal(layers(R"([])")), Contains("s.json: /compression/layers: expected a non-empty"));
  CHECK_THAT(refusal(layers(R"([{"tensors": [0]}])")),
             Contains("s.json: /compression/layers/0: missing required key \"kind\""));
  CHECK_THAT(refusal(layers(R"([{"tensors": [0], "kind": "identity", "layers": []}])")),
             Contains("s.json: /compression/layers/0/layers: unknown key"));
  CHECK_THAT(refusal(layers(R"([{"tensors": [0], "kind": "qsgd", "bits": 9}])")),
             Contains("s.json: /compression/layers/0/bits: must be between 2 and 8"));
  // An inner codec the algorithm does not take, by the top-level codec's rules.
  CHECK_THAT(refusal(layers(R"([{"tensors": [0], "kind": "topk", "k": 3, "error_feedback": true}])")),
             Contains("s.json: /compression/layers/0/error_feedback: choco already sends "
                      "compressed differences"));
  CHECK_THAT(refusal(layers(R"([{"tensors": [0], "kind": "adacomp"}])")),
             Contains("s.json: /compression/layers/0/kind: choco already sends compressed"));
  const std::string dsgd = R"({"kind": "dsgd", "step_size": 0.1})";
  CHECK_THAT(refusal(mlpScenario(dsgd, R"(, "compression": {"kind": "topk", "ratio": 0.1,
      "error_feedback": true, "layers": [{"tensors": [0], "kind": "sign"}]})")),
             Contains("s.json: /compression/layers/0/kind: dsgd sends raw vectors"));
  CHECK(scenario::parseScenario(mlpScenario(dsgd, R"(, "compression": {"kind": "topk", "ratio": 0.1,
      "error_feedback": true, "layers": [{"tensors": [0], "kind": "sign", "error_feedback": true}],
      "uncompressed": ["last"]})"),
                                "s.json", ".")
            .isOk());
  // exact diffusion takes identity only, in a rule too.
  CHECK_THAT(refusal(with("}}}", R"(}}}, "compression": {"kind": "identity",
                          "layers": [{"tensors": [0], "kind": "fp16"}]})")),
             Contains("s.json: /compression/layers/0/kind: exact_diffusion sends raw vectors"));
  // A problem without a layout: one tensor, 0 or -1.
  CHECK_THAT(refusal(with("}}}", R"(}}}, "compression": {"kind": "identity",
                          "layers": [{"tensors": [1], "kind": "identity"}]})")),
             Contains("s.json: /compression/layers/0/tensors/0: compression layers rule 0: tensor 1 "
                      "is outside the model's layout of 1 tensor (valid: -1..0) (this problem's "
                      "model has no layers: it is one tensor, 0 or -1)"));
  CHECK_THAT(refusal(with("}}}", R"(}}}, "compression": {"kind": "identity",
                          "uncompressed": ["first"]})")),
             Contains("s.json: /compression/uncompressed: \"first\" is tensors 0 and 1"));
  // The shorthand: its values, and a tensor a rule names as well.
  CHECK_THAT(refusal(chocoMlp(top + R"("uncompressed": ["middle"]})")),
             Contains("s.json: /compression/uncompressed/0: unknown layer \"middle\""));
  CHECK_THAT(refusal(chocoMlp(top + R"("uncompressed": ["last", "last"]})")),
             Contains("s.json: /compression/uncompressed/1: \"last\" is named twice"));
  CHECK_THAT(refusal(chocoMlp(top + R"("uncompressed": []})")),
             Contains("s.json: /compression/uncompressed: expected a non-empty array"));
  CHECK_THAT(refusal(chocoMlp(top + R"("layers": [{"tensors": [-1], "kind": "fp16"}],
                                       "uncompressed": ["last"]})")),
             Contains("s.json: /compression/uncompressed: \"first\" is tensors 0 and 1 (W_1, "
                      "b_1), \"last\" tensors -2 and -1: compression layers rule 1: tensor -1 "));
  // lgc: in one group at most, and its refusals hold in a rule too.
  CHECK_THAT(refusal(layers(R"([{"tensors": [0], "kind": "lgc", "k": 8},
                                {"tensors": [1], "kind": "lgc", "k": 8}])")),
             Contains("s.json: /compression/layers/1/kind: at most one group may use lgc"));
  CHECK_THAT(refusal(chocoMlp(top + R"("layers": [{"tensors": [2], "kind": "lgc", "k": 8}]},
                                       "checkpoint": {"every": 5})")),
             Contains("s.json: /checkpoint: lgc's receivers keep their neighbours' decoder"));
  // A trainer's scenario: what holds for every layout.
  const std::string trainer = R"({"schema_version": 1, "nodes": 4, "topology": {"kind": "ring"},
      "algorithm": {"kind": "choco", "step_size": 0.1},
      "compression": {"kind": "topk", "ratio": 0.1, "layers": [{"tensors": [3, 3], "kind": "identity"}]}})";
  CHECK_THAT(refusal(trainer), Contains("s.json: /compression/layers/0/tensors/1: "));
  // Methods that send their statistics uncompressed count a lossy rule as compression.
  CHECK_THAT(refusal(mlpScenario(R"({"kind": "dsgd", "step_size": 0.1, "combine": "adasum"})",
                                 R"(, "compression": {"kind": "identity", "error_feedback": true,
                                     "layers": [{"tensors": [0], "kind": "fp16", "error_feedback": true}]})")),
             Contains("/compression/kind: \"combine\": \"adasum\" sends models and updates "
                      "uncompressed"));
}

}  // namespace
}  // namespace starling::runtime

namespace starling::runtime {
namespace {

using namespace scenario_testing;
using Catch::Matchers::Contains;

// CHOCO on the mlp problem with an lgc codec of `keys`, and `extra` top-level keys.
std::string lgcScenario(const std::string& keys, const std::string& extra = "") {
  return mlpScenario(R"({"kind": "choco", "step_size": 0.1, "gamma": 0.05})",
                     R"(, "compression": {"kind": "lgc", )" + keys + "}" + extra);
}

TEST_CASE("lgc: the keys, their defaults, the writer round trip and the refusals",
          "[runtime][unit]") {
  const auto d = scenario::parseScenario(lgcScenario(R"("ratio": 0.01)"), "s.json", ".");
  INFO(d.status().toString());
  REQUIRE(d.isOk());
  const auto& c = d->compression;
  CHECK(c.kind == compression::CompressorSpec::Kind::kLgc);
  CHECK(c.ratio == 0.01);
  CHECK(c.chunk == 32);
  CHECK(c.hidden == 64);
  CHECK(c.latent == 4);
  CHECK(c.warmup == 100);
  CHECK(c.refresh == 50);
  CHECK(c.shareEvery == 10);
  CHECK(c.learningRate == 1e-3);

  // Every key given, then written back and read again: the same scenario (hash included).
  const auto g =
      scenario::parseScenario(lgcScenario(R"("k": 300, "chunk": 16, "hidden": 8, "latent": 3,
      "warmup": 7, "refresh": 0, "share_every": 2, "learning_rate": 0.01)"),
                              "s.json", ".");
  REQUIRE(g.isOk());
  CHECK(g->compression.k == 300);
  CHECK(g->compression.chunk == 16);
  CHECK(g->compression.hidden == 8);
  CHECK(g->compression.latent == 3);
  CHECK(g->compression.warmup == 7);
  CHECK(g->compression.refresh == 0);
  CHECK(g->compression.shareEvery == 2);
  CHECK(g->compression.learningRate == 0.01);
  const auto back = scenario::parseScenario(scenario::resolvedScenarioJson(*g), "r.json", ".");
  REQUIRE(back.isOk());
  CHECK(scenario::scenarioHash(*back) == scenario::scenarioHash(*g));
  CHECK(back->compression.shareEvery == 2);
  CHECK(back->compression.refresh == 0);

  CHECK_THAT(refusal(lgcScenario(R"("ratio": 0.01, "chunk": 8, "latent": 8)")),
             Contains("/compression/latent"));
  CHECK_THAT(refusal(lgcScenario(R"("ratio": 0.01, "share_every": 0)")),
             Contains("/compression/share_every"));
  CHECK_THAT(refusal(lgcScenario(R"("chunk": 8)")), Contains("exactly one of \"k\""));
  // Receivers' decoder versions are in no checkpoint and survive no membership change.
  CHECK_THAT(refusal(lgcScenario(R"("ratio": 0.01)", R"(, "checkpoint": {"every": 10})")),
             Contains("/checkpoint: lgc's receivers keep their neighbours' decoder versions"));
  CHECK_THAT(refusal(lgcScenario(R"("ratio": 0.01)",
                                 R"(, "faults": {"on_peer_loss": "continue"})")),
             Contains("/faults/on_peer_loss: lgc's decoder versions do not survive"));
  CHECK_THAT(refusal(lgcScenario(R"("ratio": 0.01)",
                                 R"(, "faults": {"on_peer_loss": "continue", "restart": true})")),
             Contains("/faults/restart: lgc's decoder versions do not survive"));
  // A lossy codec on raw vectors, as for every codec.
  CHECK_THAT(refusal(mlpScenario(R"({"kind": "exact_diffusion", "step_size": 0.1})",
                                 R"(, "compression": {"kind": "lgc", "ratio": 0.01})")),
             Contains("/compression/kind"));
}

}  // namespace
}  // namespace starling::runtime
