// Helpers for tests that run whole scenarios in process.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "runtime/simulator.h"
#include "scenario/experiment.h"
#include "scenario/scenario.h"

namespace starling::testing {

inline scenario::Experiment experimentFrom(const std::string& json) {
  auto s = scenario::parseScenario(json, "test.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  auto e = scenario::prepareExperiment(*s);
  INFO(e.status().toString());
  REQUIRE(e.isOk());
  return std::move(*e);
}

inline runtime::SimulateResult run(const scenario::Experiment& e,
                                   const runtime::SimulateOptions& opt = {}) {
  auto r = runtime::simulate(e, opt);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  return std::move(*r);
}

// A 16-node scenario with heterogeneous synthetic data.
inline std::string scenarioJson(const std::string& topology, const std::string& problem,
                                const std::string& algorithm, double step, uint64_t rounds,
                                const std::string& extraProblem = "",
                                const std::string& precision = "float64") {
  return R"({"schema_version": 1, "name": "t", "nodes": 16, "seed": 3, "rounds": )" +
         std::to_string(rounds) + R"(, "log_every": )" + std::to_string(rounds) +
         R"(, "precision": ")" + precision + R"(", "topology": )" + topology +
         R"(, "problem": {"kind": ")" + problem +
         R"(", "l2": 0.1, "data": {"synthetic": {"samples": 800, "features": 10,
         "heterogeneity": 2.0}})" + extraProblem + R"(}, "algorithm": {"kind": ")" + algorithm +
         R"(", "step_size": )" + std::to_string(step) + "}}";
}

}  // namespace starling::testing
