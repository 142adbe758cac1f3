// GPU Count-Sketch (docs/cuda.md "Count-Sketch"): the table built on the device, each cell's
// terms added in index order as the CPU adds them (cuda/kernels_sketch.cuh), the estimate, the
// heavy hitters (top-k's selection) and the sender's scale on the device; the frame on the host.
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"
#include "compression/sketch_hash.h"
#include "cuda/codecs.h"

namespace starling::cuda {

using compression::CompressorSpec;
namespace codecs = compression::codecs;

core::Status GpuCodecs::uploadSketchHashes(uint64_t seed, uint32_t rows, uint32_t cols) {
  const compression::SketchHashes h(seed, rows, cols);
  std::vector<uint64_t> coef(4 * static_cast<size_t>(rows));
  for (uint32_t j = 0; j < rows; ++j) std::memcpy(&coef[4 * j], h.coef(j), 4 * sizeof(uint64_t));
  STARLING_RETURN_IF_ERROR(reserve(sketchCoef_, coef.size() * sizeof(uint64_t)));
  STARLING_RETURN_IF_ERROR(
      gpu_.copyToDevice(sketchCoef_.ptr(), coef.data(), coef.size() * sizeof(uint64_t)));
  return gpu_.sync();  // (coef's host memory ends here)
}

// The estimate y of every coordinate from the table on the device (its hashes uploaded), in y;
// then threshold mode's zeroing (from the host's copy of the table).
core::Status GpuCodecs::sketchEstimate(const codecs::CountSketchHeader& h,
                                       std::span<const float> hostTable, DevicePtr y, uint64_t n) {
  DevicePtr table = sketchTable_.ptr(), coef = sketchCoef_.ptr();
  uint32_t rows = h.rows;
  uint64_t cols = h.cols;
  int mean = h.mean ? 1 : 0;
  void* args[] = {&table, &coef, &rows, &cols, &n, &mean, &y};
  STARLING_RETURN_IF_ERROR(gpu_.launch("starling_sketch_estimate", n, args));
  if (!h.mean && h.k == 0) {
    double thr = static_cast<double>(h.threshold) * codecs::countSketchL2(hostTable, h.rows, h.cols);
    void* targs[] = {&y, &n, &thr};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_sketch_threshold", n, targs));
  }
  return core::Status::ok();
}

core::Result<std::span<const std::byte>> GpuCodecs::encodeCountSketch(const CompressorSpec& spec,
                                                                      DevicePtr x, uint64_t n,
                                                                      uint64_t seed) {
  if (n > UINT32_MAX) return core::invalidArgument("countsketch of more than 2^32-1 elements");
  codecs::CountSketchHeader h = codecs::countSketchHeader(spec, n, seed);
  const uint64_t cols = h.cols, cells = static_cast<uint64_t>(h.rows) * cols;
  STARLING_RETURN_IF_ERROR(uploadSketchHashes(h.seed, h.rows, h.cols));
  STARLING_RETURN_IF_ERROR(reserve(sketchTable_, cells * sizeof(float)));
  STARLING_RETURN_IF_ERROR(gpu_.zero(sketchTable_.ptr(), cells * sizeof(float)));
  if (n > 0) {
    // counts (cols), offsets (cols + 1), fill (cols); the coordinates' places (n).
    STARLING_RETURN_IF_ERROR(reserve(sketchCounts_, (3 * cols + 1) * sizeof(uint32_t)));
    STARLING_RETURN_IF_ERROR(reserve(sketchIdx_, n * sizeof(uint32_t)));
    DevicePtr counts = sketchCounts_.ptr(), offsets = counts + 4 * cols,
              fill = offsets + 4 * (cols + 1), idx = sketchIdx_.ptr();
    const compression::SketchHashes hashes(h.seed, h.rows, h.cols);
    for (uint32_t j = 0; j < h.rows; ++j) {
      uint64_t a0 = hashes.coef(j)[0], b0 = hashes.coef(j)[1];
      uint64_t a1 = hashes.coef(j)[2], b1 = hashes.coef(j)[3];
      uint64_t c = cols;
      DevicePtr row = sketchTable_.ptr() + 4 * static_cast<uint64_t>(j) * cols;
      STARLING_RETURN_IF_ERROR(gpu_.zero(counts, 4 * cols));
      STARLING_RETURN_IF_ERROR(gpu_.zero(fill, 4 * cols));
      void* countArgs[] = {&n, &a0, &b0, &c, &counts};
      STARLING_RETURN_IF_ERROR(gpu_.launch("starling_sketch_count", n, countArgs));
      void* scanArgs[] = {&counts, &offsets, &c};
      {
        Gpu::Scope scope(gpu_);
        STARLING_RETURN_IF_ERROR(gpu_.launchBlocks("starling_scan_u32", 1, scanArgs, 1024));
      }
      void* placeArgs[] = {&n, &a0, &b0, &c, &offsets, &fill, &idx};
      STARLING_RETURN_IF_ERROR(gpu_.launch("starling_sketch_place", n, placeArgs));
      void* sumArgs[] = {&x, &a1, &b1, &c, &offsets, &idx, &row};
      STARLING_RETURN_IF_ERROR(gpu_.launch("starling_sketch_sum", cols, sumArgs));
    }
  }
  std::vector<float> table(cells);
  STARLING_RETURN_IF_ERROR(gpu_.copyToHost(table.data(), sketchTable_.ptr(), cells * sizeof(float)));
  STARLING_RETURN_IF_ERROR(gpu_.sync());
  bool finite = true;
  for (float v : table) finite = finite && std::isfinite(v);
  // lambda, the least-squares scale of the estimate the receivers will compute, summed as the
  // CPU sums it (starling_sketch_dot); a non-finite table makes the frame one every decoder
  // rejects, as the CPU's does.
  double xy = 0, yy = 0;
  if (finite && n > 0) {
    STARLING_RETURN_IF_ERROR(reserve(sketchY_, n * sizeof(float)));
    STARLING_RETURN_IF_ERROR(sketchEstimate(h, table, sketchY_.ptr(), n));
    STARLING_RETURN_IF_ERROR(reserve(sums_, 2 * sizeof(double) + 256 * sizeof(uint32_t)));
    DevicePtr dot = sums_.ptr();
    const bool sparse = !h.mean && h.k > 0 && h.k < n;
    DevicePtr y = sketchY_.ptr(), idx = 0;
    uint64_t count = n;
    int sparseFlag = 0;
    if (sparse) {
      STARLING_RETURN_IF_ERROR(selectTopK(sketchY_.ptr(), n, h.k));
      idx = payload_.ptr();
      y = idx + 4 * h.k;
      count = h.k;
      sparseFlag = 1;
      // (selectTopK used sums_ for its histograms: the dot's two doubles go after them.)
      dot = sums_.ptr() + 256 * sizeof(uint32_t);
    }
    void* args[] = {&x, &y, &idx, &count, &sparseFlag, &dot};
    {
      Gpu::Scope scope(gpu_);
      STARLING_RETURN_IF_ERROR(gpu_.launchBlocks("starling_sketch_dot", 1, args, 1));
    }
    double sums[2];
    STARLING_RETURN_IF_ERROR(gpu_.copyToHost(sums, dot, sizeof sums));
    STARLING_RETURN_IF_ERROR(gpu_.sync());
    xy = sums[0];
    yy = sums[1];
  }
  h.scale = yy > 0 ? xy / yy : (finite ? 0.0 : std::numeric_limits<double>::quiet_NaN());
  sketchFrame_.clear();
  codecs::FrameOut frame(sketchFrame_);
  codecs::writeCountSketchFrame(h, n, table, frame);
  if (!frame.ok()) return frame.status();
  return std::span<const std::byte>(sketchFrame_);
}

core::Status GpuCodecs::decodeCountSketch(const CompressorSpec& spec,
                                          std::span<const std::byte> frame, DevicePtr out,
                                          uint64_t n, bool onDevice) {
  std::span<const std::byte> tableBytes;
  auto h = codecs::readCountSketchFrame(spec, frame, n, tableBytes);
  if (!h) return h.status();
  if (!onDevice || n == 0) return core::Status::ok();
  std::vector<float> table(tableBytes.size() / sizeof(float));
  std::memcpy(table.data(), tableBytes.data(), tableBytes.size());
  STARLING_RETURN_IF_ERROR(uploadSketchHashes(h->seed, h->rows, h->cols));
  STARLING_RETURN_IF_ERROR(reserve(sketchTable_, tableBytes.size()));
  STARLING_RETURN_IF_ERROR(gpu_.copyToDevice(sketchTable_.ptr(), table.data(), tableBytes.size()));
  STARLING_RETURN_IF_ERROR(sketchEstimate(*h, table, out, n));
  float scale = static_cast<float>(h->scale);
  if (!h->mean && h->k > 0 && h->k < n) {
    // The heavy hitters (the CPU's largestIndices, as top-k selects), scaled; scale * 0 elsewhere
    // where that is -0 (a negative scale), +0 otherwise, as the CPU decoder leaves it.
    uint64_t k = h->k;
    STARLING_RETURN_IF_ERROR(selectTopK(out, n, k));
    DevicePtr indices = payload_.ptr(), values = indices + 4 * k;
    void* scaleArgs[] = {&values, &k, &scale};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_scale_f32", k, scaleArgs));
    const float zero = scale * 0.0f;
    float fillValue = std::signbit(zero) ? zero : 0.0f;
    void* fillArgs[] = {&out, &n, &fillValue};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_fill_f32", n, fillArgs));
    void* scatterArgs[] = {&indices, &values, &k, &out};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_scatter", k, scatterArgs));
  } else {
    void* scaleArgs[] = {&out, &n, &scale};
    STARLING_RETURN_IF_ERROR(gpu_.launch("starling_scale_f32", n, scaleArgs));
  }
  return gpu_.sync();
}

}  // namespace starling::cuda
