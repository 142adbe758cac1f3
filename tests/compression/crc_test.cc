// CRC32C (compression/frame.h): the ISA-L-backed crc32c() and Crc32c against a bit-at-a-time
// reference at every length, offset and split, and the vector state ISA-L's AVX-512 path leaves.
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "compression/frame.h"
#include "crc_reference.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace starling::compression {
namespace {

using Frame = std::vector<std::byte>;
using testing::referenceCrc32c;

std::span<const std::byte> asBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST_CASE("crc32c matches the CRC-32C check value", "[compression][unit]") {
  CHECK(crc32c(asBytes("123456789")) == 0xE3069283u);
  CHECK(crc32c({}) == 0u);
  CHECK(crc32c(asBytes("a")) == 0xC1D04330u);
}

TEST_CASE("crc32c agrees with a bitwise reference at every length and offset",
          "[compression][unit]") {
  std::vector<std::byte> data(300);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  int mismatches = 0;
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t len = 0; offset + len <= data.size(); ++len) {
      const auto s = std::span<const std::byte>(data).subspan(offset, len);
      if (crc32c(s) != referenceCrc32c(s)) ++mismatches;
    }
  }
  CHECK(mismatches == 0);
  CHECK(referenceCrc32c(asBytes("123456789")) == 0xE3069283u);  // the reference itself is right
}

TEST_CASE("Crc32c over pieces equals the bitwise reference over the whole, at every split",
          "[compression][unit]") {
  std::vector<std::byte> data(300);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 37 + 11) & 0xff);
  const std::span<const std::byte> all(data);
  const uint32_t want = referenceCrc32c(all);
  int mismatches = 0;
  for (size_t a = 0; a <= data.size(); a += 7) {
    for (size_t b = a; b <= data.size(); b += 13) {
      Crc32c c;
      c.update(all.first(a));
      c.update(all.subspan(a, b - a));
      c.update(all.subspan(b));
      if (c.value() != want) ++mismatches;
    }
  }
  CHECK(mismatches == 0);
  CHECK(Crc32c().value() == 0u);  // nothing fed: the CRC of no bytes
  // sealFrame(out, crc) writes what sealFrame(out) computes itself.
  Frame f;
  const auto payload = beginDense<float>(5, f);
  for (size_t k = 0; k < 5; ++k) payload[k] = static_cast<float>(k) - 1.5f;
  Frame g = f;
  sealFrame(f);
  Crc32c c;
  c.update(std::span<const std::byte>(g).first(g.size() - kFrameTrailerBytes));
  sealFrame(std::span<std::byte>(g), c.value());
  CHECK(f == g);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// XGETBV with ECX = 1 (where the CPU has it): which parts of the vector state are in use. Bit 2 is
// the upper halves of the YMM registers, bit 6 the upper halves of ZMM0-15 (the ones legacy SSE
// instructions write). Returns nullopt where the CPU cannot say.
std::optional<uint64_t> vectorStateInUse() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(0xd, 1, &a, &b, &c, &d) || !(a & (1u << 2))) return std::nullopt;
  uint32_t lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return (uint64_t{hi} << 32 | lo) & ((1u << 2) | (1u << 6));
}

TEST_CASE("a CRC leaves no vector registers' upper halves in use", "[compression][unit]") {
  // ISA-L's AVX-512 CRC returns with them in use, and every legacy-SSE loop of the portable build
  // after it ran about 5x slower on the CI machine's CPU (compression/frame.cc). Each way to a CRC
  // is tried on a buffer large enough for ISA-L's widest path.
  std::vector<std::byte> data(64 * 1024, std::byte{0x5a});
  const std::span<const std::byte> bytes(data);
  Frame frame;
  const auto payload = beginDense<float>(8192, frame);
  std::fill(payload.begin(), payload.end(), 1.5f);
  std::vector<float> values(8192, 2.5f);
  uint32_t sink = 0;
  const std::vector<std::pair<const char*, std::function<void()>>> ways = {
      {"crc32c", [&] { sink += crc32c(bytes); }},
      {"Crc32c::update", [&] {
         Crc32c c;
         c.update(bytes);
         sink += c.value();
       }},
      {"sealFrame", [&] { sealFrame(frame); }},
      {"encodeDense", [&] { encodeDense<float>(values, frame); }},
  };
  for (const auto& [name, call] : ways) {
    CAPTURE(name);
    call();
    const auto inUse = vectorStateInUse();  // at once: nothing in between may clear it
    if (!inUse) {
      WARN("this CPU cannot report its vector state (XGETBV 1): not checked");
      return;
    }
    CHECK(*inUse == 0);
  }
  CHECK(sink != 0);
}
#endif

}  // namespace
}  // namespace starling::compression
