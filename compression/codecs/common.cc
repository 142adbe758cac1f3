#include <cmath>
#include <string>

#include "compression/codecs/codecs.h"

namespace starling::compression::codecs {

template <typename T>
core::Result<FrameView> openFrame(std::span<const std::byte> frame, CodecId codec,
                                  size_t expectedCount, size_t paramsBytes) {
  auto parsed = parseFrame(frame);
  if (!parsed) return parsed.status();
  const FrameView& v = *parsed;
  if (v.codec != codec) {
    return core::corruption("expected codec " + std::to_string(static_cast<int>(codec)) +
                            ", frame has codec " + std::to_string(static_cast<int>(v.codec)));
  }
  if (v.elementType != elementTypeOf<T>()) return core::corruption("element type mismatch");
  if (v.elementCount != expectedCount) {
    return core::corruption("expected " + std::to_string(expectedCount) + " elements, frame has " +
                            std::to_string(v.elementCount));
  }
  if (v.params.size() != paramsBytes) {
    return core::corruption("codec " + std::to_string(static_cast<int>(codec)) + " takes " +
                            std::to_string(paramsBytes) + " params bytes, frame has " +
                            std::to_string(v.params.size()));
  }
  return v;
}

uint64_t keptCount(uint64_t k, double ratio, uint64_t d) {
  if (d == 0) return 0;
  if (k == 0) {
    const double want = std::ceil(ratio * static_cast<double>(d));
    k = want >= static_cast<double>(d) ? d : static_cast<uint64_t>(want);
  }
  if (k < 1) k = 1;
  if (k > d) k = d;
  return k;
}

template core::Result<FrameView> openFrame<float>(std::span<const std::byte>, CodecId, size_t,
                                                  size_t);
template core::Result<FrameView> openFrame<double>(std::span<const std::byte>, CodecId, size_t,
                                                   size_t);

}  // namespace starling::compression::codecs
