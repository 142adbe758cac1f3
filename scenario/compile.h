// What a Scenario compiles into for the layers below it, which never see one: the engine's
// Options, the network transport's options, and the peer log's header line that names the
// scenario. Thread-safety: free functions (networkOptions and currentRunId read the
// environment).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/options.h"
#include "scenario/scenario.h"
#include "transport/factory.h"

namespace starling::scenario {

// What the engine (engine/engine.h, survival, fault injection) needs of `s`: its node and
// round counts, step sizes, timeouts, `faults` section and explainRoundFailure for its algorithm.
engine::Options engineOptions(const Scenario& s);

// The network transport options of `rank` for scenario `s`: its `transport` section, and
// `addresses` ("host:port" per rank; empty: the scenario's). kInvalidArgument when there are not
// s.nodes addresses.
core::Result<transport::NetworkOptions> networkOptions(const Scenario& s, int rank,
                                                       std::vector<std::string> addresses);

// The id of the run this process belongs to, for its peer log's header: STARLING_RUN_ID (set by
// `node-launcher run` for every peer and trainer it starts), else the Slurm job and step, else
// the PMIx namespace (mpirun), else "" (peers started by hand). `merge` refuses logs of
// different runs mixed in one folder.
std::string currentRunId();

// The peer log's first line, and its failure line. `trainer`: written by a trainer's
// starling::Peer (run SCENARIO -- COMMAND), whose rounds are not the scenario's problem.
std::string peerLogHeader(const Scenario& s, int rank, const std::string& address,
                          bool trainer = false);

}  // namespace starling::scenario
