#include <cmath>
#include <cstring>
#include <string>

#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

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

std::byte* beginFrame(CodecId codec, ElementType type, uint64_t elementCount,
                      std::span<const std::byte> params, size_t payloadBytes,
                      std::vector<std::byte>& out) {
  // writeFrame owns the header layout: let it write the frame of an empty payload on the side,
  // copy its header and params, and set the payload length field (u64 at offset 24,
  // docs/wire_format.md). Sizing `out` once keeps a reused buffer from being cleared.
  std::vector<std::byte> head;
  writeFrame(codec, type, elementCount, params, {}, head);
  const size_t payloadAt = head.size() - kFrameTrailerBytes;
  out.resize(payloadAt + payloadBytes + kFrameTrailerBytes);
  std::memcpy(out.data(), head.data(), payloadAt);
  storeLe<uint64_t>(out.data() + 24, payloadBytes);
  return out.data() + payloadAt;
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
