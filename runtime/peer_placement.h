// Which address every rank of a `node-launcher peer` listens on, from the first source that
// applies (docs/architecture.md, "Across hosts"):
//   1. --peers H:P,... on the command line;
//   2. the scenario's `peers` section with `addresses` or `hosts`;
//   3. --hostfile FILE (OpenMPI's format, ranks mapped by slot);
//   4. a Slurm step's layout (SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION);
//   5. the PMIx server of the launcher (mpirun, srun --mpi=pmix): each rank publishes its address;
//   6. 127.0.0.1, every rank on this machine.
// Ports are peers.base_port (default 29500) + rank for 3-6.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/placement.h"
#include "scenario/scenario.h"

namespace starling::runtime {

struct PeerPlacementRequest {
  std::string peersFlag;  // --peers, comma-separated; empty: not given
  std::string hostfile;   // --hostfile; empty: not given
  std::optional<int> rank;  // --rank or a launcher's rank variable; PMIx may supply it
};

struct PeerPlacement {
  int rank = -1;
  std::vector<std::string> addresses;
  std::string source;  // what decided them, for the peer's log ("slurm step", "hostfile f", ...)
};

core::Result<PeerPlacement> placePeer(const scenario::Scenario& s,
                                      const PeerPlacementRequest& request, const EnvLookup& env);

// The IPv4 address of network interface `name`, or (name empty) of the first interface that is
// up, not loopback and has one. kNotFound names the interfaces there are.
core::Result<std::string> interfaceAddress(const std::string& name);

}  // namespace starling::runtime
