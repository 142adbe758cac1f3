// The span encode (Compressor::encodeInto, docs/compression.md "Writing into transport memory"):
// for every codec kind, with and without error feedback, it writes exactly the bytes the vector
// encode writes, `seen` is exactly what decode reads back, the frame fits maxEncodedBytes (which
// is exact for the fixed-size codecs), and a span too small for the frame fails cleanly: an
// error, and not one byte written past the span.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codec_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;

// Every codec kind, with parameters that exercise their payloads (bucketed, several levels).
std::vector<CompressorSpec> everyKind() {
  std::vector<CompressorSpec> specs;
  for (const CompressorKindInfo& info : compressorKinds()) {
    CompressorSpec s = makeSpec(info.kind);
    switch (info.kind) {
      case Kind::kTopK:
      case Kind::kTopKDithering:
        s.ratio = 0.1;
        break;
      case Kind::kRandK:
        s.ratio = 0.1;
        break;
      case Kind::kQsgd:
      case Kind::kNuqsgd:
        s.bits = 3;
        s.bucket = 64;
        break;
      case Kind::kCountSketch:
        s.rows = 3;
        s.cols = 32;
        s.k = 5;
        break;
      case Kind::kAdaComp:
        s.bin = 16;
        break;
      case Kind::kDqsgd:
        s.bucket = 64;
        break;
      case Kind::kLgc:
        // Round 0 a warm-up frame, rounds 1 and 2 each a new decoder version (mode 2, which a
        // decode without the sender's state can read).
        s.ratio = 0.2;
        s.chunk = 4;
        s.hidden = 8;
        s.latent = 2;
        s.warmup = 1;
        s.refresh = 1;
        break;
      default:
        break;
    }
    specs.push_back(s);
  }
  // A second variant of a few: rand-k unscaled, qsgd with the max norm, the sketch's mean estimate.
  CompressorSpec randk = makeSpec(Kind::kRandK);
  randk.k = 3;
  randk.scaled = false;
  specs.push_back(randk);
  specs.push_back(qsgdSpec(8, 1000, true));
  CompressorSpec mean = makeSpec(Kind::kCountSketch);
  mean.rows = 2;
  mean.cols = 16;
  mean.meanEstimate = true;
  specs.push_back(mean);
  return specs;
}

// Frames of these codecs have one length for a given d: the bound must be that length.
bool fixedSize(Kind kind) {
  switch (kind) {
    case Kind::kTopK:
    case Kind::kRandK:
    case Kind::kTopKDithering:
    case Kind::kAdaComp:
    case Kind::kDqsgd:
    case Kind::kLgc:
      return false;
    default:
      return true;
  }
}

template <typename T>
bool sameBits(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Three rounds of one stream, encoded both ways from the same rng and state history.
// With a layout, the spec's layers rules make it the layered codec (codec 14) over it.
template <typename T>
void checkSpec(const CompressorSpec& spec, size_t d, std::vector<size_t> layout = {}) {
  auto made = createCompressor<T>(spec, layout);
  INFO(made.status().toString());
  REQUIRE(made.isOk());
  const auto codec = std::move(*made);
  const std::string name = std::string(compressorKindName(spec.kind)) +
                           (spec.errorFeedback ? "+ef" : "") + " d=" + std::to_string(d) +
                           (layout.empty() ? "" : " layered");
  INFO(name);
  auto stateA = codec->newState(d);
  auto stateB = codec->newState(d);
  core::Rng rngA(11), rngB(11);
  for (uint64_t round = 0; round < 3; ++round) {
    INFO("round " << round);
    const std::vector<T> x = normalVector<T>(d, 100 + round, 1.0 + static_cast<double>(round));
    const StreamContext ctxA{round, 99, stateA.get()};
    SeenError error;
    const StreamContext ctxB{round, 99, stateB.get(), &error};
    Frame expected;
    codec->encodeStream(x, rngA, ctxA, expected);

    const size_t bound = codec->maxEncodedBytes(d);
    REQUIRE(expected.size() <= bound);
    if (fixedSize(spec.kind)) REQUIRE(expected.size() == bound);
    if (!layout.empty()) REQUIRE(codec->id() == CodecId::kLayered);

    // The span sits inside a larger buffer whose tail must stay untouched.
    constexpr size_t kGuard = 64;
    std::vector<std::byte> buffer(bound + kGuard, std::byte{0xa5});
    std::vector<T> seen(d, T(-7));
    const core::Result<size_t> n = codec->encodeInto(
        x, rngB, ctxB, std::span<std::byte>(buffer).first(bound), seen);
    INFO(n.status().toString());
    REQUIRE(n.isOk());
    REQUIRE(*n == expected.size());
    REQUIRE(std::memcmp(buffer.data(), expected.data(), expected.size()) == 0);
    for (size_t i = bound; i < buffer.size(); ++i) REQUIRE(buffer[i] == std::byte{0xa5});

    // seen is decode(frame), bit for bit.
    const std::vector<T> decoded = decodeOk<T>(*codec, expected, d);
    REQUIRE(sameBits<T>(seen, decoded));
    // A codec that measured the compression error as it went got the bits of one pass over x and
    // seen afterwards (which is what the engine makes otherwise). The 16-bit casts and sign do;
    // the layered codec leaves it to the engine.
    const bool measures = !spec.errorFeedback && layout.empty() && (spec.kind == Kind::kFp16 ||
                                                  spec.kind == Kind::kBf16 ||
                                                  spec.kind == Kind::kSign);
    REQUIRE(error.measured == measures);
    if (error.measured) {
      SquaredErrorSum pass;
      pass.add(x.data(), seen.data(), d);
      const SeenError want = pass.result();
      REQUIRE(std::memcmp(&error.errorSq, &want.errorSq, sizeof(double)) == 0);
      REQUIRE(std::memcmp(&error.normSq, &want.normSq, sizeof(double)) == 0);
      // and it is the compression error: a plain float64 sum to rounding.
      double e = 0, n = 0;
      for (size_t i = 0; i < d; ++i) {
        e += (static_cast<double>(seen[i]) - x[i]) * (static_cast<double>(seen[i]) - x[i]);
        n += static_cast<double>(x[i]) * x[i];
      }
      REQUIRE(error.errorSq == Approx(e).epsilon(1e-12).margin(1e-300));
      REQUIRE(error.normSq == Approx(n).epsilon(1e-12));
    }
    // The rng advanced alike: the next draw agrees.
    REQUIRE(rngA.nextU64() == rngB.nextU64());
  }

  // A span one byte short of the frame: an error, nothing written past it.
  const std::vector<T> x = normalVector<T>(d, 7);
  auto fresh = codec->newState(d);
  Frame expected;
  {
    core::Rng rng(5);
    codec->encodeStream(x, rng, StreamContext{0, 99, fresh.get()}, expected);
  }
  auto state = codec->newState(d);
  std::vector<std::byte> buffer(expected.size() + 64, std::byte{0x5a});
  std::vector<T> seen(d);
  core::Rng rng(5);
  const core::Result<size_t> n =
      codec->encodeInto(x, rng, StreamContext{0, 99, state.get()},
                        std::span<std::byte>(buffer).first(expected.size() - 1), seen);
  REQUIRE_FALSE(n.isOk());
  REQUIRE(n.status().code() == StatusCode::kInvalidArgument);
  for (size_t i = expected.size() - 1; i < buffer.size(); ++i) REQUIRE(buffer[i] == std::byte{0x5a});
}

TEMPLATE_TEST_CASE("encodeInto writes encodeStream's bytes and decode's values for every codec",
                   "[compression][unit]", float, double) {
  for (CompressorSpec spec : everyKind()) {
    for (bool feedback : {false, true}) {
      if (feedback && spec.kind == Kind::kAdaComp) continue;  // its residue is error feedback
      spec.errorFeedback = feedback;
      for (size_t d : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}, size_t{4099}, size_t{9001}}) {
        checkSpec<TestType>(spec, d);
      }
    }
  }
}

// Every codec as the layered codec's rest, next to an identity group of the first and last
// tensors (a scattered group) and a qsgd group (a codec with its own frame length bound).
CompressorSpec layeredOver(CompressorSpec rest) {
  LayerRule ends{{0, -1}, makeSpec(Kind::kIdentity)};
  LayerRule middle{{2}, qsgdSpec(3, 16, false)};
  middle.codec.errorFeedback = rest.errorFeedback;
  rest.layers = {ends, middle};
  return rest;
}

// Five tensors holding d elements (d >= 5).
std::vector<size_t> fiveTensors(size_t d) {
  const size_t q = d / 5;
  return {q, q + 1, q > 1 ? q - 1 : 1, q, d - (q + q + 1 + (q > 1 ? q - 1 : 1) + q)};
}

TEMPLATE_TEST_CASE("encodeInto writes encodeStream's bytes for the layered codec over every codec",
                   "[compression][unit]", float, double) {
  for (CompressorSpec spec : everyKind()) {
    for (bool feedback : {false, true}) {
      if (feedback && spec.kind == Kind::kAdaComp) continue;
      spec.errorFeedback = feedback;
      const CompressorSpec layered = layeredOver(spec);
      for (size_t d : {size_t{7}, size_t{64}, size_t{1000}, size_t{9001}}) {
        checkSpec<TestType>(layered, d, fiveTensors(d));
      }
    }
  }
}

TEMPLATE_TEST_CASE("encodeInto: a non-finite input gives decode's error", "[compression][unit]",
                   float, double) {
  // Codecs whose frames refuse NaN report it from encodeInto as decode would on that frame.
  for (const CompressorSpec& spec : everyKind()) {
    const auto codec = make<TestType>(spec);
    INFO(compressorKindName(spec.kind));
    std::vector<TestType> x = normalVector<TestType>(100, 3);
    x[17] = std::numeric_limits<TestType>::quiet_NaN();
    auto stateA = codec->newState(x.size());
    auto stateB = codec->newState(x.size());
    core::Rng rngA(1), rngB(1);
    Frame frame;
    codec->encodeStream(x, rngA, StreamContext{0, 1, stateA.get()}, frame);
    std::vector<TestType> decoded(x.size());
    const core::Status want = codec->decode(frame, decoded);
    std::vector<std::byte> out(codec->maxEncodedBytes(x.size()));
    std::vector<TestType> seen(x.size());
    const auto got = codec->encodeInto(x, rngB, StreamContext{0, 1, stateB.get()}, out, seen);
    REQUIRE(got.status().code() == want.code());
    if (want.isOk()) {
      REQUIRE(*got == frame.size());
      REQUIRE(std::memcmp(out.data(), frame.data(), frame.size()) == 0);
      REQUIRE(sameBits<TestType>(seen, decoded));
    }
  }
}

TEMPLATE_TEST_CASE("identity writes in place: header, the caller's values, the seal",
                   "[compression][unit]", float, double) {
  const auto identity = make<TestType>(makeSpec(Kind::kIdentity));
  REQUIRE(identity->writesInPlace());
  for (const CompressorSpec& spec : everyKind()) {
    if (spec.kind != Kind::kIdentity) REQUIRE_FALSE(make<TestType>(spec)->writesInPlace());
  }
  for (size_t d : {size_t{0}, size_t{1}, size_t{333}}) {
    const std::vector<TestType> x = normalVector<TestType>(d, 9);
    const Frame expected = encodeWith<TestType>(*identity, x);
    REQUIRE(identity->maxEncodedBytes(d) == expected.size());
    std::vector<std::byte> buffer(expected.size());
    const std::span<TestType> payload = identity->beginInPlace(d, buffer);
    REQUIRE(payload.size() == d);
    std::copy(x.begin(), x.end(), payload.begin());
    sealFrame(std::span<std::byte>(buffer));
    REQUIRE(buffer == expected);
    // The receive side reads it in place when the frame is aligned: no copy into scratch.
    std::vector<TestType> scratch;
    const auto view = identity->decodeView(buffer, d, scratch, Checksum::kVerify);
    REQUIRE(view.isOk());
    REQUIRE(sameBits<TestType>(*view, x));
    if (d > 0) REQUIRE(static_cast<const void*>(view->data()) == payload.data());
  }
}

TEMPLATE_TEST_CASE("capabilities: in place for identity, linear for the mean sketch, receiver "
                   "state for lgc, through error feedback and layers",
                   "[compression][unit]", float, double) {
  // What each codec's definition says it can do (docs/compression.md): identity's frame is the
  // vector itself; only the mean estimate is linear in the Count-Sketch table; only LGC's frames
  // need what the sender shipped before. Error feedback keeps its inner codec's linear decoding
  // and receiver state (its frames are the inner codec's) but never writes in place (it needs the
  // frame's values for its residual); the layered codec has receiver state when a group has it,
  // and is never linear.
  const size_t d = 64;
  for (CompressorSpec spec : everyKind()) {
    for (const bool feedback : {false, true}) {
      for (const bool layered : {false, true}) {
        if (feedback && spec.kind == Kind::kAdaComp) continue;  // its residue is error feedback
        if (layered && spec.kind == Kind::kIdentity) continue;  // all identity: no layered codec
        CAPTURE(compressorKindName(spec.kind), feedback, layered);
        spec.errorFeedback = feedback;
        const CompressorSpec built = layered ? layeredOver(spec) : spec;
        const std::vector<size_t> layout = layered ? fiveTensors(d) : std::vector<size_t>{};
        auto codec = createCompressor<TestType>(built, layout);
        REQUIRE(codec.isOk());
        const CodecCapabilities<TestType> caps = (*codec)->capabilities();
        const bool inPlace = spec.kind == Kind::kIdentity && !feedback;
        const bool linear = spec.kind == Kind::kCountSketch && spec.meanEstimate && !layered;
        const bool receiver = spec.kind == Kind::kLgc;
        CHECK((caps.inPlace != nullptr) == inPlace);
        CHECK((caps.linear != nullptr) == linear);
        CHECK((caps.receiver != nullptr) == receiver);
        // The members of the same names answer through them.
        CHECK((*codec)->writesInPlace() == inPlace);
        CHECK(((*codec)->newAccumulator(d) != nullptr) == linear);
        CHECK(((*codec)->newReceiverState(d) != nullptr) == receiver);
      }
    }
  }
  // Both estimates, whatever everyKind chose: only the mean is linear, with error feedback too.
  for (const bool mean : {false, true}) {
    for (const bool feedback : {false, true}) {
      CAPTURE(mean, feedback);
      CompressorSpec sketch = makeSpec(Kind::kCountSketch);
      sketch.rows = 3;
      sketch.cols = 32;
      sketch.meanEstimate = mean;
      if (!mean) sketch.k = 5;
      sketch.errorFeedback = feedback;
      const auto codec = make<TestType>(sketch);
      CHECK((codec->capabilities().linear != nullptr) == mean);
      CHECK((codec->newAccumulator(d) != nullptr) == mean);
    }
  }
}

TEMPLATE_TEST_CASE("decodeView of a lossy codec is decode", "[compression][unit]", float, double) {
  const std::vector<TestType> x = normalVector<TestType>(200, 4);
  for (const CompressorSpec& spec : everyKind()) {
    const auto codec = make<TestType>(spec);
    INFO(compressorKindName(spec.kind));
    const Frame frame = encodeWith<TestType>(*codec, x);
    std::vector<TestType> scratch;
    const auto view = codec->decodeView(frame, x.size(), scratch, Checksum::kVerify);
    REQUIRE(view.isOk());
    REQUIRE(sameBits<TestType>(*view, decodeOk<TestType>(*codec, frame, x.size())));
    // A damaged frame is refused, as decode refuses it.
    Frame bad = frame;
    bad[bad.size() / 2] ^= std::byte{0x10};
    REQUIRE_FALSE(codec->decodeView(bad, x.size(), scratch, Checksum::kVerify).isOk());
  }
}

}  // namespace
}  // namespace starling::compression
