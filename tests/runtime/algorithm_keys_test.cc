// The algorithm table (optim::algorithmKinds(), optim/algorithms.cc): every kind once, in order,
// with a name the scenario reader takes; the keys a row says it takes (gamma, alpha) are exactly
// the keys the reader accepts and the writer writes for that algorithm; its traits are what the
// codec and regularizer rules enforce.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "optim/algorithm.h"
#include "scenario/scenario.h"
#include "scenario/scenario_writer.h"
#include "tests/runtime/scenario_testing.h"

namespace starling::runtime {
namespace {

using namespace scenario_testing;

std::string withAlgorithm(const std::string& name, const std::string& keys) {
  return with(R"({"kind": "exact_diffusion", "step_size": 0.3})",
              R"({"kind": ")" + name + R"(", "step_size": 0.3)" + keys + "}");
}

TEST_CASE("the algorithm table: every kind once, and its keys are the reader's and the writer's",
          "[scenario][unit]") {
  const auto kinds = optim::algorithmKinds();
  REQUIRE(kinds.size() == static_cast<size_t>(optim::AlgorithmKind::kDiloco) + 1);
  std::set<std::string> names;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const optim::AlgorithmInfo& a = kinds[i];
    CAPTURE(a.name);
    // diloco needs its inner_steps (its other keys: tests/integration/diloco_test.cc).
    const std::string base = a.kind == optim::AlgorithmKind::kDiloco ? R"(, "inner_steps": 2)" : "";
    CHECK(static_cast<size_t>(a.kind) == i);
    CHECK(names.insert(a.name).second);
    CHECK(std::string(optim::algorithmKindName(a.kind)) == a.name);
    CHECK(std::string(a.summary).size() > 5);
    // The reader takes the name, and gamma / alpha exactly where the row says so.
    auto plain = scenario::parseScenario(withAlgorithm(a.name, base + ""), "s.json", ".");
    REQUIRE(plain.isOk());
    CHECK(plain->algorithm.kind == a.kind);
    const auto gamma = scenario::parseScenario(withAlgorithm(a.name, base + R"(, "gamma": 0.5)"),
                                               "s.json", ".");
    CHECK(gamma.isOk() == a.usesGamma);
    if (gamma.isOk()) CHECK(gamma->algorithm.gamma == 0.5);
    const auto alpha = scenario::parseScenario(withAlgorithm(a.name, base + R"(, "alpha": 0.25)"),
                                               "s.json", ".");
    CHECK(alpha.isOk() == a.usesAlpha);
    if (alpha.isOk()) CHECK(alpha->algorithm.alpha == 0.25);
    // The writer writes them exactly then, and what it writes reads back the same.
    const std::string written = scenario::resolvedScenarioJson(*plain);
    CHECK((written.find("\"gamma\"") != std::string::npos) == a.usesGamma);
    CHECK((written.find("\"alpha\"") != std::string::npos) == a.usesAlpha);
    // Traits: a lossy codec without error feedback only where the messages are differences.
    const auto qsgd = scenario::parseScenario(
        withAlgorithm(a.name, base + R"(}, "compression": {"kind": "qsgd")"), "s.json", ".");
    // diloco takes one too: without error feedback it sends compressed differences against
    // reference points (docs/algorithms.md §29), a mode its codec, not its kind, selects.
    CHECK(qsgd.isOk() == (a.sendsDifferences || a.kind == optim::AlgorithmKind::kDiloco));
    CHECK(optim::sendsCompressedDifferences(a.kind) == a.sendsDifferences);
    CHECK(optim::handlesRegularizer(a.kind) == a.proximal);
  }
  CHECK(names == std::set<std::string>{"dsgd", "exact_diffusion", "gradient_tracking", "choco",
                                       "nids", "lead", "prox_lead", "diloco"});
  const std::string unknown = refusal(withAlgorithm("admm", ""));
  for (const auto& a : kinds) CHECK(unknown.find(a.name) != std::string::npos);
}

}  // namespace
}  // namespace starling::runtime
