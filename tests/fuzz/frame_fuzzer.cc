// libFuzzer target for the wire frame itself: parseFrame(), which every received message goes
// through first, and decodeDense(), which engine/node.cc uses for uncompressed messages.
//
// Properties checked for every input (fuzz_input.h describes the input):
//  - parseFrame() returns a view or kCorruption, reading only inside the frame;
//  - a view lies inside the frame, within the format's maxima, and writeFrame() of its fields
//    gives back the same bytes: every accepted frame is the one canonical encoding of its fields;
//  - crc32c() (ISA-L) agrees with a bitwise CRC32C;
//  - decodeDense() succeeds exactly for identity frames of the right type, count and payload
//    length, and then returns the payload's values.
//
// With --make-corpus=DIR the binary writes seed inputs into DIR and exits; --print-frame=FILE shows
// the frame an input decodes (fuzz_input.h).
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "compression/frame.h"
#include "core/rng.h"
#include "core/status.h"
#include "tests/fuzz/fuzz_input.h"

namespace starling::fuzz {
namespace {

using compression::CodecId;
using compression::ElementType;

uint32_t referenceCrc32c(std::span<const std::byte> bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (std::byte b : bytes) {
    crc ^= std::to_integer<uint8_t>(b);
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

bool inside(std::span<const std::byte> part, std::span<const std::byte> whole) {
  return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

void checkParse(std::span<const std::byte> frame) {
  auto parsed = compression::parseFrame(frame);
  if (!parsed) {
    require(parsed.status().code() == core::StatusCode::kCorruption,
            "parseFrame() failed but not with kCorruption");
    return;
  }
  const compression::FrameView& v = *parsed;
  require(inside(v.params, frame) && inside(v.payload, frame), "a view points outside the frame");
  require(v.params.size() <= compression::kMaxFrameParamsBytes, "params longer than the maximum");
  require(v.elementCount <= compression::kMaxFrameElements, "element count above the maximum");
  require(v.payload.data() + v.payload.size() + compression::kFrameTrailerBytes ==
              frame.data() + frame.size(),
          "the payload does not end at the trailer");
  require((v.payload.data() - frame.data()) % 8 == 0, "the payload is not at an 8-byte offset");
  std::vector<std::byte> rebuilt;
  compression::writeFrame(v.codec, v.elementType, v.elementCount, v.params, v.payload, rebuilt);
  require(rebuilt.size() == frame.size() &&
              std::memcmp(rebuilt.data(), frame.data(), frame.size()) == 0,
          "an accepted frame is not the canonical encoding of its fields");
}

template <typename T>
void checkDense(std::span<const std::byte> frame, size_t expected) {
  std::vector<T> scratch;
  auto values = compression::decodeDense<T>(frame, expected, scratch);
  auto parsed = compression::parseFrame(frame);
  const bool want = parsed && parsed->codec == CodecId::kIdentity &&
                    parsed->elementType == compression::elementTypeOf<T>() &&
                    parsed->elementCount == expected &&
                    parsed->payload.size() == expected * sizeof(T);
  require(values.isOk() == want, "decodeDense() disagrees with the frame's header");
  if (!values) {
    require(values.status().code() == core::StatusCode::kCorruption,
            "decodeDense() failed but not with kCorruption");
    return;
  }
  require(values->size() == expected, "decodeDense() returned the wrong number of values");
  require(expected == 0 ||
              std::memcmp(values->data(), parsed->payload.data(), expected * sizeof(T)) == 0,
          "decodeDense() values differ from the payload");
}

void writeSeeds(const std::string& dir) {
  core::Rng rng(20240611);
  std::vector<std::byte> frame;
  const uint8_t fix = kFixCrc | kFixPayloadLength | kExactCount;
  for (size_t d : {0, 1, 3, 64, 1000}) {
    std::vector<float> xf(d);
    std::vector<double> xd(d);
    for (size_t i = 0; i < d; ++i) xd[i] = rng.normal();
    for (size_t i = 0; i < d; ++i) xf[i] = static_cast<float>(xd[i]);
    compression::encodeDense<float>(xf, frame);
    writeSeed(dir, "dense-f32-d" + std::to_string(d), fix, frame);
    writeSeed(dir, "dense-f32-d" + std::to_string(d) + "-asis", kExactCount, frame);
    compression::encodeDense<double>(xd, frame);
    writeSeed(dir, "dense-f64-d" + std::to_string(d), fix | kDouble, frame);
    writeSeed(dir, "dense-f64-d" + std::to_string(d) + "-odd", fix | kDouble | kMisalign, frame);
  }
  // Frames of other codecs, with every params length modulo 8.
  for (size_t p = 0; p <= 9; ++p) {
    std::vector<std::byte> params(p), payload(3 * p + 1);
    for (auto& b : params) b = static_cast<std::byte>(rng.below(256));
    for (auto& b : payload) b = static_cast<std::byte>(rng.below(256));
    compression::writeFrame(static_cast<CodecId>(p + 1),
                            p % 2 == 0 ? ElementType::kFloat32 : ElementType::kFloat64, p * 5,
                            params, payload, frame);
    writeSeed(dir, "params" + std::to_string(p), fix, frame);
  }
}

}  // namespace
}  // namespace starling::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using namespace starling::fuzz;
  const std::string dir = handleArguments(*argc, *argv);
  if (!dir.empty()) {
    writeSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace starling::fuzz;
  const FuzzFrame input(data, size);
  const std::span<const std::byte> frame = input.frame();
  checkParse(frame);
  require(starling::compression::crc32c(frame) == referenceCrc32c(frame),
          "crc32c() differs from the bitwise CRC32C");
  if (input.wantsDouble()) {
    checkDense<double>(frame, input.outputSize());
  } else {
    checkDense<float>(frame, input.outputSize());
  }
  return 0;
}
