// Blocks shared by the quantizing and sparsifying codecs (internal to compression/): fixed-width
// codes in a bit stream, the scaled-level quantizer behind qsgd, nuqsgd, natural dithering, top-k
// dithering and dqsgd, the random bits of its stochastic rounding, the top-k selection of topk,
// topk_dithering and countsketch, and the LEB128 index lists of topk_dithering and adacomp.
//
// The layouts are specified in docs/wire_format.md ("QSGD codes", "Exponential levels", "Sparse
// payloads"). Readers never read past the bytes they are given; the check functions validate a
// whole payload so that callers write their output only after a frame is known to be good.
// Implemented in bits.cc, the scaled codes in scaled_codes.cc and the top-k selection in sparse.cc.
// Thread-safety: values and free functions over caller-owned buffers.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "compression/codecs/elementwise.h"
#include "compression/codecs/wire.h"
#include "core/rng.h"
#include "core/status.h"

namespace starling::compression::codecs {

#if defined(__x86_64__) && defined(__GNUC__)
// The parts of AVX-512 this CPU has, read once (bits.cc). The vector paths of bits.cc,
// quantize.cc and exponential.cc run only where theirs are there; each keeps a portable loop that
// gives the same bits.
struct Avx512 {
  bool f = false, bw = false, vl = false, vbmi = false;
};
const Avx512& avx512();
// F, BW and VBMI: the byte-permute packing paths of bits.cc and exponential.cc.
inline bool hasVbmi() { return avx512().f && avx512().bw && avx512().vbmi; }
#endif

// Packs codes of `width` bits (1..32), least significant bit first, into a byte buffer. Every
// byte it touches is written whole (the last one by flush), so the buffer need not be zeroed.
class BitWriter {
 public:
  explicit BitWriter(std::byte* out) : out_(out) {}
  void put(uint32_t code, int width) {
    acc_ |= static_cast<uint64_t>(code) << used_;
    used_ += width;
    while (used_ >= 8) {
      *out_++ = static_cast<std::byte>(acc_ & 0xff);
      acc_ >>= 8;
      used_ -= 8;
    }
  }
  void flush() {
    if (used_ > 0) *out_ = static_cast<std::byte>(acc_ & 0xff);
  }
  // No bits pending: the next code starts at a byte boundary, at next().
  bool aligned() const { return used_ == 0; }
  std::byte* next() const { return out_; }
  void skip(size_t bytes) { out_ += bytes; }

 private:
  std::byte* out_;
  uint64_t acc_ = 0;
  int used_ = 0;
};

// Reads codes written by BitWriter; the caller has checked that the bytes are there.
class BitReader {
 public:
  explicit BitReader(const std::byte* in) : in_(in) {}
  uint32_t get(int width) {
    while (have_ < width) {
      acc_ |= static_cast<uint64_t>(std::to_integer<uint8_t>(*in_++)) << have_;
      have_ += 8;
    }
    const auto code = static_cast<uint32_t>(acc_ & ((uint64_t{1} << width) - 1));
    acc_ >>= width;
    have_ -= width;
    return code;
  }
  // The bits of the current byte not consumed yet (the last byte's padding).
  uint64_t leftover() const { return acc_; }

 private:
  const std::byte* in_;
  uint64_t acc_ = 0;
  int have_ = 0;
};

// Packs n codes of `width` bits (1..8), codes[i] < 2^width, after those already in w.
void packCodes(const uint8_t* codes, size_t n, int width, BitWriter& w);

// Unpacks codes [first, first + n) of a stream of `width`-bit codes (1..8) into codes[0, n).
// Reads only the bytes that hold them.
void unpackCodes(const std::byte* stream, uint64_t first, size_t n, int width, uint8_t* codes);

// A scale a decoder accepts: finite and not negative (-0 included).
inline bool validScale(double s) { return std::isfinite(s) && !std::signbit(s); }

// The smallest float32 >= v, so that |x| / scale never exceeds 1. NaN stays NaN; a norm beyond
// float32's range becomes infinity (and the frame is then rejected by every decoder).
inline float roundUpToFloat(double v) {
  if (std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
  if (v > static_cast<double>(std::numeric_limits<float>::max())) {
    return std::numeric_limits<float>::infinity();
  }
  float f = static_cast<float>(v);
  if (static_cast<double>(f) < v) {
    // The next float32 up; for +0 and positive finite values that is the next bit pattern.
    f = std::signbit(f) ? std::nextafter(f, std::numeric_limits<float>::infinity())
                        : std::bit_cast<float>(std::bit_cast<uint32_t>(f) + 1);
  }
  return f;
}

// ---------------------------------------------------------------------------------------------
// Sums that must equal a serial float64 loop.
//
// A frame may hold g(s) for s a float64 sum of nonnegative terms added one by one in index order
// (sign's mean |x_i|, the scales' l2 norms) and g rounding to float32, so the frame would
// change if the sum were added in another order. But recursive summation of n nonnegative terms,
// in any order, is within gamma_h = h u / (1 - h u) of the exact sum when no term takes part in
// more than h additions (Higham, "Accuracy and Stability of Numerical Algorithms", §4.2;
// u = 2^-53). LaneSum adds in 32 interleaved partial sums and gives the interval that must hold
// the serial sum as well; when a monotone g maps both ends to the same value, g(serial) is that
// value. Otherwise (a sum within about n·2^-53 of a rounding boundary of g) the caller adds
// serially.
struct LaneSum {
  double sum = 0.0;  // the lane sum; NaN or infinity when a term is
  double lo = 0.0;   // [lo, hi] holds the serial sum too
  double hi = 0.0;
};

// Sums of x_i^2 and of |x_i| over n float32 values, in 32 lanes (element i into lane i mod 32)
// combined pairwise: a fixed order, the same in every SIMD clone and in the AVX-512 path taken
// where the CPU has it. The *Portable versions are the loops alone (the tests compare both).
LaneSum laneSumSquares(const float* x, size_t n);
LaneSum laneSumAbs(const float* x, size_t n);
LaneSum laneSumSquaresPortable(const float* x, size_t n);
LaneSum laneSumAbsPortable(const float* x, size_t n);

// The bucket's max |x_i| as float32 bits, any NaN counting above infinity (so a NaN's bits
// exceed 0x7f800000). Exact: an integer max.
uint32_t maxAbsBits(const float* x, size_t n);

// ||x||_2 (or ||x||_inf) in float64, rounded up to float32 (the scale of a bucket): NaN when x
// holds a NaN, infinity when it holds an infinity or the norm exceeds float32's range. Equal to
// roundUpToFloat of the serial float64 computation for every input.
template <typename T>
float bucketScale(std::span<const T> x, bool linf);

// ---------------------------------------------------------------------------------------------
// Random bits for stochastic rounding: eight xoshiro256++ generators (Blackman and Vigna 2018)
// side by side, so that a step of all eight is a handful of SIMD instructions. They are seeded
// from one 64-bit value through SplitMix64 (core::mix64), as the xoshiro authors advise; a codec
// takes that value from the caller's Rng, one draw per frame. Good statistical quality for
// rounding, not for cryptography.
class UniformBits {
 public:
  static constexpr size_t kLanes = 8;
  explicit UniformBits(uint64_t seed);
  // Fills words[0, count), count a multiple of kLanes: word kLanes * t + l is lane l's t-th
  // output.
  void fill(uint64_t* words, size_t count);

 private:
  uint64_t state_[4][kLanes];
};

// ---------------------------------------------------------------------------------------------
// Scaled codes: per bucket one float32 scale (its norm rounded up), then one code per element:
// a level index in the low `levelBits` bits and the sign above them. Level 0 carries no sign.

enum class LevelSet : uint8_t {
  kUniform,      // level l is l / s of the scale (QSGD)
  kExponential,  // level l >= 1 is 2^(l - s) of the scale, level 0 is 0 (NUQSGD, natural dithering)
};

struct ScaledCodes {
  LevelSet levels = LevelSet::kUniform;
  uint32_t s = 1;       // the highest level index; 1 <= s < 2^levelBits
  int levelBits = 1;    // width of the level field
  uint64_t bucket = 1;  // elements per scale, >= 1
  bool linf = false;    // scale by the bucket's max |x_i| instead of its l2 norm

  int codeBits() const { return levelBits + 1; }
  uint32_t signBit() const { return 1u << levelBits; }
  uint64_t buckets(uint64_t d) const { return (d + bucket - 1) / bucket; }
  uint64_t payloadBytes(uint64_t d) const {
    return 4 * buckets(d) + (d * static_cast<uint64_t>(codeBits()) + 7) / 8;
  }
  // |decoded value| of level l under `scale`, in float64.
  double magnitude(double scale, uint32_t l) const {
    if (levels == LevelSet::kUniform) {
      return elementwise::uniformMagnitude(scale, l, s);
    }
    return l == 0 ? 0.0 : std::ldexp(scale, static_cast<int>(l) - static_cast<int>(s));
  }
};

// The fixed-point precision of the stochastic rounding: an element rounds up with probability
// round(p * 2^16) / 2^16 for its exact probability p (docs/bench_codecs.md, "Random numbers").
inline constexpr int kRoundingBits = elementwise::kRoundingBits;

// Writes the scaled codes of x into `out`, payloadBytes(x.size()) bytes that need not be zeroed.
// Takes exactly one nextU64() from rng. A bucket whose scale is not positive and finite (zeros;
// or NaN / infinity, which no decoder accepts) gets level 0 everywhere.
template <typename T>
void encodeScaledCodes(std::span<const T> x, const ScaledCodes& q, core::Rng& rng, std::byte* out);

// Validates a payload of scaled codes for n elements: its exact length, every scale, every code
// (level <= s, no signed zero) and the padding. `codec` names the codec in messages.
core::Status checkScaledCodes(std::span<const std::byte> payload, const ScaledCodes& q, uint64_t n,
                              const char* codec);

// Writes the n values of a payload checkScaledCodes accepted into out[0, n): sign * magnitude
// / divisor in float64, rounded to T.
template <typename T>
void decodeScaledCodes(std::span<const std::byte> payload, const ScaledCodes& q, uint64_t n,
                       double divisor, T* out);

// What decode reads back from a payload of scaled codes for seen.size() elements: the checks and
// the values of the decoders (everything after the frame's own header and CRC), which is what an
// encodeInto needs for the payload it has just written.
template <typename T>
core::Status seenFromScaledCodes(std::span<const std::byte> payload, const ScaledCodes& q,
                                 std::span<T> seen, const char* codec) {
  STARLING_RETURN_IF_ERROR(checkScaledCodes(payload, q, seen.size(), codec));
  decodeScaledCodes<T>(payload, q, seen.size(), 1.0, seen.data());
  return core::Status::ok();
}

// ---------------------------------------------------------------------------------------------
// Top-k selection (sparse.cc).

// The indices of the k largest |x_i|, in increasing order. Ties go to the lower index and a NaN
// counts as larger than everything (all NaNs equal), so the set is a function of x and k alone.
template <typename T>
std::vector<uint32_t> largestIndices(std::span<const T> x, uint64_t k);

// ---------------------------------------------------------------------------------------------
// Index lists: strictly increasing indices as LEB128 gaps, the first varint being the index.

inline void appendIndexGaps(std::vector<std::byte>& out, std::span<const uint32_t> indices) {
  uint32_t previous = 0;
  for (size_t j = 0; j < indices.size(); ++j) {
    appendVarint(out, j == 0 ? indices[j] : indices[j] - previous);
    previous = indices[j];
  }
}

// Reads n indices written by appendIndexGaps, each < d, into `indices` (replaced). The caller
// bounds n by the payload's size first (every index takes at least one byte).
inline core::Status readIndexGaps(Reader& r, uint64_t n, uint64_t d,
                                  std::vector<uint32_t>& indices) {
  if (n > r.remaining()) {
    return core::corruption("payload too short for " + std::to_string(n) + " indices");
  }
  indices.clear();
  indices.reserve(n);
  uint64_t index = 0;
  for (uint64_t j = 0; j < n; ++j) {
    uint64_t gap;
    if (!r.readVarint(gap)) return core::corruption("malformed index varint");
    if (j > 0 && gap == 0) return core::corruption("indices not strictly increasing");
    if (gap >= d - (j == 0 ? 0 : index)) {
      return core::corruption("index out of range for " + std::to_string(d) + " elements");
    }
    index = j == 0 ? gap : index + gap;
    indices.push_back(static_cast<uint32_t>(index));
  }
  return core::Status::ok();
}

}  // namespace starling::compression::codecs
