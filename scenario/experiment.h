// Experiment: everything a run derives from its scenario before the first round, built once.
// The data set and its split over the nodes, the round-by-round topology, and the central optimum
// x* that the metrics compare against. simulate and (later) every peer process build the same
// Experiment from the same scenario.
#pragma once

#include <memory>
#include <vector>

#include "core/status.h"
#include "optim/dataset.h"
#include "optim/image_dataset.h"
#include "optim/problem.h"
#include "scenario/scenario.h"
#include "topology/schedule.h"

namespace starling::scenario {

struct Experiment {
  Scenario scenario;
  optim::Dataset data;  // the linear problems' samples (empty for the mlp problem)
  // The mlp problem's samples (idx data): training set and held-out test set.
  optim::ImageDataset images;
  optim::ImageDataset testImages;
  std::vector<std::vector<size_t>> parts;  // sample indices of each node
  std::unique_ptr<topology::Schedule> schedule;
  std::vector<double> xStar;  // empty when not computed (ExperimentOptions::solve = false, mlp)

  // Length of every node's model: features for the linear problems, the MLP's parameter count.
  size_t modelDim() const;
  size_t trainingSamples() const;
};

// Where every node starts: zeros for the linear problems; for the mlp problem the network's He
// initialisation from the scenario's seed, the same at every node.
std::vector<double> initialModel(const Experiment& e);

struct ExperimentOptions {
  bool solve = true;  // compute x* centrally (needed for rel_error; never for the mlp problem)
};

// Errors are kInvalidArgument naming the scenario file and JSON path of the cause, e.g.
// "s.json: /problem/data/path: data/a.svm:3: expected index:value, got \"x\"".
// Leader SGD (algorithm.leader): sets s.algorithm.diameter to the diameter of the schedule's
// graph, which a global election takes in rounds; kInvalidArgument naming
// /algorithm/leader/global_period when the period is shorter. Nothing without a leader.
core::Status resolveLeaderDiameter(Scenario& s, const topology::Schedule& schedule);

core::Result<Experiment> prepareExperiment(const Scenario& scenario,
                                           const ExperimentOptions& options = {});

// A failed round's status as the user sees it: kDiverged gets a hint naming the scenario's knobs
// (step size; for CHOCO gamma, for LEAD alpha and gamma; divergence.max_abs); the rest gets
// `context` in front.
core::Status explainRoundFailure(const optim::AlgorithmSpec& algorithm, const core::Status& st,
                                 const std::string& context);

}  // namespace starling::scenario
