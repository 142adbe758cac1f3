// Shared by the starling::Peer tests (peer_test.cc, peer_mix_test.cc): scenario files written to
// a per-process temporary folder, the ring of 4 they run on, and Peers on threads.
#pragma once

#include <starling/peer.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace starling::peer_testing {

inline std::filesystem::path writeScenario(const std::string& name, const std::string& json) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("starling-peer-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / (name + ".json");
  std::ofstream(path) << json;
  return path;
}

// Ring of 4 (Metropolis weights 1/3), least squares on synthetic data.
inline std::string ring4(const std::string& algorithm, uint64_t rounds, const std::string& transport,
                  const std::string& extra = "") {
  return R"({"schema_version": 1, "name": "peer-test", "nodes": 4, "seed": 3, "rounds": )" +
         std::to_string(rounds) +
         R"(, "topology": {"kind": "ring"},
     "problem": {"kind": "least_squares", "l2": 0.05,
                 "data": {"synthetic": {"samples": 200, "features": 10, "heterogeneity": 1.0}}},
     "algorithm": )" + algorithm + R"(, "transport": )" + transport + extra + "}";
}

inline const char* const kInproc = R"({"kind": "inproc"})";

// Runs `body(rank)` on 4 threads and returns their statuses.
inline std::vector<Status> onThreads(int n, const std::function<Status(int)>& body) {
  std::vector<Status> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[r] = body(r); });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace starling::peer_testing
