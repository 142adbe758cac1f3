// Count-Sketch's frame (docs/wire_format.md, codec 11): the bytes of its params, their checks,
// and the frame of a table. The CPU codec (sketch.cc) writes and reads its frames with these, and
// so do the GPU codec's pieces (codecs.h: countSketchHeader, writeCountSketchFrame,
// readCountSketchFrame), so both write the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "compression/codecs/codecs.h"
#include "core/status.h"

namespace starling::compression::codecs {

inline constexpr size_t kSketchParamsBytes = 34;
inline constexpr uint64_t kSketchMaxCols = uint64_t{1} << 31;

void storeSketchParams(const CountSketchHeader& p, std::byte* out);
// Reads and range-checks the params of a frame for d elements.
core::Result<CountSketchHeader> loadSketchParams(std::span<const std::byte> in, uint64_t d);
// The frame of params `p` and its table (rows x cols); T is float or double.
template <typename T>
void writeSketchFrame(const CountSketchHeader& p, uint64_t d, std::span<const T> table,
                      FrameOut& out);

}  // namespace starling::compression::codecs
