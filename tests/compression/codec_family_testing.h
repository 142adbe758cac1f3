// Shared by the tests of the exponential-level and adaptive codecs (codecs_family_test.cc,
// codecs_family_adaptive_test.cc, codecs_family_corrupt_test.cc): their specs, the sizes the
// wire format predicts, and the ratios the hidden "[report]" test case prints.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "tests/compression/codec_testing.h"

namespace starling::compression::family_testing {

using namespace codec_testing;

inline CompressorSpec nuqsgdSpec(int bits, uint64_t bucket) {
  CompressorSpec s = makeSpec(Kind::kNuqsgd);
  s.bits = bits;
  s.bucket = bucket;
  return s;
}
inline CompressorSpec ditheringSpec(int levels, bool linf) {
  CompressorSpec s = makeSpec(Kind::kNaturalDithering);
  s.levels = levels;
  s.linf = linf;
  return s;
}
inline CompressorSpec topkDitheringSpec(uint64_t k, int levels, double ratio = 0.0) {
  CompressorSpec s = makeSpec(Kind::kTopKDithering);
  s.k = k;
  s.ratio = ratio;
  s.levels = levels;
  return s;
}
inline CompressorSpec adacompSpec(uint64_t bin) {
  CompressorSpec s = makeSpec(Kind::kAdaComp);
  s.bin = bin;
  return s;
}
inline CompressorSpec dqsgdSpec(int minBits, int maxBits, double target, uint64_t bucket) {
  CompressorSpec s = makeSpec(Kind::kDqsgd);
  s.minBits = minBits;
  s.maxBits = maxBits;
  s.target = target;
  s.bucket = bucket;
  return s;
}

inline const CompressorSpec kFamily[] = {
    nuqsgdSpec(2, 4),        nuqsgdSpec(4, 512),           makeSpec(Kind::kNatural),
    ditheringSpec(1, false), ditheringSpec(5, true),       ditheringSpec(30, false),
    topkDitheringSpec(3, 4), topkDitheringSpec(0, 2, 0.3), adacompSpec(4),
    adacompSpec(500),        dqsgdSpec(2, 8, 0.1, 5),      dqsgdSpec(3, 3, 1.0, 512),
};

// zeta of natural dithering on n elements with s levels (docs/algorithms.md §12.9, l2 norm).
inline double zeta(size_t n, int s) {
  const double a = std::sqrt(double(n)) * std::ldexp(1.0, 1 - s);
  return 9.0 / 8 + a * std::min(1.0, a);
}

inline uint64_t varintBytes(uint64_t v) {
  uint64_t n = 1;
  for (; v >= 128; v >>= 7) ++n;
  return n;
}

// Bytes of LEB128 gaps for the nonzero positions of y.
template <typename T>
inline uint64_t gapBytes(const std::vector<T>& y, size_t* count = nullptr) {
  uint64_t bytes = 0, previous = 0, kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) continue;
    bytes += varintBytes(kept++ == 0 ? i : i - previous);
    previous = i;
  }
  if (count != nullptr) *count = kept;
  return bytes;
}

// Measured ratios, reported by the hidden test case "[report]".
struct Measured {
  std::string what;
  double measured, bound;
};
inline std::vector<Measured>& report() {
  static std::vector<Measured> r;
  return r;
}

}  // namespace starling::compression::family_testing
