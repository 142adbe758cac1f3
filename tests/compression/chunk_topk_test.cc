// topk_2bit (codec 17) and dct_sign (codec 18): golden frames written from docs/wire_format.md,
// every decoded value against references written here from the definitions (the chunk's top k
// by magnitude, ties to the lower index; topk_2bit's levels s and s/2 of the largest kept
// magnitude; dct_sign's signs times the mean kept magnitude of the orthonormal DCT-II, inverted
// by the DCT-III), encodeInto against encode and decode, every malformed frame, every bit flip.
#include <numbers>
#include <tuple>

#include "tests/compression/codec_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;

CompressorSpec chunkSpec(Kind kind, uint32_t chunk, uint32_t perChunk) {
  CompressorSpec s = makeSpec(kind);
  s.scaleChunk = chunk;
  s.perChunk = perChunk;
  return s;
}

// Indices of the k largest |v| of a chunk (ties to the lower index), increasing.
std::vector<size_t> topIndices(const std::vector<double>& v, size_t k) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < v.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return std::abs(v[a]) > std::abs(v[b]); });
  idx.resize(std::min(k, v.size()));
  std::sort(idx.begin(), idx.end());
  return idx;
}

template <typename T>
std::vector<T> twoBitReference(const std::vector<T>& x, size_t chunk, size_t k) {
  std::vector<T> out(x.size(), T(0));
  for (size_t lo = 0; lo < x.size(); lo += chunk) {
    const size_t n = std::min(chunk, x.size() - lo);
    std::vector<double> v(x.begin() + lo, x.begin() + lo + n);
    const auto kept = topIndices(v, k);
    double s = 0;
    for (size_t i : kept) s = std::max(s, std::abs(v[i]));
    const double sf = static_cast<float>(s);
    for (size_t i : kept) {
      const double m = std::abs(v[i]) >= 0.75 * sf ? sf : sf / 2;
      out[lo + i] = static_cast<T>(v[i] < 0 ? -m : m);
    }
  }
  return out;
}

// The DCT written as its definition: X_k = a_k sum_i x_i cos(pi (i + 1/2) k / n).
double basis(size_t k, size_t i, size_t n) {
  const double a = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(n));
  return a * std::cos(std::numbers::pi * (static_cast<double>(i) + 0.5) *
                      static_cast<double>(k) / static_cast<double>(n));
}

template <typename T>
std::vector<double> dctSignReference(const std::vector<T>& x, size_t chunk, size_t k) {
  std::vector<double> out(x.size(), 0.0);
  for (size_t lo = 0; lo < x.size(); lo += chunk) {
    const size_t n = std::min(chunk, x.size() - lo);
    std::vector<double> coef(n, 0.0);
    for (size_t q = 0; q < n; ++q) {
      for (size_t i = 0; i < n; ++i) coef[q] += basis(q, i, n) * static_cast<double>(x[lo + i]);
    }
    const auto kept = topIndices(coef, k);
    double s = 0;
    for (size_t q : kept) s += std::abs(coef[q]);
    s = static_cast<float>(s / static_cast<double>(kept.size()));
    for (size_t i = 0; i < n; ++i) {
      for (size_t q : kept) out[lo + i] += basis(q, i, n) * (coef[q] < 0 ? -s : s);
    }
  }
  return out;
}

TEST_CASE("topk_2bit: golden frame, float32 {1, -3, 0.5, 2.5, 7}, chunk 4, 2 kept",
          "[compression][unit]") {
  auto c = make<float>(chunkSpec(Kind::kTopK2Bit, 4, 2));
  // params: chunk 4, per_chunk 2 | scales 3.0, 7.0 | 4-bit entries (2-bit index, 2-bit code):
  // (1, sign|big = 3), (3, big = 2) | (0, big = 2) -> bytes 0xbd 0x08
  const Frame expected = sealed(
      "53 54 52 4c 01 11 01 00  05 00 00 00 00 00 00 00  08 00 00 00 00 00 00 00"
      "0a 00 00 00 00 00 00 00  04 00 00 00 02 00 00 00"
      "00 00 40 40 00 00 e0 40  bd 08");
  const std::vector<float> x = {1.0f, -3.0f, 0.5f, 2.5f, 7.0f};
  CHECK(toHex(encodeWith(*c, x)) == toHex(expected));
  CHECK(decodeOk(*c, expected, 5) == std::vector<float>{0.0f, -3.0f, 0.0f, 3.0f, 7.0f});
  CHECK(c->maxEncodedBytes(5) == expected.size());
  CHECK_FALSE(c->unbiased());
  CHECK(c->id() == CodecId::kTopK2Bit);
}

TEST_CASE("dct_sign: golden frame, float64 {3, 1}, chunk 2, 1 kept", "[compression][unit]") {
  auto c = make<double>(chunkSpec(Kind::kDctSign, 2, 1));
  // DCT-II: X0 = 4/sqrt(2), X1 = sqrt(2); X0 kept, scale float32(2 sqrt(2)) = 0x403504f3;
  // one 2-bit entry (1-bit index 0, sign 0) -> 0x00
  const Frame expected = sealed(
      "53 54 52 4c 01 12 02 00  02 00 00 00 00 00 00 00  08 00 00 00 00 00 00 00"
      "05 00 00 00 00 00 00 00  02 00 00 00 01 00 00 00"
      "f3 04 35 40 00");
  const std::vector<double> x = {3.0, 1.0};
  CHECK(toHex(encodeWith(*c, x)) == toHex(expected));
  const auto y = decodeOk(*c, expected, 2);
  const double s = static_cast<float>(2 * std::numbers::sqrt2);
  CHECK(y[0] == Approx(s / std::numbers::sqrt2).epsilon(1e-15));
  CHECK(y[1] == Approx(s / std::numbers::sqrt2).epsilon(1e-15));
  CHECK(c->id() == CodecId::kDctSign);
}

TEST_CASE("topk_2bit and dct_sign: every value is the definition's", "[compression][unit]") {
  for (const size_t chunk : {2, 3, 16, 64}) {
    for (const size_t k : {size_t{1}, size_t{2}, chunk - 1}) {
      if (k < 1 || k >= chunk) continue;
      for (const size_t d : {1, 5, 64, 100, 257}) {
        CAPTURE(chunk, k, d);
        const auto xf = normalVector<float>(d, 31 + d + chunk, 2.0);
        const auto xd = normalVector<double>(d, 37 + d + k, 1e-2);
        auto tf = make<float>(chunkSpec(Kind::kTopK2Bit, static_cast<uint32_t>(chunk),
                                        static_cast<uint32_t>(k)));
        auto td = make<double>(chunkSpec(Kind::kTopK2Bit, static_cast<uint32_t>(chunk),
                                         static_cast<uint32_t>(k)));
        const Frame ff = encodeWith(*tf, xf);
        CHECK(ff.size() == tf->maxEncodedBytes(d));
        CHECK(decodeOk(*tf, ff, d) == twoBitReference(xf, chunk, k));
        CHECK(decodeOk(*td, encodeWith(*td, xd), d) == twoBitReference(xd, chunk, k));
        auto df = make<float>(chunkSpec(Kind::kDctSign, static_cast<uint32_t>(chunk),
                                        static_cast<uint32_t>(k)));
        auto dd = make<double>(chunkSpec(Kind::kDctSign, static_cast<uint32_t>(chunk),
                                         static_cast<uint32_t>(k)));
        const auto yf = decodeOk(*df, encodeWith(*df, xf), d);
        const auto yd = decodeOk(*dd, encodeWith(*dd, xd), d);
        const auto rf = dctSignReference(xf, chunk, k);
        const auto rd = dctSignReference(xd, chunk, k);
        for (size_t i = 0; i < d; ++i) {
          REQUIRE(yf[i] == Approx(rf[i]).epsilon(1e-5).margin(1e-6));
          REQUIRE(yd[i] == Approx(rd[i]).epsilon(1e-10).margin(1e-14));
        }
      }
    }
  }
}

TEST_CASE("topk_2bit and dct_sign: frame sizes are docs/wire_format.md's formula",
          "[compression][unit]") {
  // 36 bytes of header and CRC, 8 of params, 4 per chunk, E entries of b + value bits.
  for (const auto& [chunk, k, b] : {std::tuple{64u, 2u, 6u}, std::tuple{256u, 4u, 8u},
                                    std::tuple{3u, 2u, 2u}, std::tuple{2u, 1u, 1u}}) {
    for (const size_t d : {1, 7, 100, 10000}) {
      CAPTURE(chunk, k, d);
      const size_t chunks = (d + chunk - 1) / chunk;
      const size_t entries = (d / chunk) * k + std::min<size_t>(k, d % chunk);
      auto two = make<float>(chunkSpec(Kind::kTopK2Bit, chunk, k));
      auto dct = make<double>(chunkSpec(Kind::kDctSign, chunk, k));
      CHECK(encodeWith(*two, normalVector<float>(d, 1)).size() ==
            36 + 8 + 4 * chunks + (entries * (b + 2) + 7) / 8);
      CHECK(encodeWith(*dct, normalVector<double>(d, 2)).size() ==
            36 + 8 + 4 * chunks + (entries * (b + 1) + 7) / 8);
    }
  }
}

TEST_CASE("dct_sign gives back a DCT basis vector exactly; topk_2bit a vector of +-s exactly",
          "[compression][unit]") {
  const size_t n = 16;
  auto dct = make<double>(chunkSpec(Kind::kDctSign, n, 1));
  auto two = make<double>(chunkSpec(Kind::kTopK2Bit, n, 3));
  for (size_t q = 0; q < n; ++q) {
    std::vector<double> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = -1.5 * basis(q, i, n);  // 1.5 is a float32
    const auto y = decodeOk(*dct, encodeWith(*dct, x), n);
    for (size_t i = 0; i < n; ++i) CHECK(y[i] == Approx(x[i]).margin(1e-13));
  }
  std::vector<double> x(n, 0.0);
  x[2] = 4.0, x[5] = -4.0, x[9] = 2.0, x[11] = 0.5;
  CHECK(decodeOk(*two, encodeWith(*two, x), n) ==
        std::vector<double>{0, 0, 4, 0, 0, -4, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0});
}

TEMPLATE_TEST_CASE("topk_2bit and dct_sign: encodeInto writes encode's frame and decode's "
                   "values; NaN is refused", "[compression][unit]", float, double) {
  for (Kind kind : {Kind::kTopK2Bit, Kind::kDctSign}) {
    auto c = make<TestType>(chunkSpec(kind, 8, 2));
    const auto x = normalVector<TestType>(50, 3);
    const Frame frame = encodeWith(*c, x);
    std::vector<std::byte> out(c->maxEncodedBytes(x.size()));
    std::vector<TestType> seen(x.size());
    core::Rng rng(1);
    auto n = c->encodeInto(x, rng, {}, out, seen);
    REQUIRE(n.isOk());
    out.resize(*n);
    CHECK(out == frame);
    CHECK(seen == decodeOk(*c, frame, x.size()));
    auto bad = x;
    bad[20] = std::numeric_limits<TestType>::quiet_NaN();
    requireCorrupt(*c, encodeWith(*c, bad), x.size());
  }
}

TEMPLATE_TEST_CASE("topk_2bit and dct_sign: malformed frames and every single-bit flip are "
                   "refused", "[compression][unit]", float, double) {
  for (Kind kind : {Kind::kTopK2Bit, Kind::kDctSign}) {
    CAPTURE(static_cast<int>(kind));
    for (const size_t d : {1, 9, 40}) requireMalformedRejected<TestType>(chunkSpec(kind, 8, 3), d);
    auto c = make<TestType>(chunkSpec(kind, 8, 3));
    const auto x = normalVector<TestType>(13, 5);
    const Frame f = encodeWith(*c, x);
    for (size_t bit = 0; bit < f.size() * 8; ++bit) {
      Frame g = f;
      g[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
      requireCorrupt(*c, g, x.size());
    }
  }
}

TEST_CASE("topk_2bit: frames with a valid CRC but bad contents are refused and leave the output "
          "untouched", "[compression][unit]") {
  auto c = make<float>(chunkSpec(Kind::kTopK2Bit, 4, 2));
  const Bytes params = fromHex("04 00 00 00 02 00 00 00");
  const Bytes scales = fromHex("00 00 40 40 00 00 e0 40");
  auto payload = [&](const char* bits) {
    Bytes p = scales;
    const Bytes b = fromHex(bits);
    p.insert(p.end(), b.begin(), b.end());
    return p;
  };
  REQUIRE(decodeOk(*c, craft<float>(CodecId::kTopK2Bit, 5, params, payload("bd 08")), 5) ==
          std::vector<float>{0.0f, -3.0f, 0.0f, 3.0f, 7.0f});
  SECTION("indices not increasing within a chunk (3 then 1), or repeated (1, 1)") {
    requireCorrupt(*c, craft<float>(CodecId::kTopK2Bit, 5, params, payload("db 08")), 5);
    requireCorrupt(*c, craft<float>(CodecId::kTopK2Bit, 5, params, payload("9d 08")), 5);
  }
  SECTION("an index beyond the last chunk's one value") {
    requireCorrupt(*c, craft<float>(CodecId::kTopK2Bit, 5, params, payload("bd 09")), 5);
  }
  SECTION("padding bits set") {
    requireCorrupt(*c, craft<float>(CodecId::kTopK2Bit, 5, params, payload("bd 18")), 5);
  }
  SECTION("a negative, NaN or infinite scale") {
    for (const char* scale : {"00 00 80 bf", "00 00 c0 7f", "00 00 80 7f", "00 00 00 80"}) {
      CAPTURE(scale);
      Bytes p = fromHex(std::string(scale) + " 00 00 e0 40 bd 08");
      requireCorrupt(*c, craft<float>(CodecId::kTopK2Bit, 5, params, p), 5);
    }
  }
  SECTION("another chunk or per_chunk than the codec's") {
    requireCorrupt(*c, craft<float>(CodecId::kTopK2Bit, 5, fromHex("05 00 00 00 02 00 00 00"),
                                    payload("bd 08")), 5);
    requireCorrupt(*c, craft<float>(CodecId::kTopK2Bit, 5, fromHex("04 00 00 00 01 00 00 00"),
                                    payload("bd 08")), 5);
  }
}

TEST_CASE("topk_2bit and dct_sign: the factory refuses chunk 1 and per_chunk 0 or >= chunk",
          "[compression][unit]") {
  for (Kind kind : {Kind::kTopK2Bit, Kind::kDctSign}) {
    CHECK(createCompressor<float>(chunkSpec(kind, 1, 1)).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(createCompressor<float>(chunkSpec(kind, 8, 0)).status().code() ==
          StatusCode::kInvalidArgument);
    const auto all = createCompressor<float>(chunkSpec(kind, 8, 8));
    CHECK(all.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(all.status().message(), Catch::Matchers::Contains("per_chunk"));
  }
}

}  // namespace
}  // namespace starling::compression
