// Shared by the counting tests of step() (step_allocations_test.cc, step_copies_test.cc): four
// trainers on threads over UCX loopback, each calling step() on its own float32 parameters.
#pragma once

#include <starling/peer.h>

#include <catch2/catch.hpp>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "peer_testing.h"
#include "runtime/launcher.h"

namespace starling::peer_testing {

// 4 peers on a ring over UCX loopback, each `steps` step() calls of `dim` float32 parameters
// (the gradient: a pull towards a per-rank target; the problem only sizes the model).
// before(rank, t, params, grads) and after(rank, t) run on the rank's thread around each call.
inline void stepOnLoopback(
    const std::string& name, const std::string& algorithm, size_t dim, int steps,
    const std::function<void(int, int, std::span<const float>, std::span<const float>)>& before,
    const std::function<void(int, int)>& after) {
  auto ports = runtime::freeLoopbackPorts(4);
  REQUIRE(ports.isOk());
  std::vector<std::string> addresses;
  for (uint16_t p : *ports) addresses.push_back("127.0.0.1:" + std::to_string(p));
  const auto path = writeScenario(name, R"({"schema_version": 1, "name": ")" + name +
                                            R"(", "nodes": 4, "seed": 3, "rounds": )" +
                                            std::to_string(steps) + R"(,
     "topology": {"kind": "ring"},
     "problem": {"kind": "least_squares",
                 "data": {"synthetic": {"samples": 8, "features": )" +
                                            std::to_string(dim) + R"(}}},
     "algorithm": )" + algorithm + R"(, "transport": {"kind": "ucx", "round_timeout_ms": 20000}})");
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    PeerOptions po;
    po.addresses = addresses;
    auto peer = Peer::fromScenario(path.string(), rank, po);
    if (!peer) return peer.status();
    std::vector<float> x(dim, 0.0f), g(dim);
    for (int t = 0; t < steps; ++t) {
      for (size_t i = 0; i < dim; ++i) g[i] = x[i] - static_cast<float>(rank + i % 3);
      before(rank, t, x, g);
      const Status st = (*peer)->step(std::span<float>(x), std::span<const float>(g));
      after(rank, t);
      if (!st.isOk()) return st;
    }
    return (*peer)->close();
  });
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].toString());
    CHECK(statuses[rank].isOk());
  }
  for (const auto& st : statuses) REQUIRE(st.isOk());
}

}  // namespace starling::peer_testing
