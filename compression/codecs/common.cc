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

std::byte* writeFrameHead(CodecId codec, ElementType type, uint64_t elementCount,
                          std::span<const std::byte> params, size_t payloadBytes, std::byte* p) {
  // The layout writeFrame writes (docs/wire_format.md); the golden frames hold both to it.
  const size_t paramsPadded = (params.size() + 7) & ~size_t{7};
  std::memset(p, 0, kFrameHeaderBytes);  // the reserved fields
  storeLe<uint32_t>(p + 0, kFrameMagic);
  p[4] = std::byte{kFrameVersion};
  p[5] = static_cast<std::byte>(codec);
  p[6] = static_cast<std::byte>(type);
  storeLe<uint64_t>(p + 8, elementCount);
  storeLe<uint32_t>(p + 16, static_cast<uint32_t>(params.size()));
  storeLe<uint64_t>(p + 24, payloadBytes);
  std::byte* at = p + kFrameHeaderBytes;
  if (!params.empty()) std::memcpy(at, params.data(), params.size());
  std::memset(at + params.size(), 0, paramsPadded - params.size());
  return at + paramsPadded;
}

std::byte* FrameOut::begin(CodecId codec, ElementType type, uint64_t elementCount,
                           std::span<const std::byte> params, size_t payloadBytes) {
  const size_t n = frameBytesFor(params.size(), payloadBytes);
  if (vector_ != nullptr) {
    vector_->resize(n);
    frame_ = *vector_;
  } else if (n <= span_.size()) {
    frame_ = span_.first(n);
  } else {
    needed_ = n;
    frame_ = {};
    return nullptr;
  }
  payload_ = writeFrameHead(codec, type, elementCount, params, payloadBytes, frame_.data());
  payloadBytes_ = payloadBytes;
  return payload_;
}

void FrameOut::write(CodecId codec, ElementType type, uint64_t elementCount,
                     std::span<const std::byte> params, std::span<const std::byte> payload) {
  std::byte* p = begin(codec, type, elementCount, params, payload.size());
  if (p == nullptr) return;
  if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
  seal();
}

void FrameOut::seal() {
  if (ok()) sealFrame(frame_);
}

core::Status FrameOut::status() const {
  if (ok()) return core::Status::ok();
  return core::invalidArgument("the frame needs " + std::to_string(needed_) +
                               " bytes; the buffer has " + std::to_string(span_.size()));
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
