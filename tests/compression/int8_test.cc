// int8 (codec 16): a golden frame written from docs/wire_format.md, every decoded value against a
// reference written here from the definition (scale = max |x| / 127 in float32, codes rounded to
// nearest, ties to even, clamped to +-127, values code * scale in float32), the error bound,
// encodeInto against encode and decode, and the corruption corpus.
#include "tests/compression/codec_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;

CompressorSpec int8Spec(uint32_t chunk) {
  CompressorSpec s = makeSpec(Kind::kInt8);
  s.scaleChunk = chunk;
  return s;
}

// The definition, element by element, in the test's own words.
template <typename T>
std::vector<T> reference(const std::vector<T>& x, size_t chunk) {
  std::vector<T> out(x.size());
  for (size_t lo = 0; lo < x.size(); lo += chunk) {
    const size_t hi = std::min(x.size(), lo + chunk);
    double m = 0;
    for (size_t i = lo; i < hi; ++i) m = std::max(m, std::abs(static_cast<double>(x[i])));
    const float scale = static_cast<float>(m / 127.0);
    for (size_t i = lo; i < hi; ++i) {
      double q = scale == 0.0f ? 0.0 : std::nearbyint(static_cast<double>(x[i]) / scale);
      q = std::min(127.0, std::max(-127.0, q));
      out[i] = static_cast<T>(static_cast<float>(q) * scale);
    }
  }
  return out;
}

TEST_CASE("int8: golden frame, float32 {1, -2.54, 0.5, 0, 127}, chunk 2", "[compression][unit]") {
  auto c = make<float>(int8Spec(2));
  // params: chunk 2 (padded to 8) | scales 2.54f/127 = 0x3ca3d70a, 0.5/127 = 0x3b810204, 1.0 |
  // codes 50, -127, 127, 0, 127
  const Frame expected = sealed(
      "53 54 52 4c 01 10 01 00  05 00 00 00 00 00 00 00  04 00 00 00 00 00 00 00"
      "11 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00"
      "0a d7 a3 3c 04 02 81 3b  00 00 80 3f 32 81 7f 00  7f");
  const std::vector<float> x = {1.0f, -2.54f, 0.5f, 0.0f, 127.0f};
  CHECK(toHex(encodeWith(*c, x)) == toHex(expected));
  CHECK(decodeOk(*c, expected, 5) == std::vector<float>{1.0f, -2.54f, 0.5f, 0.0f, 127.0f});
  CHECK(c->maxEncodedBytes(5) == expected.size());
  CHECK_FALSE(c->unbiased());
}

TEST_CASE("int8: every value is the definition's, within half a step of the input",
          "[compression][unit]") {
  for (const size_t chunk : {1, 3, 64, 256, 1000}) {
    for (const size_t d : {1, 2, 255, 256, 257, 1000, 4099}) {
      CAPTURE(chunk, d);
      auto cf = make<float>(int8Spec(static_cast<uint32_t>(chunk)));
      auto cd = make<double>(int8Spec(static_cast<uint32_t>(chunk)));
      auto xf = normalVector<float>(d, 7 + d, 3.0);
      auto xd = normalVector<double>(d, 9 + d, 1e-3);
      if (d > 2) xf[1] = 0.0f, xd[2] = -0.0;
      const Frame ff = encodeWith(*cf, xf);
      const Frame fd = encodeWith(*cd, xd);
      CHECK(ff.size() == 36 + 8 + 4 * ((d + chunk - 1) / chunk) + d);
      CHECK(ff.size() == cf->maxEncodedBytes(d));
      const auto yf = decodeOk(*cf, ff, d);
      const auto yd = decodeOk(*cd, fd, d);
      CHECK(yf == reference(xf, chunk));
      CHECK(yd == reference(xd, chunk));
      for (size_t lo = 0; lo < d; lo += chunk) {
        const size_t hi = std::min(d, lo + chunk);
        double m = 0;
        for (size_t i = lo; i < hi; ++i) m = std::max(m, std::abs(xd[i]));
        for (size_t i = lo; i < hi; ++i) {
          // Half a step, plus the float32 roundings of the scale and of the product.
          REQUIRE(std::abs(yd[i] - xd[i]) <= (m / 127) * (0.5 + 1e-5) + 1e-7 * m);
        }
      }
    }
  }
}

TEST_CASE("int8: an all-zero chunk, a chunk of one, and the largest magnitude at +-127",
          "[compression][unit]") {
  auto c = make<double>(int8Spec(4));
  const std::vector<double> x = {0, 0, 0, 0, 5, -5, 2.5, 1e-300, -7};
  const auto y = decodeOk(*c, encodeWith(*c, x), x.size());
  CHECK(std::vector<double>(y.begin(), y.begin() + 4) == std::vector<double>(4, 0.0));
  CHECK(y[4] == static_cast<double>(127 * static_cast<float>(5.0 / 127)));
  CHECK(y[5] == -y[4]);
  CHECK(y[7] == 0.0);  // rounds to code 0
  CHECK(y[8] == static_cast<double>(-127.0f * static_cast<float>(7.0 / 127)));
}

TEST_CASE("int8: encodeInto writes encode's frame and decode's values; a NaN is refused",
          "[compression][unit]") {
  auto c = make<float>(int8Spec(16));
  const auto x = normalVector<float>(100, 3);
  const Frame frame = encodeWith(*c, x);
  std::vector<std::byte> out(c->maxEncodedBytes(x.size()));
  std::vector<float> seen(x.size());
  core::Rng rng(1);
  auto n = c->encodeInto(x, rng, {}, out, seen);
  REQUIRE(n.isOk());
  out.resize(*n);
  CHECK(out == frame);
  CHECK(seen == decodeOk(*c, frame, x.size()));
  auto bad = x;
  bad[40] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::byte> out2(c->maxEncodedBytes(x.size()));
  CHECK(c->encodeInto(bad, rng, {}, out2, seen).status().code() == StatusCode::kCorruption);
  bad[40] = std::numeric_limits<float>::infinity();
  requireCorrupt(*c, encodeWith(*c, bad), x.size());
}

TEST_CASE("int8: corrupt frames are refused and leave the output untouched",
          "[compression][unit]") {
  auto c = make<float>(int8Spec(2));
  const Bytes params = fromHex("02 00 00 00");
  const Bytes good = fromHex("00 00 80 3f 00 00 00 40 01 ff 7f");  // scales 1, 2; codes 1 -1 127
  REQUIRE(decodeOk(*c, craft<float>(CodecId::kInt8, 3, params, good), 3) ==
          std::vector<float>{1.0f, -1.0f, 254.0f});
  SECTION("a code of -128") {
    requireCorrupt(*c, craft<float>(CodecId::kInt8, 3, params,
                                    fromHex("00 00 80 3f 00 00 00 40 01 80 7f")), 3);
  }
  SECTION("a negative, NaN or infinite scale") {
    for (const char* scale : {"00 00 80 bf", "00 00 c0 7f", "00 00 80 7f"}) {
      CAPTURE(scale);
      requireCorrupt(*c, craft<float>(CodecId::kInt8, 3, params,
                                      fromHex(std::string("00 00 80 3f ") + scale +
                                              " 01 ff 7f")), 3);
    }
  }
  SECTION("another chunk than the codec's") {
    requireCorrupt(*c, craft<float>(CodecId::kInt8, 3, fromHex("03 00 00 00"), good), 3);
  }
  SECTION("a payload one byte short or long, params of another length") {
    requireCorrupt(*c, craft<float>(CodecId::kInt8, 3, params, Bytes(good.begin(), good.end() - 1)),
                   3);
    Bytes longer = good;
    longer.push_back(std::byte{0});
    requireCorrupt(*c, craft<float>(CodecId::kInt8, 3, params, longer), 3);
    requireCorrupt(*c, craft<float>(CodecId::kInt8, 3, fromHex("02 00 00 00 00"), good), 3);
  }
  SECTION("another element count, another codec id, float64 elements") {
    requireCorrupt(*c, craft<float>(CodecId::kInt8, 4, params, good), 3);
    requireCorrupt(*c, craft<float>(CodecId::kQsgd, 3, params, good), 3);
    requireCorrupt(*c, craft<double>(CodecId::kInt8, 3, params, good), 3);
  }
}

TEST_CASE("int8: the factory refuses chunk 0", "[compression][unit]") {
  auto c = createCompressor<float>(int8Spec(0));
  CHECK(c.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(c.status().message(), Catch::Matchers::Contains("int8: chunk"));
}

}  // namespace
}  // namespace starling::compression
