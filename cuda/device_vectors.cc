#include "cuda/device_vectors.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "compression/frame.h"
#include "compression/sketch_hash.h"
#include "core/rng.h"
#include "cuda/codecs.h"
#include "cuda/driver.h"

namespace starling::cuda {
namespace {

using compression::CompressorSpec;

class GpuVectors final : public optim::DeviceVectors {
 public:
  GpuVectors(std::unique_ptr<Gpu> gpu, int ordinal, const CompressorSpec& spec,
                 std::unique_ptr<compression::Compressor<float>> cpu)
      : gpu_(std::move(gpu)), ordinal_(ordinal), spec_(spec), cpu_(std::move(cpu)),
        codecs_(*gpu_) {}

  std::string where() const override {
    return "cuda:" + std::to_string(ordinal_) + " (" + gpu_->name() + ")";
  }

  core::Result<Address> allocate(size_t n) override {
    Gpu::Scope scope(*gpu_);
    auto b = DeviceBuffer::allocate(std::max<size_t>(n, 1) * sizeof(float));
    if (!b) return b.status();
    STARLING_RETURN_IF_ERROR(gpu_->zero(b->ptr(), b->bytes()));
    STARLING_RETURN_IF_ERROR(gpu_->sync());
    buffers_.push_back(std::move(*b));
    return buffers_.back().ptr();
  }

  core::Status copy(Address to, Address from, size_t n) override {
    if (n == 0 || to == from) return core::Status::ok();
    STARLING_RETURN_IF_ERROR(gpu_->copyOnDevice(to, from, n * sizeof(float)));
    return gpu_->sync();
  }
  core::Status toHost(std::span<float> to, Address from) override {
    if (to.empty()) return core::Status::ok();
    STARLING_RETURN_IF_ERROR(gpu_->copyToHost(to.data(), from, to.size_bytes()));
    return gpu_->sync();
  }
  core::Status fromHost(Address to, std::span<const float> from) override {
    if (from.empty()) return core::Status::ok();
    STARLING_RETURN_IF_ERROR(gpu_->copyToDevice(to, from.data(), from.size_bytes()));
    return gpu_->sync();
  }
  core::Status combine(Address out, Address start, Address self, std::span<const Address> m,
                       std::span<const float> c, size_t n) override {
    std::vector<DevicePtr> ptrs(m.begin(), m.end());
    return codecs_.combine(out, start, self, ptrs, c, n);
  }
  core::Result<bool> anyBeyond(Address x, size_t n, float limit) override {
    if (n == 0) return false;
    if (flag_.bytes() == 0) {
      Gpu::Scope scope(*gpu_);
      auto b = DeviceBuffer::allocate(sizeof(uint32_t));
      if (!b) return b.status();
      flag_ = std::move(*b);
    }
    STARLING_RETURN_IF_ERROR(gpu_->zero(flag_.ptr(), sizeof(uint32_t)));
    DevicePtr at = x, flag = flag_.ptr();
    uint64_t count = n;
    void* args[] = {&at, &count, &limit, &flag};
    STARLING_RETURN_IF_ERROR(gpu_->launch("starling_any_beyond", n, args));
    uint32_t beyond = 0;
    STARLING_RETURN_IF_ERROR(gpu_->copyToHost(&beyond, flag_.ptr(), sizeof beyond));
    STARLING_RETURN_IF_ERROR(gpu_->sync());
    return beyond != 0;
  }

  bool lossy() const override { return spec_.kind != CompressorSpec::Kind::kIdentity; }
  size_t maxFrameBytes(size_t n) const override { return cpu_->maxEncodedBytes(n); }

  core::Result<size_t> encode(Address x, size_t n, const FrameSeeds& seeds,
                              std::span<std::byte> frame) override {
    if (!lossy()) {
      // The identity frame: the values copied from the device straight into its payload.
      const size_t bytes = compression::denseFrameBytes<float>(n);
      if (frame.size() < bytes) return core::internalError("identity frame buffer too small");
      const std::span<std::byte> out = frame.first(bytes);
      const std::span<float> payload = compression::beginDense<float>(n, out);
      STARLING_RETURN_IF_ERROR(toHost(payload, x));
      compression::sealFrame(out);
      return bytes;
    }
    // The seed the CPU codec's encodeStream uses: its own draw, or for Count-Sketch the round's
    // hashes every sender shares (so that tables add up across senders).
    const uint64_t seed = spec_.kind == CompressorSpec::Kind::kCountSketch
                              ? core::deriveSeed(seeds.shared, compression::kSketchHashSalt,
                                                 seeds.round)
                              : seeds.draw;
    auto got = codecs_.encode(spec_, x, n, seed);
    if (!got) return got.status();
    if (got->size() > frame.size()) return core::internalError("GPU frame beyond its bound");
    std::memcpy(frame.data(), got->data(), got->size());
    return got->size();
  }

  core::Status check(std::span<const std::byte> frame, size_t n) const override {
    if (!lossy()) {
      // The identity decoder's checks on a view of the frame (no copy of the values).
      std::vector<float> scratch;
      auto view = cpu_->decodeView(frame, n, scratch, compression::Checksum::kVerify);
      return view.status();
    }
    return codecs_.check(spec_, frame, n);
  }

  core::Status decode(std::span<const std::byte> frame, Address out, size_t n) override {
    if (!lossy()) {
      std::vector<float> scratch;
      auto view = cpu_->decodeView(frame, n, scratch, compression::Checksum::kVerify);
      if (!view) return view.status();
      return fromHost(out, *view);
    }
    return codecs_.decode(spec_, frame, out, n);
  }

  core::Status after(uint64_t stream) override { return gpu_->after(stream); }
  uint64_t stream() const override { return gpu_->streamHandle(); }
  core::Status checkPointer(Address address, const std::string& what) const override {
    return gpu_->checkPointer(address, what);
  }

 private:
  std::unique_ptr<Gpu> gpu_;
  int ordinal_;
  CompressorSpec spec_;
  std::unique_ptr<compression::Compressor<float>> cpu_;  // frame bounds, identity frames
  mutable GpuCodecs codecs_;
  std::vector<DeviceBuffer> buffers_;
  DeviceBuffer flag_;
};

}  // namespace

core::Result<std::unique_ptr<optim::DeviceVectors>> openGpuVectors(int ordinal,
                                                                   const CompressorSpec& spec) {
  if (spec.errorFeedback) {
    return core::invalidArgument("compression.error_feedback: not on the GPU yet (tensors on the "
                                 "GPU mix with CHOCO-gossip's reference points instead)");
  }
  if (spec.kind != CompressorSpec::Kind::kIdentity && !gpuSupports(spec)) {
    return core::invalidArgument(
        "compression.kind: no GPU codec for it; tensors on the GPU take fp16, bf16, qsgd, "
        "nuqsgd, natural_dithering, topk and countsketch (or none), docs/cuda.md");
  }
  auto cpu = compression::createCompressor<float>(spec);
  if (!cpu) return cpu.status();
  auto gpu = Gpu::open(ordinal);
  if (!gpu) return gpu.status();
  return std::unique_ptr<optim::DeviceVectors>(
      std::make_unique<GpuVectors>(std::move(*gpu), ordinal, spec, std::move(*cpu)));
}

}  // namespace starling::cuda
