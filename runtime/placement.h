// Where every rank of a run listens, when the peers were started by a cluster's own tools rather
// than by `node-launcher run`: the layout of a Slurm step, an OpenMPI-style hostfile, or
// addresses exchanged through the launcher's PMIx server (mpirun). docs/architecture.md,
// "Across hosts", says which source wins and why.
//
// The parsing and layout functions here are pure (no environment, no sockets) so that tests can
// give them every layout Slurm and OpenMPI produce; `fromSlurm` takes the environment as a
// lookup function for the same reason.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace starling::runtime {

// ---- Slurm --------------------------------------------------------------------------------

// Expands a Slurm host list as `scontrol show hostnames` does: "n[1-3,7],login" gives n1 n2 n3
// n7 login; zero padding is kept ("n[08-10]" gives n08 n09 n10); several bracket groups in one
// name multiply out, leftmost slowest ("r[1-2]n[1-2]" gives r1n1 r1n2 r2n1 r2n2). Order is kept
// and duplicates are not removed (Slurm keeps them too). Errors (kInvalidArgument, naming the
// text): unbalanced brackets, empty names, a range whose end is below its start, a range of more
// than 1,048,576 names.
core::Result<std::vector<std::string>> expandHostlist(std::string_view list);

// Expands SLURM_TASKS_PER_NODE / SLURM_STEP_TASKS_PER_NODE: "2(x3),1" gives 2 2 2 1. Counts must
// be positive; errors name the text.
core::Result<std::vector<int>> expandTasksPerNode(std::string_view text);

// How a Slurm step spreads its tasks over its nodes (SLURM_DISTRIBUTION, the part before any ':';
// unset means block).
enum class SlurmDistribution { kBlock, kCyclic, kPlane };

// Parses SLURM_DISTRIBUTION ("block", "cyclic", "plane", "block:cyclic", "cyclic:block",
// "plane=4", ...; the node-level part is the first). "arbitrary" (srun --distribution=arbitrary
// with SLURM_HOSTFILE) and anything unknown are errors that say so. `planeSize` is filled for
// plane (from "plane=N", else from SLURM_DIST_PLANESIZE, passed in as planeSizeText).
core::Result<SlurmDistribution> parseSlurmDistribution(std::string_view text,
                                                       std::string_view planeSizeText,
                                                       int* planeSize);

// The node index of every task (task id = rank), given the tasks per node and the distribution,
// as Slurm lays out a step:
// - block: node 0 takes tasks 0..c0-1, node 1 the next c1, and so on;
// - cyclic: task t goes to the next node in round-robin order that still has room (nodes with
//   fewer tasks drop out of the rotation once full);
// - plane=P: blocks of P consecutive tasks go round-robin to the nodes that still have room.
// Errors: empty counts, a non-positive plane size.
core::Result<std::vector<int>> slurmNodeOfTask(const std::vector<int>& tasksPerNode,
                                               SlurmDistribution distribution, int planeSize);

// ---- OpenMPI-style hostfile -----------------------------------------------------------------

struct HostfileEntry {
  std::string host;
  int slots = 1;
};

// Parses an OpenMPI hostfile: one host per line, optionally "slots=N" (and "max_slots=N", which is
// accepted and ignored); '#' starts a comment; blank lines are skipped; a host listed twice adds
// its slots to the first entry (OpenMPI does the same). Errors name `file` and the line number.
core::Result<std::vector<HostfileEntry>> parseHostfile(std::string_view text, const std::string& file);

// The host index of every rank, as OpenMPI maps by slot (its default): ranks fill the first
// host's slots, then the next host's, and so on. More ranks than slots is an error that says how
// many slots the file has (OpenMPI refuses too unless told to oversubscribe).
core::Result<std::vector<int>> mapBySlot(const std::vector<HostfileEntry>& hosts, int ranks,
                                         const std::string& file);

// ---- the whole decision ---------------------------------------------------------------------

// Looks up an environment variable; returns nullopt when it is unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup processEnvironment();

// Every rank's "host:port" for a Slurm step, from SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST),
// SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE), SLURM_DISTRIBUTION and
// SLURM_DIST_PLANESIZE; rank r listens on basePort + r. The step's size (SLURM_STEP_NUM_TASKS or
// SLURM_NTASKS) must equal `nodes`, and the layout must put this task (SLURM_PROCID) on the node
// SLURM_NODEID names at the local index SLURM_LOCALID: anything else is an error that names the
// variables, never a guess. nullopt when SLURM_PROCID or the node list is unset (not under srun).
std::optional<core::Result<std::vector<std::string>>> fromSlurm(const EnvLookup& env, int nodes,
                                                                int basePort);

// Every rank's "host:port" from a hostfile mapped by slot; rank r listens on basePort + r.
core::Result<std::vector<std::string>> fromHostfile(const std::string& path, int nodes, int basePort);

}  // namespace starling::runtime
