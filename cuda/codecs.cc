// GPU codecs: the frame layout on the host, the kernels (cuda/kernels.cu) for the payload.
#include "cuda/codecs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/elementwise.h"
#include "compression/codecs/wire.h"

namespace starling::cuda {
namespace {

using compression::CodecId;
using compression::CompressorSpec;
using Kind = CompressorSpec::Kind;
namespace codecs = compression::codecs;
namespace ew = compression::elementwise;

// docs/wire_format.md: qsgd's params are bits, the linf flag and the bucket (u32); nuqsgd's bits
// and the bucket; natural dithering's levels and the linf flag (one bucket, the whole vector).
constexpr size_t kQsgdParamsBytes = 6;
constexpr size_t kNuqsgdParamsBytes = 5;
constexpr size_t kDitheringParamsBytes = 2;
constexpr int kMaxDitheringLevels = 30;

bool scaledKind(Kind k) {
  return k == Kind::kQsgd || k == Kind::kNuqsgd || k == Kind::kNaturalDithering;
}

CodecId codecIdOf(Kind k) {
  switch (k) {
    case Kind::kFp16:
      return CodecId::kFp16;
    case Kind::kBf16:
      return CodecId::kBf16;
    case Kind::kQsgd:
      return CodecId::kQsgd;
    case Kind::kNuqsgd:
      return CodecId::kNuqsgd;
    default:
      return CodecId::kNaturalDithering;
  }
}

size_t paramsBytesOf(Kind k) {
  return k == Kind::kQsgd               ? kQsgdParamsBytes
         : k == Kind::kNuqsgd           ? kNuqsgdParamsBytes
         : k == Kind::kNaturalDithering ? kDitheringParamsBytes
                                        : 0;
}

// The scaled codes of a spec for n elements, as the CPU codecs lay them out.
codecs::ScaledCodes scaledCodes(const CompressorSpec& spec, uint64_t n) {
  codecs::ScaledCodes q;
  if (spec.kind == Kind::kQsgd) {
    q.levels = codecs::LevelSet::kUniform;
    q.s = (1u << (spec.bits - 1)) - 1;
    q.levelBits = spec.bits - 1;
    q.bucket = spec.bucket;
    q.linf = spec.linf;
  } else {
    q.levels = codecs::LevelSet::kExponential;
    q.s = spec.kind == Kind::kNuqsgd ? (1u << (spec.bits - 1)) - 1
                                     : static_cast<uint32_t>(spec.levels);
    q.levelBits = std::bit_width(q.s);
    q.bucket = spec.kind == Kind::kNuqsgd ? spec.bucket : std::max<uint64_t>(n, 1);
    q.linf = spec.kind == Kind::kNaturalDithering && spec.linf;
  }
  return q;
}

void writeParams(const CompressorSpec& spec, std::byte* params) {
  if (spec.kind == Kind::kQsgd) {
    params[0] = static_cast<std::byte>(spec.bits);
    params[1] = static_cast<std::byte>(spec.linf ? 1 : 0);
    codecs::storeLe<uint32_t>(params + 2, static_cast<uint32_t>(spec.bucket));
  } else if (spec.kind == Kind::kNuqsgd) {
    params[0] = static_cast<std::byte>(spec.bits);
    codecs::storeLe<uint32_t>(params + 1, static_cast<uint32_t>(spec.bucket));
  } else if (spec.kind == Kind::kNaturalDithering) {
    params[0] = static_cast<std::byte>(spec.levels);
    params[1] = static_cast<std::byte>(spec.linf ? 1 : 0);
  }
}

// The spec a frame's params describe, checked as the CPU decoders check them.
core::Result<CompressorSpec> specOfParams(Kind kind, std::span<const std::byte> params) {
  CompressorSpec framed;
  framed.kind = kind;
  if (kind == Kind::kQsgd || kind == Kind::kNuqsgd) {
    const char* name = kind == Kind::kQsgd ? "qsgd" : "nuqsgd";
    framed.bits = std::to_integer<int>(params[0]);
    if (framed.bits < 2 || framed.bits > 8)
      return core::corruption(std::string(name) + " bits " + std::to_string(framed.bits));
    if (kind == Kind::kQsgd) {
      const int linf = std::to_integer<int>(params[1]);
      if (linf > 1) return core::corruption("qsgd norm flag " + std::to_string(linf));
      framed.linf = linf == 1;
    }
    framed.bucket = codecs::loadLe<uint32_t>(params.data() + (kind == Kind::kQsgd ? 2 : 1));
    if (framed.bucket == 0) return core::corruption(std::string(name) + " bucket size 0");
  } else {
    framed.levels = std::to_integer<int>(params[0]);
    const int linf = std::to_integer<int>(params[1]);
    if (framed.levels < 1 || framed.levels > kMaxDitheringLevels) {
      return core::corruption("natural dithering levels " + std::to_string(framed.levels));
    }
    if (linf > 1) return core::corruption("natural dithering norm flag " + std::to_string(linf));
    framed.linf = linf == 1;
  }
  return framed;
}

// A bucket scale that needs the serial sum (kernels.cu's kNeedsSerial), and the largest bucket
// one GPU thread sums serially; larger ones are summed on the host.
constexpr uint32_t kNeedsSerialScale = 0xffffffffu;
constexpr uint64_t kSerialOnDevice = 65536;
// Buckets summed by one warp each (pass 1); larger ones by blocks.
constexpr uint64_t kWarpBucketMax = 4096;

// Whether 16-byte vector accesses to both addresses are aligned (the kernels' vec4 path).
int aligned16(DevicePtr a, DevicePtr b) { return (a % 16 == 0 && b % 16 == 0) ? 1 : 0; }

}  // namespace

bool gpuSupports(const CompressorSpec& spec) {
  switch (spec.kind) {
    case Kind::kFp16:
    case Kind::kBf16:
      return true;
    case Kind::kQsgd:
    case Kind::kNuqsgd:
      return spec.bits >= 2 && spec.bits <= 8 && spec.bucket >= 1 && spec.bucket <= 0xffffffffu;
    case Kind::kNaturalDithering:
      return spec.levels >= 1 && spec.levels <= kMaxDitheringLevels;
    case Kind::kTopK:
      return true;
    case Kind::kCountSketch:
      // The median's comparison networks cover up to 7 rows (elementwise.h's sketchMedian).
      return !spec.errorFeedback && (spec.meanEstimate || spec.rows <= 7);
    default:
      return false;
  }
}

core::Status GpuCodecs::reservePinned(PinnedBuffer& b, size_t bytes) {
  if (b.bytes() >= bytes) return core::Status::ok();
  Gpu::Scope scope(gpu_);
  b = PinnedBuffer();
  auto fresh = PinnedBuffer::allocate(bytes);
  if (!fresh) return fresh.status();
  b = std::move(*fresh);
  return core::Status::ok();
}

core::Status GpuCodecs::reserve(DeviceBuffer& b, size_t bytes) {
  if (b.bytes() >= bytes) return core::Status::ok();
  Gpu::Scope scope(gpu_);
  b = DeviceBuffer();
  auto fresh = DeviceBuffer::allocate(std::max<size_t>(bytes, 256));
  if (!fresh) return fresh.status();
  b = std::move(*fresh);
  return core::Status::ok();
}

core::Result<std::span<const std::byte>> GpuCodecs::encode(const CompressorSpec& spec, DevicePtr x,
                                                           uint64_t n, uint64_t seed) {
  if (!gpuSupports(spec)) {
    return core::invalidArgument("this codec has no GPU encoder (fp16, bf16, qsgd, nuqsgd, "
                                 "natural_dithering, topk and countsketch have)");
  }
  if (spec.kind == Kind::kTopK) return encodeTopK(spec, x, n);
  if (spec.kind == Kind::kCountSketch) return encodeCountSketch(spec, x, n, seed);
  const bool scaled = scaledKind(spec.kind);
  const codecs::ScaledCodes q = scaledCodes(spec, n);
  std::byte params[kQsgdParamsBytes] = {};
  writeParams(spec, params);
  const std::span<const std::byte> paramSpan(params, paramsBytesOf(spec.kind));
  // Natural dithering of the empty vector: its norm alone, 0.
  const bool emptyDithering = spec.kind == Kind::kNaturalDithering && n == 0;
  const size_t payloadBytes = !scaled ? 2 * n : emptyDithering ? 4 : q.payloadBytes(n);
  const size_t frameBytes = codecs::frameBytesFor(paramSpan.size(), payloadBytes);
  STARLING_RETURN_IF_ERROR(reservePinned(staging_, frameBytes));
  codecs::FrameOut frame(std::span<std::byte>(staging_.data(), frameBytes));
  std::byte* payload = frame.begin(codecIdOf(spec.kind), compression::ElementType::kFloat32, n,
                                   paramSpan, payloadBytes);
  if (payload == nullptr) return frame.status();
  if (emptyDithering) {
    codecs::storeLe<uint32_t>(payload, 0);
  } else if (n > 0) {
    auto written = encodePayload(spec, x, n, seed);
    if (!written) return written.status();
    STARLING_RETURN_IF_ERROR(gpu_.copyToHost(payload, payload_.ptr(), payloadBytes));
    STARLING_RETURN_IF_ERROR(gpu_.sync());
  }
  frame.seal();
  return std::span<const std::byte>(frame.frame());
}

core::Result<size_t> GpuCodecs::encodePayload(const CompressorSpec& spec, DevicePtr x, uint64_t n,
                                              uint64_t seed) {
  if (!gpuSupports(spec) || n == 0 || spec.kind == Kind::kCountSketch)
    return core::invalidArgument("encodePayload: no GPU encoder, n = 0, or countsketch (whose "
                                 "frame is its table: encode)");
  if (spec.kind == Kind::kTopK) return encodeTopKPayload(spec, x, n);
  const codecs::ScaledCodes q = scaledCodes(spec, n);
  const size_t payloadBytes = scaledKind(spec.kind) ? q.payloadBytes(n) : 2 * n;
  // Room for a whole last 32-bit word of codes (starling_scaled_codes_words).
  STARLING_RETURN_IF_ERROR(reserve(payload_, payloadBytes + 8));
  DevicePtr out = payload_.ptr();
  if (!scaledKind(spec.kind)) {
    int vec4 = aligned16(x, out);
    void* args[] = {&x, &out, &n, &vec4};
    STARLING_RETURN_IF_ERROR(
        gpu_.launch(spec.kind == Kind::kFp16 ? "starling_encode_f16" : "starling_encode_bf16",
                    vec4 != 0 ? n / 4 + 3 : n, args));
  } else {
    STARLING_RETURN_IF_ERROR(encodeScaled(q, x, n, seed, payloadBytes));
  }
  return payloadBytes;
}

core::Status GpuCodecs::encodeScaled(const codecs::ScaledCodes& q, DevicePtr x, uint64_t n,
                                     uint64_t seed, size_t payloadBytes) {
  uint64_t bucket = q.bucket;
  const uint64_t buckets = q.buckets(n);
  if (n == 0) return core::Status::ok();
  STARLING_RETURN_IF_ERROR(reserve(sums_, buckets * sizeof(double)));
  STARLING_RETURN_IF_ERROR(reserve(maxBits_, buckets * sizeof(uint32_t)));
  DevicePtr sums = sums_.ptr(), maxBits = maxBits_.ptr(), scales = payload_.ptr();
  STARLING_RETURN_IF_ERROR(gpu_.zero(sums, buckets * sizeof(double)));
  STARLING_RETURN_IF_ERROR(gpu_.zero(maxBits, buckets * sizeof(uint32_t)));
  // Pass 1: a warp per bucket for small buckets; else a block per chunk of at most 16384
  // elements of one bucket, added up with atomics.
  if (bucket <= kWarpBucketMax) {
    void* args[] = {&x, &n, &bucket, &sums, &maxBits};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_bucket_norms_warp", 32 * buckets, args));
  } else {
    uint64_t chunk = std::min<uint64_t>(bucket, 16384);
    uint64_t chunksPerBucket = (bucket + chunk - 1) / chunk;
    void* args[] = {&x, &n, &bucket, &chunk, &chunksPerBucket, &sums, &maxBits};
    Gpu::Scope scope(gpu_);
    STARLING_RETURN_IF_ERROR(
        gpu_.launchBlocks("starling_bucket_norms", buckets * chunksPerBucket, args, 256));
  }
  // Pass 2: scales, and the factors in place of the sums.
  int linf = q.linf ? 1 : 0;
  uint32_t s = q.s;
  int exponential = q.levels == codecs::LevelSet::kExponential ? 1 : 0;
  uint64_t serialLimit = kSerialOnDevice;
  {
    void* args[] = {&x,    &n, &bucket,      &sums,        &maxBits,
                    &linf, &s, &exponential, &serialLimit, &scales};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_bucket_scales", buckets, args));
  }
  if (bucket > kSerialOnDevice && linf == 0) {
    // Buckets whose scale needs the serial sum and are too large for one GPU thread: on the host.
    std::vector<uint32_t> scaleBits(buckets);
    STARLING_RETURN_IF_ERROR(gpu_.copyToHost(scaleBits.data(), scales, 4 * buckets));
    STARLING_RETURN_IF_ERROR(gpu_.sync());
    std::vector<float> part;
    for (uint64_t b = 0; b < buckets; ++b) {
      if (scaleBits[b] != kNeedsSerialScale) continue;
      const uint64_t lo = b * bucket, hi = std::min<uint64_t>(n, lo + bucket);
      part.resize(hi - lo);
      STARLING_RETURN_IF_ERROR(gpu_.copyToHost(part.data(), x + 4 * lo, 4 * (hi - lo)));
      STARLING_RETURN_IF_ERROR(gpu_.sync());
      double serial = 0.0;
      for (float v : part) serial += static_cast<double>(v) * static_cast<double>(v);
      const float scale = codecs::roundUpToFloat(std::sqrt(serial));
      const uint32_t bits = std::bit_cast<uint32_t>(scale);
      const double factor = ew::scaledFactor(scale, s, exponential != 0);
      STARLING_RETURN_IF_ERROR(gpu_.copyToDevice(scales + 4 * b, &bits, 4));
      STARLING_RETURN_IF_ERROR(gpu_.copyToDevice(sums + 8 * b, &factor, 8));
      STARLING_RETURN_IF_ERROR(gpu_.sync());
      ++serialOnHost_;
    }
  }
  // Pass 3: codes and packing.
  uint32_t levelBits = static_cast<uint32_t>(q.levelBits);
  DevicePtr stream = scales + 4 * buckets;
  const uint64_t streamBytes = payloadBytes - 4 * buckets;
  if (8 % (levelBits + 1) == 0) {
    uint64_t streamWords = (streamBytes + 3) / 4;  // the payload buffer has room for the last
    void* args[] = {&x,         &n,           &bucket, &sums,   &s,
                    &levelBits, &exponential, &seed,   &stream, &streamWords};
    return gpu_.launch("starling_scaled_codes_words", streamWords, args);
  }
  uint64_t bytes = streamBytes;
  void* args[] = {&x, &n, &bucket, &sums, &s, &levelBits, &exponential, &seed, &stream, &bytes};
  return gpu_.launch("starling_scaled_codes", streamBytes, args);
}

core::Status GpuCodecs::decode(const CompressorSpec& spec, std::span<const std::byte> frame,
                               DevicePtr out, uint64_t n) {
  return decodeOrCheck(spec, frame, out, n, /*onDevice=*/true);
}

core::Status GpuCodecs::check(const CompressorSpec& spec, std::span<const std::byte> frame,
                              uint64_t n) {
  return decodeOrCheck(spec, frame, 0, n, /*onDevice=*/false);
}

core::Status GpuCodecs::decodeOrCheck(const CompressorSpec& spec,
                                      std::span<const std::byte> frame, DevicePtr out,
                                      uint64_t n, bool onDevice) {
  if (!gpuSupports(spec)) {
    return core::invalidArgument("this codec has no GPU decoder (fp16, bf16, qsgd, nuqsgd, "
                                 "natural_dithering, topk and countsketch have)");
  }
  if (spec.kind == Kind::kCountSketch) return decodeCountSketch(spec, frame, out, n, onDevice);
  if (spec.kind == Kind::kTopK) {
    if (onDevice) return decodeTopK(frame, out, n);
    std::vector<uint32_t> indices;
    std::vector<float> values;
    return codecs::readTopKFrame(frame, n, indices, values);
  }
  const bool scaled = scaledKind(spec.kind);
  auto v = codecs::openFrame<float>(frame, codecIdOf(spec.kind), n, paramsBytesOf(spec.kind));
  if (!v) return v.status();
  codecs::ScaledCodes q;
  if (!scaled) {
    if (v->payload.size() != 2 * n) {
      return core::corruption("16-bit payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(n) + " elements");
    }
  } else {
    // The frame's own params, checked as the CPU decoder checks them, then its codes.
    auto framed = specOfParams(spec.kind, v->params);
    if (!framed) return framed.status();
    q = scaledCodes(*framed, n);
    if (spec.kind == Kind::kNaturalDithering && n == 0) {
      if (v->payload.size() != 4) return core::corruption("natural dithering payload length");
      if (!codecs::validScale(std::bit_cast<float>(codecs::loadLe<uint32_t>(v->payload.data())))) {
        return core::corruption("natural dithering norm is negative, NaN or infinite");
      }
      return core::Status::ok();
    }
    const char* name = spec.kind == Kind::kQsgd     ? "qsgd"
                       : spec.kind == Kind::kNuqsgd ? "nuqsgd"
                                                    : "natural dithering";
    STARLING_RETURN_IF_ERROR(codecs::checkScaledCodes(v->payload, q, n, name));
  }
  if (n == 0 || !onDevice) return core::Status::ok();
  STARLING_RETURN_IF_ERROR(reserve(payload_, v->payload.size()));
  DevicePtr in = payload_.ptr();
  STARLING_RETURN_IF_ERROR(gpu_.copyToDevice(in, v->payload.data(), v->payload.size()));
  if (!scaled) {
    int vec4 = aligned16(in, out);
    void* args[] = {&in, &out, &n, &vec4};
    STARLING_RETURN_IF_ERROR(
        gpu_.launch(spec.kind == Kind::kFp16 ? "starling_decode_f16" : "starling_decode_bf16",
                    vec4 != 0 ? n / 4 + 3 : n, args));
  } else {
    uint64_t bucket = q.bucket;
    DevicePtr stream = in + 4 * q.buckets(n);
    uint32_t s = q.s;
    uint32_t levelBits = static_cast<uint32_t>(q.levelBits);
    int exponential = q.levels == codecs::LevelSet::kExponential ? 1 : 0;
    void* args[] = {&in, &stream, &n, &bucket, &s, &levelBits, &exponential, &out};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_scaled_decode", n, args));
  }
  return gpu_.sync();
}

namespace {
// The kernels' parameter blocks (cuda/kernels.cu, CombineF32 / CombineF64), laid out alike.
template <typename T>
struct CombineParams {
  DevicePtr m[16];
  T c[16];
  uint32_t count;
};

template <typename T>
core::Status combineChain(Gpu& gpu, const char* kernel, DevicePtr out, DevicePtr start,
                          DevicePtr self, std::span<const DevicePtr> m, std::span<const T> c,
                          uint64_t n) {
  if (m.size() != c.size()) return core::invalidArgument("combine: one weight per neighbour");
  size_t j = 0;
  do {  // at least one launch: with no neighbours out = start
    CombineParams<T> p{};
    p.count = static_cast<uint32_t>(std::min<size_t>(16, m.size() - j));
    for (uint32_t t = 0; t < p.count; ++t) {
      p.m[t] = m[j + t];
      p.c[t] = c[j + t];
    }
    void* args[] = {&out, &start, &self, &p, &n};
    STARLING_RETURN_IF_ERROR(gpu.launch(kernel, n, args));
    start = out;  // the next launch continues each element's sum
    j += p.count;
  } while (j < m.size());
  return gpu.sync();
}
}  // namespace

core::Status GpuCodecs::combine(DevicePtr out, DevicePtr start, DevicePtr self,
                                std::span<const DevicePtr> m, std::span<const float> c,
                                uint64_t n) {
  return combineChain<float>(gpu_, "starling_combine_f32", out, start, self, m, c, n);
}
core::Status GpuCodecs::combine(DevicePtr out, DevicePtr start, DevicePtr self,
                                std::span<const DevicePtr> m, std::span<const double> c,
                                uint64_t n) {
  return combineChain<double>(gpu_, "starling_combine_f64", out, start, self, m, c, n);
}

namespace {
template <typename T>
const char* suffixed(const char* f32, const char* f64) {
  return sizeof(T) == 4 ? f32 : f64;
}

template <typename T>
core::Status chocoPrepareT(Gpu& gpu, DevicePtr x, DevicePtr g, DevicePtr s, DevicePtr hat,
                           DevicePtr out, T eta, T gamma, uint64_t n) {
  void* args[] = {&x, &g, &s, &hat, &out, &eta, &gamma, &n};
  STARLING_RETURN_IF_ERROR(
      gpu.launch(suffixed<T>("starling_choco_prepare_f32", "starling_choco_prepare_f64"), n, args));
  return gpu.sync();
}

template <typename T>
core::Status chocoAbsorbT(Gpu& gpu, DevicePtr hat, DevicePtr s, DevicePtr own, T self,
                          std::span<const DevicePtr> m, std::span<const T> w, uint64_t n) {
  if (m.size() != w.size()) return core::invalidArgument("chocoAbsorb: one weight per neighbour");
  size_t j = 0;
  bool first = true;
  do {  // the first launch also adds own; further ones (more than 16 neighbours) only s
    CombineParams<T> p{};
    p.count = static_cast<uint32_t>(std::min<size_t>(16, m.size() - j));
    for (uint32_t t = 0; t < p.count; ++t) {
      p.m[t] = m[j + t];
      p.c[t] = w[j + t];
    }
    if (first) {
      void* args[] = {&hat, &s, &own, &self, &p, &n};
      STARLING_RETURN_IF_ERROR(gpu.launch(
          suffixed<T>("starling_choco_absorb_f32", "starling_choco_absorb_f64"), n, args));
    } else {
      void* args[] = {&s, &p, &n};
      STARLING_RETURN_IF_ERROR(gpu.launch(
          suffixed<T>("starling_choco_absorb_more_f32", "starling_choco_absorb_more_f64"), n,
          args));
    }
    first = false;
    j += p.count;
  } while (j < m.size());
  return gpu.sync();
}
}  // namespace

core::Status GpuCodecs::chocoPrepare(DevicePtr x, DevicePtr g, DevicePtr s, DevicePtr hat,
                                     DevicePtr out, float eta, float gamma, uint64_t n) {
  return chocoPrepareT<float>(gpu_, x, g, s, hat, out, eta, gamma, n);
}
core::Status GpuCodecs::chocoPrepare(DevicePtr x, DevicePtr g, DevicePtr s, DevicePtr hat,
                                     DevicePtr out, double eta, double gamma, uint64_t n) {
  return chocoPrepareT<double>(gpu_, x, g, s, hat, out, eta, gamma, n);
}
core::Status GpuCodecs::chocoAbsorb(DevicePtr hat, DevicePtr s, DevicePtr own, float self,
                                    std::span<const DevicePtr> m, std::span<const float> w,
                                    uint64_t n) {
  return chocoAbsorbT<float>(gpu_, hat, s, own, self, m, w, n);
}
core::Status GpuCodecs::chocoAbsorb(DevicePtr hat, DevicePtr s, DevicePtr own, double self,
                                    std::span<const DevicePtr> m, std::span<const double> w,
                                    uint64_t n) {
  return chocoAbsorbT<double>(gpu_, hat, s, own, self, m, w, n);
}

template <typename T>
core::Status GpuCodecs::leadStart(const LeadBuffers<T>& b, T eta, const optim::ProxParams<T>& prox,
                                  uint64_t n) {
  LeadBuffers<T> st = b;
  T threshold = prox.threshold, lo = prox.lo, hi = prox.hi;
  void* args[] = {&st, &eta, &threshold, &lo, &hi, &n};
  STARLING_RETURN_IF_ERROR(
      gpu_.launch(suffixed<T>("starling_lead_start_f32", "starling_lead_start_f64"), n, args));
  return gpu_.sync();
}

template <typename T>
core::Status GpuCodecs::leadPrepare(const LeadBuffers<T>& b, DevicePtr out, T eta, uint64_t n) {
  LeadBuffers<T> st = b;
  void* args[] = {&st, &out, &eta, &n};
  STARLING_RETURN_IF_ERROR(
      gpu_.launch(suffixed<T>("starling_lead_prepare_f32", "starling_lead_prepare_f64"), n, args));
  return gpu_.sync();
}

template <typename T>
core::Status GpuCodecs::leadAbsorb(const LeadBuffers<T>& b, DevicePtr own,
                                   std::span<const DevicePtr> m, std::span<const T> w, T eta,
                                   T step, T a, const optim::ProxParams<T>& prox, uint64_t n) {
  if (m.size() != w.size()) return core::invalidArgument("leadAbsorb: one weight per neighbour");
  if (m.size() > 16) return core::invalidArgument("leadAbsorb: at most 16 neighbours on the GPU");
  LeadBuffers<T> st = b;
  CombineParams<T> p{};
  p.count = static_cast<uint32_t>(m.size());
  for (uint32_t t = 0; t < p.count; ++t) {
    p.m[t] = m[t];
    p.c[t] = w[t];
  }
  T threshold = prox.threshold, lo = prox.lo, hi = prox.hi;
  void* args[] = {&st, &own, &p, &eta, &step, &a, &threshold, &lo, &hi, &n};
  STARLING_RETURN_IF_ERROR(
      gpu_.launch(suffixed<T>("starling_lead_absorb_f32", "starling_lead_absorb_f64"), n, args));
  return gpu_.sync();
}

template core::Status GpuCodecs::leadStart<float>(const LeadBuffers<float>&, float,
                                                  const optim::ProxParams<float>&, uint64_t);
template core::Status GpuCodecs::leadStart<double>(const LeadBuffers<double>&, double,
                                                   const optim::ProxParams<double>&, uint64_t);
template core::Status GpuCodecs::leadPrepare<float>(const LeadBuffers<float>&, DevicePtr, float,
                                                    uint64_t);
template core::Status GpuCodecs::leadPrepare<double>(const LeadBuffers<double>&, DevicePtr, double,
                                                     uint64_t);
template core::Status GpuCodecs::leadAbsorb<float>(const LeadBuffers<float>&, DevicePtr,
                                                   std::span<const DevicePtr>,
                                                   std::span<const float>, float, float, float,
                                                   const optim::ProxParams<float>&, uint64_t);
template core::Status GpuCodecs::leadAbsorb<double>(const LeadBuffers<double>&, DevicePtr,
                                                    std::span<const DevicePtr>,
                                                    std::span<const double>, double, double, double,
                                                    const optim::ProxParams<double>&, uint64_t);

}  // namespace starling::cuda
