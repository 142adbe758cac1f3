// starling::Peer::mix on device memory (DeviceSpan, docs/cuda.md "Tensors on the GPU") where
// there is no GPU: what the Peer says without a driver or for what the GPU path refuses, and the
// device path itself (engine, session, log, mixStart/mixWait, close with a mix in flight) run on
// host memory under STARLING_DEVICE=host, against the same Peers mixing host buffers. The GPU
// runs are cuda_gpu_mix's.
#include <starling/peer.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/status.h"
#include "peer_testing.h"

using namespace starling;
using namespace starling::peer_testing;
using Catch::Matchers::Contains;

namespace {

// Whether this build has the CUDA path (meson found a PTX compiler).
constexpr bool kCudaBuild = STARLING_TEST_CUDA_BUILD;

// mix(DeviceSpan) where there is no GPU (the GPU runs are tools/gpu_check's): the Peer says
// why (no CUDA driver here, or no CUDA path in a build without a PTX compiler), and refuses
// what it does not do on the GPU before asking for one.
TEST_CASE("mix on GPU memory: no driver, no GPU codec, no compressed diloco yet, each said",
          "[api][unit]") {
  setenv("STARLING_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
  const DeviceSpan span{0x10000, 8, 0};
  {
    const auto path = writeScenario("device-plain", ring4(R"({"kind": "dsgd", "step_size": 0.1})", 1, kInproc));
    auto peer = Peer::fromScenario(path.string(), 0);
    INFO(peer.status().toString());
    REQUIRE(peer);
    const Status s = (*peer)->mix(span);
    CHECK(s.code() == StatusCode::kUnavailable);
    CHECK_THAT(s.message(), Contains("no CUDA driver") || Contains("no CUDA path"));
    uint64_t stream = 0;
    CHECK((*peer)->deviceStream(0, &stream).code() == StatusCode::kUnavailable);
    CHECK((*peer)->mix(DeviceSpan{0, 8, 0}).code() == StatusCode::kInvalidArgument);
  }
  {
    const auto path = writeScenario(
        "device-sign", ring4(R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5})", 1, kInproc,
                             R"(, "compression": {"kind": "sign"})"));
    auto peer = Peer::fromScenario(path.string(), 0);
    INFO(peer.status().toString());
    REQUIRE(peer);
    const Status s = (*peer)->mix(span);
    CHECK(s.code() == (kCudaBuild ? StatusCode::kInvalidArgument : StatusCode::kUnavailable));
    if (kCudaBuild) CHECK_THAT(s.message(), Contains("compression.kind"));
  }
  {
    const auto path = writeScenario(
        "device-diloco",
        ring4(R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 5})", 1, kInproc,
              R"(, "compression": {"kind": "topk", "ratio": 0.1})"));
    auto peer = Peer::fromScenario(path.string(), 0);
    INFO(peer.status().toString());
    REQUIRE(peer);
    const Status s = (*peer)->mix(span);
    CHECK(s.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(s.message(), Contains("algorithm.kind: diloco's compressed differences"));
  }
  unsetenv("STARLING_CUDA_DRIVER");
}

void requireOk(const std::vector<Status>& statuses) {
  for (const auto& s : statuses) {
    INFO(s.toString());
    REQUIRE(s.isOk());
  }
}

// 4 Peers on threads, 3 rounds: each adds its local change, then mixes (mix(), or mixStart,
// polls and mixWait in round 1) host buffers or, on the device path, DeviceSpans of host memory.
std::vector<std::vector<float>> peersMix(const std::string& scenario, bool device,
                                         const std::string& out = "") {
  const size_t d = 3001;
  std::vector<std::vector<float>> result(4);
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    PeerOptions options;
    options.outDir = out;
    auto peer = Peer::fromScenario(scenario, rank, options);
    if (!peer) return peer.status();
    std::vector<float> x(d);
    for (size_t k = 0; k < d; ++k) x[k] = static_cast<float>(std::sin(0.01 * k + rank));
    const DeviceSpan span{reinterpret_cast<uint64_t>(x.data()), d, 0};
    for (int t = 0; t < 3; ++t) {
      for (size_t k = 0; k < d; ++k) x[k] += 0.1f * static_cast<float>(rank - t);
      if (t == 1) {
        STARLING_RETURN_IF_ERROR(device ? (*peer)->mixStart(span)
                                        : (*peer)->mixStart(std::span<float>(x)));
        for (int i = 0; i < 20; ++i) STARLING_RETURN_IF_ERROR((*peer)->poll());
        STARLING_RETURN_IF_ERROR((*peer)->mixWait());
      } else {
        STARLING_RETURN_IF_ERROR(device ? (*peer)->mix(span) : (*peer)->mix(std::span<float>(x)));
      }
      STARLING_RETURN_IF_ERROR((*peer)->log("loss", 0.5 * t));
    }
    result[rank] = x;
    return (*peer)->close();
  });
  requireOk(statuses);
  return result;
}

struct DeviceOnHost {
  DeviceOnHost() { setenv("STARLING_DEVICE", "host", 1); }
  ~DeviceOnHost() { unsetenv("STARLING_DEVICE"); }
};

}  // namespace

TEST_CASE("mix on device memory (STARLING_DEVICE=host): the host mix's models", "[api][unit]") {
  DeviceOnHost on;
  // Uncompressed: the same combine in the same order as the host mix, so the same bits.
  const auto plain = writeScenario("device-mix", ring4(R"({"kind": "dsgd", "step_size": 0.1})",
                                                       3, kInproc));
  const auto want = peersMix(plain.string(), false);
  CHECK(peersMix(plain.string(), true) == want);
  // The mixed models moved (ring of 4: each the mean of three).
  CHECK(want[0] != want[1]);
  // DiLoCo's exchange, uncompressed (what starling.torch.DiLoCo's mix() of a GPU model runs).
  const auto diloco = writeScenario(
      "device-mix-diloco",
      ring4(R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 4})", 3, kInproc));
  CHECK(peersMix(diloco.string(), true) == peersMix(diloco.string(), false));
  // fp16 CHOCO-gossip: the same frames, the same running sum in the same order: the same bits.
  const auto fp16 = writeScenario(
      "device-mix-fp16", ring4(R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5})", 3,
                               kInproc, R"(, "compression": {"kind": "fp16"})"));
  const auto host = peersMix(fp16.string(), false), dev = peersMix(fp16.string(), true);
  CHECK(dev == host);
}

TEST_CASE("mix on device memory (STARLING_DEVICE=host): the peer log's rounds", "[api][unit]") {
  // The round lines keep the mixed model (d <= 4096) and the trainer's metrics, as the host
  // mix's do: round r's x is rank 0's model after mix r.
  DeviceOnHost on;
  const auto out = std::filesystem::temp_directory_path() /
                   ("starling-device-log-" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  const auto path = writeScenario("device-log", ring4(R"({"kind": "dsgd", "step_size": 0.1})",
                                                      3, kInproc));
  const auto models = peersMix(path.string(), true, out.string());
  std::ifstream in(out / "peers" / "rank-0.jsonl");
  REQUIRE(in.good());
  std::string line, last;
  int rounds = 0;
  while (std::getline(in, line)) {
    if (line.find("\"round\":") == std::string::npos || line.find("\"x\":") == std::string::npos) {
      continue;
    }
    ++rounds;
    last = line;
  }
  CHECK(rounds == 4);  // rounds 0 (the start) to 3
  CHECK_THAT(last, Contains("\"round\":3") && Contains("\"loss\":1"));
  // Its first value is rank 0's final model's, printed in full precision.
  std::ostringstream first;
  first.precision(17);
  first << static_cast<double>(models[0][0]);
  CHECK_THAT(last, Contains("\"x\":[" + first.str().substr(0, 8)));
  std::filesystem::remove_all(out);
}

TEST_CASE("mix on device memory (STARLING_DEVICE=host): one kind of buffer a Peer",
          "[api][unit]") {
  // A Peer that mixed host buffers refuses device ones, and one that mixed and stepped device
  // buffers refuses host ones, each naming what it works on.
  DeviceOnHost on;
  const auto path = writeScenario("device-kinds", ring4(R"({"kind": "dsgd", "step_size": 0.1})",
                                                        1, kInproc));
  for (const bool deviceFirst : {false, true}) {
    CAPTURE(deviceFirst);
    requireOk(onThreads(4, [&](int rank) -> Status {
      auto peer = Peer::fromScenario(path.string(), rank);
      if (!peer) return peer.status();
      std::vector<float> x(8, 1.0f * rank), g(8, 0.5f);
      const DeviceSpan xs{reinterpret_cast<uint64_t>(x.data()), 8, 0};
      const DeviceSpan gs{reinterpret_cast<uint64_t>(g.data()), 8, 0};
      std::vector<Status> refused;
      if (!deviceFirst) {
        STARLING_RETURN_IF_ERROR((*peer)->mix(std::span<float>(x)));
        refused.push_back((*peer)->mix(xs));
      } else {
        STARLING_RETURN_IF_ERROR((*peer)->mix(xs));
        STARLING_RETURN_IF_ERROR((*peer)->step(xs, gs));
        refused.push_back((*peer)->mix(std::span<float>(x)));
        refused.push_back((*peer)->step(std::span<float>(x), std::span<const float>(g)));
      }
      for (const Status& s : refused) {
        const char* says = !deviceFirst ? "mixes CPU buffers"
                           : &s == &refused[0] ? "mixes GPU memory"
                                               : "steps GPU memory";
        if (s.code() != StatusCode::kFailedPrecondition ||
            s.message().find(says) == std::string::npos) {
          return Status(StatusCode::kInternal, "not refused: " + s.toString());
        }
      }
      return (*peer)->close();
    }));
  }
}

TEST_CASE("mix on device memory (STARLING_DEVICE=host): close() lands a mix in flight",
          "[api][unit]") {
  // Every rank starts a round and closes: close() finishes it for the neighbours and writes the
  // mixed model into the buffer (ring of 4: the mean of its own and its two neighbours' values).
  DeviceOnHost on;
  const auto path = writeScenario("device-close", ring4(R"({"kind": "dsgd", "step_size": 0.1})",
                                                        1, kInproc));
  std::vector<std::vector<float>> x(4);
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    auto peer = Peer::fromScenario(path.string(), rank);
    if (!peer) return peer.status();
    x[rank].assign(5, static_cast<float>(3 * rank));
    STARLING_RETURN_IF_ERROR(
        (*peer)->mixStart(DeviceSpan{reinterpret_cast<uint64_t>(x[rank].data()), 5, 0}));
    return (*peer)->close();
  });
  requireOk(statuses);
  for (int i = 0; i < 4; ++i) {
    const float want = (3.0f * ((i + 3) % 4) + 3.0f * i + 3.0f * ((i + 1) % 4)) / 3.0f;
    for (float v : x[i]) CHECK(v == Approx(want).epsilon(1e-6));
  }
}

namespace {

// 4 Peers on threads, 3 dsgd steps with the gradient of 0.15 x^2 - rank x (the scenario's step
// size, then lr = 0.05 in the last), on host buffers or, on the device path, DeviceSpans.
std::vector<std::vector<float>> peersStep(const std::string& scenario, bool device) {
  const size_t d = 2001;
  std::vector<std::vector<float>> result(4);
  const auto statuses = onThreads(4, [&](int rank) -> Status {
    auto peer = Peer::fromScenario(scenario, rank);
    if (!peer) return peer.status();
    std::vector<float> x(d), g(d);
    for (size_t k = 0; k < d; ++k) x[k] = static_cast<float>(std::cos(0.02 * k - rank));
    for (int t = 0; t < 3; ++t) {
      for (size_t k = 0; k < d; ++k) g[k] = 0.3f * x[k] - static_cast<float>(rank);
      const std::optional<double> lr = t == 2 ? std::optional<double>(0.05) : std::nullopt;
      if (device) {
        STARLING_RETURN_IF_ERROR((*peer)->step(
            DeviceSpan{reinterpret_cast<uint64_t>(x.data()), d, 0},
            DeviceSpan{reinterpret_cast<uint64_t>(g.data()), d, 0}, lr));
      } else {
        STARLING_RETURN_IF_ERROR(
            (*peer)->step(std::span<float>(x), std::span<const float>(g), lr));
      }
    }
    if ((*peer)->round() != 3) return Status(StatusCode::kInternal, "round() is not 3");
    result[rank] = x;
    return (*peer)->close();
  });
  requireOk(statuses);
  return result;
}

}  // namespace

TEST_CASE("step on device memory (STARLING_DEVICE=host): dsgd, choco, exact diffusion, exactly",
          "[api][unit]") {
  DeviceOnHost on;
  const auto path = writeScenario(
      "device-step", ring4(R"({"kind": "dsgd", "step_size": 0.1, "gamma": 0.9})", 3, kInproc));
  const auto want = peersStep(path.string(), false);
  CHECK(peersStep(path.string(), true) == want);
  CHECK(want[0] != want[2]);
  // CHOCO-SGD: reference points and the consensus step with the next local step, uncompressed
  // and under fp16 and top-k.
  for (const char* codec : {"", R"(, "compression": {"kind": "fp16"})",
                            R"(, "compression": {"kind": "topk", "ratio": 0.05})"}) {
    CAPTURE(codec);
    const auto choco = writeScenario(
        "device-step-choco",
        ring4(R"({"kind": "choco", "step_size": 0.1, "gamma": 0.6})", 3, kInproc, codec));
    const auto host = peersStep(choco.string(), false);
    CHECK(peersStep(choco.string(), true) == host);
    CHECK(host != want);
  }
  // Exact diffusion: psi_prev from the first round's model, the message phi, the half weights.
  const auto ed = writeScenario(
      "device-step-ed", ring4(R"({"kind": "exact_diffusion", "step_size": 0.1})", 3, kInproc));
  const auto edHost = peersStep(ed.string(), false);
  CHECK(peersStep(ed.string(), true) == edHost);
  CHECK(edHost != want);
  // What the GPU path does not do yet is refused, naming the key.
  const auto other = writeScenario(
      "device-step-gt", ring4(R"({"kind": "gradient_tracking", "step_size": 0.1})", 3, kInproc));
  auto peer = Peer::fromScenario(other.string(), 0);
  REQUIRE(peer);
  std::vector<float> x(4), g(4);
  const Status s = (*peer)->step(DeviceSpan{reinterpret_cast<uint64_t>(x.data()), 4, 0},
                                 DeviceSpan{reinterpret_cast<uint64_t>(g.data()), 4, 0});
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(s.message(), Contains("algorithm.kind: gradient_tracking"));
}
