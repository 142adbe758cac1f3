// Peer::mix on GPU memory (docs/cuda.md, "Tensors on the GPU"), on a real GPU: device gossip's
// rounds on the GPU's vectors (cuda/device_vectors.h) against the round written out, value for
// value, for the codecs whose GPU frames are the CPU's byte for byte; a GPU rank among host
// ranks; and 4 Peers on threads mixing device buffers against the same Peers mixing host
// buffers, bit for bit. Without a driver or a device it prints why and exits 77 (meson's skip);
// tools/gpu_check runs it on a machine with a GPU.
#include <starling/peer.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda/device_vectors.h"
#include "cuda/driver.h"
#include "tests/catch_runner.h"
#include "tests/runtime/device_gossip_testing.h"

using namespace starling;
using namespace starling::runtime::device_testing;
using Kind = compression::CompressorSpec::Kind;

namespace {

cuda::Gpu* theGpu = nullptr;

std::unique_ptr<DeviceVectors> gpuDevice(const compression::CompressorSpec& spec) {
  auto got = cuda::openGpuVectors(0, spec);
  INFO(got.status().toString());
  REQUIRE(got.isOk());
  return std::move(*got);
}

TEST_CASE("GPU device gossip: the round written out, codecs with CPU-identical frames",
          "[cuda][gpu][mix]") {
  const auto schedule = mustSchedule(staticSpec(4, topology::GraphKind::kRing));
  for (Kind kind : {Kind::kIdentity, Kind::kFp16, Kind::kBf16, Kind::kTopK, Kind::kCountSketch}) {
    CAPTURE(static_cast<int>(kind));
    const auto spec = specOf(kind);
    const auto want = reference(spec, *schedule, 4, 6);
    const auto got = runRing(spec, *schedule, 4, 6, {true, true, true, true}, gpuDevice);
    for (int i = 0; i < 4; ++i) CHECK(got[i] == want[i]);
    // A GPU rank between host ranks: the same frames on the wire.
    const auto mixed = runRing(spec, *schedule, 4, 6, {true, false, true, false}, gpuDevice);
    CHECK(mixed[0] == want[0]);
    CHECK(mixed[2] == want[2]);
  }
}

TEST_CASE("GPU device gossip: stochastic codecs decode and mix", "[cuda][gpu][mix]") {
  // Their GPU frames draw other rounding bits than the CPU's (docs/cuda.md), so the models are
  // the written-out ones up to the quantizers' noise: the mean of the ranks' models, which gossip
  // keeps, within a few quantization steps of the reference's.
  const auto schedule = mustSchedule(staticSpec(4, topology::GraphKind::kRing));
  for (Kind kind : {Kind::kQsgd, Kind::kNuqsgd, Kind::kNaturalDithering}) {
    CAPTURE(static_cast<int>(kind));
    auto spec = specOf(kind);
    spec.bits = 8;
    spec.levels = 8;
    const auto want = reference(spec, *schedule, 4, 4);
    const auto got = runRing(spec, *schedule, 4, 4, {true, true, true, true}, gpuDevice);
    for (size_t k = 0; k < kDim; ++k) {
      double a = 0, b = 0;
      for (int i = 0; i < 4; ++i) {
        a += got[i][k];
        b += want[i][k];
      }
      CHECK(a / 4 == Approx(b / 4).margin(0.25));
    }
  }
}

// Runs body(rank) on 4 threads and requires every status to be ok.
void onFourThreads(const std::function<Status(int)>& body) {
  std::vector<Status> statuses(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] { statuses[rank] = body(rank); });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : statuses) {
    INFO(s.toString());
    REQUIRE(s.isOk());
  }
}

// A GPU buffer of d floats, and the copies between it and a host vector (synchronized).
cuda::DeviceBuffer gpuBuffer(size_t d) {
  cuda::Gpu::Scope scope(*theGpu);
  return std::move(cuda::DeviceBuffer::allocate(d * sizeof(float)).value());
}
Status upload(const cuda::DeviceBuffer& to, const std::vector<float>& from) {
  STARLING_RETURN_IF_ERROR(theGpu->copyToDevice(to.ptr(), from.data(), 4 * from.size()));
  return theGpu->sync();
}
Status download(std::vector<float>& to, const cuda::DeviceBuffer& from) {
  STARLING_RETURN_IF_ERROR(theGpu->copyToHost(to.data(), from.ptr(), 4 * to.size()));
  return theGpu->sync();
}

// 4 Peers on threads over the in-process transport, 3 mix() rounds with local changes between
// them, the parameters in host memory or on the GPU; each rank's final model.
std::vector<std::vector<float>> peersMix(const std::string& scenario, bool onGpu) {
  const size_t d = 5000;
  std::vector<std::vector<float>> out(4);
  onFourThreads([&](int rank) -> Status {
    auto peer = Peer::fromScenario(scenario, rank);
    if (!peer) return peer.status();
    std::vector<float> x(d);
    for (size_t k = 0; k < d; ++k) x[k] = static_cast<float>(std::sin(0.01 * k + rank));
    cuda::DeviceBuffer buffer = onGpu ? gpuBuffer(d) : cuda::DeviceBuffer();
    for (int t = 0; t < 3; ++t) {
      for (size_t k = 0; k < d; ++k) x[k] += 0.1f * static_cast<float>(rank - t);
      if (!onGpu) {
        STARLING_RETURN_IF_ERROR((*peer)->mix(std::span<float>(x)));
        continue;
      }
      STARLING_RETURN_IF_ERROR(upload(buffer, x));
      STARLING_RETURN_IF_ERROR((*peer)->mix(DeviceSpan{buffer.ptr(), d, 0}));
      STARLING_RETURN_IF_ERROR(download(x, buffer));
    }
    out[rank] = x;
    return (*peer)->close();
  });
  return out;
}

TEST_CASE("GPU Peer::mix: 4 Peers mixing GPU buffers as they mix host buffers",
          "[cuda][gpu][mix]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("starling-gpu-mix-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& extra) {
    const auto path = dir / (name + ".json");
    std::ofstream(path) << R"({"schema_version": 1, "name": ")" << name
                        << R"(", "nodes": 4, "seed": 3, "topology": {"kind": "ring"},
        "transport": {"kind": "inproc"}, "algorithm": )"
                        << extra << "}";
    return path.string();
  };
  // Uncompressed: the same combine in the same order, so the same bits.
  const auto plain = write("plain", R"({"kind": "dsgd", "step_size": 0.1})");
  CHECK(peersMix(plain, true) == peersMix(plain, false));
  // fp16 (CHOCO-gossip): the same frames (the GPU's fp16 is the CPU's, bit for bit), the same
  // running sum in the same order: the same bits.
  const auto fp16 = write("fp16", R"({"kind": "choco", "step_size": 0.1, "gamma": 0.5},
        "compression": {"kind": "fp16"})");
  CHECK(peersMix(fp16, true) == peersMix(fp16, false));
  std::filesystem::remove_all(dir);
}

// 4 Peers' 3 steps (the gradient of 0.15 x^2 - rank x) on GPU buffers or host buffers.
std::vector<std::vector<float>> peersStep(const std::string& scenario, bool onGpu) {
  const size_t d = 5000;
  std::vector<std::vector<float>> out(4);
  onFourThreads([&](int rank) -> Status {
    auto peer = Peer::fromScenario(scenario, rank);
    if (!peer) return peer.status();
    std::vector<float> x(d), g(d);
    for (size_t k = 0; k < d; ++k) x[k] = static_cast<float>(std::cos(0.02 * k - rank));
    cuda::DeviceBuffer xb = onGpu ? gpuBuffer(d) : cuda::DeviceBuffer();
    cuda::DeviceBuffer gb = onGpu ? gpuBuffer(d) : cuda::DeviceBuffer();
    for (int t = 0; t < 3; ++t) {
      for (size_t k = 0; k < d; ++k) g[k] = 0.3f * x[k] - static_cast<float>(rank);
      if (!onGpu) {
        STARLING_RETURN_IF_ERROR((*peer)->step(std::span<float>(x), std::span<const float>(g)));
        continue;
      }
      STARLING_RETURN_IF_ERROR(upload(xb, x));
      STARLING_RETURN_IF_ERROR(upload(gb, g));
      STARLING_RETURN_IF_ERROR(
          (*peer)->step(DeviceSpan{xb.ptr(), d, 0}, DeviceSpan{gb.ptr(), d, 0}));
      STARLING_RETURN_IF_ERROR(download(x, xb));
    }
    out[rank] = x;
    return (*peer)->close();
  });
  return out;
}

TEST_CASE("GPU Peer::step: dsgd, exact diffusion, choco on GPU buffers as on host, bit for bit",
          "[cuda][gpu][mix]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("starling-gpu-step-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const char* algorithm :
       {R"({"kind": "dsgd", "step_size": 0.1})", R"({"kind": "exact_diffusion", "step_size": 0.1})",
        R"({"kind": "choco", "step_size": 0.1, "gamma": 0.6}, "compression": {"kind": "fp16"})",
        R"({"kind": "choco", "step_size": 0.1, "gamma": 0.6},
            "compression": {"kind": "topk", "ratio": 0.05})"}) {
    CAPTURE(algorithm);
    const auto path = dir / "step.json";
    std::ofstream(path) << R"({"schema_version": 1, "name": "gpu-step", "nodes": 4, "seed": 3,
        "topology": {"kind": "ring"}, "transport": {"kind": "inproc"}, "algorithm": )"
                        << algorithm << "}";
    CHECK(peersStep(path.string(), true) == peersStep(path.string(), false));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  auto gpu = cuda::Gpu::open(0);
  if (!gpu) {
    std::printf("cuda_gpu_mix: skipped, no GPU here: %s\n", gpu.status().message().c_str());
    return 77;
  }
  std::printf("cuda_gpu_mix: %s, kernels from %s PTX\n", (*gpu)->name().c_str(),
              (*gpu)->ptxSource().c_str());
  theGpu = gpu->get();
  const int failed = starling::testing::runCatch(argc, argv);
  theGpu = nullptr;
  return failed == 0 ? 0 : 1;
}
