// The base scenarios and helpers shared by the scenario tests (scenario_test.cc,
// scenario_compression_test.cc).
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "scenario/scenario.h"

namespace starling::runtime::scenario_testing {

inline const std::string kGood = R"({"schema_version": 1, "name": "good", "nodes": 4, "seed": 1,
  "rounds": 40, "topology": {"kind": "ring"},
  "problem": {"kind": "least_squares", "l2": 0.1,
              "data": {"synthetic": {"samples": 40, "features": 3}}},
  "algorithm": {"kind": "exact_diffusion", "step_size": 0.3}})";

// kGood with the first `from` replaced by `to`.
inline std::string with(const std::string& from, const std::string& to, std::string base = kGood) {
  const auto pos = base.find(from);
  REQUIRE(pos != std::string::npos);
  return base.replace(pos, from.size(), to);
}

// The message of a scenario that must be refused (kInvalidArgument).
inline std::string refusal(const std::string& json, const std::string& file = "s.json") {
  const auto s = scenario::parseScenario(json, file, ".");
  REQUIRE_FALSE(s.isOk());
  CHECK(s.status().code() == core::StatusCode::kInvalidArgument);
  return s.status().message();
}

// An mlp scenario with `algorithm` (the data are not read while parsing).
inline std::string mlpScenario(const std::string& algorithm, const std::string& extra = "",
                               const std::string& estimator = R"({"kind": "sgd", "batch": 8})") {
  return R"({"schema_version": 1, "name": "codistil", "nodes": 4, "seed": 1, "rounds": 40,
    "topology": {"kind": "ring"},
    "problem": {"kind": "mlp", "layers": [784, 16, 10], "estimator": )" + estimator + R"(,
                "data": {"dataset": "fashion-mnist"}},
    "algorithm": )" + algorithm + extra + "}";
}

}  // namespace starling::runtime::scenario_testing
