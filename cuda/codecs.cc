// GPU codecs: the frame layout on the host, the kernels (cuda/kernels.cu) for the payload.
#include "cuda/codecs.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::cuda {
namespace {

using compression::CodecId;
using compression::CompressorSpec;
using Kind = CompressorSpec::Kind;
namespace codecs = compression::codecs;

constexpr size_t kQsgdParamsBytes = 6;  // bits, linf flag, bucket (u32): docs/wire_format.md

codecs::ScaledCodes qsgdCodes(const CompressorSpec& spec) {
  codecs::ScaledCodes q;
  q.levels = codecs::LevelSet::kUniform;
  q.levelBits = spec.bits - 1;
  q.s = (1u << (spec.bits - 1)) - 1;
  q.bucket = spec.bucket;
  q.linf = spec.linf;
  return q;
}

}  // namespace

bool gpuSupports(const CompressorSpec& spec) {
  return spec.kind == Kind::kFp16 || spec.kind == Kind::kBf16 ||
         (spec.kind == Kind::kQsgd && spec.bits >= 2 && spec.bits <= 8 && spec.bucket >= 1 &&
          spec.bucket <= 0xffffffffu);
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
    return core::invalidArgument("this codec has no GPU encoder (fp16, bf16 and qsgd have)");
  }
  const bool half = spec.kind != Kind::kQsgd;
  const codecs::ScaledCodes q = qsgdCodes(spec);
  std::byte params[kQsgdParamsBytes];
  std::span<const std::byte> paramSpan;
  size_t payloadBytes = 2 * n;
  CodecId id = spec.kind == Kind::kFp16 ? CodecId::kFp16 : CodecId::kBf16;
  if (!half) {
    id = CodecId::kQsgd;
    params[0] = static_cast<std::byte>(spec.bits);
    params[1] = static_cast<std::byte>(spec.linf ? 1 : 0);
    codecs::storeLe<uint32_t>(params + 2, static_cast<uint32_t>(spec.bucket));
    paramSpan = params;
    payloadBytes = q.payloadBytes(n);
  }
  const size_t frameBytes = codecs::frameBytesFor(paramSpan.size(), payloadBytes);
  if (staging_.bytes() < frameBytes) {
    Gpu::Scope scope(gpu_);
    staging_ = PinnedBuffer();
    auto fresh = PinnedBuffer::allocate(frameBytes);
    if (!fresh) return fresh.status();
    staging_ = std::move(*fresh);
  }
  codecs::FrameOut frame(std::span<std::byte>(staging_.data(), frameBytes));
  std::byte* payload = frame.begin(id, compression::ElementType::kFloat32, n, paramSpan, payloadBytes);
  if (payload == nullptr) return frame.status();
  STARLING_RETURN_IF_ERROR(reserve(payload_, payloadBytes));
  DevicePtr out = payload_.ptr();
  if (half) {
    void* args[] = {&x, &out, &n};
    STARLING_RETURN_IF_ERROR(gpu_.launch(spec.kind == Kind::kFp16 ? "starling_encode_f16" : "starling_encode_bf16", n, args));
  } else {
    STARLING_RETURN_IF_ERROR(encodeQsgd(spec, x, n, seed, payload, payloadBytes));
  }
  STARLING_RETURN_IF_ERROR(gpu_.copyToHost(payload, out, payloadBytes));
  STARLING_RETURN_IF_ERROR(gpu_.sync());
  frame.seal();
  return std::span<const std::byte>(frame.frame());
}

core::Status GpuCodecs::encodeQsgd(const CompressorSpec& spec, DevicePtr x, uint64_t n, uint64_t seed,
                                   std::byte*, size_t payloadBytes) {
  const codecs::ScaledCodes q = qsgdCodes(spec);
  uint64_t bucket = q.bucket;
  const uint64_t buckets = q.buckets(n);
  if (n == 0) return core::Status::ok();
  STARLING_RETURN_IF_ERROR(reserve(sums_, buckets * sizeof(double)));
  STARLING_RETURN_IF_ERROR(reserve(maxBits_, buckets * sizeof(uint32_t)));
  DevicePtr sums = sums_.ptr(), maxBits = maxBits_.ptr(), scales = payload_.ptr();
  STARLING_RETURN_IF_ERROR(gpu_.zero(sums, buckets * sizeof(double)));
  STARLING_RETURN_IF_ERROR(gpu_.zero(maxBits, buckets * sizeof(uint32_t)));
  // A block per chunk of at most 16384 elements of one bucket.
  uint64_t chunk = std::min<uint64_t>(bucket, 16384);
  uint64_t chunksPerBucket = (bucket + chunk - 1) / chunk;
  {
    void* args[] = {&x, &n, &bucket, &chunk, &chunksPerBucket, &sums, &maxBits};
    Gpu::Scope scope(gpu_);
    STARLING_RETURN_IF_ERROR(gpu_.launchBlocks("starling_bucket_norms", buckets * chunksPerBucket, args, 256));
  }
  int linf = q.linf ? 1 : 0;
  {
    void* args[] = {&x, &n, &bucket, &sums, &maxBits, &linf, &scales};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_bucket_scales", buckets, args));
  }
  uint32_t s = q.s;
  uint32_t levelBits = static_cast<uint32_t>(q.levelBits);
  DevicePtr stream = scales + 4 * buckets;
  uint64_t streamBytes = payloadBytes - 4 * buckets;
  void* args[] = {&x, &n, &bucket, &scales, &s, &levelBits, &seed, &stream, &streamBytes};
  return gpu_.launch("starling_qsgd_codes", streamBytes, args);
}

core::Status GpuCodecs::decode(const CompressorSpec& spec, std::span<const std::byte> frame,
                               DevicePtr out, uint64_t n) {
  if (!gpuSupports(spec)) {
    return core::invalidArgument("this codec has no GPU decoder (fp16, bf16 and qsgd have)");
  }
  const bool half = spec.kind != Kind::kQsgd;
  const CodecId id = spec.kind == Kind::kFp16 ? CodecId::kFp16
                     : spec.kind == Kind::kBf16 ? CodecId::kBf16 : CodecId::kQsgd;
  auto v = codecs::openFrame<float>(frame, id, n, half ? 0 : kQsgdParamsBytes);
  if (!v) return v.status();
  codecs::ScaledCodes q;
  if (half) {
    if (v->payload.size() != 2 * n) {
      return core::corruption("16-bit payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(n) + " elements");
    }
  } else {
    // The frame's own params, checked as the CPU decoder checks them.
    CompressorSpec framed = spec;
    framed.bits = std::to_integer<int>(v->params[0]);
    const int linf = std::to_integer<int>(v->params[1]);
    framed.bucket = codecs::loadLe<uint32_t>(v->params.data() + 2);
    framed.linf = linf == 1;
    if (framed.bits < 2 || framed.bits > 8) return core::corruption("qsgd bits " + std::to_string(framed.bits));
    if (linf > 1) return core::corruption("qsgd norm flag " + std::to_string(linf));
    if (framed.bucket == 0) return core::corruption("qsgd bucket size 0");
    q = qsgdCodes(framed);
    STARLING_RETURN_IF_ERROR(codecs::checkScaledCodes(v->payload, q, n, "qsgd"));
  }
  if (n == 0) return core::Status::ok();
  STARLING_RETURN_IF_ERROR(reserve(payload_, v->payload.size()));
  DevicePtr in = payload_.ptr();
  STARLING_RETURN_IF_ERROR(gpu_.copyToDevice(in, v->payload.data(), v->payload.size()));
  if (half) {
    void* args[] = {&in, &out, &n};
    STARLING_RETURN_IF_ERROR(gpu_.launch(spec.kind == Kind::kFp16 ? "starling_decode_f16" : "starling_decode_bf16", n, args));
  } else {
    uint64_t bucket = q.bucket;
    DevicePtr stream = in + 4 * q.buckets(n);
    uint32_t s = q.s;
    uint32_t levelBits = static_cast<uint32_t>(q.levelBits);
    void* args[] = {&in, &stream, &n, &bucket, &s, &levelBits, &out};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_qsgd_decode", n, args));
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
core::Status combineChain(Gpu& gpu, const char* kernel, DevicePtr out, DevicePtr start, DevicePtr self,
                          std::span<const DevicePtr> m, std::span<const T> c, uint64_t n) {
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
                                std::span<const DevicePtr> m, std::span<const float> c, uint64_t n) {
  return combineChain<float>(gpu_, "starling_combine_f32", out, start, self, m, c, n);
}
core::Status GpuCodecs::combine(DevicePtr out, DevicePtr start, DevicePtr self,
                                std::span<const DevicePtr> m, std::span<const double> c, uint64_t n) {
  return combineChain<double>(gpu_, "starling_combine_f64", out, start, self, m, c, n);
}

}  // namespace starling::cuda
