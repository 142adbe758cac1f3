// Byte helpers shared by the compression tests: hex in and out, for golden frames.
#pragma once

#include <catch2/catch.hpp>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace starling::compression::testing {

using Frame = std::vector<std::byte>;

// "53 54 52 4c ..." -> bytes. Spaces and newlines are ignored.
inline Frame fromHex(std::string_view hex) {
  Frame out;
  int hi = -1;
  for (char c : hex) {
    if (c == ' ' || c == '\n') continue;
    const int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    REQUIRE(v >= 0);
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<std::byte>(hi * 16 + v));
      hi = -1;
    }
  }
  REQUIRE(hi < 0);
  return out;
}

inline std::string toHex(std::span<const std::byte> bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (std::byte b : bytes) {
    const auto v = std::to_integer<unsigned>(b);
    s += kDigits[v >> 4];
    s += kDigits[v & 15];
    s += ' ';
  }
  return s;
}

}  // namespace starling::compression::testing
