// Adasum: combining two or more updates (gradients or model deltas) by their geometry instead of
// a weighted average (docs/algorithms.md §23).
//
// For two vectors a and b (one tensor):
//   Adasum(a, b) = (1 - a.b / (2 ||a||^2)) a + (1 - a.b / (2 ||b||^2)) b
// Orthogonal vectors add (a + b), identical ones give the vector (a), opposite ones cancel (0).
// A coefficient whose norm is exactly 0 is taken as 1, so a zero vector contributes nothing and
// the result is the other vector. (Horovod forces it to 1 below ||a||^2 < 1e-8; an absolute
// threshold would turn Adasum into a plain sum for small model deltas, so only an exact zero is
// guarded here: with the products in double, a.b / ||a||^2 is finite for every nonzero float a.)
// With a ParameterLayout the rule is applied tensor by tensor, each with its own coefficients.
// Dot products and squared norms are accumulated in double.
//
// More than two vectors are reduced as a binary tree, level by level in the order given:
// level 1 combines (v0, v1), (v2, v3), ..., an odd last vector goes up unchanged, and so on until
// one is left. For 2^k vectors this is Horovod's Adasum(Adasum(v0, v1), Adasum(v2, v3)) ...,
// every input at depth k, where a left fold would pass v0 through n - 1 combines and v_{n-1}
// through one; the rounding error grows with the depth.
// Adasum is not associative, so the result depends on the order: callers on different peers must
// list the same vectors in the same order (e.g. sorted by peer id) to get the same bits.
//
// How it is meant to be driven: a gossip peer that receives its neighbours' updates (model deltas
// x_j^{t+1} - x_j^t, or their gradients) combines its own and theirs with adasumCombine, in peer
// order, and applies the result; how the models are kept in consensus (e.g. Adasum on the update,
// plain gossip on the model) is the runtime's (docs/algorithms.md §23 discusses it).
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <utility>

#include "optim/local_optimizer.h"

namespace starling::optim {

// The two coefficients (ca, cb) of Adasum(a, b) = ca a + cb b from a.b, ||a||^2 and ||b||^2:
// ca = 1 - dot / (2 aa), or 1 when aa == 0; likewise cb with bb.
std::pair<double, double> adasumCoefficients(double dot, double aa, double bb);

// out = Adasum(a, b) over the whole vector as one tensor. All three spans have the same size;
// `out` may be `a` or `b` (the same span), not a partial overlap.
template <typename T>
void adasumPair(std::span<const T> a, std::span<const T> b, std::span<T> out);

// The same, tensor by tensor: each tensor of `layout` gets its own coefficients.
// layout.dim() == a.size().
template <typename T>
void adasumPair(const ParameterLayout& layout, std::span<const T> a, std::span<const T> b,
                std::span<T> out);

// out = the binary-tree Adasum of `vectors` (at least one, each of layout.dim() elements), tensor
// by tensor, in the order given (see above). One vector is copied. `out` must not overlap any
// input. Allocates (n / 2) vectors of scratch.
template <typename T>
void adasumCombine(std::span<const std::span<const T>> vectors, const ParameterLayout& layout,
                   std::span<T> out);

}  // namespace starling::optim
