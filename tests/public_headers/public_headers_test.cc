// Includes every public header and nothing else of ours; built with the project root as its only
// include directory of ours and the library link targets as its only dependencies (see
// meson.build). Boost, nlohmann/json and ISA-L headers live in /usr/include, where any compile can
// reach them, so the include guards below prove that no public header pulls them in.
#include "compression/frame.h"
#include "core/rng.h"
#include "core/status.h"
#include "engine/node.h"
#include "optim/algorithm.h"
#include "optim/dataset.h"
#include "optim/problem.h"
#include "runtime/simulator.h"
#include "scenario/scenario.h"
#include "topology/graph.h"
#include "topology/mixing.h"
#include "topology/schedule.h"
#include "topology/spec.h"
#include "transport/transport.h"
// The installed front door (include/starling/), which a trainer compiles against.
#include <starling/peer.h>
#include <starling/status.h>

#if defined(BOOST_CONFIG_HPP) || defined(BOOST_VERSION)
#error "a public header includes Boost"
#endif
#if defined(EIGEN_CORE_H) || defined(EIGEN_WORLD_VERSION)
#error "a public header includes Eigen"
#endif
#if defined(INCLUDE_NLOHMANN_JSON_HPP_) || defined(INCLUDE_NLOHMANN_JSON_FWD_HPP_) || \
    defined(NLOHMANN_JSON_VERSION_MAJOR)
#error "a public header includes nlohmann/json"
#endif
#if defined(_CRC_H_)
#error "a public header includes ISA-L"
#endif
#if defined(UCP_H_) || defined(UCS_VERSION_MAJOR)
#error "a public header includes UCX"
#endif
#if defined(__CUDA_RUNTIME_H__) || defined(CUDART_VERSION)
#error "a public header includes CUDA"
#endif

#include <catch2/catch.hpp>

namespace starling {
namespace {

TEST_CASE("public headers alone build and link a ring schedule", "[public_headers][unit]") {
  topology::TopologySpec spec;
  spec.nodes = 4;
  spec.seed = 1;
  spec.base.kind = topology::GraphKind::kRing;
  auto schedule = topology::Schedule::create(spec);
  INFO(schedule.status().toString());
  REQUIRE(schedule.isOk());
  const auto round = (*schedule)->at(0);
  REQUIRE(round != nullptr);
  CHECK(round->graph.nodes() == 4);
  CHECK(round->graph.edgeCount() == 4);
  CHECK(round->graph.neighbors(0) == std::vector<int>{1, 3});
}

TEST_CASE("public headers alone build and link a frame round trip", "[public_headers][unit]") {
  const std::vector<double> x = {1.0, -2.5};
  std::vector<std::byte> frame;
  compression::encodeDense<double>(x, frame);
  std::vector<double> scratch;
  auto y = compression::decodeDense<double>(frame, 2, scratch);
  REQUIRE(y.isOk());
  CHECK(std::vector<double>(y->begin(), y->end()) == x);
}

}  // namespace
}  // namespace starling
