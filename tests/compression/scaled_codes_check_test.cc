// checkScaledCodes (compression/codecs/scaled_codes.cc) checks codes of 2, 4 and 8 bits on the
// packed stream, many fields to a 64-bit word, before it ever unpacks them. Every answer is
// checked here against a reference that reads the stream one bit at a time: the same verdict, and
// the same first bad code named, for widths packed and not, levels s below and at the field's
// top, and a bad code at every kind of position (first word, word tail, last whole byte, the
// codes of a part byte).
#include <catch2/catch.hpp>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compression/codecs/bits.h"

namespace starling::compression::codecs {
namespace {

uint32_t codeAt(const std::vector<std::byte>& stream, uint64_t i, int width) {
  uint32_t v = 0;
  for (int b = 0; b < width; ++b) {
    const uint64_t bit = i * static_cast<uint64_t>(width) + static_cast<uint64_t>(b);
    v |= ((std::to_integer<uint32_t>(stream[bit / 8]) >> (bit % 8)) & 1u) << b;
  }
  return v;
}

// What the first bad code of the stream is, by the reference: nullopt when every code is good.
std::optional<std::string> firstBad(const std::vector<std::byte>& stream, uint64_t n,
                                    const ScaledCodes& q) {
  const int width = q.codeBits();
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t c = codeAt(stream, i, width);
    if (c == q.signBit()) return std::string("negative zero");
    const uint32_t level = c & (q.signBit() - 1);
    if (level > q.s) return "level " + std::to_string(level) + " above " + std::to_string(q.s);
  }
  return std::nullopt;
}

void put(std::vector<std::byte>& stream, uint64_t i, int width, uint32_t code) {
  for (int b = 0; b < width; ++b) {
    const uint64_t bit = i * static_cast<uint64_t>(width) + static_cast<uint64_t>(b);
    const auto mask = std::byte(1u << (bit % 8));
    stream[bit / 8] = ((code >> b) & 1u) != 0 ? (stream[bit / 8] | mask) : (stream[bit / 8] & ~mask);
  }
}

TEST_CASE("the packed code check gives the verdict and the message of a bit-by-bit reference",
          "[compression][unit]") {
  std::mt19937_64 rng(20261127);
  int checked = 0, bad = 0;
  for (const int levelBits : {1, 2, 3, 4, 7}) {  // codes of 2, 3, 4, 5 and 8 bits
    const uint32_t top = (1u << levelBits) - 1;
    for (const uint32_t s : {1u, top / 2 + 1, top - 1, top}) {
      if (s < 1 || s > top) continue;
      ScaledCodes q;
      q.s = s;
      q.levelBits = levelBits;
      q.bucket = 64;
      const int width = q.codeBits();
      for (const uint64_t n : {uint64_t{1}, uint64_t{3}, uint64_t{7}, uint64_t{31}, uint64_t{64},
                               uint64_t{65}, uint64_t{200}, uint64_t{1001}, uint64_t{4099}}) {
        const uint64_t buckets = q.buckets(n);
        std::vector<std::byte> payload(q.payloadBytes(n), std::byte{0});
        for (uint64_t b = 0; b < buckets; ++b) {
          const float scale = 1.5f;
          std::memcpy(payload.data() + 4 * b, &scale, 4);  // little-endian host
        }
        // Good codes everywhere: random levels 0..s with a random sign (never -0).
        std::vector<std::byte> stream(payload.size() - 4 * buckets, std::byte{0});
        for (uint64_t i = 0; i < n; ++i) {
          const auto level = static_cast<uint32_t>(rng() % (s + 1));
          put(stream, i, width, level | (level != 0 && (rng() & 1) ? q.signBit() : 0u));
        }
        // Then one bad code, or none, at positions across the stream.
        const uint64_t wholeCodes = n * static_cast<uint64_t>(width) / 8 * 8 / width;
        std::vector<std::optional<uint64_t>> places = {std::nullopt, 0, n - 1, n / 2};
        if (wholeCodes > 0) places.push_back(wholeCodes - 1);
        if (wholeCodes < n) places.push_back(wholeCodes);
        for (int r = 0; r < 4; ++r) places.push_back(rng() % n);
        for (const auto& at : places) {
          for (const bool negativeZero : {true, false}) {
            if (!negativeZero && s == top) continue;  // no level above s fits the field
            auto st = stream;
            if (at && negativeZero) {
              put(st, *at, width, q.signBit());
            } else if (at) {  // a level in (s, top], either sign
              const uint32_t over = s + 1 + static_cast<uint32_t>(rng() % (top - s));
              put(st, *at, width, over | ((rng() & 1) ? q.signBit() : 0u));
            }
            auto p = payload;
            std::memcpy(p.data() + 4 * buckets, st.data(), st.size());
            const auto want = firstBad(st, n, q);
            const core::Status got = checkScaledCodes(p, q, n, "test");
            INFO("width " << width << ", s " << s << ", n " << n << ", bad code at "
                          << (at ? std::to_string(*at) : "none") << ": " << got.toString());
            ++checked;
            if (!want) {
              CHECK(got.isOk());
            } else {
              ++bad;
              REQUIRE_FALSE(got.isOk());
              CHECK(got.message().find(*want) != std::string::npos);
            }
            if (!at) break;
          }
        }
      }
    }
  }
  CHECK(checked > 500);
  CHECK(bad > 300);
}

}  // namespace
}  // namespace starling::compression::codecs
