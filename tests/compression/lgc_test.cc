// LGC (docs/compression.md "LGC", docs/wire_format.md codec 15): the autoencoder's gradient
// against finite differences, what its architecture can and cannot reconstruct, frames decoded
// with exactly the decoder version they name (also across an update of the decoder), and hostile
// frames rejected without touching the receiver's state or output.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codec_testing.h"
#include "compression/codecs/lgc_net.h"

namespace starling::compression {
namespace {

using namespace codec_testing;
namespace lgc = codecs::lgc;

CompressorSpec lgcSpec(uint64_t k, uint32_t chunk, uint32_t hidden, uint32_t latent,
                       uint64_t warmup, uint64_t refresh) {
  CompressorSpec s;
  s.kind = Kind::kLgc;
  s.k = k;
  s.chunk = chunk;
  s.hidden = hidden;
  s.latent = latent;
  s.warmup = warmup;
  s.refresh = refresh;
  return s;
}

// The hand-written network of the tests below, in double: lrelu with slope 0.01.
double lrelu(double v) { return v >= 0 ? v : 0.01 * v; }

TEST_CASE("lgc: the autoencoder's gradient against central finite differences",
          "[compression][lgc][unit]") {
  const lgc::Shape shape{6, 5, 2};
  const size_t P = lgc::parameterCount(shape);
  // W1 5x6 + 5, W2 2x5 + 2, W3 5x2 + 5, W4 6x5 + 6.
  REQUIRE(P == 30 + 5 + 10 + 2 + 10 + 5 + 30 + 6);
  REQUIRE(lgc::encoderCount(shape) == 30 + 5 + 10 + 2);
  core::Rng rng(4);
  std::vector<double> theta(P), u(3 * 6), grad(P);
  for (double& t : theta) t = 0.5 * rng.normal();
  for (double& v : u) v = rng.normal();
  const double loss = lgc::lossAndGradient<double>(shape, theta, u, 3, grad);
  CHECK(loss > 0);
  std::vector<double> scratch(P);
  double worst = 0;
  for (size_t k = 0; k < P; ++k) {
    const double h = 1e-6;
    std::vector<double> up = theta, down = theta;
    up[k] += h;
    down[k] -= h;
    const double fd = (lgc::lossAndGradient<double>(shape, up, u, 3, scratch) -
                       lgc::lossAndGradient<double>(shape, down, u, 3, scratch)) /
                      (2 * h);
    worst = std::max(worst, std::abs(fd - grad[k]) / std::max(1e-3, std::abs(fd)));
  }
  CAPTURE(worst);
  CHECK(worst < 1e-5);

  // The loss itself, written out for one chunk with the test's own lrelu.
  const double* t = theta.data();
  double expected = 0;
  for (size_t c = 0; c < 3; ++c) {
    const double* x = u.data() + 6 * c;
    double a1[5], z[2], a2[5];
    for (int o = 0; o < 5; ++o) {
      double s = t[30 + o];
      for (int i = 0; i < 6; ++i) s += t[o * 6 + i] * x[i];
      a1[o] = lrelu(s);
    }
    for (int o = 0; o < 2; ++o) {
      double s = t[35 + 10 + o];
      for (int i = 0; i < 5; ++i) s += t[35 + o * 5 + i] * a1[i];
      z[o] = s;
    }
    for (int o = 0; o < 5; ++o) {
      double s = t[47 + 10 + o];
      for (int i = 0; i < 2; ++i) s += t[47 + o * 2 + i] * z[i];
      a2[o] = lrelu(s);
    }
    for (int o = 0; o < 6; ++o) {
      double s = t[62 + 30 + o];
      for (int i = 0; i < 5; ++i) s += t[62 + o * 5 + i] * a2[i];
      expected += (s - x[o]) * (s - x[o]);
    }
  }
  CHECK(loss == Approx(expected / 18).epsilon(1e-12));
}

// Trains a network of `shape` on batches drawn by `draw` and returns the relative error
// sum ||y - u||^2 / sum ||u||^2 on fresh chunks.
template <typename Draw>
double trainedError(const lgc::Shape& shape, Draw draw, int steps) {
  std::vector<float> theta = lgc::initialParameters(shape, 7);
  std::vector<float> m(theta.size(), 0.0f), v(theta.size(), 0.0f), grad(theta.size());
  const size_t batch = 64;
  std::vector<float> u(batch * shape.chunk);
  for (int s = 1; s <= steps; ++s) {
    for (size_t c = 0; c < batch; ++c) draw(u.data() + c * shape.chunk);
    (void)lgc::lossAndGradient<float>(shape, theta, u, batch, grad);
    lgc::adamStep(theta, grad, m, v, static_cast<uint64_t>(s), 3e-3);
  }
  const size_t E = lgc::encoderCount(shape);
  std::vector<float> z(shape.latent), y(shape.chunk), x(shape.chunk);
  double err = 0, norm = 0;
  for (int c = 0; c < 500; ++c) {
    draw(x.data());
    lgc::encodeChunk<float>(shape, std::span<const float>(theta).first(E), x.data(), z.data());
    lgc::decodeChunk<float>(shape, std::span<const float>(theta).subspan(E), z.data(), y.data());
    for (size_t j = 0; j < shape.chunk; ++j) {
      err += (y[j] - x[j]) * (y[j] - x[j]);
      norm += x[j] * x[j];
    }
  }
  return err / norm;
}

TEST_CASE("lgc: the autoencoder learns correlated chunks and cannot beat PCA on isotropic ones",
          "[compression][lgc][unit]") {
  const lgc::Shape shape{16, 32, 2};
  core::Rng rng(12);
  // Chunks in a fixed 2-dimensional subspace (u = A w, w ~ N(0, I)): a latent of 2 can carry
  // them whole, so the trained network must reconstruct them nearly exactly.
  std::vector<double> A(16 * 2);
  for (double& a : A) a = rng.normal() / 4;
  core::Rng draws(13);
  auto correlated = [&](float* u) {
    const double w0 = draws.normal(), w1 = draws.normal();
    for (int j = 0; j < 16; ++j) u[j] = static_cast<float>(A[2 * j] * w0 + A[2 * j + 1] * w1);
  };
  const double low = trainedError(shape, correlated, 1500);
  CAPTURE(low);
  CHECK(low < 0.05);
  // Isotropic chunks (N(0, I) in 16 dimensions): any map through 2 numbers loses at least the
  // 14 directions PCA drops, 14/16 of the energy in expectation; the network cannot do better
  // (it would have to be leaking the input past its latent), and training gets it near there.
  auto isotropic = [&](float* u) {
    for (int j = 0; j < 16; ++j) u[j] = static_cast<float>(draws.normal() / 4);
  };
  const double high = trainedError(shape, isotropic, 1500);
  CAPTURE(high);
  CHECK(high > 0.8);
  CHECK(high < 1.0);
}

// The version a frame names (params bytes 4..7) and its mode (params byte 0).
uint32_t frameVersion(const Frame& f) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::to_integer<uint32_t>(f[kFrameHeaderBytes + 4 + i]) << (8 * i);
  return v;
}
int frameMode(const Frame& f) { return std::to_integer<int>(f[kFrameHeaderBytes]); }

TEST_CASE("lgc: receivers decode with the version each frame names, across decoder updates",
          "[compression][lgc][unit]") {
  // Warm-up of 3 rounds, then a new decoder every 4 rounds: versions 1 (rounds 3-6), 2 (7-10),
  // 3 (11-14), 4 (15-18), 5 (19-).
  const auto spec = lgcSpec(24, 8, 16, 2, 3, 4);
  auto codec = make<float>(spec);
  const size_t d = 200;
  auto sender = codec->newState(d);
  auto early = codec->newReceiverState(d);  // hears every frame
  auto late = codec->newReceiverState(d);   // hears from round 8 on
  REQUIRE(early != nullptr);
  core::Rng rng(1);
  std::vector<Frame> frames;
  std::vector<std::vector<float>> seens;
  for (uint64_t round = 0; round < 20; ++round) {
    CAPTURE(round);
    std::vector<float> x = normalVector<float>(d, 50 + round);
    Frame f;
    std::vector<float> seen(d);
    const StreamContext ctx{round, 77, sender.get()};
    REQUIRE(codec->encodeSeen(x, rng, ctx, f, seen).isOk());
    const uint32_t version = round < 3 ? 0 : 1 + static_cast<uint32_t>((round - 3) / 4);
    CHECK(frameVersion(f) == version);
    CHECK(frameMode(f) == (round < 3 ? 0 : (round - 3) % 4 == 0 ? 2 : 1));
    std::vector<float> scratch;
    auto got = codec->decodeFrom(f, d, scratch, Checksum::kVerify, early.get());
    REQUIRE(got.isOk());
    // Bit for bit what the sender says its neighbours see.
    CHECK(std::memcmp(got->data(), seen.data(), d * sizeof(float)) == 0);
    // Warm-up frames are top-k's values exactly; coded ones only the kept coordinates.
    size_t nonzero = 0;
    for (size_t i = 0; i < d; ++i) nonzero += seen[i] != 0.0f;
    CHECK(nonzero <= 24);
    if (round < 3) {
      for (size_t i = 0; i < d; ++i) {
        if (seen[i] != 0.0f) CHECK(seen[i] == x[i]);
      }
    }
    if (round >= 8) {
      auto late_got = codec->decodeFrom(f, d, scratch, Checksum::kVerify, late.get());
      if (round < 11) {
        // Version 2's network was shipped in round 7, before this receiver listened.
        REQUIRE_FALSE(late_got.isOk());
        CHECK(late_got.status().code() == StatusCode::kCorruption);
        CHECK_THAT(late_got.status().message(),
                   Catch::Contains("decoder version 2") && Catch::Contains("holds none"));
      } else {
        REQUIRE(late_got.isOk());  // from version 3 on, it was there when the network came
        CHECK(std::memcmp(late_got->data(), seen.data(), d * sizeof(float)) == 0);
      }
    }
    // A coded frame without the sender's state cannot be decoded, and says why.
    if (round >= 3 && (round - 3) % 4 != 0) {
      std::vector<float> out(d, 5.0f);
      const core::Status st = codec->decode(f, out);
      CHECK(st.code() == StatusCode::kCorruption);
      CHECK(out == std::vector<float>(d, 5.0f));
    }
    frames.push_back(f);
    seens.push_back(seen);
  }
  // The receiver keeps the last four versions (2..5 now): a late frame of version 2 still
  // decodes to what it decoded to then; version 1 (round 4) is gone.
  std::vector<float> scratch;
  auto v2 = codec->decodeFrom(frames[8], d, scratch, Checksum::kVerify, early.get());
  REQUIRE(v2.isOk());
  CHECK(std::memcmp(v2->data(), seens[8].data(), d * sizeof(float)) == 0);
  auto v1 = codec->decodeFrom(frames[4], d, scratch, Checksum::kVerify, early.get());
  REQUIRE_FALSE(v1.isOk());
  CHECK_THAT(v1.status().message(), Catch::Contains("version 1") && Catch::Contains("2, 3, 4, 5"));
  // The decoders differ between versions (the network kept learning), so decoding a frame with
  // another version's decoder would have given other values.
  Frame relabelled = frames[12];  // version 3
  relabelled[kFrameHeaderBytes + 4] = std::byte{4};
  relabelled.resize(relabelled.size() - 4);
  const uint32_t crc = crc32c(relabelled);
  for (int i = 0; i < 4; ++i) relabelled.push_back(static_cast<std::byte>((crc >> (8 * i)) & 0xff));
  auto other = codec->decodeFrom(relabelled, d, scratch, Checksum::kVerify, early.get());
  REQUIRE(other.isOk());
  CHECK(std::memcmp(other->data(), seens[12].data(), d * sizeof(float)) != 0);
}

TEST_CASE("lgc: the reconstruction never moves farther from x than top-k's zeros",
          "[compression][lgc][unit]") {
  // Each chunk is fitted by least squares, so ||seen - x||^2 <= ||x - topk(x)||^2 + ||topk(x)||^2
  // = ||x||^2, whatever the network (here an untrained one, warm-up 0).
  auto codec = make<double>(lgcSpec(40, 8, 8, 2, 0, 0));
  auto state = codec->newState(100);
  core::Rng rng(2);
  for (uint64_t round = 0; round < 5; ++round) {
    const std::vector<double> x = normalVector<double>(100, 9 + round);
    Frame f;
    std::vector<double> seen(100);
    REQUIRE(codec->encodeSeen(x, rng, StreamContext{round, 5, state.get()}, f, seen).isOk());
    double err = 0, norm = 0;
    for (size_t i = 0; i < 100; ++i) {
      err += (seen[i] - x[i]) * (seen[i] - x[i]);
      norm += x[i] * x[i];
    }
    CHECK(err <= norm);
  }
}

TEST_CASE("lgc: a hand-written frame decodes to the hand-computed network output",
          "[compression][lgc][unit]") {
  // chunk 2, hidden 1, latent 1: the network is W1 (1x2) b1 W2 (1x1) b2 | W3 (1x1) b3 W4 (2x1)
  // b4, 11 float32. Mode 2, version 1, k = 3 of d = 5: indices 0, 2, 4 (gaps 0 2 2); two chunks
  // with scales 2 and -1, latent codes 1.0 and 0.5 in fp16.
  const std::vector<float> net = {0.5f, 0.5f, 0.0f, 1.0f, 0.0f,   // encoder (unused here)
                                  2.0f, -1.0f, 1.0f, -0.5f, 0.25f, 0.0f};
  Bytes body = fromHex(
      "53 54 52 4c 01 0f 01 00  05 00 00 00 00 00 00 00  20 00 00 00 00 00 00 00");
  const size_t payload = 11 * 4 + 3 + 2 * 4 + 2 * 2;
  for (int i = 0; i < 8; ++i) body.push_back(static_cast<std::byte>((payload >> (8 * i)) & 0xff));
  // params: mode 2, reserved, version 1, k 3, chunk 2, hidden 1, latent 1, reserved, count 11
  const Bytes params = fromHex(
      "02 00 00 00 01 00 00 00  03 00 00 00 00 00 00 00  02 00 01 00 01 00 00 00"
      "0b 00 00 00 00 00 00 00");
  body.insert(body.end(), params.begin(), params.end());
  for (float v : net) appendValue<float>(body, v);
  body.insert(body.end(), {std::byte{0}, std::byte{2}, std::byte{2}});
  appendValue<float>(body, 2.0f);
  appendValue<float>(body, -1.0f);
  body.insert(body.end(), {std::byte{0x00}, std::byte{0x3c}, std::byte{0x00}, std::byte{0x38}});
  const Frame frame = sealed(toHex(body));
  // Decoder by hand: W3 = 2, b3 = -1, W4 = (1, -0.5), b4 = (0.25, 0):
  // a2 = lrelu(2z - 1); y = (a2 + 0.25, -0.5 a2).
  auto dec = [](double z) {
    const double a = lrelu(2 * z - 1);
    return std::pair<double, double>{a + 0.25, -0.5 * a};
  };
  const auto [y0, y1] = dec(1.0);  // chunk 0: coordinates 0 and 2
  const auto [w0, w1] = dec(0.5);  // chunk 1: coordinate 4 (its second value is padding)
  (void)w1;
  auto codec = make<float>(lgcSpec(3, 2, 1, 1, 0, 0));
  auto state = codec->newReceiverState(5);
  std::vector<float> scratch;
  auto got = codec->decodeFrom(frame, 5, scratch, Checksum::kVerify, state.get());
  INFO(got.status().toString());
  REQUIRE(got.isOk());
  const std::vector<float> expected = {static_cast<float>(2 * y0), 0.0f,
                                       static_cast<float>(2 * y1), 0.0f,
                                       static_cast<float>(-1 * w0)};
  CHECK(std::vector<float>(got->begin(), got->end()) == expected);
  // Stateless decode of the same frame works too: it carries its network.
  std::vector<float> out(5);
  CHECK(codec->decode(frame, out).isOk());
  CHECK(out == expected);

  // Hostile variants, each rejected with the receiver's state and output untouched.
  auto fresh = codec->newReceiverState(5);
  auto reject = [&](Bytes b, const char* why) {
    CAPTURE(why);
    const Frame f = sealed(toHex(b));
    std::vector<float> o(5, 9.0f);
    CHECK(codec->decode(f, o).code() == StatusCode::kCorruption);
    CHECK(o == std::vector<float>(5, 9.0f));
    std::vector<float> s2;
    CHECK_FALSE(codec->decodeFrom(f, 5, s2, Checksum::kVerify, fresh.get()).isOk());
  };
  const size_t p0 = kFrameHeaderBytes, pay = p0 + 32;
  {
    Bytes b = body;
    b[pay + 11 * 4 + 3 + 8 + 1] = std::byte{0x7e};  // first latent code: fp16 NaN (0x7e00)
    reject(b, "a NaN latent code");
  }
  {
    Bytes b = body;
    const Bytes nan = bytesOf({0x00, 0x00, 0xc0, 0x7f});
    std::copy(nan.begin(), nan.end(), b.begin() + static_cast<long>(pay + 11 * 4 + 3));
    reject(b, "a NaN scale");
  }
  {
    Bytes b = body;
    const Bytes inf = bytesOf({0x00, 0x00, 0x80, 0x7f});
    std::copy(inf.begin(), inf.end(), b.begin() + static_cast<long>(pay + 4));
    reject(b, "an infinite network parameter");
  }
  {
    Bytes b = body;
    b[p0 + 16] = std::byte{4};  // chunk 4: another run's shape
    reject(b, "another shape");
  }
  {
    Bytes b = body;
    b[p0] = std::byte{1};  // mode 1 must not ship a network
    reject(b, "mode 1 with a network");
  }
  {
    Bytes b = body;
    b[p0] = std::byte{3};
    reject(b, "mode 3");
  }
  {
    Bytes b = body;
    b[p0 + 8] = std::byte{6};  // k = 6 > d = 5
    reject(b, "more kept than elements");
  }
  {
    Bytes b = body;  // the last code cut off, lengths fixed up: a truncated code
    b.resize(b.size() - 2);
    const size_t shorter = payload - 2;
    for (int i = 0; i < 8; ++i) b[24 + i] = static_cast<std::byte>((shorter >> (8 * i)) & 0xff);
    reject(b, "a truncated code");
  }
  // Every truncation of the sealed frame is rejected.
  for (size_t n = 0; n < frame.size(); ++n) {
    std::vector<float> o(5);
    CHECK_FALSE(codec->decode(std::span<const std::byte>(frame).first(n), o).isOk());
  }
  // A mode-1 frame of version 1 decodes against the state that learned it, not the fresh one.
  Bytes coded = body;
  coded[p0] = std::byte{1};
  for (int i = 0; i < 4; ++i) coded[p0 + 24 + i] = std::byte{0};
  coded.erase(coded.begin() + static_cast<long>(pay), coded.begin() + static_cast<long>(pay + 44));
  const size_t codedPayload = payload - 44;
  for (int i = 0; i < 8; ++i) coded[24 + i] = static_cast<std::byte>((codedPayload >> (8 * i)) & 0xff);
  const Frame codedFrame = sealed(toHex(coded));
  auto again = codec->decodeFrom(codedFrame, 5, scratch, Checksum::kVerify, state.get());
  REQUIRE(again.isOk());
  CHECK(std::vector<float>(again->begin(), again->end()) == expected);
  auto unknown = codec->decodeFrom(codedFrame, 5, scratch, Checksum::kVerify, fresh.get());
  REQUIRE_FALSE(unknown.isOk());
  CHECK_THAT(unknown.status().message(), Catch::Contains("version 1"));
}

TEST_CASE("lgc: warm-up frames carry the network, and endRound averages it with the neighbours'",
          "[compression][lgc][unit]") {
  CompressorSpec spec = lgcSpec(10, 4, 4, 1, 5, 0);
  spec.shareEvery = 1;
  auto codec = make<float>(spec);
  const size_t d = 50;
  const size_t P = lgc::parameterCount(lgc::Shape{4, 4, 1});
  // a and twin see the same vectors; only a hears b.
  auto a = codec->newState(d), twin = codec->newState(d), b = codec->newState(d);
  auto aHearsB = codec->newReceiverState(d);
  core::Rng rng(3);
  Frame fa, ft, fb;
  std::vector<float> seen(d), scratch;
  auto networkOf = [&](const Frame& f) {
    std::vector<float> net(P);
    std::memcpy(net.data(), f.data() + kFrameHeaderBytes + 32, P * 4);
    return net;
  };
  for (uint64_t round = 0; round < 2; ++round) {
    const auto xa = normalVector<float>(d, 10 + round), xb = normalVector<float>(d, 20 + round);
    REQUIRE(codec->encodeSeen(xa, rng, {round, 8, a.get()}, fa, seen).isOk());
    REQUIRE(codec->encodeSeen(xa, rng, {round, 8, twin.get()}, ft, seen).isOk());
    REQUIRE(codec->encodeSeen(xb, rng, {round, 8, b.get()}, fb, seen).isOk());
    if (round == 0) {
      // All started from the same network (the shared seed), shipped before their first step.
      CHECK(networkOf(fa) == networkOf(fb));
      CHECK(networkOf(fa) == lgc::initialParameters(lgc::Shape{4, 4, 1},
                                                    core::deriveSeed(8, 0x4c4743, 0, 0)));
    }
  }
  // Round 1: each has taken a step on its own values, so they differ. a hears b's round-1 frame
  // and averages at the end of the round; twin hears nobody.
  const std::vector<float> nb = networkOf(fb);
  CHECK(networkOf(fa) != nb);
  REQUIRE(codec->decodeFrom(fb, d, scratch, Checksum::kVerify, aHearsB.get()).isOk());
  CodecState* heard[] = {aHearsB.get()};
  codec->endRound({1, 8, a.get()}, heard);
  codec->endRound({1, 8, twin.get()}, {});
  // Round 2's frames ship the networks as they are now: a's is the mean of twin's and b's.
  const auto x2 = normalVector<float>(d, 30);
  REQUIRE(codec->encodeSeen(x2, rng, {2, 8, a.get()}, fa, seen).isOk());
  REQUIRE(codec->encodeSeen(x2, rng, {2, 8, twin.get()}, ft, seen).isOk());
  const std::vector<float> na = networkOf(fa), nt = networkOf(ft);
  for (size_t k = 0; k < P; ++k) {
    CHECK(na[k] == static_cast<float>((static_cast<double>(nt[k]) + nb[k]) * 0.5));
  }
  // A network is averaged once: the same state heard again without a new frame adds nothing.
  codec->endRound({2, 8, a.get()}, heard);
  REQUIRE(codec->encodeSeen(x2, rng, {3, 8, a.get()}, fa, seen).isOk());
  REQUIRE(codec->encodeSeen(x2, rng, {3, 8, twin.get()}, ft, seen).isOk());
  CHECK(networkOf(fa) != networkOf(ft));  // still the averaged trajectory, not pulled again

  // With share_every 3 (the default is 10) only rounds 0 and 3 of the warm-up ship the network:
  // the other frames are top-k's bytes plus the params.
  spec.shareEvery = 3;
  auto sparse = make<float>(spec);
  auto st = sparse->newState(d);
  auto topk = make<float>(topkSpec(10));
  for (uint64_t round = 0; round < 4; ++round) {
    Frame f, plain;
    const auto x = normalVector<float>(d, 40 + round);
    REQUIRE(sparse->encodeSeen(x, rng, {round, 8, st.get()}, f, seen).isOk());
    topk->encode(x, rng, plain);
    const size_t network = round % 3 == 0 ? P * 4 : 0;
    // lgc: 32 params, no u32 count; top-k: no params, a u32 count.
    CHECK(f.size() == plain.size() + 32 - 4 + network);
  }
}

}  // namespace
}  // namespace starling::compression

namespace starling::compression {
namespace {

TEST_CASE("lgc: with every element kept, frames carry no indices, and decode in place of them",
          "[compression][lgc][unit]") {
  // ratio 1: chunks are consecutive stretches of the message. d = 50, C = 8: 7 chunks.
  CompressorSpec spec = lgcSpec(0, 8, 6, 2, 1, 0);
  spec.ratio = 1.0;
  auto codec = make<double>(spec);
  const size_t d = 50, P = lgc::parameterCount(lgc::Shape{8, 6, 2});
  auto sender = codec->newState(d);
  auto receiver = codec->newReceiverState(d);
  core::Rng rng(5);
  for (uint64_t round = 0; round < 4; ++round) {
    CAPTURE(round);
    const auto x = normalVector<double>(d, 60 + round);
    Frame f;
    std::vector<double> seen(d);
    REQUIRE(codec->encodeSeen(x, rng, {round, 3, sender.get()}, f, seen).isOk());
    // Header 32 + params 32 + [network] + values or 7 x (scale + 2 codes) + CRC 4.
    const size_t expected = round == 0   ? 68 + 4 * P + 8 * d   // warm-up, network shipped
                            : round == 1 ? 68 + 4 * P + 7 * 8  // version 1 starts
                                         : 68 + 7 * 8;
    CHECK(f.size() == expected);
    CHECK(codec->maxEncodedBytes(d) >= f.size());
    std::vector<double> scratch;
    auto got = codec->decodeFrom(f, d, scratch, Checksum::kVerify, receiver.get());
    REQUIRE(got.isOk());
    CHECK(std::memcmp(got->data(), seen.data(), d * sizeof(double)) == 0);
    if (round == 0) CHECK(seen == x);  // the warm-up sends the values themselves
    double err = 0, norm = 0;
    for (size_t i = 0; i < d; ++i) {
      err += (seen[i] - x[i]) * (seen[i] - x[i]);
      norm += x[i] * x[i];
    }
    CHECK(err <= norm);
  }
}

}  // namespace
}  // namespace starling::compression
