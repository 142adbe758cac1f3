// GPU codecs and the gossip combine on float32 device vectors (docs/cuda.md): the frames on the
// wire are the CPU codecs' (docs/wire_format.md), built in page-locked host memory from a payload
// that the kernels write on the device, so only the compressed bytes cross to the host.
//
//   fp16, bf16: byte-identical to the CPU codecs (deterministic rounding, elementwise.h).
//   qsgd, nuqsgd, natural_dithering (the scaled codes):
//               the same scales as the CPU codec, bit for bit; the stochastic rounding takes its
//               bits from the counter-based generator of elementwise.h (counterUniform16), so a
//               frame is a valid frame of its codec that any peer decodes, byte-identical to a CPU
//               encoding with those bits, not to the CPU codec's xoshiro stream.
//   topk:       the CPU codec's selection (the k largest magnitudes, ties by lower index, NaNs
//               first) by a radix select and a stable compaction on the device (cuda/topk_select.h);
//               only the k (index, value) pairs cross to the host, where the frame's index gaps
//               are written: byte-identical to the CPU codec's frame.
//   countsketch: the table byte-identical to the CPU codec's (each cell's terms added in index
//               order: a per-row counting placement, each bucket sorted and summed by one
//               thread), the estimate (median of up to 7 rows, or mean), the heavy hitters and
//               the sender's scale as the CPU computes them: the CPU's frame byte for byte.
//   decode:     a frame is checked on the host by the CPU codec's own validation, then decoded
//               on the device to the CPU decoder's values, bit for bit.
//   combine:    optim/combine.h's difference form, bit for bit; CHOCO-SGD's and LEAD's
//               (Prox-LEAD's) steps with a static W, bit for bit.
//
// Thread-safety: one GpuCodecs per thread (it owns staging buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "compression/compressor.h"
#include "core/status.h"
#include "cuda/driver.h"
#include "optim/regularizer.h"

namespace starling::compression::codecs {
struct ScaledCodes;
struct CountSketchHeader;
}

namespace starling::cuda {

// Whether the GPU path implements this codec: fp16, bf16, the scaled codes (qsgd, nuqsgd,
// natural_dithering) and topk today.
bool gpuSupports(const compression::CompressorSpec& spec);

class GpuCodecs {
 public:
  explicit GpuCodecs(Gpu& gpu) : gpu_(gpu) {}

  // The frame of the n float32 values at device address x, in this object's page-locked
  // staging buffer (valid until the next encode); `seed` is the stochastic codecs' per-frame
  // draw (the CPU codecs take one nextU64() from the caller's Rng for it).
  core::Result<std::span<const std::byte>> encode(const compression::CompressorSpec& spec,
                                                  DevicePtr x, uint64_t n, uint64_t seed);
  // The kernels alone: the payload of that frame left in device memory (payloadOnDevice()), its
  // length returned; nothing is synchronized. n >= 1. For topk the kernels leave the kept
  // indices (k u32) followed by their values (k float32), 8 k bytes, and the selection's passes
  // synchronize with the host between them.
  core::Result<size_t> encodePayload(const compression::CompressorSpec& spec, DevicePtr x,
                                     uint64_t n, uint64_t seed);
  DevicePtr payloadOnDevice() const { return payload_.ptr(); }
  // How many bucket scales so far needed the serial sum of a bucket too large for one GPU
  // thread, computed on the host (docs/cuda.md, "Scales").
  uint64_t serialScalesOnHost() const { return serialOnHost_; }
  // Decodes a frame (host memory) of n float32 values into device address out.
  core::Status decode(const compression::CompressorSpec& spec, std::span<const std::byte> frame,
                      DevicePtr out, uint64_t n);
  // decode()'s checks alone, on the host (CRC32C, params, every code's level, topk's indices):
  // ok when decode() would decode the frame.
  core::Status check(const compression::CompressorSpec& spec, std::span<const std::byte> frame,
                     uint64_t n);
  // out_k = start_k + sum_j c[j] (m[j]_k - self_k) over n float32 (or float64) elements, terms in
  // the order given; out may be start.
  core::Status combine(DevicePtr out, DevicePtr start, DevicePtr self, std::span<const DevicePtr> m,
                       std::span<const float> c, uint64_t n);
  core::Status combine(DevicePtr out, DevicePtr start, DevicePtr self, std::span<const DevicePtr> m,
                       std::span<const double> c, uint64_t n);

  // CHOCO-SGD with a static W (optim/choco.cc), bit for bit, on device vectors of n elements:
  // chocoPrepare updates x in place from the gradient g, s and x_hat, and writes the difference
  // the node sends into out; chocoAbsorb updates x_hat and s = sum_j w_ij x_hat_j from this node's
  // decoded difference (own, weight self = w_ii) and its neighbours' (m, weights w, in order).
  core::Status chocoPrepare(DevicePtr x, DevicePtr g, DevicePtr s, DevicePtr hat, DevicePtr out,
                            float eta, float gamma, uint64_t n);
  core::Status chocoPrepare(DevicePtr x, DevicePtr g, DevicePtr s, DevicePtr hat, DevicePtr out,
                            double eta, double gamma, uint64_t n);
  core::Status chocoAbsorb(DevicePtr hat, DevicePtr s, DevicePtr own, float self,
                           std::span<const DevicePtr> m, std::span<const float> w, uint64_t n);
  core::Status chocoAbsorb(DevicePtr hat, DevicePtr s, DevicePtr own, double self,
                           std::span<const DevicePtr> m, std::span<const double> w, uint64_t n);

  // LEAD and Prox-LEAD with a static W (optim/lead.cc), bit for bit, for up to 16 neighbours:
  // the node's state in device vectors of n elements of T (g holds the gradient at x, written by
  // the caller before leadStart and before each leadPrepare). leadStart: Z = X - eta G,
  // X = prox(Z); leadPrepare: the difference to send into out; leadAbsorb: from this node's
  // decoded difference (own) and its neighbours' (m, weights w), the dual D, e, H, then Z and
  // X = prox(Z). `step` is gamma / (2 eta) and `a` alpha, in T, as the CPU algorithm takes them;
  // `prox` is optim::proxParams of the regularizer at step eta.
  template <typename T>
  struct LeadBuffers {
    DevicePtr x, z, g, d, dLost, e, h;
  };
  template <typename T>
  core::Status leadStart(const LeadBuffers<T>& b, T eta, const optim::ProxParams<T>& prox,
                         uint64_t n);
  template <typename T>
  core::Status leadPrepare(const LeadBuffers<T>& b, DevicePtr out, T eta, uint64_t n);
  template <typename T>
  core::Status leadAbsorb(const LeadBuffers<T>& b, DevicePtr own, std::span<const DevicePtr> m,
                          std::span<const T> w, T eta, T step, T a,
                          const optim::ProxParams<T>& prox, uint64_t n);

 private:
  core::Status reserve(DeviceBuffer& b, size_t bytes);
  core::Status reservePinned(PinnedBuffer& b, size_t bytes);
  core::Status encodeScaled(const compression::codecs::ScaledCodes& q, DevicePtr x, uint64_t n,
                            uint64_t seed, size_t payloadBytes);
  // Top-k of the n float32 at x: the k kept indices, then their values, into payload_.
  core::Status selectTopK(DevicePtr x, uint64_t n, uint64_t k);
  core::Result<size_t> encodeTopKPayload(const compression::CompressorSpec& spec, DevicePtr x,
                                         uint64_t n);
  core::Result<std::span<const std::byte>> encodeTopK(const compression::CompressorSpec& spec,
                                                      DevicePtr x, uint64_t n);
  core::Status decodeTopK(std::span<const std::byte> frame, DevicePtr out, uint64_t n);
  // Count-Sketch (cuda/codecs_sketch.cc): the rows' hash coefficients on the device; the
  // estimate of n coordinates from the table there into y (threshold mode's zeroing from the
  // host's copy of the table); encode and decode.
  core::Status uploadSketchHashes(uint64_t seed, uint32_t rows, uint32_t cols);
  core::Status sketchEstimate(const compression::codecs::CountSketchHeader& h,
                              std::span<const float> hostTable, DevicePtr y, uint64_t n);
  core::Result<std::span<const std::byte>> encodeCountSketch(
      const compression::CompressorSpec& spec, DevicePtr x, uint64_t n, uint64_t seed);
  core::Status decodeCountSketch(const compression::CompressorSpec& spec,
                                 std::span<const std::byte> frame, DevicePtr out, uint64_t n,
                                 bool onDevice);
  core::Status decodeOrCheck(const compression::CompressorSpec& spec,
                             std::span<const std::byte> frame, DevicePtr out, uint64_t n,
                             bool onDevice);

  Gpu& gpu_;
  PinnedBuffer staging_;
  PinnedBuffer pairs_;  // topk: the kept (index, value) pairs on the host
  DeviceBuffer payload_;
  DeviceBuffer sums_;
  DeviceBuffer maxBits_;
  uint64_t serialOnHost_ = 0;
  // Count-Sketch: the table, the rows' hash coefficients, the counts / offsets / fill of a row's
  // buckets, the coordinates' places, the estimate; the last frame (host memory).
  DeviceBuffer sketchTable_, sketchCoef_, sketchCounts_, sketchIdx_, sketchY_;
  std::vector<std::byte> sketchFrame_;
};

}  // namespace starling::cuda
