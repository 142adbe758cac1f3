// The family codecs' corruption corpora: malformed frames, bad params, scales, codes and
// padding for each codec, non-finite input, and mutated frames, every one refused as corruption
// and none crashing a decoder. codecs_family_adaptive_test.cc has the adaptive codecs' rules and
// the frame sizes.
#include <cmath>
#include <limits>

#include "tests/compression/codec_family_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;
using namespace family_testing;

// ---------------------------------------------------------------------------------------------
// Corruption

TEMPLATE_TEST_CASE("malformed frames of every family codec are corruption", "[compression][unit]",
                   float, double) {
  for (const CompressorSpec& spec : kFamily) {
    for (size_t d : {size_t{0}, size_t{7}, size_t{20}}) {
      CAPTURE(compressorKindName(spec.kind), d);
      requireMalformedRejected<TestType>(spec, d);
    }
  }
}

const float kBadScales[] = {std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            -1.0f,
                            -0.0f};

TEMPLATE_TEST_CASE("nuqsgd and dqsgd frames with bad params, scales or codes are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  const bool dq = GENERATE(false, true);
  CAPTURE(dq);
  auto c = make<T>(dq ? dqsgdSpec(2, 8, 0.1, 512) : nuqsgdSpec(4, 2));
  const CodecId id = c->id();
  // bits 4, bucket 2; d = 3: scales 2.0f, 1.0f; codes 7, 8|1, 0 -> bytes 97 00.
  auto params = [dq](unsigned bits, uint32_t bucket, unsigned norm = 0) {
    Bytes p = bytesOf({bits});
    if (dq) p.push_back(std::byte(norm));
    appendU32(p, bucket);
    return p;
  };
  const auto payload = twoBucketPayload;
  const size_t d = 3;
  const Bytes good = payload(2.0f, 1.0f, 0x97, 0x00);
  // nuqsgd: s = 7, level 7 = 1, level 1 = 2^-6; dqsgd: qsgd's 7/7 and 1/7 (of the scale 2).
  CHECK(decodeOk(*c, craft<T>(id, d, params(4, 2), good), d) ==
        std::vector<T>{T(2), T(dq ? -2.0 / 7 : -2.0 / 64), T(0)});
  for (unsigned bits : {0u, 1u, 9u, 255u}) {
    CAPTURE(bits);
    requireCorrupt(*c, craft<T>(id, d, params(bits, 2), good), d);
  }
  requireCorrupt(*c, craft<T>(id, d, params(4, 0), good), d);  // bucket 0
  requireCorrupt(*c, craft<T>(id, d, params(4, 1), good), d);  // 3 scales implied
  requireCorrupt(*c, craft<T>(id, d, params(4, 3), good), d);  // 1 scale implied
  requireCorrupt(*c, craft<T>(id, d, params(8, 2), good), d);  // 3 code bytes implied
  if (dq) {
    requireCorrupt(*c, craft<T>(id, d, params(4, 2, 1), good), d);  // linf is not dqsgd's
    requireCorrupt(*c, craft<T>(id, d, params(4, 2, 2), good), d);
  }
  for (float bad : kBadScales) {
    CAPTURE(bad);
    requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(2.0f, bad, 0x97, 0)), d);
    requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(bad, 1.0f, 0x97, 0)), d);
  }
  requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(2.0f, 1.0f, 0x87, 0x00)), d);  // -0
  requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(2.0f, 1.0f, 0x97, 0x08)), d);  // -0
  requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(2.0f, 1.0f, 0x97, 0x10)), d);  // pad
}

TEMPLATE_TEST_CASE("natural frames with bad codes or padding are corruption", "[compression][unit]",
                   float, double) {
  using T = TestType;
  auto c = make<T>(makeSpec(Kind::kNatural));
  // d = 2: 18 bits in 3 bytes; codes 127 (1.0) and 128 | 256 (-2.0) -> 7f 00 03.
  auto frame = [](uint32_t code0, uint32_t code1, uint8_t extra = 0) {
    const uint32_t v = code0 | code1 << 9 | uint32_t{extra} << 18;
    return craft<T>(CodecId::kNatural, 2, {},
                    bytesOf({v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff}));
  };
  CHECK(decodeOk(*c, frame(127, 384), 2) == std::vector<T>{1, -2});
  CHECK(decodeOk(*c, frame(1, 254), 2) ==
        std::vector<T>{T(std::ldexp(1.0, -126)), T(std::ldexp(1.0, 127))});
  requireCorrupt(*c, frame(255, 127), 2);        // the code of no value
  requireCorrupt(*c, frame(127, 255 | 256), 2);  // with a sign too
  requireCorrupt(*c, frame(256, 127), 2);        // negative zero
  requireCorrupt(*c, frame(127, 384, 1), 2);     // padding bit 18
  requireCorrupt(*c, frame(127, 384, 0x20), 2);  // padding bit 23
  requireCorrupt(*c, craft<T>(CodecId::kNatural, 2, bytesOf({0}), bytesOf({0x7f, 0, 3})), 2);
  // Long enough for the vector loops of the check: one bad code anywhere fails the frame.
  constexpr size_t kLong = 1000;
  auto longFrame = [](size_t badAt, uint32_t badCode) {
    Bytes bytes((9 * kLong + 7) / 8, std::byte{0});
    for (size_t i = 0; i < kLong; ++i) {
      const uint32_t code = i == badAt ? badCode : (i % 3 == 0 ? 127 : 128 | 256);
      for (size_t b = 0; b < 9; ++b) {
        bytes[(9 * i + b) / 8] |= static_cast<std::byte>(((code >> b) & 1u) << ((9 * i + b) % 8));
      }
    }
    return craft<T>(CodecId::kNatural, kLong, {}, bytes);
  };
  const auto good = decodeOk(*c, longFrame(kLong, 0), kLong);
  REQUIRE(good.size() == kLong);
  for (size_t i = 0; i < kLong; ++i) {
    if (good[i] != (i % 3 == 0 ? T(1) : T(-2))) FAIL("value " << i << " is " << good[i]);
  }
  for (const size_t at : {size_t{0}, size_t{31}, size_t{32}, size_t{517}, kLong - 1}) {
    for (const uint32_t bad : {255u, 255u | 256u, 256u}) {
      INFO("code " << bad << " at " << at);
      requireCorrupt(*c, longFrame(at, bad), kLong);
    }
  }
}

TEMPLATE_TEST_CASE("natural dithering frames with bad params, norms or codes are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  auto c = make<T>(ditheringSpec(4, false));
  // s = 5 takes 3-bit levels and 4-bit codes. d = 3: norm 8.0f; codes 5, 8|4, 0 -> c5 00.
  auto payload = [](float norm, uint8_t b0, uint8_t b1) {
    Bytes p;
    appendValue<float>(p, norm);
    p.push_back(std::byte{b0});
    p.push_back(std::byte{b1});
    return p;
  };
  const CodecId id = CodecId::kNaturalDithering;
  const size_t d = 3;
  CHECK(decodeOk(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0xc5, 0)), d) ==
        std::vector<T>{8, -4, 0});
  CHECK(decodeOk(*c, craft<T>(id, d, bytesOf({5, 1}), payload(8.0f, 0xc1, 0)), d) ==
        std::vector<T>{T(0.5), -4, 0});  // level 1 = 2^-4 of the norm; the norm flag is free
  for (unsigned levels : {0u, 31u, 255u}) {
    requireCorrupt(*c, craft<T>(id, d, bytesOf({levels, 0}), payload(8.0f, 0xc5, 0)), d);
  }
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 2}), payload(8.0f, 0xc5, 0)), d);  // norm flag
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0xc6, 0)), d);  // level 6 > 5
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0xf5, 0)), d);  // level 7
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0x85, 0)), d);  // -0
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0xc5, 0x10)), d);  // pad
  requireCorrupt(*c, craft<T>(id, d, bytesOf({4, 0}), payload(8.0f, 0xc5, 0)), d);     // 5 > s = 4
  for (float bad : kBadScales) {
    CAPTURE(bad);
    requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(bad, 0xc5, 0)), d);
    Bytes empty;
    appendValue<float>(empty, bad);
    requireCorrupt(*c, craft<T>(id, 0, bytesOf({5, 0}), empty), 0);
  }
}

TEMPLATE_TEST_CASE("topk dithering frames with bad counts, indices or codes are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  auto c = make<T>(topkDitheringSpec(2, 4));
  const CodecId id = CodecId::kTopKDithering;
  const size_t d = 5;
  // count k | index bytes | norm | code bytes; s = 2: 3-bit codes.
  const auto payload = countedPayload<float>;
  const Bytes s2 = bytesOf({2});
  // Indices 1 and 4, codes 2 and 4|1 -> 0x2a: norm, -norm/2, over zeta_2 = 9/8 + (sqrt(2)/2)^2.
  const double z = 9.0 / 8 + 0.5;
  CHECK(decodeOk(*c, craft<T>(id, d, s2, payload(2, bytesOf({1, 3}), 4.0f, bytesOf({0x2a}))), d) ==
        std::vector<T>{0, T(4 / z), 0, 0, T(-2 / z)});
  auto bad = [&](uint32_t k, const Bytes& indexBytes, const Bytes& codes,
                 const Bytes& params = bytesOf({2}), float norm = 4.0f) {
    requireCorrupt(*c, craft<T>(id, d, params, payload(k, indexBytes, norm, codes)), d);
  };
  bad(6, bytesOf({0, 1, 1, 1, 1, 1}), bytesOf({0x49, 0x92, 0x04}));  // k > d
  bad(0, {}, {});                                                    // no element of d > 0
  bad(2, bytesOf({5, 1}), bytesOf({0x2a}));                          // index = d
  bad(2, bytesOf({1, 4}), bytesOf({0x2a}));                          // past the end
  bad(2, bytesOf({1, 0}), bytesOf({0x2a}));                          // gap 0
  bad(2, bytesOf({1, 0x83, 0x00}), bytesOf({0x2a}));                 // overlong varint
  bad(2, bytesOf({1, 3}), bytesOf({0x2b}));                          // level 3 > 2
  bad(2, bytesOf({1, 3}), bytesOf({0x22}));                          // -0
  bad(2, bytesOf({1, 3}), bytesOf({0x6a}));                          // padding
  bad(2, bytesOf({1, 3}), bytesOf({0x2a, 0x00}));                    // a code byte too many
  bad(2, bytesOf({1, 3}), {});                                       // none
  bad(2, bytesOf({1, 3}), bytesOf({0x2a}), bytesOf({0}));            // levels 0
  bad(2, bytesOf({1, 3}), bytesOf({0x2a}), bytesOf({31}));           // levels 31
  bad(1000, bytesOf({1, 3}), bytesOf({0x2a}));                       // a count without bytes
  for (float scale : kBadScales) {
    CAPTURE(scale);
    bad(2, bytesOf({1, 3}), bytesOf({0x2a}), s2, scale);
  }
}

TEMPLATE_TEST_CASE("adacomp frames with bad counts, indices, scales or signs are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  using L = std::numeric_limits<T>;
  auto c = make<T>(adacompSpec(4));
  const CodecId id = CodecId::kAdaComp;
  const size_t d = 5;
  const auto payload = countedPayload<T>;
  CHECK(decodeOk(*c, craft<T>(id, d, {}, payload(2, bytesOf({1, 3}), T(0.5), bytesOf({2}))), d) ==
        std::vector<T>{0, T(0.5), 0, 0, T(-0.5)});
  CHECK(decodeOk(*c, craft<T>(id, d, {}, payload(0, {}, T(0), {})), d) == std::vector<T>(d, 0));
  auto bad = [&](uint32_t n, const Bytes& indexBytes, T scale, const Bytes& signs) {
    requireCorrupt(*c, craft<T>(id, d, {}, payload(n, indexBytes, scale, signs)), d);
  };
  bad(6, bytesOf({0, 1, 1, 1, 1, 1}), T(1), bytesOf({0}));  // n > d
  bad(2, bytesOf({5, 1}), T(1), bytesOf({0}));              // index = d
  bad(2, bytesOf({1, 4}), T(1), bytesOf({0}));              // past the end
  bad(2, bytesOf({1, 0}), T(1), bytesOf({0}));              // gap 0
  bad(2, bytesOf({1, 0x83, 0x00}), T(1), bytesOf({0}));     // overlong varint
  bad(2, bytesOf({1, 3}), T(1), bytesOf({4}));              // a sign bit past n
  bad(2, bytesOf({1, 3}), T(1), bytesOf({0, 0}));           // a sign byte too many
  bad(2, bytesOf({1, 3}), T(1), {});                        // none
  bad(0, {}, T(1), {});                                     // a scale without elements
  bad(1000, bytesOf({1, 3}), T(1), bytesOf({0}));           // a count without bytes
  for (T scale : {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity(), T(-1), T(-0.0)}) {
    CAPTURE(scale);
    bad(2, bytesOf({1, 3}), scale, bytesOf({0}));
    bad(0, {}, scale, {});
  }
  requireCorrupt(*c, craft<T>(id, d, bytesOf({0}), payload(2, bytesOf({1, 3}), T(1), bytesOf({0}))),
                 d);  // params
}

TEMPLATE_TEST_CASE("non-finite input gives family frames that fail to decode",
                   "[compression][unit]", float, double) {
  using L = std::numeric_limits<TestType>;
  for (const CompressorSpec& spec : kFamily) {
    CAPTURE(compressorKindName(spec.kind), spec.k);
    auto c = make<TestType>(spec);
    for (const std::vector<TestType>& x : {std::vector<TestType>{1, L::quiet_NaN(), -2, 3},
                                           std::vector<TestType>{1, -2, 3, L::infinity()},
                                           std::vector<TestType>{-L::infinity(), 1, 2, 3}}) {
      requireCorrupt(*c, encodeWith(*c, x), x.size());
    }
  }
  // AdaComp's residue keeps a NaN: the stream's later frames fail too.
  auto c = make<TestType>(adacompSpec(2));
  auto state = c->newState(2);
  core::Rng rng(1);
  Frame f;
  c->encodeStream(std::vector<TestType>{1, L::quiet_NaN()}, rng, StreamContext{0, 0, state.get()},
                  f);
  requireCorrupt(*c, f, 2);
  c->encodeStream(std::vector<TestType>{1, 2}, rng, StreamContext{1, 0, state.get()}, f);
  requireCorrupt(*c, f, 2);
}

// Mutated params and payloads, re-sealed: decoding returns ok or kCorruption, never reads outside
// the frame (ASan), and an accepted frame decodes to finite values.
TEMPLATE_TEST_CASE("mutated family frames never crash a decoder", "[compression][unit]", float,
                   double) {
  core::Rng rng(700);
  for (const CompressorSpec& spec : kFamily) {
    CAPTURE(compressorKindName(spec.kind));
    auto c = make<TestType>(spec);
    const size_t d = 37;
    const Frame f = encodeWith(*c, normalVector<TestType>(d, 701));
    const auto view = parseFrame(f);
    REQUIRE(view.isOk());
    for (int t = 0; t < 2000; ++t) {
      Bytes params(view->params.begin(), view->params.end());
      Bytes payload(view->payload.begin(), view->payload.end());
      mutate(params, payload, rng);
      std::vector<TestType> out(d);
      const core::Status st = c->decode(craft<TestType>(c->id(), d, params, payload), out);
      REQUIRE((st.isOk() || st.code() == StatusCode::kCorruption));
      if (st.isOk()) {
        REQUIRE(std::all_of(out.begin(), out.end(), [](TestType v) { return std::isfinite(v); }));
      }
    }
  }
}

}  // namespace
}  // namespace starling::compression
