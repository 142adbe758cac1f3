// bench-gossip-mpi: the gossip round of bench-gossip done with MPI, for its MPI columns.
//
// The ring is a distributed-graph communicator (MPI_Dist_graph_create_adjacent, sources and
// destinations {r-1, r+1}); a round is MPI_Neighbor_allgather of the d floats of x into a 2d
// receive buffer, then the same one-pass combine as bench-gossip: x = (x + left + right) / 3.
// The data, the warm-up, the adaptive round count and the result file are bench-gossip's, so the
// columns compare like with like. Started by bench-gossip through mpirun:
//
//   mpirun -np P bench-gossip-mpi --dim D --out-dir DIR [--warmup 8] [--settle 16] [--rounds-max 200]
//                                 [--min-seconds 1]
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "tools/bench_gossip_round.h"

using namespace starling::bench;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, peers = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &peers);

  CLI::App app{"bench-gossip-mpi: bench-gossip's round over MPI_Neighbor_allgather"};
  std::string dimText, outDir;
  int warmup = 8, settle = 16, roundsMax = 200;
  double minSeconds = 1.0;
  app.add_option("--dim", dimText, "vector length in floats")->required();
  app.add_option("--out-dir", outDir, "one result file per rank goes here")->required();
  app.add_option("--warmup", warmup, "untimed rounds first");
  app.add_option("--settle", settle, "untimed rounds after the round count is agreed");
  app.add_option("--rounds-max", roundsMax, "at most this many timed rounds");
  app.add_option("--min-seconds", minSeconds, "time at least this long (5 rounds at least)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) app.exit(e);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (peers < 3) {
    if (rank == 0) std::fprintf(stderr, "bench-gossip-mpi: a ring needs 3 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const double dim = std::atof(dimText.c_str());
  if (!(dim >= 1) || dim > std::numeric_limits<int>::max()) {
    // MPI counts are ints.
    if (rank == 0) std::fprintf(stderr, "bench-gossip-mpi: bad --dim %s\n", dimText.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const size_t d = static_cast<size_t>(std::llround(dim));
  const int count = static_cast<int>(d);

  const int nbrs[2] = {(rank + peers - 1) % peers, (rank + 1) % peers};
  MPI_Comm ring;
  MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, nbrs, MPI_UNWEIGHTED, 2, nbrs, MPI_UNWEIGHTED,
                                 MPI_INFO_NULL, /*reorder=*/0, &ring);

  std::vector<float> x(d), recv(2 * d);
  initialValues(rank, x);
  const std::span<const float> left(recv.data(), d), right(recv.data() + d, d);
  double exchangeS = 0, combineS = 0;
  auto round = [&] {
    const auto t0 = Clock::now();
    MPI_Neighbor_allgather(x.data(), count, MPI_FLOAT, recv.data(), count, MPI_FLOAT, ring);
    const auto t1 = Clock::now();
    combineRing(x, x, left, right);
    const auto t2 = Clock::now();
    exchangeS += seconds(t0, t1);
    combineS += seconds(t1, t2);
    return seconds(t0, t2);
  };

  int done = 0;
  double lastS = 0;
  for (int w = 0; w < warmup; ++w, ++done) lastS = round();
  // Rank 0 decides how many rounds to time, as in bench-gossip.
  int rounds = std::clamp(static_cast<int>(std::ceil(minSeconds / std::max(lastS, 1e-9))),
                          std::min(5, roundsMax), roundsMax);
  MPI_Bcast(&rounds, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int s = 0; s < settle; ++s, ++done) round();

  exchangeS = combineS = 0;
  std::vector<double> times;
  for (int t = 0; t < rounds; ++t, ++done) times.push_back(round());
  const double exchangeTimed = exchangeS, combineTimed = combineS;
  for (int s = 0; s < settle; ++s, ++done) round();
  exchangeS = exchangeTimed;
  combineS = combineTimed;

  std::ofstream out(outDir + "/rank-" + std::to_string(rank) + ".txt");
  out << "rounds " << rounds << "\nmaxerr " << maxError(peers, rank, done, x) << "\nphases "
      << exchangeS / rounds << ' ' << combineS / rounds << '\n';
  for (double t : times) out << t << '\n';
  out.close();
  const int rc = out ? 0 : 1;
  MPI_Comm_free(&ring);
  MPI_Finalize();
  return rc;
}
