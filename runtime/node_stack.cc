#include "runtime/node_stack.h"

namespace starling::runtime {
namespace {
// Seeds of the per-node random streams (minibatch sampling).
constexpr uint64_t kGradientSalt = 0x6772616421;
}  // namespace

template <typename T>
NodeStack<T> buildNode(const Experiment& e, int rank, transport::Transport& transport) {
  const Scenario& s = e.scenario;
  NodeStack<T> stack;
  stack.objective = optim::LocalObjective<T>::create(s.problem.spec, e.data.subset(e.parts[rank]),
                                                     e.data.samples(), s.nodes);
  stack.oracle = std::make_unique<optim::ObjectiveOracle<T>>(
      *stack.objective, s.problem.batch, core::deriveSeed(s.seed, kGradientSalt, rank));
  const std::vector<T> x0(static_cast<size_t>(e.data.features), T(0));
  stack.node = std::make_unique<Node<T>>(
      rank, optim::createAlgorithm<T>(s.algorithm, x0, *stack.oracle), transport);
  return stack;
}

template NodeStack<float> buildNode<float>(const Experiment&, int, transport::Transport&);
template NodeStack<double> buildNode<double>(const Experiment&, int, transport::Transport&);

}  // namespace starling::runtime
