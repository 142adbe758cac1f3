// NodeStack: one node and everything it owns (local objective, gradient oracle, algorithm),
// built the same way by the simulator and by a peer process, so that both compute identical
// iterates from identical seeds.
#pragma once

#include <memory>
#include <span>

#include "compression/compressor.h"
#include "engine/node.h"
#include "optim/codistillation_gossip.h"
#include "optim/oracle.h"
#include "optim/problem.h"
#include "scenario/experiment.h"
#include "transport/transport.h"

namespace starling::runtime {

template <typename T>
struct NodeStack {
  std::unique_ptr<optim::Objective<T>> objective;  // linear f_i or the MLP's
  // The estimator the scenario asked for; `oracle` is it, or a local optimizer wrapped around it
  // (algorithm.local_optimizer), and is what the algorithm calls.
  std::unique_ptr<optim::GradientOracle<T>> estimator;
  // algorithm.adascale: the micro-batch averager around `estimator` (optim/adascale_gossip.h),
  // which a local optimizer (or nothing) then wraps.
  std::unique_ptr<optim::GradientOracle<T>> microBatches;
  std::unique_ptr<optim::GradientOracle<T>> oracle;
  // algorithm.codistillation: the neighbours' stale models, written by the algorithm and read
  // by the estimator (optim/codistillation_gossip.h). Null otherwise.
  std::unique_ptr<optim::NeighborModels<T>> neighbors;
  std::unique_ptr<compression::Compressor<T>> codec;  // null: identity frames, read in place
  std::unique_ptr<engine::Node<T>> node;
  // The scenario's algorithm as this node runs it (by_time's emulated step count in simulate):
  // what a membership change or a rejoin restarts it with.
  optim::AlgorithmSpec spec;

  // The node's algorithm for `spec` from x0, over this stack's oracle (and, for codistillation,
  // its neighbours' models): what buildNode starts with and what a membership change or a
  // rejoin restarts.
  std::unique_ptr<optim::Algorithm<T>> algorithmFrom(const optim::AlgorithmSpec& spec,
                                                     std::span<const T> x0) {
    if (spec.codistillation) {
      return optim::createCodistillationGossip<T>(spec, x0, *oracle, *neighbors);
    }
    return optim::createAlgorithm<T>(spec, x0, *oracle);
  }
};

// The seed of node `rank`'s gradient estimator (its minibatch draws), for tests that replay them.
uint64_t gradientSeed(const scenario::Scenario& s, int rank);

// Node `rank` of the experiment, starting from initialModel(e), on the borrowed `transport`. Errors only for
// a codec the scenario validated but this build cannot make (kInvalidArgument). `simulated`: in
// `simulate`, where time is virtual (DiLoCo's by_time inner steps then come from the node's
// speed).
template <typename T>
core::Result<NodeStack<T>> buildNode(const scenario::Experiment& e, int rank,
                                     transport::Transport& transport, bool simulated = false);

}  // namespace starling::runtime
