#include "compression/frame.h"

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "crc_reference.h"
#include "hex.h"

namespace starling::compression {
namespace {

using Catch::Matchers::Contains;
using core::StatusCode;

using Frame = std::vector<std::byte>;

using testing::fromHex;
using testing::referenceCrc32c;
using testing::toHex;

void storeU32(Frame& f, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) f[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
void storeU64(Frame& f, size_t at, uint64_t v) {
  for (size_t i = 0; i < 8; ++i) f[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
uint32_t loadU32(const Frame& f, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= std::to_integer<uint32_t>(f[at + i]) << (8 * i);
  return v;
}

// Rewrites the CRC trailer so that only the header checks can reject the frame.
void reseal(Frame& f) {
  const size_t body = f.size() - kFrameTrailerBytes;
  storeU32(f, body, crc32c(std::span<const std::byte>(f).first(body)));
}

template <typename T>
Frame encode(const std::vector<T>& x) {
  Frame f;
  encodeDense<T>(x, f);
  return f;
}

// Decodes from an exactly sized heap copy so that any read past the end is caught under ASan.
template <typename T>
core::Status decodeStatus(const Frame& frame, size_t expectedCount) {
  const Frame copy(frame.begin(), frame.end());
  std::vector<T> scratch;
  return decodeDense<T>(copy, expectedCount, scratch).status();
}

core::Status parseStatus(const Frame& frame) {
  const Frame copy(frame.begin(), frame.end());
  return parseFrame(copy).status();
}

template <typename T>
std::vector<T> testValues(size_t n) {
  std::vector<T> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<T>((static_cast<double>(i) - 3.0) * 0.375 + (i % 3 == 0 ? -1e-3 : 2.5));
  }
  return x;
}

template <typename T>
bool sameBits(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

TEST_CASE("golden float64 frame", "[compression][unit]") {
  const Frame f = encode<double>({1.0, -2.5});
  // Layout from frame.h, by hand: magic 'S' 'T' 'R' 'L', version 1, codec 0 (identity), element
  // type 2 (float64), reserved 0; count u64 = 2; params length u32 = 0; reserved u32 = 0;
  // payload length u64 = 16; 1.0 = 0x3FF0000000000000 and -2.5 = 0xC004000000000000, little
  // endian; then the CRC32C of the 48 bytes before it.
  const Frame expectedBody = fromHex(
      "53 54 52 4c 01 00 02 00"
      "02 00 00 00 00 00 00 00"
      "00 00 00 00 00 00 00 00"
      "10 00 00 00 00 00 00 00"
      "00 00 00 00 00 00 f0 3f"
      "00 00 00 00 00 00 04 c0");
  REQUIRE(expectedBody.size() == 48);
  REQUIRE(f.size() == 52);
  CHECK(denseFrameBytes<double>(2) == 52);
  INFO(toHex(f));
  CHECK(toHex(std::span<const std::byte>(f).first(48)) == toHex(expectedBody));
  const uint32_t crc = crc32c(expectedBody);
  CHECK(crc == referenceCrc32c(expectedBody));
  Frame expected = expectedBody;
  for (int i = 0; i < 4; ++i) expected.push_back(static_cast<std::byte>((crc >> (8 * i)) & 0xff));
  CHECK(toHex(f) == toHex(expected));
}

TEST_CASE("golden float32 frame", "[compression][unit]") {
  const Frame f = encode<float>({1.0f});
  // type 1 (float32), count 1, payload length 4, 1.0f = 0x3F800000 little endian, no padding
  // after the payload, then the CRC32C of the 36 bytes before it.
  const Frame expectedBody = fromHex(
      "53 54 52 4c 01 00 01 00"
      "01 00 00 00 00 00 00 00"
      "00 00 00 00 00 00 00 00"
      "04 00 00 00 00 00 00 00"
      "00 00 80 3f");
  REQUIRE(expectedBody.size() == 36);
  REQUIRE(f.size() == 40);
  CHECK(denseFrameBytes<float>(1) == 40);
  INFO(toHex(f));
  CHECK(toHex(std::span<const std::byte>(f).first(36)) == toHex(expectedBody));
  CHECK(loadU32(f, 36) == crc32c(expectedBody));
  CHECK(loadU32(f, 36) == referenceCrc32c(expectedBody));
}

TEST_CASE("encodeDense clears the output first", "[compression][unit]") {
  Frame f(100, std::byte{0x5a});
  encodeDense<double>(std::vector<double>{1.0, -2.5}, f);
  CHECK(f == encode<double>({1.0, -2.5}));
}

TEMPLATE_TEST_CASE("dense frames round trip in place when aligned", "[compression][unit]", float,
                   double) {
  const size_t n = GENERATE(0, 1, 7, 1000);
  CAPTURE(n);
  const std::vector<TestType> x = testValues<TestType>(n);
  const Frame f = encode<TestType>(x);
  REQUIRE(f.size() == denseFrameBytes<TestType>(n));

  std::vector<TestType> scratch;
  const auto values = decodeDense<TestType>(f, n, scratch);
  INFO(values.status().toString());
  REQUIRE(values.isOk());
  CHECK(sameBits<TestType>(*values, x));
  if (n > 0) {
    // A view of the frame's own payload: no copy.
    CHECK(static_cast<const void*>(values->data()) ==
          static_cast<const void*>(f.data() + kFrameHeaderBytes));
  }
  CHECK(scratch.empty());

  auto parsed = parseFrame(f);
  REQUIRE(parsed.isOk());
  CHECK(parsed->codec == CodecId::kIdentity);
  CHECK(parsed->elementType == elementTypeOf<TestType>());
  CHECK(parsed->elementCount == n);
  CHECK(parsed->params.empty());
  CHECK(parsed->payload.size() == n * sizeof(TestType));
  CHECK(parsed->payload.data() == f.data() + kFrameHeaderBytes);
}

TEMPLATE_TEST_CASE("dense frames decode through scratch when misaligned", "[compression][unit]",
                   float, double) {
  const size_t n = GENERATE(0, 1, 7, 1000);
  CAPTURE(n);
  const std::vector<TestType> x = testValues<TestType>(n);
  const Frame f = encode<TestType>(x);
  Frame shifted(f.size() + 1);
  std::memcpy(shifted.data() + 1, f.data(), f.size());
  const auto frame = std::span<const std::byte>(shifted).subspan(1);
  REQUIRE(reinterpret_cast<uintptr_t>(frame.data() + kFrameHeaderBytes) % alignof(TestType) != 0);

  std::vector<TestType> scratch;
  const auto values = decodeDense<TestType>(frame, n, scratch);
  INFO(values.status().toString());
  REQUIRE(values.isOk());
  CHECK(sameBits<TestType>(*values, x));
  CHECK(scratch.size() == n);
  if (n > 0) {
    CHECK(values->data() == scratch.data());
    CHECK(sameBits<TestType>(scratch, x));
  }
}

TEMPLATE_TEST_CASE("identity frames carry any IEEE value", "[compression][unit]", float, double) {
  using L = std::numeric_limits<TestType>;
  const std::vector<TestType> x = {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity(),
                                   TestType(-0.0), L::denorm_min(), L::max(),      L::lowest()};
  const Frame f = encode<TestType>(x);
  std::vector<TestType> scratch;
  const auto values = decodeDense<TestType>(f, x.size(), scratch);
  INFO(values.status().toString());
  REQUIRE(values.isOk());
  CHECK(sameBits<TestType>(*values, x));
}

TEST_CASE("frames with params are parsed with padding skipped", "[compression][unit]") {
  const std::vector<std::byte> params = {std::byte{0xaa}, std::byte{0xbb}, std::byte{0xcc}};
  const std::vector<double> payload = {4.0, 5.0};
  Frame f;
  writeFrame(CodecId{7}, ElementType::kFloat64, 2, params, std::as_bytes(std::span(payload)), f);
  REQUIRE(f.size() == kFrameHeaderBytes + 8 + 16 + kFrameTrailerBytes);
  auto parsed = parseFrame(f);
  INFO(parsed.status().toString());
  REQUIRE(parsed.isOk());
  CHECK(parsed->codec == CodecId{7});  // unknown codecs are for the dispatch to reject
  CHECK(parsed->params.size() == 3);
  CHECK(parsed->params.data() == f.data() + kFrameHeaderBytes);
  CHECK(parsed->params[2] == std::byte{0xcc});
  CHECK(parsed->payload.size() == 16);
  CHECK(parsed->payload.data() == f.data() + kFrameHeaderBytes + 8);
  // The padding is written as zeros.
  for (size_t i = kFrameHeaderBytes + 3; i < kFrameHeaderBytes + 8; ++i)
    CHECK(f[i] == std::byte{0});
}

// ---- hostile input ------------------------------------------------------------------------

TEMPLATE_TEST_CASE("every truncation of a valid frame is corruption", "[compression][unit]", float,
                   double) {
  const size_t n = GENERATE(0, 1, 7);
  const Frame f = encode<TestType>(testValues<TestType>(n));
  int accepted = 0, wrongCode = 0;
  for (size_t len = 0; len < f.size(); ++len) {
    const Frame cut(f.begin(), f.begin() + static_cast<ptrdiff_t>(len));
    const core::Status p = parseStatus(cut);
    const core::Status d = decodeStatus<TestType>(cut, n);
    if (p.isOk() || d.isOk()) ++accepted;
    if (p.code() != StatusCode::kCorruption || d.code() != StatusCode::kCorruption) ++wrongCode;
  }
  CAPTURE(n);
  CHECK(accepted == 0);
  CHECK(wrongCode == 0);
}

TEMPLATE_TEST_CASE("every single-bit flip of a valid frame is corruption", "[compression][unit]",
                   float, double) {
  const size_t n = GENERATE(0, 1, 7);
  const Frame f = encode<TestType>(testValues<TestType>(n));
  REQUIRE(decodeStatus<TestType>(f, n).isOk());
  int accepted = 0, wrongCode = 0;
  for (size_t bit = 0; bit < f.size() * 8; ++bit) {
    Frame g = f;
    g[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    const core::Status p = parseStatus(g);
    const core::Status d = decodeStatus<TestType>(g, n);
    if (p.isOk() || d.isOk()) {
      ++accepted;
      UNSCOPED_INFO("accepted a flip of bit " << bit);
    }
    if (p.code() != StatusCode::kCorruption || d.code() != StatusCode::kCorruption) ++wrongCode;
  }
  CAPTURE(n);
  CHECK(accepted == 0);
  CHECK(wrongCode == 0);
}

// Each case edits the header of a valid {1.0, -2.5} float64 frame, recomputes the CRC so only the
// targeted check can object, and expects kCorruption with a message about that check.
TEST_CASE("malformed headers are corruption even with a valid CRC", "[compression][unit]") {
  const Frame good = encode<double>({1.0, -2.5});
  REQUIRE(decodeStatus<double>(good, 2).isOk());
  Frame f = good;
  std::string expectWord;

  SECTION("wrong magic") {
    f[3] = std::byte{'M'};
    expectWord = "magic";
  }
  SECTION("magic byte order reversed") {
    f[0] = std::byte{'L'};
    f[1] = std::byte{'R'};
    f[2] = std::byte{'T'};
    f[3] = std::byte{'S'};
    expectWord = "magic";
  }
  SECTION("version 2") {
    f[4] = std::byte{2};
    expectWord = "version";
  }
  SECTION("version 0") {
    f[4] = std::byte{0};
    expectWord = "version";
  }
  SECTION("unknown element type 9") {
    f[6] = std::byte{9};
    expectWord = "element type";
  }
  SECTION("element type 0") {
    f[6] = std::byte{0};
    expectWord = "element type";
  }
  SECTION("reserved byte 7 not zero") {
    f[7] = std::byte{1};
    expectWord = "reserved";
  }
  SECTION("reserved u32 at 20 not zero") {
    f[23] = std::byte{0x80};
    expectWord = "reserved";
  }
  SECTION("payload length one past the buffer") {
    storeU64(f, 24, 17);
    expectWord = "lengths";
  }
  SECTION("payload length one short") {
    storeU64(f, 24, 15);
    expectWord = "lengths";
  }
  SECTION("payload length 2^40") {
    storeU64(f, 24, uint64_t{1} << 40);
    expectWord = "lengths";
  }
  SECTION("payload length UINT64_MAX") {
    storeU64(f, 24, std::numeric_limits<uint64_t>::max());
    expectWord = "lengths";
  }
  SECTION("element count above kMaxFrameElements") {
    storeU64(f, 8, kMaxFrameElements + 1);
    expectWord = "count";
  }
  SECTION("element count UINT64_MAX") {
    storeU64(f, 8, std::numeric_limits<uint64_t>::max());
    expectWord = "count";
  }
  SECTION("params length above kMaxFrameParamsBytes") {
    storeU32(f, 16, kMaxFrameParamsBytes + 1);
    expectWord = "params";
  }
  SECTION("params length UINT32_MAX") {
    storeU32(f, 16, std::numeric_limits<uint32_t>::max());
    expectWord = "params";
  }
  SECTION("params length within the maximum but past the payload") {
    storeU32(f, 16, 24);  // 24 > the 16 bytes between header and trailer
    expectWord = "lengths";
  }
  SECTION("params length that would eat the payload") {
    storeU32(f, 16, 8);  // params 8 + payload 16 != 16
    expectWord = "lengths";
  }
  SECTION("codec id 7") {
    f[5] = std::byte{7};
    expectWord = "codec";
  }
  SECTION("header count disagrees with the expected count") {
    storeU64(f, 8, 3);
    expectWord = "expected";
  }
  reseal(f);
  const core::Status st = decodeStatus<double>(f, 2);
  INFO(st.toString());
  CHECK(st.code() == StatusCode::kCorruption);
  CHECK_THAT(st.message(), Contains(expectWord, Catch::CaseSensitive::No));
}

TEST_CASE("a valid frame is refused when it is not what the caller expects",
          "[compression][unit]") {
  const Frame d = encode<double>({1.0, -2.5});
  const Frame s = encode<float>({1.0f, -2.5f});

  SECTION("count mismatch") {
    for (size_t expected : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
      const core::Status st = decodeStatus<double>(d, expected);
      INFO(expected << ": " << st.toString());
      CHECK(st.code() == StatusCode::kCorruption);
    }
  }
  SECTION("float frame decoded as double") {
    CHECK(decodeStatus<double>(s, 2).code() == StatusCode::kCorruption);
    CHECK(decodeStatus<double>(s, 1).code() == StatusCode::kCorruption);  // same payload bytes
    // A float32-typed frame whose count and payload length both fit two doubles: only the
    // element type check stands between it and being read as float64.
    const std::vector<double> payload = {1.0, -2.5};
    Frame f;
    writeFrame(CodecId::kIdentity, ElementType::kFloat32, 2, {}, std::as_bytes(std::span(payload)),
               f);
    REQUIRE(parseStatus(f).isOk());
    const core::Status st = decodeStatus<double>(f, 2);
    CHECK(st.code() == StatusCode::kCorruption);
    CHECK_THAT(st.message(), Contains("type"));
  }
  SECTION("double frame decoded as float") {
    CHECK(decodeStatus<float>(d, 2).code() == StatusCode::kCorruption);
    CHECK(decodeStatus<float>(d, 4).code() == StatusCode::kCorruption);  // same payload bytes
  }
  SECTION("codec id 7 written properly is refused by the identity decoder") {
    const std::vector<double> payload = {1.0, -2.5};
    Frame f;
    writeFrame(CodecId{7}, ElementType::kFloat64, 2, {}, std::as_bytes(std::span(payload)), f);
    REQUIRE(parseStatus(f).isOk());
    const core::Status st = decodeStatus<double>(f, 2);
    CHECK(st.code() == StatusCode::kCorruption);
    CHECK_THAT(st.message(), Contains("codec"));
  }
  SECTION("header count that disagrees with the payload size") {
    // count 3 but only two doubles of payload: the frame is self-consistent in length, so only
    // the count-vs-payload check can catch it.
    const std::vector<double> payload = {1.0, -2.5};
    Frame f;
    writeFrame(CodecId::kIdentity, ElementType::kFloat64, 3, {}, std::as_bytes(std::span(payload)),
               f);
    REQUIRE(parseStatus(f).isOk());
    CHECK(decodeStatus<double>(f, 3).code() == StatusCode::kCorruption);
    CHECK(decodeStatus<double>(f, 2).code() == StatusCode::kCorruption);
  }
  SECTION("identity frame with params is not a dense frame of that count") {
    const std::vector<std::byte> params = {std::byte{1}};
    const std::vector<double> payload = {1.0, -2.5};
    Frame f;
    writeFrame(CodecId::kIdentity, ElementType::kFloat64, 2, params,
               std::as_bytes(std::span(payload)), f);
    REQUIRE(parseStatus(f).isOk());
    // Params are not part of the identity codec; the payload still holds exactly 2 doubles, so
    // this one is allowed. What must not happen is the params being read as payload.
    std::vector<double> scratch;
    auto v = decodeDense<double>(f, 2, scratch);
    REQUIRE(v.isOk());
    CHECK((*v)[0] == 1.0);
    CHECK((*v)[1] == -2.5);
  }
}

// frame.h: parseFrame "Checks magic, version, lengths, padding and CRC". The writer zeroes the
// params padding; a frame whose padding is not zero (CRC recomputed) is refused like the reserved
// header bytes are.
TEST_CASE("non-zero params padding is corruption", "[compression][unit]") {
  const std::vector<std::byte> params = {std::byte{0xaa}, std::byte{0xbb}, std::byte{0xcc}};
  const std::vector<double> payload = {4.0, 5.0};
  Frame good;
  writeFrame(CodecId::kIdentity, ElementType::kFloat64, 2, params,
             std::as_bytes(std::span(payload)), good);
  REQUIRE(parseStatus(good).isOk());
  // Each of the 5 bytes of padding after the 3 bytes of params, and each bit of it.
  for (size_t at = kFrameHeaderBytes + 3; at < kFrameHeaderBytes + 8; ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      CAPTURE(at, bit);
      Frame f = good;
      f[at] ^= static_cast<std::byte>(1 << bit);
      reseal(f);
      const core::Status st = parseStatus(f);
      CHECK(st.code() == StatusCode::kCorruption);
      CHECK_THAT(st.message(), Contains("padding"));
      CHECK(decodeStatus<double>(f, 2).code() == StatusCode::kCorruption);
    }
  }
  // The params themselves are not padding: any value is accepted there.
  Frame f = good;
  f[kFrameHeaderBytes + 2] = std::byte{0xff};
  reseal(f);
  CHECK(parseStatus(f).isOk());
}

TEMPLATE_TEST_CASE("Checksum::kSkip checks everything but the CRC", "[compression][unit]", float,
                   double) {
  // For bytes a transport vouches for: a wrong CRC is not looked at, every other defect is
  // still corruption.
  const size_t n = 7;
  const auto values = testValues<TestType>(n);
  Frame f = encode<TestType>(values);
  f[f.size() - 1] ^= std::byte{0x5a};  // the CRC alone is wrong
  std::vector<TestType> scratch;
  CHECK(compression::decodeDense<TestType>(f, n, scratch).status().code() ==
        StatusCode::kCorruption);
  auto skipped = compression::decodeDense<TestType>(f, n, scratch, compression::Checksum::kSkip);
  REQUIRE(skipped.isOk());
  REQUIRE(skipped->size() == n);
  for (size_t k = 0; k < n; ++k) {
    if (std::isnan(values[k])) {
      CHECK(std::isnan((*skipped)[k]));
    } else {
      CHECK((*skipped)[k] == values[k]);
    }
  }
  CHECK(compression::parseFrame(f, compression::Checksum::kSkip).isOk());
  // Header, length, type and count defects are caught without the CRC.
  const auto skipStatus = [&](const Frame& g, size_t count) {
    return compression::decodeDense<TestType>(g, count, scratch, compression::Checksum::kSkip)
        .status()
        .code();
  };
  Frame badMagic = f;
  badMagic[0] ^= std::byte{1};
  CHECK(skipStatus(badMagic, n) == StatusCode::kCorruption);
  Frame badCount = f;
  badCount[8] ^= std::byte{1};
  CHECK(skipStatus(badCount, n) == StatusCode::kCorruption);
  Frame badLength = f;
  badLength[24] ^= std::byte{8};
  CHECK(skipStatus(badLength, n) == StatusCode::kCorruption);
  const Frame cut(f.begin(), f.end() - 1);
  CHECK(skipStatus(cut, n) == StatusCode::kCorruption);
  CHECK(skipStatus(f, n + 1) == StatusCode::kCorruption);
}

}  // namespace
}  // namespace starling::compression
