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

#include "compression/compressor.h"
#include "compression/frame.h"
#include "runtime/core/status.h"

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

// parseFrame plus the checks every decoder shares: the codec id, the element type of T, the
// element count and the exact params length.
template <typename T>
core::Result<FrameView> openFrame(std::span<const std::byte> frame, CodecId codec,
                                  size_t expectedCount, size_t paramsBytes);

// Number of elements a top-k / rand-k codec keeps out of d.
uint64_t keptCount(uint64_t k, double ratio, uint64_t d);

}  // namespace starling::compression::codecs
