// Shared by the GPU codec tests (gpu_test.cc, gpu_sparse_test.cc: one program, cuda_gpu): the
// GPU, device copies of host vectors, edge-value inputs, the CPU codecs' frames and decodes.
#pragma once

#include <bit>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <span>
#include <vector>

#include "compression/compressor.h"
#include "core/rng.h"
#include "cuda/driver.h"

namespace starling::gpu_testing {

using compression::CompressorSpec;

// The GPU the program opened (main, gpu_test.cc).
inline cuda::Gpu* theGpu = nullptr;
// STARLING_CUDA_TEST_QUICK=1: smaller vectors, for the runs under compute-sanitizer (tens of
// times slower); the same checks.
inline const bool quick = [] {
  const char* q = std::getenv("STARLING_CUDA_TEST_QUICK");
  return q != nullptr && *q == '1';
}();

// A device copy of a host vector, freed with it.
template <typename T>
struct OnDevice {
  cuda::DeviceBuffer buffer;
  explicit OnDevice(std::span<const T> host) {
    cuda::Gpu::Scope scope(*theGpu);
    buffer = std::move(
        cuda::DeviceBuffer::allocate(std::max<size_t>(host.size(), 1) * sizeof(T)).value());
    REQUIRE(theGpu->copyToDevice(buffer.ptr(), host.data(), host.size() * sizeof(T)).isOk());
    REQUIRE(theGpu->sync().isOk());
  }
  explicit OnDevice(size_t n) : OnDevice(std::vector<T>(n)) {}
  std::vector<T> read(size_t n) const {
    std::vector<T> out(n);
    REQUIRE(theGpu->copyToHost(out.data(), buffer.ptr(), n * sizeof(T)).isOk());
    REQUIRE(theGpu->sync().isOk());
    return out;
  }
  cuda::DevicePtr ptr() const { return buffer.ptr(); }
};

// Gradient-like values with every kind of edge value the conversions treat specially.
inline std::vector<float> values(size_t n, uint32_t seed, bool edges) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(gen) * 0.01f;
  if (edges) {
    const uint32_t special[] = {0u,          0x80000000u, 1u,          0x7fffffu,   0x7f7fffffu,
                                0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0x477ff000u,
                                0x477fefffu, 0x33000000u, 0x387fc000u, 0x7f7f8000u, 0x38800000u};
    for (size_t i = 0; i < n; i += 97)
      x[i] = std::bit_cast<float>(special[(i / 97) % std::size(special)]);
    for (size_t i = 13; i < n; i += 89) x[i] = std::bit_cast<float>(static_cast<uint32_t>(gen()));
  }
  return x;
}

inline std::vector<std::byte> cpuFrame(const CompressorSpec& spec, std::span<const float> x,
                                       uint64_t seed) {
  auto codec = compression::createCompressor<float>(spec).value();
  core::Rng rng(seed);
  std::vector<std::byte> out;
  codec->encode(x, rng, out);
  return out;
}

inline std::vector<float> cpuDecode(const CompressorSpec& spec,
                                    std::span<const std::byte> frame, size_t n) {
  auto codec = compression::createCompressor<float>(spec).value();
  std::vector<float> out(n);
  REQUIRE(codec->decode(frame, out).isOk());
  return out;
}

inline bool sameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace starling::gpu_testing
