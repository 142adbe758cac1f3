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

}  // namespace starling::optim::elementwise
