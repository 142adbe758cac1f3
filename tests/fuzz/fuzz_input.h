// Shared by the libFuzzer targets (tests/fuzz/*_fuzzer.cc): turning a fuzzer input into the frame
// a decoder sees, writing seed corpora, and failing loudly when a property does not hold.
//
// A fuzzer input is one control byte followed by a frame. Most mutations of a frame break its
// CRC32C or its length fields, so a decoder would reject them before reaching the codec's own
// checks; the control byte lets the fuzzer ask for those two fields to be rewritten, so that most
// executions exercise the payload parsing (docs/testing.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compression/frame.h"

namespace starling::fuzz {

// Control byte, bit by bit.
inline constexpr uint8_t kFixCrc = 1u << 0;            // rewrite the CRC32C trailer
inline constexpr uint8_t kFixPayloadLength = 1u << 1;  // rewrite the payload length field
inline constexpr uint8_t kMisalign = 1u << 2;          // place the frame at an odd address
inline constexpr uint8_t kDouble = 1u << 3;            // decode as float64 (else float32)
inline constexpr uint8_t kVariant = 1u << 4;           // the target's second parameter set
inline constexpr int kCountDeltaShift = 5;             // bits 5-7: out size = count + (v - 4)
inline constexpr uint8_t kExactCount = 4u << kCountDeltaShift;

// Largest output vector a target decodes into.
inline constexpr uint64_t kMaxElements = uint64_t{1} << 16;

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

inline void require(bool ok, const char* what) {
  if (!ok) fail(what);
}

inline uint64_t loadLe(const std::byte* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{std::to_integer<uint8_t>(p[i])} << (8 * i);
  return v;
}

inline void storeLe(std::byte* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

// The frame part of one fuzzer input, copied into a buffer the target owns (and may misalign).
class FuzzFrame {
 public:
  FuzzFrame(const uint8_t* data, size_t size) {
    if (size == 0) return;
    control_ = data[0];
    const size_t n = size - 1;
    const size_t at = (control_ & kMisalign) != 0 ? 1 : 0;
    storage_.resize(at + n);
    if (n > 0) std::memcpy(storage_.data() + at, data + 1, n);
    frame_ = std::span<std::byte>(storage_).subspan(at);
    using compression::kFrameHeaderBytes;
    using compression::kFrameTrailerBytes;
    if (frame_.size() < kFrameHeaderBytes + kFrameTrailerBytes) return;
    if ((control_ & kFixPayloadLength) != 0) {
      const uint64_t room = frame_.size() - kFrameHeaderBytes - kFrameTrailerBytes;
      const uint64_t paramsPadded = (loadLe(frame_.data() + 16, 4) + 7) & ~uint64_t{7};
      if (paramsPadded <= room) storeLe(frame_.data() + 24, room - paramsPadded, 8);
    }
    if ((control_ & kFixCrc) != 0) {
      const size_t body = frame_.size() - kFrameTrailerBytes;
      storeLe(frame_.data() + body, compression::crc32c(frame_.first(body)), 4);
    }
  }

  uint8_t control() const { return control_; }
  bool wantsDouble() const { return (control_ & kDouble) != 0; }
  bool wantsVariant() const { return (control_ & kVariant) != 0; }
  std::span<const std::byte> frame() const { return frame_; }

  // The element count in the frame's header (0 when there is no header), moved by the control
  // byte's delta: mostly the right size, sometimes a few off. A count above kMaxElements cannot
  // decode into at most kMaxElements anyway: its low byte is then the size (cheap to run).
  size_t outputSize() const {
    const uint64_t count = frame_.size() >= 16 ? loadLe(frame_.data() + 8, 8) : 0;
    const int delta = (control_ >> kCountDeltaShift) - 4;
    if (count > kMaxElements) return count & 0xff;
    if (delta < 0 && count < static_cast<uint64_t>(-delta)) return 0;
    const uint64_t d = count + static_cast<uint64_t>(static_cast<int64_t>(delta));
    return d > kMaxElements ? kMaxElements : d;
  }

 private:
  uint8_t control_ = 0;
  std::vector<std::byte> storage_;
  std::span<std::byte> frame_;
};

// The value of a "--NAME=VALUE" argument (libFuzzer ignores arguments that start with "--"), or
// empty.
inline std::string flagValue(int argc, char** argv, std::string_view name) {
  const std::string prefix = "--" + std::string(name) + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.substr(0, prefix.size()) == prefix) return std::string(a.substr(prefix.size()));
  }
  return {};
}

// For --print-frame=FILE: prints what a decoder sees for the fuzzer input in FILE (a crash file,
// say) — element type, output size and the frame in hex, CRC and lengths rewritten — so that it
// can become a unit test.
inline void printFrame(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)),
                                std::istreambuf_iterator<char>());
  const FuzzFrame input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  std::printf("control 0x%02x: %s, %s parameters, output of %zu elements\nframe (%zu bytes):\n",
              input.control(), input.wantsDouble() ? "float64" : "float32",
              input.wantsVariant() ? "variant" : "default", input.outputSize(),
              input.frame().size());
  size_t i = 0;
  for (std::byte b : input.frame()) {
    std::printf("%02x%s", std::to_integer<unsigned>(b), ++i % 32 == 0 ? "\n" : "");
  }
  std::printf("\n");
}

// Handles the arguments every target shares; returns the --make-corpus directory (or empty).
inline std::string handleArguments(int argc, char** argv) {
  const std::string frameOf = flagValue(argc, argv, "print-frame");
  if (!frameOf.empty()) {
    printFrame(frameOf);
    std::exit(0);
  }
  return flagValue(argc, argv, "make-corpus");
}

// Writes control byte + frame as DIR/NAME; exits on an I/O error (the seed run then fails).
inline void writeSeed(const std::string& dir, const std::string& name, uint8_t control,
                      std::span<const std::byte> frame) {
  const std::string path = dir + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const char c = static_cast<char>(control);
  f.write(&c, 1);
  f.write(reinterpret_cast<const char*>(frame.data()), static_cast<std::streamsize>(frame.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write seed %s\n", path.c_str());
    std::exit(1);
  }
}

}  // namespace starling::fuzz
