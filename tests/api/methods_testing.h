// Shared by methods_test.cc and diloco_step_test.cc: a scenario file on the complete graph over
// the in-process transport, the nodes' starting models, and the check of the threads' statuses.
#pragma once

#include <starling/status.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace methods_test {

using Vec = std::vector<double>;

inline std::string scenarioFile(const std::string& name, int nodes, const std::string& algorithm) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("starling-api-methods-" + name + "-" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"schema_version": 1, "name": ")" << name << R"(", "nodes": )"
                      << nodes << R"(, "topology": {"kind": "complete"},
      "transport": {"kind": "inproc"}, "algorithm": )" << algorithm << "}";
  return path.string();
}

inline Vec start(int rank) { return {1.0 * rank, -0.5 * rank, 0.25, 2.0 - rank}; }

// Every peer thread's status is ok (the failing one's message shown).
inline void requireAllOk(const std::vector<starling::Status>& statuses) {
  for (const auto& s : statuses) {
    INFO(s.message());
    REQUIRE(s.isOk());
  }
}

}  // namespace methods_test
