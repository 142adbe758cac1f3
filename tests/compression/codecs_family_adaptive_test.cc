// The adaptive codecs (adacomp, dqsgd) against their selection rules, and frame sizes of the
// whole family at d = 10^4 (docs/wire_format.md). codecs_family_test.cc has the construction,
// round trips, golden frames and statistics; codecs_family_corrupt_test.cc the corruption corpora.
#include <bit>
#include <iomanip>
#include <iostream>

#include "tests/compression/codec_family_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;
using namespace family_testing;

// ---------------------------------------------------------------------------------------------
// AdaComp

// The frame AdaComp's rule gives for residue g (already holding v) and the latest vector v:
// sent indices and the scale.
struct Selection {
  std::vector<size_t> indices;
  double scale = 0;
};
template <typename T>
Selection adacompRule(const std::vector<double>& g, const std::vector<T>& v, size_t bin) {
  Selection sel;
  double sum = 0;
  for (size_t lo = 0; lo < g.size(); lo += bin) {
    const size_t hi = std::min(g.size(), lo + bin);
    double gMax = 0;
    for (size_t i = lo; i < hi; ++i) gMax = std::max(gMax, std::abs(g[i]));
    for (size_t i = lo; i < hi; ++i) {
      if (g[i] != 0 && std::abs(g[i] + double(v[i])) >= gMax) {
        sel.indices.push_back(i);
        sum += std::abs(g[i]);
      }
    }
  }
  if (!sel.indices.empty()) sel.scale = sum / double(sel.indices.size());
  return sel;
}

TEMPLATE_TEST_CASE("adacomp sends every bin's maximum of a fresh residue", "[compression][unit]",
                   float, double) {
  const size_t d = GENERATE(size_t{1}, size_t{7}, size_t{1001});
  const size_t bin = GENERATE(size_t{1}, size_t{3}, size_t{50}, size_t{5000});
  CAPTURE(d, bin);
  auto c = make<TestType>(adacompSpec(bin));
  const auto x = normalVector<TestType>(d, 260 + d);
  const auto y = decodeOk(*c, encodeWith(*c, x), d);
  // G = x, H = 2x: i is sent iff 2|x_i| >= the bin's max |x|; the max itself always is.
  double scale = 0;
  for (size_t lo = 0; lo < d; lo += bin) {
    const size_t hi = std::min(d, lo + bin);
    double xMax = 0;
    for (size_t i = lo; i < hi; ++i) xMax = std::max(xMax, std::abs(double(x[i])));
    for (size_t i = lo; i < hi; ++i) {
      CAPTURE(i, x[i], y[i], xMax);
      REQUIRE((y[i] != 0) == (2 * std::abs(double(x[i])) >= xMax));
      if (std::abs(double(x[i])) == xMax) REQUIRE(y[i] != 0);
      if (y[i] != 0) {
        REQUIRE((y[i] < 0) == (x[i] < 0));
        if (scale == 0) scale = std::abs(y[i]);
        REQUIRE(std::abs(y[i]) == scale);  // one scale
      }
    }
  }
  std::vector<double> g(x.begin(), x.end());
  const Selection sel = adacompRule(g, x, bin);
  CHECK(scale == static_cast<TestType>(sel.scale));
}

TEMPLATE_TEST_CASE("adacomp is error feedback: frames plus residue account for every input",
                   "[compression][unit]", float, double) {
  const size_t d = 1001, bin = 50;  // 20 full bins and one of 1
  auto c = make<TestType>(adacompSpec(bin));
  auto state = c->newState(d);
  REQUIRE(state != nullptr);
  core::Rng rng(270), noise(271);
  std::vector<double> g(d, 0.0), sumIn(d, 0.0), sumOut(d, 0.0);
  std::vector<TestType> x(d), y(d);
  Frame f;
  size_t sentTotal = 0;
  for (uint64_t round = 0; round < 60; ++round) {
    // Gradients with a drifting mean, so that residues build up and change sign.
    for (size_t i = 0; i < d; ++i) {
      x[i] = static_cast<TestType>(noise.normal() + 0.3 * std::sin(0.1 * double(round + i)));
    }
    c->encodeStream(x, rng, StreamContext{round, 0, state.get()}, f);
    REQUIRE(c->decode(f, y).isOk());
    // The codec's residue is the inputs minus what was sent: its choices must be exactly those
    // of AdaComp's rule on that residue.
    for (size_t i = 0; i < d; ++i) g[i] += double(x[i]);
    const Selection sel = adacompRule(g, x, bin);
    size_t j = 0;
    for (size_t i = 0; i < d; ++i) {
      CAPTURE(round, i, g[i], y[i]);
      const bool sent = j < sel.indices.size() && sel.indices[j] == i;
      REQUIRE((y[i] != 0) == sent);
      if (sent) {
        ++j;
        REQUIRE(double(std::abs(y[i])) ==
                Approx(sel.scale).epsilon(4 * std::numeric_limits<TestType>::epsilon()));
        REQUIRE((y[i] < 0) == (g[i] < 0));
      }
      g[i] -= double(y[i]);
      sumIn[i] += double(x[i]);
      sumOut[i] += double(y[i]);
    }
    sentTotal += sel.indices.size();
  }
  // Sent + residue = inputs, to rounding.
  for (size_t i = 0; i < d; ++i) {
    REQUIRE(sumOut[i] + g[i] == Approx(sumIn[i]).margin(1e-9));
  }
  CHECK(sentTotal > 0);
  CHECK(sentTotal < 60 * d / 2);  // it does compress
}

TEMPLATE_TEST_CASE("adacomp holds back, then drains, a residue: a stream by hand",
                   "[compression][unit]", float, double) {
  using T = TestType;
  auto c = make<T>(adacompSpec(2));
  auto state = c->newState(2);
  core::Rng rng(1);
  auto next = [&](std::vector<T> x) {
    Frame f;
    c->encodeStream(x, rng, StreamContext{0, 0, state.get()}, f);
    return decodeOk(*c, f, 2);
  };
  // G = {1, 1/4}, H = {2, 1/2}, max 1: only element 0; G <- {0, 1/4}.
  CHECK(next({1, 0.25}) == std::vector<T>{1, 0});
  // G = {-1/2, 3/8}, H = {-1, 1/2}, max 1/2: both, scale 7/16; G <- {-1/16, -1/16}.
  CHECK(next({-0.5, 0.125}) == std::vector<T>{T(-0.4375), T(0.4375)});
  // No input: H = G, both sent with scale 1/16, and the residue is empty.
  CHECK(next({0, 0}) == std::vector<T>{T(-0.0625), T(-0.0625)});
  CHECK(next({0, 0}) == std::vector<T>{0, 0});
  // Sent: {1 - 7/16 - 1/16, 7/16 - 1/16} = {1/2, 3/8}, the sum of the inputs.
}

// ---------------------------------------------------------------------------------------------
// DQSGD

int dqsgdBits(int minBits, int maxBits, double target, size_t bucket, size_t d, double norm2,
              double mean) {
  const double b = double(std::min(bucket, d));
  for (int bits = minBits; bits <= maxBits; ++bits) {
    const double s = (1 << (bits - 1)) - 1;
    if (std::min(b / (s * s), std::sqrt(b) / s) * norm2 <= target * mean) return bits;
  }
  return maxBits;
}

int frameBits(const Frame& f) {
  const auto view = parseFrame(f);
  REQUIRE(view.isOk());
  return std::to_integer<int>(view->params[0]);
}

TEMPLATE_TEST_CASE("dqsgd picks the fewest bits that keep eps(s) ||x||^2 <= target * mean",
                   "[compression][unit]", float, double) {
  const double target = GENERATE(0.01, 0.1, 1.0);
  const size_t bucket = GENERATE(size_t{16}, size_t{512});
  CAPTURE(target, bucket);
  const size_t d = 300;
  auto c = make<TestType>(dqsgdSpec(2, 8, target, bucket));
  auto state = c->newState(d);
  core::Rng rng(280);
  double sum = 0;
  std::vector<int> seen;
  Frame f;
  const double scales[] = {1, 1, 10, 0.1, 3, 0.5, 30, 1, 0.01, 5};
  for (size_t t = 0; t < std::size(scales); ++t) {
    const auto x = normalVector<TestType>(d, 281 + t, scales[t]);
    const double norm2 = squaredNorm<TestType>(x);
    const double mean = (sum + norm2) / double(t + 1);
    core::Rng before = rng;
    c->encodeStream(x, rng, StreamContext{t, 0, state.get()}, f);
    const int bits = frameBits(f);
    CAPTURE(t, norm2, mean, bits);
    CHECK(bits == dqsgdBits(2, 8, target, bucket, d, norm2, mean));
    sum += norm2;
    seen.push_back(bits);
    // The payload is qsgd's, bit for bit, at the chosen width.
    auto qsgd = make<TestType>(qsgdSpec(bits, bucket, false));
    Frame fq;
    qsgd->encode(x, before, fq);
    const auto pq = parseFrame(fq), pd = parseFrame(f);
    REQUIRE((pq.isOk() && pd.isOk()));
    CHECK(Bytes(pq->payload.begin(), pq->payload.end()) ==
          Bytes(pd->payload.begin(), pd->payload.end()));
    // ...and any decoder reads the width from the params.
    auto other = make<TestType>(dqsgdSpec(7, 8, 1e-6, 3));
    CHECK(decodeOk(*other, f, d) == decodeOk(*c, f, d));
  }
  // The first frame is judged against its own norm: eps(s) <= target, whatever the scale.
  for (double scale : {1e-3, 1.0, 1e3}) {
    const auto x = normalVector<TestType>(d, 299, scale);
    CHECK(frameBits(encodeWith(*c, x)) ==
          dqsgdBits(2, 8, target, bucket, d, squaredNorm<TestType>(x), squaredNorm<TestType>(x)));
  }
  // Frames far above the stream's mean get more bits than frames far below it.
  CHECK(seen[6] >= seen[8]);
}

TEMPLATE_TEST_CASE("dqsgd gives a larger-norm frame at least as many bits", "[compression][unit]",
                   float, double) {
  const size_t d = 200;
  auto c = make<TestType>(dqsgdSpec(2, 8, 0.05, 64));
  for (double factor : {0.1, 0.5, 2.0, 4.0, 16.0}) {
    // Two streams with the same history, then x and factor * x.
    auto a = c->newState(d);
    auto b = c->newState(d);
    core::Rng ra(1), rb(1);
    Frame f;
    for (uint64_t t = 0; t < 5; ++t) {
      const auto h = normalVector<TestType>(d, 300 + t);
      c->encodeStream(h, ra, StreamContext{t, 0, a.get()}, f);
      c->encodeStream(h, rb, StreamContext{t, 0, b.get()}, f);
    }
    const auto x = normalVector<TestType>(d, 310);
    std::vector<TestType> big(x);
    for (auto& v : big) v = static_cast<TestType>(v * factor);
    Frame fa, fb;
    c->encodeStream(x, ra, StreamContext{5, 0, a.get()}, fa);
    c->encodeStream(big, rb, StreamContext{5, 0, b.get()}, fb);
    CAPTURE(factor, frameBits(fa), frameBits(fb));
    if (factor > 1) CHECK(frameBits(fb) >= frameBits(fa));
    if (factor < 1) CHECK(frameBits(fb) <= frameBits(fa));
  }
  // With maxBits too low to meet the budget, maxBits.
  auto capped = make<TestType>(dqsgdSpec(2, 3, 1e-6, 64));
  CHECK(frameBits(encodeWith(*capped, normalVector<TestType>(d, 320))) == 3);
}

// ---------------------------------------------------------------------------------------------
// Frame sizes at d = 10^4 (docs/wire_format.md's table)

TEMPLATE_TEST_CASE("family frame sizes follow the wire format's formulas", "[compression][unit]",
                   float, double) {
  const size_t d = 10000;
  const size_t e = sizeof(TestType);
  const auto x = normalVector<TestType>(d, 600);
  auto size = [&](const CompressorSpec& spec) {
    return encodeWith(*make<TestType>(spec), x).size();
  };
  for (int bits : {2, 4, 8}) {
    CHECK(size(nuqsgdSpec(bits, 512)) == 36 + 8 + 4 * 20 + d * bits / 8);
  }
  CHECK(size(makeSpec(Kind::kNatural)) == 36 + (9 * d + 7) / 8);
  for (int s : {1, 2, 3, 4, 8, 16, 30}) {
    CHECK(size(ditheringSpec(s, false)) ==
          36 + 8 + 4 + (d * (std::bit_width(unsigned(s)) + 1) + 7) / 8);
  }
  for (size_t k : {size_t{100}, size_t{1000}}) {
    auto c = make<TestType>(topkDitheringSpec(k, 4));
    auto topk = make<TestType>(topkSpec(k));
    const auto t = decodeOk(*topk, encodeWith(*topk, x), d);
    CHECK(encodeWith(*c, x).size() == 36 + 8 + 4 + gapBytes(t) + 4 + (4 * k + 7) / 8);
  }
  {
    auto c = make<TestType>(adacompSpec(500));
    const Frame f = encodeWith(*c, x);
    size_t n = 0;
    const uint64_t gaps = gapBytes(decodeOk(*c, f, d), &n);
    CHECK(f.size() == 36 + 4 + gaps + e + (n + 7) / 8);
  }
  {
    auto c = make<TestType>(dqsgdSpec(2, 8, 0.1, 512));
    const Frame f = encodeWith(*c, x);
    CHECK(f.size() == 36 + 8 + 4 * 20 + (d * frameBits(f) + 7) / 8);
  }
}

// Not run by default: `compression_test "[report]"` prints bits per element at d = 10^4 (float32)
// and the measured variance and contraction ratios of the statistics tests run before it.
TEST_CASE("report: bits per element and measured ratios", "[.][report]") {
  const size_t d = 10000;
  const auto x = normalVector<float>(d, 600);
  auto bitsPer = [&](const CompressorSpec& spec, int frames = 1) {
    auto c = make<float>(spec);
    auto state = c->newState(d);
    core::Rng rng(1), noise(2);
    Frame f;
    size_t bytes = 0;
    std::vector<float> v(x);
    for (int t = 0; t < frames; ++t) {
      for (auto& e : v) e = static_cast<float>(noise.normal());
      c->encodeStream(t == 0 ? std::span<const float>(x) : std::span<const float>(v), rng,
                      StreamContext{uint64_t(t), 0, state.get()}, f);
      bytes += f.size();
    }
    return 8.0 * double(bytes) / double(frames) / double(d);
  };
  std::cout << std::fixed << std::setprecision(3);
  std::cout << "bits per element, d = 10^4, float32 (normal vector)\n";
  for (int bits : {2, 4, 8}) {
    std::cout << "  nuqsgd bits " << bits << " bucket 512: " << bitsPer(nuqsgdSpec(bits, 512))
              << "\n";
  }
  std::cout << "  natural: " << bitsPer(makeSpec(Kind::kNatural)) << "\n";
  for (int s : {1, 2, 4, 8}) {
    std::cout << "  natural_dithering s=" << s << ": " << bitsPer(ditheringSpec(s, false)) << "\n";
  }
  for (size_t k : {size_t{100}, size_t{1000}}) {
    std::cout << "  topk_dithering s=4 k=" << k << ": " << bitsPer(topkDitheringSpec(k, 4)) << "\n";
  }
  for (size_t bin : {size_t{50}, size_t{500}}) {
    std::cout << "  adacomp bin " << bin << ": first frame " << bitsPer(adacompSpec(bin))
              << ", mean of 50 frames " << bitsPer(adacompSpec(bin), 50) << "\n";
  }
  for (double target : {0.01, 0.1, 1.0}) {
    std::cout << "  dqsgd 2..8 bits target " << target
              << " bucket 512: " << bitsPer(dqsgdSpec(2, 8, target, 512)) << "\n";
  }
  std::cout << std::setprecision(4) << "measured / bound\n";
  for (const Measured& m : report()) {
    std::cout << "  " << m.what << ": " << m.measured << " / " << m.bound << "\n";
  }
}

}  // namespace
}  // namespace starling::compression
