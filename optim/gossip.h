// Gossip averaging without a gradient step: the public Peer's mix(), for trainers that keep their
// own optimizer (docs/algorithms.md §17).
//
// The model is set from the trainer's parameters before every round (setModel), because the
// trainer changes them between rounds. Uncompressed (the identity codec), one round is
//   x_i <- x_i + gamma sum_j w_ij (x_j - x_i)       (sends x_i; gamma = 1: x_i <- sum_j w_ij x_j)
// in difference form, so the rounded self weight never enters. With a lossy codec it is
// CHOCO-gossip (Koloskova, Stich, Jaggi 2019, Alg. 1): sender and receivers track reference points
// x-hat, only compressed differences travel, so compression errors do not accumulate:
//   send q_i = C(x_i - x-hat_i);  x-hat_j <- x-hat_j + q_j (all j, self included);
//   x_i <- x_i + gamma sum_j w_ij (x-hat_j - x-hat_i)
// On a static graph s = sum_j w_ij x-hat_j (self included) is kept as a running sum; on a
// time-varying one every neighbour's x-hat_j is tracked (Algorithm::tracksNeighbors).
#pragma once

#include <memory>
#include <span>

#include "optim/algorithm.h"

namespace starling::optim {

template <typename T>
class GossipAlgorithm : public Algorithm<T> {
 public:
  // The point the next round starts from (x.size() == messageSize()).
  virtual void setModel(std::span<const T> x) = 0;

  // Peer::mix without copies: for the round that follows, the trainer's buffer `user` is the
  // model. The message is read straight from it, and the combine writes the mixed model into it
  // as well as into the algorithm's own copy (which model() reads between rounds, when the
  // trainer may have freed `user`). release() ends the loan, whatever became of the round,
  // without reading `user`, and returns whether `user` holds the mixed model. Where it does not:
  // an algorithm that copies (the default: lend is setModel) has model() to copy out; plain
  // gossip whose round ended before its combine keeps the model it had before the loan (the
  // caller calls setModel(user) where the buffer is still the trainer's).
  virtual void lend(std::span<T> user) { setModel(user); }
  virtual bool release() { return false; }
};

// Where a compressed gossip's reference points x-hat start, and what the round makes of them.
template <typename T>
struct GossipReference {
  // The point every node's x-hat starts from; it must be the same on every node (the common
  // initial model). Empty: zero, so the first messages carry the whole model.
  std::span<const T> start;
  // DiLoCo's mix of compressed differences (docs/algorithms.md §29): the round leaves
  // x_i = sum_j w_ij x-hat_j, not CHOCO's x_i + gamma sum_j w_ij (x-hat_j - x-hat_i).
  bool averageReferences = false;
  // Streaming DiLoCo's fragments: the model is `fragments` pieces of the message's size (the
  // last padded with zeros), round r mixes piece r mod fragments, and each piece has reference
  // points of its own; `start` then holds the whole model (at most fragments * dim values).
  size_t fragments = 1;
};

// `compressed`: the messages go through a lossy codec (CHOCO-gossip: each sends the compressed
// x - x-hat); `timeVarying`: the mixing matrix changes between rounds.
template <typename T>
std::unique_ptr<GossipAlgorithm<T>> createGossip(double gamma, size_t dim, bool compressed,
                                                 bool timeVarying,
                                                 const GossipReference<T>& reference = {});

}  // namespace starling::optim
