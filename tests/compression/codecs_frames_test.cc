// Codec frames: golden bytes (also of the exponential-level and adaptive codecs), frame sizes
// and a corruption corpus.
#include "tests/compression/codec_family_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;
using namespace family_testing;

// ---------------------------------------------------------------------------------------------
// Golden frames: headers written by hand; the CRC32C computed.

TEST_CASE("golden frames", "[compression][unit]") {
  SECTION("identity float32 {1, -2.5}: encodeDense's bytes") {
    auto c = make<float>(makeSpec(Kind::kIdentity));
    const Frame expected = sealed(
        "53 54 52 4c 01 00 01 00  02 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "08 00 00 00 00 00 00 00  00 00 80 3f 00 00 20 c0");
    CHECK(toHex(encodeWith(*c, std::vector<float>{1.0f, -2.5f})) == toHex(expected));
  }
  SECTION("fp16 float32 {1, -2.5, 1/3, 1e6 (saturates), 0}") {
    auto c = make<float>(makeSpec(Kind::kFp16));
    const Frame expected = sealed(
        "53 54 52 4c 01 01 01 00  05 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "0a 00 00 00 00 00 00 00  00 3c 00 c1 55 35 ff 7b  00 00");
    const std::vector<float> x = {1.0f, -2.5f, 1.0f / 3, 1e6f, 0.0f};
    CHECK(toHex(encodeWith(*c, x)) == toHex(expected));
    CHECK(decodeOk(*c, expected, 5) ==
          std::vector<float>{1.0f, -2.5f, 0.333251953125f, 65504.0f, 0.0f});
  }
  SECTION("bf16 float64 {1, -2.5, 1/3, 1e39 (saturates)}") {
    auto c = make<double>(makeSpec(Kind::kBf16));
    const Frame expected = sealed(
        "53 54 52 4c 01 02 02 00  04 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "08 00 00 00 00 00 00 00  80 3f 20 c0 ab 3e 7f 7f");
    CHECK(toHex(encodeWith(*c, std::vector<double>{1.0, -2.5, 1.0 / 3, 1e39})) == toHex(expected));
  }
  SECTION("topk k=2 float64 {0.5, -3, 2, 0, 1}") {
    auto c = make<double>(topkSpec(2));
    // count 2 | index 1 | gap 1 | -3.0 | 2.0
    const Frame expected = sealed(
        "53 54 52 4c 01 03 02 00  05 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "16 00 00 00 00 00 00 00  02 00 00 00 01 01"
        "00 00 00 00 00 00 08 c0  00 00 00 00 00 00 00 40");
    CHECK(toHex(encodeWith(*c, std::vector<double>{0.5, -3, 2, 0, 1})) == toHex(expected));
  }
  SECTION("topk k=2 float32 d=300: a two-byte index varint") {
    auto c = make<float>(topkSpec(2));
    std::vector<float> x(300, 0.0f);
    x[5] = 1, x[200] = -4, x[299] = 2;
    // count 2 | index 200 = c8 01 | gap 99 = 63 | -4.0f | 2.0f
    const Frame expected = sealed(
        "53 54 52 4c 01 03 01 00  2c 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "0f 00 00 00 00 00 00 00  02 00 00 00 c8 01 63 00  00 80 c0 00 00 00 40");
    CHECK(toHex(encodeWith(*c, x)) == toHex(expected));
  }
  SECTION("randk k=d=2 scaled float32 {1, -2}") {
    auto c = make<float>(randkSpec(2, true));
    // params: scaled = 1, padded to 8 | count 2 | index 0 | gap 1 | 1.0f | -2.0f
    const Frame expected = sealed(
        "53 54 52 4c 01 04 01 00  02 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00"
        "0e 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00"
        "02 00 00 00 00 01 00 00  80 3f 00 00 00 c0");
    CHECK(toHex(encodeWith(*c, std::vector<float>{1, -2})) == toHex(expected));
  }
  SECTION("sign float32 {1, -2, 0, 3}") {
    auto c = make<float>(makeSpec(Kind::kSign));
    // scale 6/4 = 1.5f | signs: bit 1
    const Frame expected = sealed(
        "53 54 52 4c 01 05 01 00  04 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "05 00 00 00 00 00 00 00  00 00 c0 3f 02");
    CHECK(toHex(encodeWith(*c, std::vector<float>{1, -2, 0, 3})) == toHex(expected));
  }
  SECTION("sign float64 {-1, 1, -1, 1, 0, -1, 1, 1, -2}") {
    auto c = make<double>(makeSpec(Kind::kSign));
    // scale 9/9 = 1.0 | signs: bits 0, 2, 5 -> 25, bit 8 -> 01
    const Frame expected = sealed(
        "53 54 52 4c 01 05 02 00  09 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "0a 00 00 00 00 00 00 00  00 00 00 00 00 00 f0 3f  25 01");
    CHECK(toHex(encodeWith(*c, std::vector<double>{-1, 1, -1, 1, 0, -1, 1, 1, -2})) ==
          toHex(expected));
  }
  SECTION("qsgd 5 bits l2 bucket 512 float32 {3, -4, 0}: levels 9, -12, 0 of s = 15") {
    auto c = make<float>(qsgdSpec(5, 512, false));
    // params: bits 5, l2, bucket 512 | scale 5.0f | codes 9, 16|12, 0 in 5-bit fields, LSB first
    const Frame expected = sealed(
        "53 54 52 4c 01 06 01 00  03 00 00 00 00 00 00 00  06 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  05 00 00 02 00 00 00 00  00 00 a0 40 89 03");
    for (uint64_t seed = 1; seed < 4; ++seed) {  // every level is exact: no rounding draw matters
      CHECK(toHex(encodeWith(*c, std::vector<float>{3, -4, 0}, seed)) == toHex(expected));
    }
  }
  SECTION("qsgd 3 bits linf bucket 2 float64 {3, -2, 1, 0}: levels 3, -2 | 3, 0 of s = 3") {
    auto c = make<double>(qsgdSpec(3, 2, true));
    // params: bits 3, linf, bucket 2 | scales 3.0f, 1.0f | codes 3, 4|2, 3, 0 in 3-bit fields
    const Frame expected = sealed(
        "53 54 52 4c 01 06 02 00  04 00 00 00 00 00 00 00  06 00 00 00 00 00 00 00"
        "0a 00 00 00 00 00 00 00  03 01 02 00 00 00 00 00  00 00 40 40 00 00 80 3f  f3 00");
    CHECK(toHex(encodeWith(*c, std::vector<double>{3, -2, 1, 0})) == toHex(expected));
    CHECK(decodeOk(*c, expected, 4) == std::vector<double>{3, -2, 1, 0});
  }
}

// ---------------------------------------------------------------------------------------------
// Frame sizes

TEMPLATE_TEST_CASE("frame sizes follow the wire format's formulas", "[compression][unit]", float,
                   double) {
  constexpr size_t kOverhead = kFrameHeaderBytes + kFrameTrailerBytes;  // 36
  constexpr size_t kValue = sizeof(TestType);
  const size_t d = 1000;
  std::vector<TestType> x(d);
  for (size_t i = 0; i < d; ++i) x[i] = static_cast<TestType>(i + 1);  // the largest at the end

  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kIdentity)), x).size() == kOverhead + d * kValue);
  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kFp16)), x).size() == kOverhead + 2 * d);
  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kBf16)), x).size() == kOverhead + 2 * d);
  // top-10 = indices 990..999: count 4 + varint(990) 2 + nine gaps of 1 + 10 values.
  CHECK(encodeWith(*make<TestType>(topkSpec(10)), x).size() == kOverhead + 4 + 2 + 9 + 10 * kValue);
  // rand-k with k = d keeps every index: 1 + 999 one-byte varints; params 1 byte padded to 8.
  CHECK(encodeWith(*make<TestType>(randkSpec(d, true)), x).size() ==
        kOverhead + 8 + 4 + d + d * kValue);
  // rand-k 10 of 1000: the varint bytes depend on the gaps drawn.
  {
    auto c = make<TestType>(randkSpec(10, false));
    const Frame f = encodeWith(*c, x, 77);
    const auto y = decodeOk(*c, f, d);
    size_t varints = 0, previous = 0, kept = 0;
    for (size_t i = 0; i < d; ++i) {
      if (y[i] == 0) continue;
      const size_t gap = kept++ == 0 ? i : i - previous;
      varints += gap < 128 ? 1 : 2;
      previous = i;
    }
    CHECK(f.size() == kOverhead + 8 + 4 + varints + 10 * kValue);
  }
  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kSign)), x).size() == kOverhead + kValue + 125);
  // qsgd 4 bits, bucket 512: 2 float32 scales + 1000 * 4 / 8 code bytes; params 6 padded to 8.
  CHECK(encodeWith(*make<TestType>(qsgdSpec(4, 512, false)), x).size() == 36 + 8 + 2 * 4 + 500);
  CHECK(encodeWith(*make<TestType>(qsgdSpec(4, 512, false)), x).size() == 552);
  // qsgd 3 bits, bucket 128: 8 scales (7 x 128 + 104) + ceil(3000 / 8) = 375 code bytes.
  CHECK(encodeWith(*make<TestType>(qsgdSpec(3, 128, true)), x).size() == 36 + 8 + 32 + 375);
  // Empty vectors: just the fixed parts.
  const std::vector<TestType> empty;
  CHECK(encodeWith(*make<TestType>(topkSpec(3)), empty).size() == kOverhead + 4);
  CHECK(encodeWith(*make<TestType>(randkSpec(3, true)), empty).size() == kOverhead + 8 + 4);
  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kSign)), empty).size() == kOverhead + kValue);
  CHECK(encodeWith(*make<TestType>(qsgdSpec(8, 16, false)), empty).size() == kOverhead + 8);
}

// ---------------------------------------------------------------------------------------------
// Corruption corpus

const CompressorSpec kAllSpecs[] = {
    makeSpec(Kind::kIdentity), makeSpec(Kind::kFp16),
    makeSpec(Kind::kBf16),     topkSpec(3),
    randkSpec(3, true),        randkSpec(0, false, 0.5),
    makeSpec(Kind::kSign),     qsgdSpec(3, 4, false),
    qsgdSpec(8, 512, true),
};

TEMPLATE_TEST_CASE("malformed frames of every codec are corruption", "[compression][unit]", float,
                   double) {
  for (const CompressorSpec& spec : kAllSpecs) {
    for (size_t d : {size_t{0}, size_t{7}, size_t{20}}) {
      CAPTURE(compressorKindName(spec.kind), d);
      requireMalformedRejected<TestType>(spec, d);
    }
  }
}

TEMPLATE_TEST_CASE("malformed sparse payloads are corruption", "[compression][unit]", float,
                   double) {
  using T = TestType;
  const bool randk = GENERATE(false, true);
  CAPTURE(randk);
  auto c = make<T>(randk ? randkSpec(2, true) : topkSpec(2));
  const CodecId id = c->id();
  const Bytes params = randk ? bytesOf({1}) : Bytes{};
  const size_t d = 5;
  // count k | the given index bytes | k values of 1.0
  auto sparse = [](uint32_t k, const Bytes& indexBytes, size_t values) {
    Bytes p;
    appendU32(p, k);
    p.insert(p.end(), indexBytes.begin(), indexBytes.end());
    for (size_t j = 0; j < values; ++j) appendValue<T>(p, T(1));
    return p;
  };
  // The well-formed reference: indices 1 and 4.
  CHECK(decodeOk(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 3}), 2)), d) ==
        std::vector<T>{0, T(randk ? 2.5 : 1), 0, 0, T(randk ? 2.5 : 1)});

  SECTION("more elements than d") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(6, bytesOf({0, 1, 1, 1, 1, 1}), 6)), d);
  }
  SECTION("no element of a non-empty vector") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(0, {}, 0)), d);
  }
  SECTION("a count without the bytes behind it") {
    requireCorrupt(*c, craft<T>(id, 1000, params, sparse(1000, bytesOf({1, 3}), 2)), 1000);
  }
  SECTION("first index = d") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({5, 1}), 2)), d);
  }
  SECTION("a gap past the end") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 4}), 2)), d);
  }
  SECTION("a huge gap that wraps around 2^64") {
    requireCorrupt(
        *c,
        craft<T>(
            id, d, params,
            sparse(2, bytesOf({1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), 2)),
        d);
  }
  SECTION("a repeated index (gap 0)") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 0}), 2)), d);
  }
  SECTION("a varint that never ends") {
    requireCorrupt(*c,
                   craft<T>(id, d, params,
                            sparse(2,
                                   bytesOf({1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                            0x80, 0x80, 0x80}),
                                   0)),
                   d);
  }
  SECTION("an overlong varint (redundant zero group)") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 0x83, 0x00}), 2)), d);
  }
  SECTION("an eleven-byte varint") {
    requireCorrupt(
        *c,
        craft<T>(
            id, d, params,
            sparse(1, bytesOf({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}),
                   1)),
        d);
  }
  SECTION("one value missing") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 3}), 1)), d);
  }
  SECTION("one value too many") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 3}), 3)), d);
  }
  SECTION("an empty payload") { requireCorrupt(*c, craft<T>(id, d, params, {}), d); }
  if (randk) {
    SECTION("scaled flag 2") {
      requireCorrupt(*c, craft<T>(id, d, bytesOf({2}), sparse(2, bytesOf({1, 3}), 2)), d);
    }
    SECTION("scaled flag 255") {
      requireCorrupt(*c, craft<T>(id, d, bytesOf({255}), sparse(2, bytesOf({1, 3}), 2)), d);
    }
  }
}

TEMPLATE_TEST_CASE("sign frames with a bad scale or padding are corruption", "[compression][unit]",
                   float, double) {
  using T = TestType;
  using L = std::numeric_limits<T>;
  auto c = make<T>(makeSpec(Kind::kSign));
  auto payload = [](T scale, uint8_t signs) {
    Bytes p;
    appendValue<T>(p, scale);
    p.push_back(std::byte{signs});
    return p;
  };
  const size_t d = 7;
  CHECK(decodeOk(*c, craft<T>(CodecId::kSign, d, {}, payload(T(2), 0x41)), d) ==
        std::vector<T>{-2, 2, 2, 2, 2, 2, -2});
  CHECK(decodeOk(*c, craft<T>(CodecId::kSign, d, {}, payload(T(0), 0)), d) == std::vector<T>(d, 0));
  for (T bad : {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity(), T(-1), T(-0.0)}) {
    CAPTURE(bad);
    requireCorrupt(*c, craft<T>(CodecId::kSign, d, {}, payload(bad, 0)), d);
  }
  requireCorrupt(*c, craft<T>(CodecId::kSign, d, {}, payload(T(1), 0x80)), d);  // bit 7 of 7
  requireCorrupt(*c, craft<T>(CodecId::kSign, d, bytesOf({0}), payload(T(1), 0)), d);
}

TEMPLATE_TEST_CASE("qsgd frames with bad params, scales or codes are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  auto c = make<T>(qsgdSpec(4, 2, false));
  auto params = [](unsigned bits, unsigned linf, uint32_t bucket) {
    Bytes p = bytesOf({bits, linf});
    appendU32(p, bucket);
    return p;
  };
  // d = 3, bits 4, bucket 2: scales 2.0f and 1.0f, codes 7, 8|1 (-1/7), 0 -> bytes 97 00.
  const auto payload = twoBucketPayload;
  const size_t d = 3;
  const Bytes good = payload(2.0f, 1.0f, 0x97, 0x00);
  const auto y = decodeOk(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), good), d);
  CHECK(y == std::vector<T>{T(2.0), T(-2.0 / 7), T(0)});
  // A frame's own params decide how it decodes (this compressor was built with 4 bits, bucket 2):
  // 8 bits, linf, one bucket, scale 1, codes 127, 128|1, 0.
  Bytes own;
  appendValue<float>(own, 1.0f);
  own.insert(own.end(), {std::byte{0x7f}, std::byte{0x81}, std::byte{0x00}});
  CHECK(decodeOk(*c, craft<T>(CodecId::kQsgd, d, params(8, 1, 3), own), d) ==
        std::vector<T>{T(1), T(-1.0 / 127), T(0)});

  for (unsigned bits : {0u, 1u, 9u, 16u, 255u}) {
    CAPTURE(bits);
    requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(bits, 0, 2), good), d);
  }
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 2, 2), good), d);  // linf flag 2
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 0), good), d);  // bucket 0
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 1), good), d);  // 3 scales implied
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 3), good), d);  // 1 scale implied
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(8, 0, 2), good), d);  // 3 code bytes
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, -nan, inf, -inf, -1.0f, -0.0f}) {
    CAPTURE(bad);
    requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, bad, 0x97, 0)),
                   d);
    requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(bad, 1.0f, 0x97, 0)),
                   d);
  }
  // The code "negative zero" (sign bit, level 0) is not canonical.
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, 1.0f, 0x87, 0x00)),
                 d);
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, 1.0f, 0x08, 0x00)),
                 d);
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, 1.0f, 0x97, 0x08)),
                 d);
  // The unused high nibble of the last byte must be zero.
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, 1.0f, 0x97, 0x10)),
                 d);
}

TEMPLATE_TEST_CASE(
    "non-finite input is carried by identity, fp16 and bf16 and rejected in sign "
    "and qsgd frames",
    "[compression][unit]", float, double) {
  using L = std::numeric_limits<TestType>;
  const std::vector<TestType> x = {1, L::quiet_NaN(), -2, L::infinity()};
  for (Kind kind : {Kind::kIdentity, Kind::kFp16, Kind::kBf16}) {
    auto c = make<TestType>(makeSpec(kind));
    const auto y = decodeOk(*c, encodeWith(*c, x), x.size());
    CHECK((y[0] == 1 && std::isnan(y[1]) && y[2] == -2 && y[3] == L::infinity()));
  }
  for (const CompressorSpec& spec :
       {makeSpec(Kind::kSign), qsgdSpec(4, 2, false), qsgdSpec(4, 2, true)}) {
    auto c = make<TestType>(spec);
    requireCorrupt(*c, encodeWith(*c, x), x.size());
  }
  // A norm beyond float32's range has no float32 scale: that bucket's frame is rejected too.
  if constexpr (std::is_same_v<TestType, double>) {
    auto c = make<double>(qsgdSpec(4, 2, false));
    requireCorrupt(*c, encodeWith(*c, std::vector<double>{1e39, 1.0}), 2);
    CHECK(decodeOk(*c, encodeWith(*c, std::vector<double>{1e30, 1.0}), 2)[0] > 0);
  }
}

// Mutated params and payloads, re-sealed so that the CRC is valid: decoding returns ok or
// kCorruption and never reads outside the frame (run under ASan to see the latter).
TEMPLATE_TEST_CASE("mutated frames never crash a decoder", "[compression][unit]", float, double) {
  core::Rng rng(500);
  for (const CompressorSpec& spec : kAllSpecs) {
    CAPTURE(compressorKindName(spec.kind));
    auto c = make<TestType>(spec);
    const size_t d = 37;
    const Frame f = encodeWith(*c, normalVector<TestType>(d, 501));
    const auto view = parseFrame(f);
    REQUIRE(view.isOk());
    int accepted = 0;
    for (int t = 0; t < 3000; ++t) {
      Bytes params(view->params.begin(), view->params.end());
      Bytes payload(view->payload.begin(), view->payload.end());
      mutate(params, payload, rng);
      std::vector<TestType> out(d);
      const core::Status st = c->decode(craft<TestType>(c->id(), d, params, payload), out);
      REQUIRE((st.isOk() || st.code() == StatusCode::kCorruption));
      if (st.isOk()) {
        ++accepted;
        if (spec.kind == Kind::kSign || spec.kind == Kind::kQsgd) {
          REQUIRE(std::all_of(out.begin(), out.end(), [](TestType v) { return std::isfinite(v); }));
        }
      }
    }
    // Not everything is rejected: payload bytes of dense codecs are all valid values.
    if (spec.kind == Kind::kFp16) CHECK(accepted > 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Golden frames: written by hand from docs/wire_format.md; the CRC32C computed. Every element is
// an exact level, so no rounding draw matters.

TEST_CASE("golden frames of the exponential and adaptive codecs", "[compression][unit]") {
  SECTION("nuqsgd 3 bits bucket 4 float32 {2, -2, 2, 2, -1, 0}: levels 1/2 | 1 of s = 3") {
    auto c = make<float>(nuqsgdSpec(3, 4));
    // params: bits 3, bucket 4 (P = 5) | scales 4.0f, 1.0f | codes 2, 4|2, 2, 2, 4|3, 0 (3 bits)
    const Frame expected = sealed(
        "53 54 52 4c 01 07 01 00  06 00 00 00 00 00 00 00  05 00 00 00 00 00 00 00"
        "0b 00 00 00 00 00 00 00  03 04 00 00 00 00 00 00"
        "00 00 80 40 00 00 80 3f  b2 74 00");
    const std::vector<float> x = {2, -2, 2, 2, -1, 0};
    for (uint64_t seed = 1; seed < 4; ++seed) {
      CHECK(toHex(encodeWith(*c, x, seed)) == toHex(expected));
    }
    CHECK(decodeOk(*c, expected, 6) == x);
    // Level 1 is 2^(1-s) = 1/4 of the scale 8: codes 1, 4|1, 0 -> 0x0029 (9 bits, 2 bytes).
    const Frame lowest = sealed(
        "53 54 52 4c 01 07 02 00  03 00 00 00 00 00 00 00  05 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  03 04 00 00 00 00 00 00  00 00 00 41 29 00");
    CHECK(decodeOk(*make<double>(nuqsgdSpec(3, 4)), lowest, 3) == std::vector<double>{2, -2, 0});
  }
  SECTION("natural float32 {1, -2, 1/4, 0, 2^-126, 2^127}") {
    auto c = make<float>(makeSpec(Kind::kNatural));
    // 9-bit codes E | sign << 8: 127, 256|128, 125, 0, 1, 254
    const Frame expected = sealed(
        "53 54 52 4c 01 08 01 00  06 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "07 00 00 00 00 00 00 00  7f 00 f7 01 10 c0 1f");
    const std::vector<float> x = {1, -2, 0.25f, 0, std::ldexp(1.0f, -126), std::ldexp(1.0f, 127)};
    for (uint64_t seed = 1; seed < 4; ++seed) {
      CHECK(toHex(encodeWith(*c, x, seed)) == toHex(expected));
    }
    CHECK(decodeOk(*c, expected, 6) == x);
  }
  SECTION("natural dithering s = 2 l2 float32 {2, -2, 2, 2, 0}: level 1 = 1/2 of the norm 4") {
    auto c = make<float>(ditheringSpec(2, false));
    // params: levels 2, l2 | norm 4.0f | 3-bit codes 1, 4|1, 1, 1, 0
    const Frame expected = sealed(
        "53 54 52 4c 01 09 01 00  05 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00  00 00 80 40 69 02");
    CHECK(toHex(encodeWith(*c, std::vector<float>{2, -2, 2, 2, 0})) == toHex(expected));
  }
  SECTION("natural dithering s = 3 linf float64 {4, -1, 2, 0}: levels 3, 1, 2, 0 of s = 3") {
    auto c = make<double>(ditheringSpec(3, true));
    // params: levels 3, linf | norm 4.0f | 3-bit codes 3, 4|1, 2, 0
    const Frame expected = sealed(
        "53 54 52 4c 01 09 02 00  04 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  03 01 00 00 00 00 00 00  00 00 80 40 ab 00");
    CHECK(toHex(encodeWith(*c, std::vector<double>{4, -1, 2, 0})) == toHex(expected));
    CHECK(decodeOk(*c, expected, 4) == std::vector<double>{4, -1, 2, 0});
  }
  SECTION("topk dithering k = 4 s = 2 float64 {1/2, -2, 2, 0, 2, 2, 1}") {
    auto c = make<double>(topkDitheringSpec(4, 2));
    // params: levels 2 | count 4 | index 1, gaps 1 2 1 | norm 4.0f | 3-bit codes 4|1, 1, 1, 1
    const Frame expected = sealed(
        "53 54 52 4c 01 0a 02 00  07 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00"
        "0e 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00"
        "04 00 00 00 01 01 02 01  00 00 80 40 4d 02");
    const std::vector<double> x = {0.5, -2, 2, 0, 2, 2, 1};
    CHECK(toHex(encodeWith(*c, x)) == toHex(expected));
    // zeta_4 = 9/8 + sqrt(4) 2^-1 min(1, 1) = 17/8: each kept value is +-4 * 1/2 * 8/17.
    const double v = 2.0 / (17.0 / 8);
    CHECK(decodeOk(*c, expected, 7) == std::vector<double>{0, -v, v, 0, v, v, 0});
  }
  SECTION("adacomp bin 2 float32 {1, -3, 1/2, 1/4, 0, 2}, fresh residue") {
    auto c = make<float>(adacompSpec(2));
    // G = x, H = 2x. Bin maxima 3, 1/2, 2: sent 1 (|H| 6), 2 (1), 3 (1/2), 5 (4); not 0 (2 < 3),
    // nor 4 (G = 0). Scale (3 + 1/2 + 1/4 + 2) / 4 = 1.4375.
    // count 4 | index 1, gaps 1 1 2 | scale 1.4375f | signs: the first one negative
    const Frame expected = sealed(
        "53 54 52 4c 01 0c 01 00  06 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "0d 00 00 00 00 00 00 00  04 00 00 00 01 01 01 02  00 00 b8 3f 01");
    CHECK(toHex(encodeWith(*c, std::vector<float>{1, -3, 0.5f, 0.25f, 0, 2})) == toHex(expected));
    CHECK(decodeOk(*c, expected, 6) ==
          std::vector<float>{0, -1.4375f, 1.4375f, 1.4375f, 0, 1.4375f});
  }
  SECTION("dqsgd target 0.05 float32 {3, -4, 0}: 5 bits, the qsgd payload") {
    auto c = make<float>(dqsgdSpec(2, 8, 0.05, 512));
    // B = 3: eps(s) = min(3/s^2, sqrt(3)/s) is 1.73, 0.333, 0.0612 (> 0.05) and 0.0133 for
    // s = 1, 3, 7, 15: 5 bits. params: bits 5, l2, bucket 512 | scale 5.0f | 9, 16|12, 0
    const Frame expected = sealed(
        "53 54 52 4c 01 0d 01 00  03 00 00 00 00 00 00 00  06 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  05 00 00 02 00 00 00 00  00 00 a0 40 89 03");
    CHECK(toHex(encodeWith(*c, std::vector<float>{3, -4, 0})) == toHex(expected));
    CHECK(decodeOk(*c, expected, 3) == std::vector<float>{3, -4, 0});
  }
}

}  // namespace
}  // namespace starling::compression
