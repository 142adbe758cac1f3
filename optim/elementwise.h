// The per-element steps of the algorithms that also run on a GPU, written once: the CPU
// algorithms call them in their loops and the CUDA kernels (cuda/kernels.cu) call the same
// functions (docs/cuda.md). IEEE operations only, each rounded on its own (no FMA: the kernels
// are built with -ffp-contract=off or nvcc's --fmad=false; x86-64's baseline has no FMA).
// The gossip combine's term is compression/codecs/elementwise.h's combineTerm.
#pragma once

#include "core/hd.h"

namespace starling::optim::elementwise {

// CHOCO-SGD, static W (choco.cc, docs/algorithms.md §7). prepare: the local step and the
// consensus step, x <- x - eta g;  x <- x + gamma (s - x_hat); the node then sends x - x_hat.
template <typename T>
STARLING_HD T chocoStep(T x, T g, T s, T hat, T eta, T gamma) {
  T v = x - eta * g;
  v += gamma * (s - hat);
  return v;
}

// absorb: x_hat <- x_hat + q_i;  s <- s + w_ii q_i, then s <- s + w_ij q_j per neighbour in order.
template <typename T>
STARLING_HD void chocoAbsorbOwn(T& hat, T& s, T own, T self) {
  hat += own;
  s += self * own;
}
template <typename T>
STARLING_HD T chocoAbsorbNeighbour(T s, T w, T m) {
  return s + w * m;
}

// sum += inc with Kahan compensation (`lost` carries what rounding dropped). The dual variables
// (NIDS's z, LEAD's D) integrate increments that shrink to nothing at the fixed point while the
// variables themselves stay of the size of x or of the gradients; dropped increments would
// accumulate in their conserved sums over the nodes and move the fixed point (lead.cc).
template <typename T>
STARLING_HD void addCompensated(T& sum, T& lost, T inc) {
  const T y = inc - lost;
  const T t = sum + y;
  lost = (t - sum) - y;
  sum = t;
}

// One neighbour's term of sum_j w_ij (m_j - own): the neighbours' part of a combine in
// difference form, added to acc (which starts at 0).
template <typename T>
STARLING_HD T pullTerm(T acc, T w, T m, T own) {
  return acc + w * (m - own);
}

// LEAD / Prox-LEAD, static W (lead.cc, docs/algorithms.md). start: Z = X - eta G.
template <typename T>
STARLING_HD T leadStart(T x, T g, T eta) {
  return x - eta * g;
}
// prepare: the difference sent, Y - H with Y = 2 X - Z - eta G - eta D.
template <typename T>
STARLING_HD T leadSend(T x, T z, T g, T d, T h, T eta) {
  const T y = T(2) * x - z - eta * g - eta * d;
  return y - h;
}
// absorb, given this node's decoded difference q and (W q)_i: the dual D, the error e and H.
template <typename T>
STARLING_HD void leadFinish(T q, T wq, T& d, T& dLost, T& e, T& h, T step, T a) {
  const T mixed = q - wq;
  addCompensated(d, dLost, step * (e + mixed));
  e += a * mixed;
  h += a * q;  // (1 - a) h + a yhat
}
// then Z = X - eta G - eta D (and X = prox(Z)).
template <typename T>
STARLING_HD T leadStep(T x, T g, T d, T eta) {
  return x - eta * g - eta * d;
}

// The proximal operator of l1 |u| plus the box [lo, hi] for one coordinate (regularizer.cc):
// the soft threshold, then the clamp.
template <typename T>
STARLING_HD T proxL1Box(T v, T threshold, T lo, T hi) {
  T u = v;
  if (threshold > T(0)) {
    if (u > threshold) {
      u -= threshold;
    } else if (u < -threshold) {
      u += threshold;
    } else {
      u = T(0);
    }
  }
  return u < lo ? lo : (u > hi ? hi : u);
}

}  // namespace starling::optim::elementwise
