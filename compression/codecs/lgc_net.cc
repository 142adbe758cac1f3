#include "compression/codecs/lgc_net.h"

#include <cassert>
#include <cmath>

#include "core/rng.h"

namespace starling::compression::codecs::lgc {
namespace {

constexpr double kSlope = 0.01;

// Offsets of the eight tensors in the flat vector.
struct Offsets {
  size_t w1, b1, w2, b2, w3, b3, w4, b4, end;
};

Offsets offsets(const Shape& s) {
  const size_t C = s.chunk, H = s.hidden, L = s.latent;
  Offsets o{};
  o.w1 = 0;
  o.b1 = o.w1 + H * C;
  o.w2 = o.b1 + H;
  o.b2 = o.w2 + L * H;
  o.w3 = o.b2 + L;
  o.b3 = o.w3 + H * L;
  o.w4 = o.b3 + H;
  o.b4 = o.w4 + C * H;
  o.end = o.b4 + C;
  return o;
}

template <typename S>
S lrelu(S v) {
  return v >= S(0) ? v : static_cast<S>(kSlope) * v;
}

// out[o] = b[o] + sum_i W[o][i] in[i], W rows x cols row-major.
template <typename S>
void dense(const S* W, const S* b, size_t rows, size_t cols, const S* in, S* out) {
  for (size_t o = 0; o < rows; ++o) {
    S acc = b[o];
    const S* w = W + o * cols;
    for (size_t i = 0; i < cols; ++i) acc += w[i] * in[i];
    out[o] = acc;
  }
}

}  // namespace

size_t parameterCount(const Shape& s) { return offsets(s).end; }
size_t encoderCount(const Shape& s) { return offsets(s).w3; }

std::vector<float> initialParameters(const Shape& s, uint64_t seed) {
  const Offsets o = offsets(s);
  std::vector<float> theta(o.end, 0.0f);
  core::Rng rng(seed);
  auto fill = [&](size_t at, size_t count, size_t fanIn) {
    const double sd = std::sqrt(2.0 / static_cast<double>(fanIn));
    for (size_t k = 0; k < count; ++k) theta[at + k] = static_cast<float>(sd * rng.normal());
  };
  fill(o.w1, o.b1 - o.w1, s.chunk);
  fill(o.w2, o.b2 - o.w2, s.hidden);
  fill(o.w3, o.b3 - o.w3, s.latent);
  fill(o.w4, o.b4 - o.w4, s.hidden);
  return theta;
}

template <typename S>
void encodeChunk(const Shape& s, std::span<const S> encoder, const S* u, S* z) {
  const Offsets o = offsets(s);
  assert(encoder.size() >= o.w3);
  std::vector<S> a1(s.hidden);
  dense(encoder.data() + o.w1, encoder.data() + o.b1, s.hidden, s.chunk, u, a1.data());
  for (S& v : a1) v = lrelu(v);
  dense(encoder.data() + o.w2, encoder.data() + o.b2, s.latent, s.hidden, a1.data(), z);
}

template <typename S>
void decodeChunk(const Shape& s, std::span<const S> decoder, const S* z, S* y) {
  const Offsets o = offsets(s);
  assert(decoder.size() == o.end - o.w3);
  const S* p = decoder.data() - o.w3;  // indexes the decoder with the whole vector's offsets
  std::vector<S> a2(s.hidden);
  dense(p + o.w3, p + o.b3, s.hidden, s.latent, z, a2.data());
  for (S& v : a2) v = lrelu(v);
  dense(p + o.w4, p + o.b4, s.chunk, s.hidden, a2.data(), y);
}

template <typename S>
double lossAndGradient(const Shape& s, std::span<const S> theta, std::span<const S> u, size_t n,
                       std::span<S> grad) {
  const Offsets o = offsets(s);
  assert(theta.size() == o.end && grad.size() == o.end && u.size() == n * s.chunk);
  const size_t C = s.chunk, H = s.hidden, L = s.latent;
  for (S& g : grad) g = S(0);
  std::vector<S> h1(H), a1(H), z(L), h2(H), a2(H), y(C), dy(C), da2(H), dz(L), da1(H);
  const S* t = theta.data();
  S* g = grad.data();
  double loss = 0.0;
  const S scale = static_cast<S>(2.0 / static_cast<double>(n * C));
  for (size_t c = 0; c < n; ++c) {
    const S* x = u.data() + c * C;
    dense(t + o.w1, t + o.b1, H, C, x, h1.data());
    for (size_t k = 0; k < H; ++k) a1[k] = lrelu(h1[k]);
    dense(t + o.w2, t + o.b2, L, H, a1.data(), z.data());
    dense(t + o.w3, t + o.b3, H, L, z.data(), h2.data());
    for (size_t k = 0; k < H; ++k) a2[k] = lrelu(h2[k]);
    dense(t + o.w4, t + o.b4, C, H, a2.data(), y.data());
    for (size_t k = 0; k < C; ++k) {
      const S e = y[k] - x[k];
      loss += static_cast<double>(e) * static_cast<double>(e);
      dy[k] = scale * e;
    }
    // Output layer: dW4 = dy a2^T, db4 = dy, da2 = W4^T dy.
    for (size_t k = 0; k < H; ++k) da2[k] = S(0);
    for (size_t r = 0; r < C; ++r) {
      g[o.b4 + r] += dy[r];
      for (size_t k = 0; k < H; ++k) {
        g[o.w4 + r * H + k] += dy[r] * a2[k];
        da2[k] += t[o.w4 + r * H + k] * dy[r];
      }
    }
    for (size_t k = 0; k < H; ++k) da2[k] *= h2[k] >= S(0) ? S(1) : static_cast<S>(kSlope);
    for (size_t k = 0; k < L; ++k) dz[k] = S(0);
    for (size_t r = 0; r < H; ++r) {
      g[o.b3 + r] += da2[r];
      for (size_t k = 0; k < L; ++k) {
        g[o.w3 + r * L + k] += da2[r] * z[k];
        dz[k] += t[o.w3 + r * L + k] * da2[r];
      }
    }
    for (size_t k = 0; k < H; ++k) da1[k] = S(0);
    for (size_t r = 0; r < L; ++r) {
      g[o.b2 + r] += dz[r];
      for (size_t k = 0; k < H; ++k) {
        g[o.w2 + r * H + k] += dz[r] * a1[k];
        da1[k] += t[o.w2 + r * H + k] * dz[r];
      }
    }
    for (size_t k = 0; k < H; ++k) da1[k] *= h1[k] >= S(0) ? S(1) : static_cast<S>(kSlope);
    for (size_t r = 0; r < H; ++r) {
      g[o.b1 + r] += da1[r];
      for (size_t k = 0; k < C; ++k) g[o.w1 + r * C + k] += da1[r] * x[k];
    }
  }
  return n == 0 ? 0.0 : loss / static_cast<double>(n * C);
}

void adamStep(std::span<float> theta, std::span<const float> grad, std::span<float> m,
              std::span<float> v, uint64_t step, double lr) {
  constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const double c1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double c2 = 1.0 - std::pow(b2, static_cast<double>(step));
  for (size_t k = 0; k < theta.size(); ++k) {
    const double gk = grad[k];
    const double mk = b1 * m[k] + (1.0 - b1) * gk;
    const double vk = b2 * v[k] + (1.0 - b2) * gk * gk;
    m[k] = static_cast<float>(mk);
    v[k] = static_cast<float>(vk);
    theta[k] = static_cast<float>(theta[k] - lr * (mk / c1) / (std::sqrt(vk / c2) + eps));
  }
}

template void encodeChunk<float>(const Shape&, std::span<const float>, const float*, float*);
template void encodeChunk<double>(const Shape&, std::span<const double>, const double*, double*);
template void decodeChunk<float>(const Shape&, std::span<const float>, const float*, float*);
template void decodeChunk<double>(const Shape&, std::span<const double>, const double*, double*);
template double lossAndGradient<float>(const Shape&, std::span<const float>,
                                       std::span<const float>, size_t, std::span<float>);
template double lossAndGradient<double>(const Shape&, std::span<const double>,
                                        std::span<const double>, size_t, std::span<double>);

}  // namespace starling::compression::codecs::lgc
