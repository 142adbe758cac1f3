// LGC's autoencoder (docs/algorithms.md §28, docs/compression.md "LGC"): a small dense network
// over fixed-size chunks of the values a sender keeps (internal to compression/; the tests use it
// directly).
//
//   encoder  a1 = lrelu(W1 u + b1)   (hidden)      z = W2 a1 + b2   (latent)
//   decoder  a2 = lrelu(W3 z + b3)   (hidden)      y = W4 a2 + b4   (chunk)
//
// lrelu(v) = v for v >= 0, 0.01 v otherwise. The loss of a batch of n chunks is the mean squared
// error (1 / (n C)) sum ||y - u||^2. The parameters are one flat vector, layer after layer, each
// W row-major (row o holds the weights into output o) then its b: the layout of the `mlp`
// problem's model (optim/mlp.h), encoder first, so the decoder is the tail from decoderOffset().
// The functions are templated on the scalar so that the tests can check the float network's
// gradient against finite differences of the same code in double. Plain loops in a fixed order:
// the sender and every receiver of a frame run the same decoder on the same bits and get the
// same values, which CHOCO's and LEAD's reference points need.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace starling::compression::codecs::lgc {

struct Shape {
  uint32_t chunk = 32;   // C: values per chunk
  uint32_t hidden = 64;  // H
  uint32_t latent = 4;   // L: numbers sent per chunk
};

// Parameters of the whole autoencoder, and of the encoder (the decoder's offset in the vector).
size_t parameterCount(const Shape& s);
size_t encoderCount(const Shape& s);
inline size_t decoderCount(const Shape& s) { return parameterCount(s) - encoderCount(s); }

// The same starting point at every node: W entries N(0, 2 / fan_in) (He) from core::Rng(seed)
// in the flat order, b = 0.
std::vector<float> initialParameters(const Shape& s, uint64_t seed);

// z (latent values) of one chunk u (chunk values); `encoder` is the first encoderCount values.
template <typename S>
void encodeChunk(const Shape& s, std::span<const S> encoder, const S* u, S* z);

// y (chunk values) of one latent z; `decoder` is the last decoderCount values.
template <typename S>
void decodeChunk(const Shape& s, std::span<const S> decoder, const S* z, S* y);

// The loss of n chunks (u holds n * chunk values) and its gradient with respect to every
// parameter, written into `grad` (parameterCount values, overwritten).
template <typename S>
double lossAndGradient(const Shape& s, std::span<const S> theta, std::span<const S> u, size_t n,
                       std::span<S> grad);

// One Adam step (beta1 0.9, beta2 0.999, eps 1e-8, bias-corrected; `step` counts from 1).
void adamStep(std::span<float> theta, std::span<const float> grad, std::span<float> m,
              std::span<float> v, uint64_t step, double lr);

}  // namespace starling::compression::codecs::lgc
