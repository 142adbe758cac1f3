// Addresses exchanged through the PMIx server of the launcher that started this process: mpirun
// (OpenMPI's daemons are PMIx servers) and srun --mpi=pmix. Each peer publishes its own
// "host:port", the launcher's fence collects them, and each peer reads every rank's. Nothing is
// assumed about where the launcher put which rank, so any mapping (by slot, by node, a rankfile)
// is right by construction. Built when Debian's libpmix-dev is there; without it,
// `pmixAvailable()` is false and the exchange says so.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/placement.h"

namespace starling::runtime {

// True when this build has PMIx and this process was started by a PMIx launcher (its environment
// names a PMIx server and a namespace).
bool underPmix(const EnvLookup& env);
bool pmixAvailable();

struct PmixJob {
  int rank = -1;
  int size = 0;
  int localSize = 0;  // processes of the job on this host
};

// Connects to the launcher's PMIx server and reads this process's rank and the job's sizes.
// A PmixSession is one connection: construct, ask `job()`, `exchange()` once, destroy
// (PMIx_Finalize).
class PmixSession {
 public:
  static core::Result<std::unique_ptr<PmixSession>> connect();
  ~PmixSession();
  const PmixJob& job() const { return job_; }
  // Publishes `own`, waits (at most `deadline`) until every rank has, and returns every rank's.
  core::Result<std::vector<std::string>> exchange(const std::string& own,
                                                  std::chrono::seconds deadline);

 private:
  PmixSession() = default;
  PmixJob job_;
  std::string nspace_;
};

}  // namespace starling::runtime
