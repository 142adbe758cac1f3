// The CUDA kernels of the GPU codecs and the gossip combine (docs/cuda.md). Each kernel's
// per-element math is compression/codecs/elementwise.h, the very functions the CPU codecs run;
// a kernel adds only the indexing, the reductions and the memory movement. Compiled to PTX by
// the normal build (clang -x cuda --cuda-device-only, no CUDA Toolkit needed) or by nvcc where it
// exists, never fusing a * b + c (-ffp-contract=off / --fmad=false), and loaded at run time
// through the driver API (cuda/driver.h). Every kernel has C linkage so that its PTX name is its
// source name, and a grid-stride loop so that any grid covers any n.
#include "cuda/prelude.h"
// clang-format off: prelude.h first, it defines the attributes that the shared math uses.
#include "compression/codecs/elementwise.h"
#include "optim/elementwise.h"
// clang-format on

namespace ew = starling::compression::elementwise;
namespace oe = starling::optim::elementwise;
using starling::core::bitsOf;
using starling::core::floatOfBits;

namespace {

__device__ uint64_t globalThread() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ uint64_t threadCount() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

__device__ double sqrtRn(double v) {
#if defined(__NVCC__)
  return __dsqrt_rn(v);
#else
  return __builtin_sqrt(v);  // llvm.sqrt.f64: PTX sqrt.rn.f64, correctly rounded
#endif
}

__device__ void atomicAddDouble(double* at, double v) {
#if defined(__NVCC__)
  atomicAdd(at, v);
#else
  __nvvm_atom_add_gen_d(at, v);
#endif
}

__device__ void atomicMaxU32(uint32_t* at, uint32_t v) {
#if defined(__NVCC__)
  atomicMax(at, v);
#else
  __nvvm_atom_max_gen_ui(at, v);
#endif
}

__device__ void atomicAddU32(uint32_t* at, uint32_t v) {
#if defined(__NVCC__)
  atomicAdd(at, v);
#else
  __nvvm_atom_add_gen_i(reinterpret_cast<int*>(at), static_cast<int>(v));
#endif
}

__device__ uint32_t popcount32(uint32_t v) {
#if defined(__NVCC__)
  return static_cast<uint32_t>(__popc(v));
#else
  return static_cast<uint32_t>(__builtin_popcount(v));
#endif
}

// The lanes of the calling thread's warp whose `pred` is true, as a bit mask (every lane calls).
__device__ uint32_t ballot(bool pred) {
#if defined(__NVCC__)
  return __ballot_sync(0xffffffffu, pred);
#else
  return __nvvm_vote_ballot_sync(0xffffffffu, pred);
#endif
}

// v >= 0 (or NaN) rounded up to a float32: roundUpToFloat of compression/codecs/bits.h for the
// non-negative values a bucket norm takes.
__device__ float roundUpToFloat(double v) {
  if (v != v) return floatOfBits(0x7fc00000u);
  if (v > 3.4028234663852886e38) return floatOfBits(0x7f800000u);
  float f = static_cast<float>(v);  // cvt.rn.f32.f64
  if (static_cast<double>(f) < v) f = floatOfBits(bitsOf(f) + 1);
  return f;
}

constexpr unsigned kBlock = 256;

// Warp shuffles (sm_70 and newer), without the toolkit's headers under clang.
__device__ uint32_t shuffleDown(uint32_t v, unsigned offset) {
#if defined(__NVCC__)
  return __shfl_down_sync(0xffffffffu, v, offset);
#else
  return static_cast<uint32_t>(
      __nvvm_shfl_sync_down_i32(0xffffffffu, static_cast<int>(v), static_cast<int>(offset), 0x1f));
#endif
}

__device__ double shuffleDown(double v, unsigned offset) {
  const uint64_t b = bitsOf(v);
  const uint64_t lo = shuffleDown(static_cast<uint32_t>(b), offset);
  const uint64_t hi = shuffleDown(static_cast<uint32_t>(b >> 32), offset);
  return starling::core::doubleOfBits(lo | (hi << 32));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// fp16 / bf16: the payload is one little-endian u16 per element.

// Four elements a thread: 16-byte loads of float32 and 8-byte stores of the codes (or the
// reverse), the widest accesses both sides allow, when the host says both are aligned (vec4);
// otherwise, and for the tail, one element at a time.
struct alignas(16) U32x4 {
  uint32_t v[4];
};
struct alignas(8) U16x4 {
  uint16_t v[4];
};

template <typename Convert>
__device__ void toHalves(const float* x, uint16_t* out, uint64_t n, int vec4, Convert convert) {
  const uint64_t quads = vec4 != 0 ? n / 4 : 0;
  for (uint64_t q = globalThread(); q < quads; q += threadCount()) {
    const U32x4 in = reinterpret_cast<const U32x4*>(x)[q];
    U16x4 h;
    for (int j = 0; j < 4; ++j) h.v[j] = convert(in.v[j]);
    reinterpret_cast<U16x4*>(out)[q] = h;
  }
  for (uint64_t i = 4 * quads + globalThread(); i < n; i += threadCount())
    out[i] = convert(bitsOf(x[i]));
}

template <typename Convert>
__device__ void fromHalves(const uint16_t* h, float* out, uint64_t n, int vec4, Convert convert) {
  const uint64_t quads = vec4 != 0 ? n / 4 : 0;
  for (uint64_t q = globalThread(); q < quads; q += threadCount()) {
    const U16x4 in = reinterpret_cast<const U16x4*>(h)[q];
    U32x4 f;
    for (int j = 0; j < 4; ++j) f.v[j] = convert(in.v[j]);
    reinterpret_cast<U32x4*>(out)[q] = f;
  }
  for (uint64_t i = 4 * quads + globalThread(); i < n; i += threadCount())
    out[i] = floatOfBits(convert(h[i]));
}

struct HalfFrom {
  __device__ uint16_t operator()(uint32_t u) const { return ew::halfFromFloatBits(u); }
};
struct Bf16From {
  __device__ uint16_t operator()(uint32_t u) const { return ew::bf16FromFloatBits(u); }
};
struct FromHalf {
  __device__ uint32_t operator()(uint32_t h) const { return ew::floatBitsFromHalf(h); }
};
struct FromBf16 {
  __device__ uint32_t operator()(uint32_t h) const { return ew::floatBitsFromBf16(h); }
};

extern "C" {

__global__ void starling_encode_f16(const float* x, uint16_t* out, uint64_t n, int vec4) {
  toHalves(x, out, n, vec4, HalfFrom{});
}

__global__ void starling_encode_bf16(const float* x, uint16_t* out, uint64_t n, int vec4) {
  toHalves(x, out, n, vec4, Bf16From{});
}

__global__ void starling_decode_f16(const uint16_t* h, float* out, uint64_t n, int vec4) {
  fromHalves(h, out, n, vec4, FromHalf{});
}

__global__ void starling_decode_bf16(const uint16_t* h, float* out, uint64_t n, int vec4) {
  fromHalves(h, out, n, vec4, FromBf16{});
}

// ---------------------------------------------------------------------------------------------
// Scaled codes of float32 values (docs/wire_format.md "QSGD codes", "Exponential levels"): QSGD,
// NUQSGD and natural dithering. Per bucket a float32 scale, then the codes as one little-endian
// bit stream.

// Pass 1: per bucket the sum of squares in float64 (squares of float32 values are exact) and the
// largest |x| as float32 bits. Block c of the grid covers elements [c * chunk, (c + 1) * chunk)
// of one bucket (chunk divides nothing; a chunk never crosses a bucket: chunksPerBucket chunks
// per bucket). `sums` and `maxBits` start at zero.
__global__ void starling_bucket_norms(const float* x, uint64_t n, uint64_t bucket, uint64_t chunk,
                                      uint64_t chunksPerBucket, double* sums, uint32_t* maxBits) {
  __shared__ double partSum[kBlock];
  __shared__ uint32_t partMax[kBlock];
  const uint64_t b = blockIdx.x / chunksPerBucket;
  const uint64_t c = blockIdx.x % chunksPerBucket;
  const uint64_t bucketLo = b * bucket;
  const uint64_t bucketHi = bucketLo + bucket < n ? bucketLo + bucket : n;
  const uint64_t lo = bucketLo + c * chunk;
  const uint64_t hi = lo + chunk < bucketHi ? lo + chunk : bucketHi;
  double sum = 0.0;
  uint32_t m = 0;
  for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const double v = static_cast<double>(x[i]);
    sum += v * v;
    const uint32_t a = bitsOf(x[i]) & 0x7fffffffu;
    m = a > m ? a : m;
  }
  partSum[threadIdx.x] = sum;
  partMax[threadIdx.x] = m;
  STARLING_SYNCTHREADS();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partSum[threadIdx.x] += partSum[threadIdx.x + half];
      const uint32_t other = partMax[threadIdx.x + half];
      if (other > partMax[threadIdx.x]) partMax[threadIdx.x] = other;
    }
    STARLING_SYNCTHREADS();
  }
  if (threadIdx.x == 0 && lo < hi) {
    atomicAddDouble(sums + b, partSum[0]);
    atomicMaxU32(maxBits + b, partMax[0]);
  }
}

// Pass 1 for buckets of up to kWarpBucketMax elements: a warp per bucket (eight to a block of
// 256), its lanes striding over the bucket, reduced with shuffles; no atomics.
__global__ void starling_bucket_norms_warp(const float* x, uint64_t n, uint64_t bucket,
                                           double* sums, uint32_t* maxBits) {
  const uint64_t buckets = (n + bucket - 1) / bucket;
  const uint64_t warps = threadCount() / 32;
  const unsigned lane = threadIdx.x % 32;
  for (uint64_t b = globalThread() / 32; b < buckets; b += warps) {
    const uint64_t lo = b * bucket;
    const uint64_t hi = lo + bucket < n ? lo + bucket : n;
    double sum = 0.0;
    uint32_t m = 0;
    for (uint64_t i = lo + lane; i < hi; i += 32) {
      const double v = static_cast<double>(x[i]);
      sum += v * v;
      const uint32_t a = bitsOf(x[i]) & 0x7fffffffu;
      m = a > m ? a : m;
    }
    for (unsigned offset = 16; offset > 0; offset /= 2) {
      sum += shuffleDown(sum, offset);
      const uint32_t other = shuffleDown(m, offset);
      m = other > m ? other : m;
    }
    if (lane == 0) {
      sums[b] = sum;
      maxBits[b] = m;
    }
  }
}

// Pass 2: each bucket's scale, written into the payload's scale table: bucketScale<float> of
// compression/codecs/bits.cc, the rounded-up square root of the serial float64 sum of squares
// (or the largest |x| with `linf`, or when the sum is 0, infinite or NaN). The parallel sum lies
// within m u S of the exact S (m terms, u = 2^-53, all terms non-negative), and so does the
// serial one, so when the bounds 3 m u around it round to the same float32 that is the serial
// sum's scale too. Otherwise this thread sums a bucket of at most `serialLimit` elements
// serially; a larger one is left to the host (scale kNeedsSerial, cuda/codecs.cc), where a core
// sums it ten times faster than one GPU thread.
// The sums are then overwritten by each bucket's factor for pass 3 (scaledFactor): k or 1/scale,
// 0 where the bucket is not quantized.
constexpr uint32_t kNeedsSerial = 0xffffffffu;  // never a scale this kernel writes otherwise

__global__ void starling_bucket_scales(const float* x, uint64_t n, uint64_t bucket, double* sums,
                                       const uint32_t* maxBits, int linf, uint32_t s,
                                       int exponential, uint64_t serialLimit, uint32_t* scales) {
  const uint64_t buckets = (n + bucket - 1) / bucket;
  for (uint64_t b = globalThread(); b < buckets; b += threadCount()) {
    const uint64_t lo = b * bucket;
    const uint64_t hi = lo + bucket < n ? lo + bucket : n;
    const double sum = sums[b];
    uint32_t scale;
    if (!linf && sum - sum == 0.0 && sum > 0.0) {
      const double slack = 3.0 * static_cast<double>(hi - lo) * 0x1p-53;
      const float down = roundUpToFloat(sqrtRn(sum * (1.0 - slack)));
      const float up = roundUpToFloat(sqrtRn(sum * (1.0 + slack)));
      if (bitsOf(down) == bitsOf(up)) {
        scale = bitsOf(down);
      } else if (hi - lo > serialLimit) {
        scale = kNeedsSerial;
      } else {
        double serial = 0.0;
        for (uint64_t i = lo; i < hi; ++i) {
          const double v = static_cast<double>(x[i]);
          serial += v * v;
        }
        scale = bitsOf(roundUpToFloat(sqrtRn(serial)));
      }
    } else {
      const uint32_t m = maxBits[b];
      scale = m > 0x7f800000u ? 0x7fc00000u : m;  // a NaN anywhere: the quiet NaN
    }
    scales[b] = scale;
    sums[b] =
        scale == kNeedsSerial ? 0.0 : ew::scaledFactor(floatOfBits(scale), s, exponential != 0);
  }
}

// The code of x under its bucket's factor (0: not quantized), with rounding bits u; the float32
// or float64 path as scaled_codes.cc picks it.
__device__ uint32_t codeOf(float x, double factor, uint32_t s, uint32_t maxR, uint32_t signBit,
                           bool exponential, float belowFactorFloat, double belowFactor,
                           uint32_t u) {
  if (factor == 0.0) return 0;
  const double v = static_cast<double>(x);
  if (exponential) {
    if (ew::exponentialInFloat(factor, s)) {
      return ew::exponentialCodeFloat(x, static_cast<float>(factor), s, belowFactorFloat, u,
                                      signBit);
    }
    return ew::exponentialCodeDouble(v < 0.0 ? -v : v, x < 0.0f, factor, s, belowFactor, u,
                                     signBit);
  }
  if (ew::uniformInFloat(factor, s))
    return ew::uniformCodeFloat(x, static_cast<float>(factor), maxR, u, signBit);
  return ew::uniformCodeDouble(v < 0.0 ? -v : v, x < 0.0f, factor, maxR, u, signBit);
}

// Pass 3: codes (uniform levels: QSGD; exponential: NUQSGD, natural dithering) and packing in
// one: thread t writes stream byte t, computing the codes of the elements whose bits fall in it
// (a code that straddles two bytes is computed by both threads, with the same rounding bits, so
// the same code). Element i rounds with counterUniform16(seed, i).
__global__ void starling_scaled_codes(const float* x, uint64_t n, uint64_t bucket,
                                      const double* factors, uint32_t s, uint32_t levelBits,
                                      int exponential, uint64_t seed, uint8_t* stream,
                                      uint64_t streamBytes) {
  const uint32_t width = levelBits + 1;
  const uint32_t signBit = 1u << levelBits;
  const uint32_t maxR = s << ew::kRoundingBits;
  const double belowFactor = ew::exponentialBelowFactor(s);
  const float belowFactorFloat = s <= 31 ? ew::exponentialBelowFactorFloat(s) : 0.0f;
  for (uint64_t byte = globalThread(); byte < streamBytes; byte += threadCount()) {
    const uint64_t firstBit = 8 * byte;
    const uint64_t first = firstBit / width;
    uint64_t last = (firstBit + 7) / width;
    if (last >= n) last = n - 1;
    uint32_t acc = 0;
    for (uint64_t i = first; i <= last; ++i) {
      const uint32_t code = codeOf(x[i], factors[i / bucket], s, maxR, signBit, exponential != 0,
                                   belowFactorFloat, belowFactor, ew::counterUniform16(seed, i));
      const int64_t shift = static_cast<int64_t>(i * width) - static_cast<int64_t>(firstBit);
      acc |= shift >= 0 ? code << shift : code >> -shift;
    }
    stream[byte] = static_cast<uint8_t>(acc & 0xffu);
  }
}

// Pass 3 for codes of 2, 4 or 8 bits, which never straddle a byte: thread t writes the 32-bit
// word t of the stream (32 / width codes), one generator word per four elements. The stream
// starts 4-byte aligned (after the 4-byte scales) and its buffer has room for a whole last word;
// codes past n are 0, so the padding bits are too.
__global__ void starling_scaled_codes_words(const float* x, uint64_t n, uint64_t bucket,
                                            const double* factors, uint32_t s, uint32_t levelBits,
                                            int exponential, uint64_t seed, uint32_t* stream,
                                            uint64_t streamWords) {
  const uint32_t width = levelBits + 1;
  const uint32_t perWord = 32 / width;
  const uint32_t signBit = 1u << levelBits;
  const uint32_t maxR = s << ew::kRoundingBits;
  const double belowFactor = ew::exponentialBelowFactor(s);
  const float belowFactorFloat = s <= 31 ? ew::exponentialBelowFactorFloat(s) : 0.0f;
  for (uint64_t w = globalThread(); w < streamWords; w += threadCount()) {
    const uint64_t first = w * perWord;
    uint32_t acc = 0;
    uint64_t bits = 0;
    for (uint32_t j = 0; j < perWord; ++j) {
      const uint64_t i = first + j;
      if (i >= n) break;
      if (j % 4 == 0 || j == 0) bits = ew::counterWord(seed, i);
      const uint32_t u = static_cast<uint32_t>((bits >> (16 * (i & 3))) & 0xffffu);
      const uint32_t code = codeOf(x[i], factors[i / bucket], s, maxR, signBit, exponential != 0,
                                   belowFactorFloat, belowFactor, u);
      acc |= code << (j * width);
    }
    stream[w] = acc;
  }
}

// Decode (the frame was validated on the host: levels <= s, no negative zero, zero padding):
// element i is code i of the stream under its bucket's scale, the float64 magnitude of
// elementwise.h rounded once to float32, as the CPU decoder's table holds it.
__global__ void starling_scaled_decode(const uint32_t* scales, const uint8_t* stream, uint64_t n,
                                       uint64_t bucket, uint32_t s, uint32_t levelBits,
                                       int exponential, float* out) {
  const uint32_t width = levelBits + 1;
  const uint32_t signBit = 1u << levelBits;
  for (uint64_t i = globalThread(); i < n; i += threadCount()) {
    const uint64_t bit = i * width;
    uint32_t word = stream[bit / 8];
    if ((bit % 8) + width > 8) word |= static_cast<uint32_t>(stream[bit / 8 + 1]) << 8;
    const uint32_t code = (word >> (bit % 8)) & ((1u << width) - 1);
    const double scale = static_cast<double>(floatOfBits(scales[i / bucket]));
    const uint32_t level = code & (signBit - 1);
    const double m = exponential != 0 ? ew::exponentialMagnitude(scale, level, s)
                                      : ew::uniformMagnitude(scale, level, s);
    out[i] = static_cast<float>((code & signBit) != 0 ? -m : m);
  }
}

// ---------------------------------------------------------------------------------------------
// The gossip combine in difference form (optim/combine.h), for DSGD, exact diffusion, gradient
// tracking and plain gossip: out_k = start_k + sum_j c_j (m_jk - self_k), each element's terms
// in neighbour order. Up to kCombineMax neighbours a launch; the host chains launches (the next
// one's start is this one's out) for more, which adds the terms in the same order.

struct CombineF32 {
  const float* m[16];
  float c[16];
  uint32_t count;
};
struct CombineF64 {
  const double* m[16];
  double c[16];
  uint32_t count;
};

__global__ void starling_combine_f32(float* out, const float* start, const float* self,
                                     CombineF32 nb, uint64_t n) {
  for (uint64_t k = globalThread(); k < n; k += threadCount()) {
    const float sk = self[k];
    float acc = start[k];
    for (uint32_t j = 0; j < nb.count; ++j) acc = ew::combineTerm(acc, nb.c[j], nb.m[j][k], sk);
    out[k] = acc;
  }
}

// flag <- 1 when some |x_k| is not within limit (NaN never is): the engine's divergence check of
// a model in device memory (optim/device_gossip.h).
__global__ void starling_any_beyond(const float* x, uint64_t n, float limit, uint32_t* flag) {
  bool beyond = false;
  for (uint64_t k = globalThread(); k < n; k += threadCount()) {
    const float v = x[k];
    beyond |= !(v <= limit && v >= -limit);
  }
  if (beyond) atomicMaxU32(flag, 1u);
}

__global__ void starling_combine_f64(double* out, const double* start, const double* self,
                                     CombineF64 nb, uint64_t n) {
  for (uint64_t k = globalThread(); k < n; k += threadCount()) {
    const double sk = self[k];
    double acc = start[k];
    for (uint32_t j = 0; j < nb.count; ++j) acc = ew::combineTerm(acc, nb.c[j], nb.m[j][k], sk);
    out[k] = acc;
  }
}

}  // extern "C"

// ---------------------------------------------------------------------------------------------
// CHOCO-SGD with a static W (optim/choco.cc): prepare's local and consensus steps, writing the
// difference the node sends; absorb's update of x_hat and s = sum_j w_ij x_hat_j.

namespace {

template <typename T>
__device__ void chocoPrepare(T* x, const T* g, const T* s, const T* hat, T* out, T eta, T gamma,
                             uint64_t n) {
  for (uint64_t k = globalThread(); k < n; k += threadCount()) {
    const T v = oe::chocoStep(x[k], g[k], s[k], hat[k], eta, gamma);
    x[k] = v;
    out[k] = v - hat[k];
  }
}

template <typename T, typename Neighbours>
__device__ void chocoAbsorb(T* hat, T* s, const T* own, T self, const Neighbours& nb, uint64_t n) {
  for (uint64_t k = globalThread(); k < n; k += threadCount()) {
    T h = hat[k], acc = s[k];
    oe::chocoAbsorbOwn(h, acc, own[k], self);
    for (uint32_t j = 0; j < nb.count; ++j) acc = oe::chocoAbsorbNeighbour(acc, nb.c[j], nb.m[j][k]);
    hat[k] = h;
    s[k] = acc;
  }
}

// Further neighbours of a node with more than 16: only s changes.
template <typename T, typename Neighbours>
__device__ void chocoAbsorbMore(T* s, const Neighbours& nb, uint64_t n) {
  for (uint64_t k = globalThread(); k < n; k += threadCount()) {
    T acc = s[k];
    for (uint32_t j = 0; j < nb.count; ++j) acc = oe::chocoAbsorbNeighbour(acc, nb.c[j], nb.m[j][k]);
    s[k] = acc;
  }
}

// LEAD / Prox-LEAD with a static W (optim/lead.cc), for up to 16 neighbours: start, prepare,
// and absorb (the pull sum_j w_ij (q_j - q_i), the dual D, e, H, then Z and X = prox(Z)).
template <typename T>
struct LeadState {
  T *x, *z, *g, *d, *dLost, *e, *h;
};

template <typename T>
__device__ void leadStart(LeadState<T> st, T eta, T threshold, T lo, T hi, uint64_t n) {
  for (uint64_t k = globalThread(); k < n; k += threadCount()) {
    const T z = oe::leadStart(st.x[k], st.g[k], eta);
    st.z[k] = z;
    st.x[k] = oe::proxL1Box(z, threshold, lo, hi);
  }
}

template <typename T>
__device__ void leadPrepare(LeadState<T> st, T* out, T eta, uint64_t n) {
  for (uint64_t k = globalThread(); k < n; k += threadCount()) {
    out[k] = oe::leadSend(st.x[k], st.z[k], st.g[k], st.d[k], st.h[k], eta);
  }
}

template <typename T, typename Neighbours>
__device__ void leadAbsorb(LeadState<T> st, const T* own, const Neighbours& nb, T eta, T step, T a,
                           T threshold, T lo, T hi, uint64_t n) {
  for (uint64_t k = globalThread(); k < n; k += threadCount()) {
    const T q = own[k];
    T pull = 0;
    for (uint32_t j = 0; j < nb.count; ++j) pull = oe::pullTerm(pull, nb.c[j], nb.m[j][k], q);
    T d = st.d[k], dLost = st.dLost[k], e = st.e[k], h = st.h[k];
    oe::leadFinish(q, q + pull, d, dLost, e, h, step, a);
    st.d[k] = d;
    st.dLost[k] = dLost;
    st.e[k] = e;
    st.h[k] = h;
    const T z = oe::leadStep(st.x[k], st.g[k], d, eta);
    st.z[k] = z;
    st.x[k] = oe::proxL1Box(z, threshold, lo, hi);
  }
}

}  // namespace

extern "C" {

__global__ void starling_lead_start_f32(LeadState<float> st, float eta, float threshold, float lo,
                                        float hi, uint64_t n) {
  leadStart(st, eta, threshold, lo, hi, n);
}
__global__ void starling_lead_start_f64(LeadState<double> st, double eta, double threshold,
                                        double lo, double hi, uint64_t n) {
  leadStart(st, eta, threshold, lo, hi, n);
}
__global__ void starling_lead_prepare_f32(LeadState<float> st, float* out, float eta, uint64_t n) {
  leadPrepare(st, out, eta, n);
}
__global__ void starling_lead_prepare_f64(LeadState<double> st, double* out, double eta,
                                          uint64_t n) {
  leadPrepare(st, out, eta, n);
}
__global__ void starling_lead_absorb_f32(LeadState<float> st, const float* own, CombineF32 nb,
                                         float eta, float step, float a, float threshold, float lo,
                                         float hi, uint64_t n) {
  leadAbsorb(st, own, nb, eta, step, a, threshold, lo, hi, n);
}
__global__ void starling_lead_absorb_f64(LeadState<double> st, const double* own, CombineF64 nb,
                                         double eta, double step, double a, double threshold,
                                         double lo, double hi, uint64_t n) {
  leadAbsorb(st, own, nb, eta, step, a, threshold, lo, hi, n);
}

__global__ void starling_choco_prepare_f32(float* x, const float* g, const float* s,
                                           const float* hat, float* out, float eta, float gamma,
                                           uint64_t n) {
  chocoPrepare(x, g, s, hat, out, eta, gamma, n);
}
__global__ void starling_choco_prepare_f64(double* x, const double* g, const double* s,
                                           const double* hat, double* out, double eta,
                                           double gamma, uint64_t n) {
  chocoPrepare(x, g, s, hat, out, eta, gamma, n);
}
__global__ void starling_choco_absorb_f32(float* hat, float* s, const float* own, float self,
                                          CombineF32 nb, uint64_t n) {
  chocoAbsorb(hat, s, own, self, nb, n);
}
__global__ void starling_choco_absorb_f64(double* hat, double* s, const double* own, double self,
                                          CombineF64 nb, uint64_t n) {
  chocoAbsorb(hat, s, own, self, nb, n);
}
__global__ void starling_choco_absorb_more_f32(float* s, CombineF32 nb, uint64_t n) {
  chocoAbsorbMore(s, nb, n);
}
__global__ void starling_choco_absorb_more_f64(double* s, CombineF64 nb, uint64_t n) {
  chocoAbsorbMore(s, nb, n);
}

}  // extern "C"

// Top-k's kernels (their own file, the same PTX module).
#include "cuda/kernels_topk.cuh"
#include "cuda/kernels_sketch.cuh"
