// GPU top-k (docs/cuda.md "Top-k"): the radix select and the compaction on the device
// (cuda/kernels_topk.cuh), the host's choices (cuda/topk_select.h), the frame on the host.
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"
#include "cuda/codecs.h"
#include "cuda/topk_select.h"

namespace starling::cuda {

using compression::CompressorSpec;
namespace codecs = compression::codecs;

namespace {
// How many elements top-k keeps of n (the CPU codec's count).
uint64_t topkKept(const CompressorSpec& spec, uint64_t n) {
  return std::min<uint64_t>(codecs::keptCount(spec.k, spec.ratio, n), UINT32_MAX);
}
// The compaction's blocks: about 4,096 elements each, at most 4,096 blocks.
constexpr uint64_t kTopkBlockElements = 4096, kTopkMaxBlocks = 4096;
}  // namespace

core::Status GpuCodecs::selectTopK(DevicePtr x, uint64_t n, uint64_t k) {
  STARLING_RETURN_IF_ERROR(reserve(payload_, 8 * k + 8));
  STARLING_RETURN_IF_ERROR(reserve(sums_, 256 * sizeof(uint32_t)));
  DevicePtr counts = sums_.ptr();
  // Four passes of the radix select, each a histogram on the device and a choice on the host.
  auto threshold = topkThreshold(k, [&](int pass, uint32_t prefix, uint32_t* out) {
    STARLING_RETURN_IF_ERROR(gpu_.zero(counts, 256 * sizeof(uint32_t)));
    void* args[] = {&x, &n, &pass, &prefix, &counts};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_topk_histogram", n, args));
    STARLING_RETURN_IF_ERROR(gpu_.copyToHost(out, counts, 256 * sizeof(uint32_t)));
    return gpu_.sync();
  });
  if (!threshold) return threshold.status();
  uint32_t kthKey = threshold->key;
  uint64_t equalKept = threshold->equalKept;
  // The blocks' counts, their offsets on the host, then the compaction.
  uint64_t blocks = std::clamp<uint64_t>((n + kTopkBlockElements - 1) / kTopkBlockElements, 1,
                                         kTopkMaxBlocks);
  uint64_t chunk = (n + blocks - 1) / blocks;
  blocks = (n + chunk - 1) / chunk;
  STARLING_RETURN_IF_ERROR(reserve(maxBits_, 2 * blocks * sizeof(uint32_t)));
  DevicePtr first = maxBits_.ptr(), second = first + 4 * blocks;
  {
    void* args[] = {&x, &n, &chunk, &kthKey, &first, &second};
    Gpu::Scope scope(gpu_);
    STARLING_RETURN_IF_ERROR(gpu_.launchBlocks("starling_topk_block_counts", blocks, args));
  }
  std::vector<uint32_t> greater(blocks), equal(blocks);
  STARLING_RETURN_IF_ERROR(gpu_.copyToHost(greater.data(), first, 4 * blocks));
  STARLING_RETURN_IF_ERROR(gpu_.copyToHost(equal.data(), second, 4 * blocks));
  STARLING_RETURN_IF_ERROR(gpu_.sync());
  const TopkBlocks offsets = topkBlockOffsets(greater, equal, equalKept);
  STARLING_RETURN_IF_ERROR(gpu_.copyToDevice(first, offsets.equalBefore.data(), 4 * blocks));
  STARLING_RETURN_IF_ERROR(gpu_.copyToDevice(second, offsets.keptBefore.data(), 4 * blocks));
  DevicePtr indices = payload_.ptr(), values = indices + 4 * k;
  void* args[] = {&x, &n, &chunk, &kthKey, &equalKept, &first, &second, &indices, &values};
  {
    Gpu::Scope scope(gpu_);
    STARLING_RETURN_IF_ERROR(gpu_.launchBlocks("starling_topk_compact", blocks, args));
  }
  // The offsets' host memory must outlive the copies.
  return gpu_.sync();
}

core::Result<size_t> GpuCodecs::encodeTopKPayload(const CompressorSpec& spec, DevicePtr x,
                                                  uint64_t n) {
  const uint64_t k = topkKept(spec, n);
  STARLING_RETURN_IF_ERROR(selectTopK(x, n, k));
  return static_cast<size_t>(8 * k);
}

core::Result<std::span<const std::byte>> GpuCodecs::encodeTopK(const CompressorSpec& spec,
                                                               DevicePtr x, uint64_t n) {
  const uint64_t k = topkKept(spec, n);
  STARLING_RETURN_IF_ERROR(reservePinned(pairs_, 8 * k + 8));
  if (k > 0) {
    STARLING_RETURN_IF_ERROR(selectTopK(x, n, k));
    STARLING_RETURN_IF_ERROR(gpu_.copyToHost(pairs_.data(), payload_.ptr(), 8 * k));
    STARLING_RETURN_IF_ERROR(gpu_.sync());
  }
  const size_t bound = codecs::topkFrameBound(n, k);
  STARLING_RETURN_IF_ERROR(reservePinned(staging_, bound));
  std::vector<uint32_t> indices(k);
  std::vector<float> values(k);
  if (k > 0) {
    std::memcpy(indices.data(), pairs_.data(), 4 * k);
    std::memcpy(values.data(), pairs_.data() + 4 * k, 4 * k);
  }
  codecs::FrameOut frame(std::span<std::byte>(staging_.data(), bound));
  codecs::writeTopKFrame(n, indices, values, frame);
  if (!frame.ok()) return frame.status();
  return std::span<const std::byte>(frame.frame());
}

core::Status GpuCodecs::decodeTopK(std::span<const std::byte> frame, DevicePtr out, uint64_t n) {
  std::vector<uint32_t> indices;
  std::vector<float> values;
  STARLING_RETURN_IF_ERROR(codecs::readTopKFrame(frame, n, indices, values));
  if (n == 0) return core::Status::ok();
  uint64_t k = indices.size();
  STARLING_RETURN_IF_ERROR(reserve(payload_, 8 * k + 8));
  DevicePtr in = payload_.ptr(), inValues = in + 4 * k;
  STARLING_RETURN_IF_ERROR(gpu_.copyToDevice(in, indices.data(), 4 * k));
  STARLING_RETURN_IF_ERROR(gpu_.copyToDevice(inValues, values.data(), 4 * k));
  STARLING_RETURN_IF_ERROR(gpu_.zero(out, 4 * n));
  void* args[] = {&in, &inValues, &k, &out};
  STARLING_RETURN_IF_ERROR(gpu_.launch("starling_scatter", k, args));
  return gpu_.sync();
}

}  // namespace starling::cuda
