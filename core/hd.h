// STARLING_HD marks a function that is compiled for the host and, inside a CUDA translation unit
// (cuda/kernels.cu, built by clang or nvcc), for the device too: the per-element math that the CPU
// codecs and the CUDA kernels share (compression/codecs/elementwise.h). Outside CUDA it is empty.
// Such a function uses only integer and IEEE float operations, no library call and no exception.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__CUDA__)
#define STARLING_HD __host__ __device__ inline __attribute__((always_inline))
#else
#define STARLING_HD inline __attribute__((always_inline))
#endif

namespace starling::core {

// The bits of a float32 or float64 and back (std::bit_cast, which device code cannot call).
STARLING_HD uint32_t bitsOf(float v) {
#if defined(__NVCC__) && defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  return __builtin_bit_cast(uint32_t, v);
#endif
}
STARLING_HD float floatOfBits(uint32_t u) {
#if defined(__NVCC__) && defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}
STARLING_HD uint64_t bitsOf(double v) {
#if defined(__NVCC__) && defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(v));
#else
  return __builtin_bit_cast(uint64_t, v);
#endif
}
STARLING_HD double doubleOfBits(uint64_t u) {
#if defined(__NVCC__) && defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  return __builtin_bit_cast(double, u);
#endif
}

// SplitMix64 finaliser (Steele, Lea and Flood 2014): a bijective 64-bit mix of x plus the golden
// gamma. core/rng.h derives seeds with it; the CUDA codecs use it as a counter-based generator.
STARLING_HD constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace starling::core
