// Construction points of the codecs behind createCompressor (internal to compression/).
//
// The factories take parameters already validated by createCompressor; each codec's frame
// layout is specified in docs/wire_format.md. Every decoder writes `out` only once the whole
// frame has been checked, so a corrupt frame leaves the caller's buffer untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compression/compressor.h"
#include "compression/frame.h"
#include "core/status.h"

namespace starling::compression::codecs {

template <typename T>
std::unique_ptr<Compressor<T>> makeIdentity();
template <typename T>
std::unique_ptr<Compressor<T>> makeFp16();
template <typename T>
std::unique_ptr<Compressor<T>> makeBf16();
// k > 0 selects k elements; otherwise ceil(ratio * d). Either way clamped to [1, d].
template <typename T>
std::unique_ptr<Compressor<T>> makeTopK(uint64_t k, double ratio);
template <typename T>
std::unique_ptr<Compressor<T>> makeRandK(uint64_t k, double ratio, bool scaled);
template <typename T>
std::unique_ptr<Compressor<T>> makeSign();
// bits in [2, 8], bucket in [1, 2^32 - 1].
template <typename T>
std::unique_ptr<Compressor<T>> makeQsgd(int bits, uint32_t bucket, bool linf);

// bits in [2, 8]: 2^(bits-1) - 1 exponentially spaced magnitude levels 2^-j plus zero.
template <typename T>
std::unique_ptr<Compressor<T>> makeNuqsgd(int bits, uint32_t bucket);
template <typename T>
std::unique_ptr<Compressor<T>> makeNatural();
// levels (s) in [1, 30]; linf selects the max norm instead of l2.
template <typename T>
std::unique_ptr<Compressor<T>> makeNaturalDithering(int levels, bool linf);
template <typename T>
std::unique_ptr<Compressor<T>> makeTopKDithering(uint64_t k, double ratio, int levels);
template <typename T>
std::unique_ptr<Compressor<T>> makeCountSketch(const CompressorSpec& spec);
template <typename T>
std::unique_ptr<Compressor<T>> makeAdaComp(uint64_t bin);
template <typename T>
std::unique_ptr<Compressor<T>> makeDqsgd(int minBits, int maxBits, double target,
                                         uint32_t bucket);
// Parameters validated by createCompressor (docs/compression.md "LGC").
template <typename T>
std::unique_ptr<Compressor<T>> makeLgc(const CompressorSpec& spec);
// chunk in [1, 2^32 - 1].
template <typename T>
std::unique_ptr<Compressor<T>> makeInt8(uint32_t chunk);
// chunk in [2, 65536], perChunk in [1, chunk - 1] (chunk_topk.cc).
template <typename T>
std::unique_ptr<Compressor<T>> makeTopK2Bit(uint32_t chunk, uint32_t perChunk);
template <typename T>
std::unique_ptr<Compressor<T>> makeDctSign(uint32_t chunk, uint32_t perChunk);
// Wraps `inner` with error feedback.
template <typename T>
std::unique_ptr<Compressor<T>> makeErrorFeedback(std::unique_ptr<Compressor<T>> inner);

// One run of consecutive elements of a layered codec's vector, all in one group.
struct LayeredSegment {
  uint64_t length = 0;  // >= 1
  uint32_t group = 0;
};
// The layered codec (codec 14): group g's elements (its segments, in order) go through inner[g].
// The segments cover the vector in order; adjacent ones differ in group; groups are numbered in
// the order of their first segment, and each has at least one; inner.size() >= 2.
template <typename T>
std::unique_ptr<Compressor<T>> makeLayered(std::vector<std::unique_ptr<Compressor<T>>> inner,
                                           std::vector<LayeredSegment> segments);

// parseFrame plus the checks every decoder shares: the codec id, the element type of T, the
// element count and the exact params length.
template <typename T>
core::Result<FrameView> openFrame(std::span<const std::byte> frame, CodecId codec,
                                  size_t expectedCount, size_t paramsBytes);

// Number of elements a top-k / rand-k codec keeps out of d.
uint64_t keptCount(uint64_t k, double ratio, uint64_t d);

class FrameOut;  // wire.h

// Top-k's float32 frame from what a GPU selected (cuda/codecs.cc): d elements keeping `indices`
// (strictly increasing) with `values` (values[j] at indices[j]), byte for byte the CPU encoder's
// frame for the same selection; topkFrameBound is its most bytes for k kept. readTopKFrame checks
// a top-k frame as the CPU decoder does and, only when it is valid, returns its kept indices and
// values.
void writeTopKFrame(uint64_t d, std::span<const uint32_t> indices, std::span<const float> values,
                    FrameOut& out);
size_t topkFrameBound(uint64_t d, uint64_t k);
core::Status readTopKFrame(std::span<const std::byte> frame, uint64_t d,
                           std::vector<uint32_t>& indices, std::vector<float>& values);

// Count-Sketch's float32 frame pieces for the GPU codec (cuda/codecs_sketch.cc). What a frame
// of d elements carries besides its table (docs/wire_format.md, codec 11):
struct CountSketchHeader {
  bool mean = false;
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint64_t k = 0;          // median: heavy hitters kept (0 in threshold mode)
  float threshold = 0.0f;  // median: keep |estimate| >= threshold * estimated ||x||_2
  uint64_t seed = 0;       // hash seed
  double scale = 0.0;      // lambda
};
// The header the CPU encoder writes for d elements under `spec` with hash `seed` (scale 0).
CountSketchHeader countSketchHeader(const CompressorSpec& spec, uint64_t d, uint64_t seed);
// The frame of a header and its table (rows x cols, row-major), byte for byte the CPU encoder's
// (which writes its frames with it).
void writeCountSketchFrame(const CountSketchHeader& h, uint64_t d, std::span<const float> table,
                           FrameOut& out);
// The CPU decoder's checks of a frame of d elements for `spec` (params, the estimate flag, the
// table's size and finiteness); when valid, its header and its table's bytes (in `frame`).
core::Result<CountSketchHeader> readCountSketchFrame(const CompressorSpec& spec,
                                                     std::span<const std::byte> frame, uint64_t d,
                                                     std::span<const std::byte>& table);
// sqrt(the lower median over rows of sum_c table[j][c]^2): the threshold mode's ||x||_2.
double countSketchL2(std::span<const float> table, uint32_t rows, uint32_t cols);

}  // namespace starling::compression::codecs
