// bench-gossip's results (bench_gossip_report.cc): a run's cell, read from the files its ranks
// wrote, and the tables the driver (bench_gossip.cc) prints of them. Internal to the benchmark.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace starling::bench::gossip {

// A rank's final x may differ from the closed form by float32 rounding only.
constexpr double kTolerance = 1e-3;

struct Cell {
  bool ran = false;
  double ms = 0;  // median over rounds of the slowest rank's round
  // A run's time per round: the largest over ranks of (its timed rounds' total / their number).
  // Ranks that drift out of phase (one finishing while the other waits) make every round's
  // slowest rank a waiting one, so `ms` can exceed what a round costs the run; this cannot.
  double meanMs = 0;
  int rounds = 0;
  double maxErr = 0;             // largest deviation from the closed form over all ranks
  std::vector<double> phasesMs;  // mean over ranks, per round
  std::string error;
  bool checked() const { return ran && maxErr <= kTolerance; }
};

// One run's cell from the rank files ("rank-R.txt") its `peers` ranks wrote into `dir`.
Cell collect(const std::filesystem::path& dir, int peers);

// Keeps the faster of `best` and `c` in `best`: one that ran over one that did not, and of two
// that did not, the first one's error.
void keepBest(Cell& best, Cell c);

// 1e6 rather than 1000000 for powers of ten.
std::string dimName(size_t d);

// A cell's median round in ms, with " (!)" if its check failed; "—" where it did not run, "fail"
// where it failed.
std::string fmtMs(const Cell& c);

// One configuration: each column's best repetition.
struct Row {
  int peers;
  size_t dim;
  Cell shm, tcp, sockets, ob1, ucx, mpiTcp;  // sockets: the round over plain TCP sockets
  std::map<std::string, Cell> secured;  // "shm+auth", ...
};

// Prints the tables of `rows` to stdout: the median round next to the memory-bandwidth floor
// (`bw`: one thread's memcpy, bytes read plus written per second; `cores` of them), the time per
// round, where a rank's round goes, and with `keyed` (--security) the cost of the cluster key.
void printTables(const std::vector<Row>& rows, double bw, unsigned cores, bool keyed);

}  // namespace starling::bench::gossip
