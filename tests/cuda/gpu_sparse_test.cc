// The GPU's sparse codecs against the CPU ones (docs/cuda.md), on a real GPU: top-k's radix select
// and compaction and Count-Sketch's table, frames byte for byte and decodes bit for bit. Part of
// cuda_gpu (main in gpu_test.cc: without a GPU it exits 77).
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "compression/compressor.h"
#include "core/rng.h"
#include "cuda/codecs.h"
#include "tests/cuda/gpu_testing.h"

using namespace starling;
using namespace starling::gpu_testing;
using Kind = CompressorSpec::Kind;

namespace {

TEST_CASE("GPU top-k frames are the CPU codec's byte for byte (ties, NaNs, every k), and decode "
          "alike", "[gpu][topk]") {
  cuda::GpuCodecs gpu(*theGpu);
  std::mt19937 gen(3);
  for (size_t n : {size_t{1}, size_t{1000}, size_t{4097}, quick ? size_t{20011} : size_t{1} << 22 | 5}) {
    std::vector<std::vector<float>> inputs = {values(n, static_cast<uint32_t>(n), true)};
    std::vector<float> ties(n);  // a few values, so that the k-th largest is shared by many
    for (float& v : ties) v = static_cast<float>(static_cast<int>(gen() % 7) - 3);
    inputs.push_back(ties);
    for (const auto& x : inputs) {
      OnDevice<float> dx(x);
      for (uint64_t k : {uint64_t{1}, uint64_t{3}, uint64_t{n / 100 + 1}, uint64_t{n / 2 + 1},
                         uint64_t{n}}) {
        CompressorSpec spec;
        spec.kind = Kind::kTopK;
        spec.k = std::min<uint64_t>(k, n);
        INFO("n " << n << " k " << spec.k);
        auto frame = gpu.encode(spec, dx.ptr(), n, 0);
        REQUIRE(frame);
        const auto cpu = cpuFrame(spec, x, 1);
        REQUIRE(frame->size() == cpu.size());
        REQUIRE(std::memcmp(frame->data(), cpu.data(), cpu.size()) == 0);
        OnDevice<float> out(n);
        REQUIRE(gpu.decode(spec, cpu, out.ptr(), n).isOk());
        REQUIRE(sameBits(out.read(n), cpuDecode(spec, cpu, n)));
      }
    }
  }
  // By ratio, as a scenario gives it.
  const auto x = values(10007, 9, false);
  OnDevice<float> dx(x);
  CompressorSpec spec;
  spec.kind = Kind::kTopK;
  spec.ratio = 0.01;
  auto frame = gpu.encode(spec, dx.ptr(), x.size(), 0);
  REQUIRE(frame);
  const auto cpu = cpuFrame(spec, x, 1);
  REQUIRE(std::vector<std::byte>(frame->begin(), frame->end()) == cpu);
}

TEST_CASE("GPU Count-Sketch frames are the CPU codec's byte for byte, and decode alike",
          "[gpu][countsketch]") {
  cuda::GpuCodecs gpu(*theGpu);
  std::mt19937 gen(8);
  for (size_t n : {size_t{1}, size_t{1000}, quick ? size_t{20011} : size_t{1} << 21 | 3}) {
    std::vector<std::vector<float>> inputs = {values(n, static_cast<uint32_t>(n) + 1, true)};
    std::vector<float> small(n);  // cancelling cells: +0 and -0 estimates in the medians
    for (float& v : small) v = static_cast<float>(static_cast<int>(gen() % 5) - 2);
    inputs.push_back(small);
    for (const auto& x : inputs) {
      OnDevice<float> dx(x);
      for (uint32_t rows : {1u, 3u, 4u, 5u, 7u}) {
        for (uint64_t cols : {uint64_t{1}, uint64_t{64}, uint64_t{4099}}) {
          for (int mode = 0; mode < 3; ++mode) {  // median + top-k, median + threshold, mean
            CompressorSpec spec;
            spec.kind = Kind::kCountSketch;
            spec.rows = rows;
            spec.cols = cols;
            spec.ratio = mode == 0 ? 0.01 : 0.0;
            spec.threshold = mode == 1 ? 0.02 : 0.0;
            spec.meanEstimate = mode == 2;
            INFO("n " << n << " rows " << rows << " cols " << cols << " mode " << mode);
            auto frame = gpu.encode(spec, dx.ptr(), n, core::Rng(1).nextU64());
            REQUIRE(frame);
            const auto cpu = cpuFrame(spec, x, 1);
            REQUIRE(std::vector<std::byte>(frame->begin(), frame->end()) == cpu);
            OnDevice<float> out(n);
            REQUIRE(gpu.decode(spec, cpu, out.ptr(), n).isOk());
            REQUIRE(sameBits(out.read(n), cpuDecode(spec, cpu, n)));
          }
        }
      }
    }
  }
}

}  // namespace
