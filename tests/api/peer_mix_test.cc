// starling::Peer::mix (include/starling/peer.h): 4 Peers on 4 threads of this process over the
// in-process transport, each result checked against the round written out by hand or the
// average it must reach: plain gossip (split into mixStart/mixWait or not), its errors (a
// non-finite parameter named, a model beyond divergence.max_abs leaving the trainer's buffer as
// it was), CHOCO-gossip under a quantizer and under compression layers over the trainer's layout.
#include <starling/peer.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/status.h"
#include "peer_testing.h"

using namespace starling;
using namespace starling::peer_testing;
using Catch::Matchers::Contains;

TEMPLATE_TEST_CASE("mix without compression is x_i <- sum_j w_ij x_j", "[api][unit]", float,
                   double) {
  const auto path = writeScenario(
      "mix", ring4(R"({"kind": "dsgd", "step_size": 0.1})", 1, kInproc));
  // Over two 4096-element blocks and a part block: the message is written, checked and sealed a
  // block at a time (Algorithm::prepareBlock).
  const size_t d = 9001;
  auto start = [&](int rank) {
    std::vector<TestType> x(d);
    for (size_t k = 0; k < d; ++k) x[k] = static_cast<TestType>((rank + 1) * (k + 1) + 0.25 * rank);
    return x;
  };
  std::vector<std::vector<TestType>> after(4);
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    auto peer = Peer::fromScenario(path.string(), rank);
    if (!peer) return peer.status();
    auto x = start(rank);
    // Two rounds: one mix, then one split in two with work in between.
    STARLING_RETURN_IF_ERROR((*peer)->mix(std::span<TestType>(x)));
    after[rank] = x;
    STARLING_RETURN_IF_ERROR((*peer)->poll());  // nothing in flight: a no-op
    STARLING_RETURN_IF_ERROR((*peer)->mixStart(std::span<TestType>(x)));
    for (int i = 0; i < 100; ++i) STARLING_RETURN_IF_ERROR((*peer)->poll());  // never waits
    STARLING_RETURN_IF_ERROR((*peer)->mixWait());
    if ((*peer)->round() != 2) return Status(StatusCode::kInternal, "round() is not 2");
    return (*peer)->close();
  });
  for (const auto& st : statuses) {
    INFO(st.toString());
    REQUIRE(st.isOk());
  }
  // Ring of 4 with Metropolis weights: every w_ij = 1/3 (self included).
  const double tol = std::is_same_v<TestType, float> ? 1e-6 : 1e-14;
  for (int i = 0; i < 4; ++i) {
    const auto a = start((i + 3) % 4), b = start(i), c = start((i + 1) % 4);
    for (size_t k = 0; k < d; ++k) {
      const double want = (double(a[k]) + double(b[k]) + double(c[k])) / 3.0;
      CHECK(std::abs(double(after[i][k]) - want) <= tol * std::abs(want));
    }
  }
}

TEST_CASE("the peer's last record is the mixed model, whatever the trainer then does to its "
          "buffer", "[api][unit]") {
  // The gossip leaves its own copy of the mixed model unwritten while the node keeps the round's
  // frames, and recomputes it where something reads it between rounds: here the record of the
  // last round, which close() writes after the trainer has overwritten its buffer. d is below
  // kFullModelLogMaxDim (4096), so the record holds the model itself.
  const size_t d = 3001;
  const auto out = std::filesystem::temp_directory_path() /
                   ("starling-mix-record-" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  const auto path = writeScenario("mix-record",
                                  ring4(R"({"kind": "dsgd", "step_size": 0.1})", 1, kInproc));
  auto start = [&](int rank) {
    std::vector<double> x(d);
    for (size_t k = 0; k < d; ++k) x[k] = std::sin(0.11 * double(k) + 0.7 * rank) * (rank + 1);
    return x;
  };
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    PeerOptions po;
    po.outDir = out.string();
    auto peer = Peer::fromScenario(path.string(), rank, po);
    if (!peer) return peer.status();
    const auto x0 = start(rank);
    std::vector<float> x(x0.begin(), x0.end());
    STARLING_RETURN_IF_ERROR((*peer)->mix(std::span<float>(x)));
    for (float& v : x) v += 0.5f;  // the trainer's local step between rounds
    STARLING_RETURN_IF_ERROR((*peer)->mix(std::span<float>(x)));
    std::fill(x.begin(), x.end(), 1e9f);  // reused for something else before close()
    return (*peer)->close();
  });
  for (const auto& st : statuses) {
    INFO(st.toString());
    REQUIRE(st.isOk());
  }
  // Ring of 4, every weight 1/3: two rounds of averaging by hand, in double, from the float
  // parameters each peer started with, the trainer's +0.5 in between.
  std::vector<std::vector<double>> y(4);
  for (int r = 0; r < 4; ++r) {
    const auto x = start(r);
    y[r].assign(x.begin(), x.end());
    for (double& v : y[r]) v = static_cast<float>(v);
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<double>> next(4, std::vector<double>(d));
    for (int r = 0; r < 4; ++r) {
      for (size_t k = 0; k < d; ++k) {
        next[r][k] = (y[(r + 3) % 4][k] + y[r][k] + y[(r + 1) % 4][k]) / 3.0 + (round == 0 ? 0.5 : 0);
      }
    }
    y = next;
  }
  for (int r = 0; r < 4; ++r) {
    std::ifstream in(out / "peers" / ("rank-" + std::to_string(r) + ".jsonl"));
    std::string line, last;
    while (std::getline(in, line)) {
      if (line.find("\"x\":[") != std::string::npos) last = line;
    }
    INFO("rank " << r << ", last record: " << last.substr(0, 200));
    REQUIRE(last.find("\"round\":2") != std::string::npos);
    std::istringstream xs(last.substr(last.find("\"x\":[") + 5));
    std::vector<double> logged;
    for (double v; xs >> v;) {
      logged.push_back(v);
      if (xs.peek() != ',') break;
      xs.ignore();
    }
    REQUIRE(logged.size() == d);
    for (size_t k = 0; k < d; ++k) {
      if (std::abs(logged[k] - y[r][k]) > 1e-5 * (1 + std::abs(y[r][k]))) {
        FAIL("rank " << r << " coordinate " << k << ": logged " << logged[k] << ", want "
                     << y[r][k]);
      }
    }
  }
  std::filesystem::remove_all(out);
}

TEST_CASE("mix names the first non-finite coordinate of the trainer's parameters",
          "[api][unit]") {
  const auto path = writeScenario(
      "mix-nan", ring4(R"({"kind": "dsgd", "step_size": 0.1})", 1, kInproc));
  const size_t d = 9001;
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    auto peer = Peer::fromScenario(path.string(), rank);
    if (!peer) return peer.status();
    std::vector<float> x(d, 1.0f);
    x[5000 + rank] = std::numeric_limits<float>::quiet_NaN();  // in the second block
    x[8000] = std::numeric_limits<float>::infinity();          // later: not the one named
    return (*peer)->mix(std::span<float>(x));
  });
  for (int rank = 0; rank < 4; ++rank) {
    INFO(statuses[rank].toString());
    CHECK(statuses[rank].code() == StatusCode::kDiverged);
    CHECK_THAT(statuses[rank].message(),
               Catch::Matchers::Contains("its message coordinate " + std::to_string(5000 + rank) +
                                         " is nan"));
  }
}

// mix() combines straight into the trainer's buffer (GossipAlgorithm::lend): a round whose mixed
// model leaves divergence.max_abs fails, and the trainer keeps the parameters it passed.
TEST_CASE("a mix that diverges leaves the trainer's parameters as they were", "[api][unit]") {
  const auto path = writeScenario(
      "mix-diverge", ring4(R"({"kind": "dsgd", "step_size": 0.1})", 1, kInproc,
                           R"(, "divergence": {"max_abs": 100})"));
  const size_t d = 9001;
  auto start = [&](int rank) {
    std::vector<float> x(d, 1.0f + static_cast<float>(rank));
    // Finite, so rank 1 sends it; the model of rank 1 and of its neighbours 0 and 2 then holds
    // (1000 + 2 + 1) / 3 or more there, above the limit. Rank 3 does not hear from rank 1.
    if (rank == 1) x[6000] = 1000.0f;
    return x;
  };
  std::vector<std::vector<float>> after(4);
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    auto peer = Peer::fromScenario(path.string(), rank);
    if (!peer) return peer.status();
    auto x = start(rank);
    const Status s = (*peer)->mix(std::span<float>(x));
    after[rank] = x;
    return s;
  });
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].toString());
    CHECK(statuses[rank].code() == StatusCode::kDiverged);
    CHECK_THAT(statuses[rank].message(), Catch::Matchers::Contains("its model coordinate 6000"));
    CHECK(after[rank] == start(rank));
  }
  INFO(statuses[3].toString());
  REQUIRE(statuses[3].isOk());
  for (size_t k = 0; k < d; ++k) {  // (3 + 4 + 1) / 3: its neighbours 2 and 0, and itself
    CHECK(std::abs(after[3][k] - 8.0f / 3.0f) <= 1e-6f);
  }
}

namespace {

// Four peers start from start(rank, k), k < d, and mix 300 times: every one must end within 1e-6
// of the starting average, which gossip keeps. `beforeClose` runs on each peer after its mixes.
void checkMixesReachTheAverage(const std::filesystem::path& path, size_t d,
                               const std::function<double(int, size_t)>& start,
                               const PeerOptions& options = {},
                               const std::function<Status(Peer&)>& beforeClose = {}) {
  auto initial = [&](int rank) {
    std::vector<double> x(d);
    for (size_t k = 0; k < d; ++k) x[k] = start(rank, k);
    return x;
  };
  std::vector<double> mean(d, 0.0);
  for (int r = 0; r < 4; ++r) {
    const auto x = initial(r);
    for (size_t k = 0; k < d; ++k) mean[k] += x[k] / 4;
  }
  std::vector<std::vector<double>> final(4);
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    auto peer = Peer::fromScenario(path.string(), rank, options);
    if (!peer) return peer.status();
    auto x = initial(rank);
    for (int t = 0; t < 300; ++t) STARLING_RETURN_IF_ERROR((*peer)->mix(std::span<double>(x)));
    final[rank] = x;
    if (beforeClose) STARLING_RETURN_IF_ERROR(beforeClose(**peer));
    return (*peer)->close();
  });
  for (const auto& st : statuses) {
    INFO(st.toString());
    REQUIRE(st.isOk());
  }
  double worst = 0;
  for (int r = 0; r < 4; ++r) {
    REQUIRE(final[r].size() == d);
    for (size_t k = 0; k < d; ++k) worst = std::max(worst, std::abs(final[r][k] - mean[k]));
  }
  CHECK(worst < 1e-6);
}

// A trainer's scenario (no problem): ring of 4, CHOCO-gossip, top-20% with the first and the
// last tensor of the trainer's layout sent with identity (docs/compression.md, "Layer-aware
// compression").
std::string layeredTrainer() {
  return R"({"schema_version": 1, "name": "peer-layers", "nodes": 4, "seed": 3,
     "topology": {"kind": "ring"}, "algorithm": {"kind": "choco", "step_size": 0.1, "gamma": 0.5},
     "transport": {"kind": "inproc"},
     "compression": {"kind": "topk", "ratio": 0.2,
                     "layers": [{"tensors": [0, -1], "kind": "identity"}]}})";
}

}  // namespace

TEST_CASE("mix with a quantizer (CHOCO-gossip) keeps the average and reaches it",
          "[api][unit]") {
  const auto path = writeScenario(
      "mixq", ring4(R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5})", 1, kInproc,
                    R"(, "compression": {"kind": "qsgd", "bits": 4})"));
  checkMixesReachTheAverage(path, 50, [](int rank, size_t k) {
    return std::sin(1.0 + rank * 7.0 + static_cast<double>(k)) * (rank + 1);
  });
}

TEST_CASE("mix with compression layers over the trainer's layout keeps the average and reaches it",
          "[api][unit]") {
  const auto path = writeScenario("mixlayers", layeredTrainer());
  PeerOptions po;
  po.layout = {10, 30, 10};  // identity on [0, 10) and [40, 50), top-6 of [10, 40)
  checkMixesReachTheAverage(
      path, 50,
      [](int rank, size_t k) {
        return std::cos(2.0 + rank * 5.0 + static_cast<double>(k)) * (rank + 1);
      },
      po, [](Peer& peer) {
        const Status late = peer.setLayout({50});
        if (late.code() != StatusCode::kFailedPrecondition) {
          return Status(StatusCode::kInternal, "setLayout after mix() was not refused: " +
                                                   late.toString());
        }
        return Status::ok();
      });
}

TEST_CASE("compression layers are checked against the trainer's layout at the first mix",
          "[api][unit]") {
  const auto path = writeScenario("layersbad", layeredTrainer());
  std::vector<float> x(50, 1.0f);
  PeerOptions po;
  SECTION("a layout that does not add up to the buffer") {
    po.layout = {10, 30};
    auto peer = Peer::fromScenario(path.string(), 0, po);
    REQUIRE(peer);
    const Status st = (*peer)->mix(std::span<float>(x));
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Contains("mix: the layout's tensors hold 40 parameters, but the "
                                      "parameter buffer has 50"));
  }
  SECTION("a rule naming a tensor the layout does not have") {
    const auto other = writeScenario(
        "layersrange", R"({"schema_version": 1, "name": "peer-layers", "nodes": 4,
         "topology": {"kind": "ring"}, "algorithm": {"kind": "choco", "step_size": 0.1},
         "transport": {"kind": "inproc"},
         "compression": {"kind": "topk", "ratio": 0.2,
                         "layers": [{"tensors": [2], "kind": "identity"}]}})");
    po.layout = {25, 25};
    auto peer = Peer::fromScenario(other.string(), 0, po);
    REQUIRE(peer);
    const Status st = (*peer)->mix(std::span<float>(x));
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Contains("compression layers rule 0: tensor 2 is outside the "
                                      "model's layout of 2 tensors"));
  }
}

// A mix in flight when the Peer goes: close() finishes it and writes the mixed model into the
// trainer's buffer; ~Peer finishes it for the neighbours but leaves the buffer alone, since it may
// already be gone (an exception unwinding the trainer's stack frees it before the Peer).
TEST_CASE("a mix in flight is finished by close() into the buffer, by ~Peer without it",
          "[api][unit]") {
  const bool explicitClose = GENERATE(true, false);
  CAPTURE(explicitClose);
  const auto path = writeScenario(explicitClose ? "mix-close" : "mix-destroy",
                                  ring4(R"({"kind": "dsgd", "step_size": 0.1})", 1, kInproc));
  const size_t d = 5000;
  auto start = [&](int rank) { return std::vector<float>(d, 3.0f * static_cast<float>(rank)); };
  std::vector<std::vector<float>> after(4);
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    auto x = start(rank);
    {
      auto peer = Peer::fromScenario(path.string(), rank);
      if (!peer) return peer.status();
      STARLING_RETURN_IF_ERROR((*peer)->mixStart(std::span<float>(x)));
      if (explicitClose) STARLING_RETURN_IF_ERROR((*peer)->close());
    }  // ~Peer
    after[rank] = x;
    return Status::ok();
  });
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank << ": " << statuses[rank].toString());
    REQUIRE(statuses[rank].isOk());
    // Ring of 4, every weight 1/3: (3(r-1) + 3r + 3(r+1)) / 3 with ranks mod 4.
    const float mixed =
        static_cast<float>((3 * ((rank + 3) % 4) + 3 * rank + 3 * ((rank + 1) % 4)) / 3.0);
    const auto want = explicitClose ? std::vector<float>(d, mixed) : start(rank);
    for (size_t k = 0; k < d; ++k) {
      if (std::abs(after[rank][k] - want[k]) > 1e-5f) {
        FAIL("rank " << rank << " coordinate " << k << ": " << after[rank][k] << ", want "
                     << want[k]);
      }
    }
  }
}
