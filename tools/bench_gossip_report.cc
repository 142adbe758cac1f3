// bench-gossip's results: the cell of a run, from the files its ranks wrote (runWorker's and
// bench-gossip-mpi's format), and the driver's tables: the median round next to the
// memory-bandwidth floor and MPI's, the time per round, where a rank's round goes, and the cost of
// the cluster key.
#include "tools/bench_gossip_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <utility>

#include "compression/frame.h"
#include "tools/bench_gossip_worker.h"

namespace starling::bench::gossip {
namespace {

namespace fs = std::filesystem;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

double bestMs(std::initializer_list<const Cell*> cells) {
  double best = 0;
  for (const Cell* c : cells) {
    if (c->ran && c->checked() && (best == 0 || c->ms < best)) best = c->ms;
  }
  return best;
}

}  // namespace

Cell collect(const fs::path& dir, int peers) {
  Cell c;
  std::vector<std::vector<double>> times(peers);
  for (int r = 0; r < peers; ++r) {
    std::ifstream in(dir / ("rank-" + std::to_string(r) + ".txt"));
    std::string word;
    int rounds = 0;
    double err = 0;
    if (!(in >> word >> rounds) || word != "rounds" || !(in >> word >> err) || word != "maxerr" ||
        !(in >> word) || word != "phases") {
      c.error = "rank " + std::to_string(r) + " wrote no result";
      return c;
    }
    std::string line;
    std::getline(in, line);
    std::istringstream ps(line);
    std::vector<double> phases;
    for (double p; ps >> p;) phases.push_back(p * 1e3);
    if (c.phasesMs.empty()) c.phasesMs.assign(phases.size(), 0.0);
    for (size_t i = 0; i < phases.size() && i < c.phasesMs.size(); ++i) {
      c.phasesMs[i] += phases[i] / peers;
    }
    for (double t; in >> t;) times[r].push_back(t);
    if (static_cast<int>(times[r].size()) != rounds || (r > 0 && rounds != c.rounds)) {
      c.error = "rank " + std::to_string(r) + " timed a different number of rounds";
      return c;
    }
    c.rounds = rounds;
    c.maxErr = std::max(c.maxErr, err);
    double total = 0;
    for (double t : times[r]) total += t;
    if (rounds > 0) c.meanMs = std::max(c.meanMs, 1e3 * total / rounds);
  }
  std::vector<double> slowest(c.rounds, 0.0);
  for (const auto& t : times) {
    for (int i = 0; i < c.rounds; ++i) slowest[i] = std::max(slowest[i], t[i]);
  }
  std::sort(slowest.begin(), slowest.end());
  const int n = c.rounds;
  c.ms = 1e3 * (n % 2 ? slowest[n / 2] : 0.5 * (slowest[n / 2 - 1] + slowest[n / 2]));
  c.ran = true;
  return c;
}

std::string dimName(size_t d) {
  int e = 0;
  size_t v = d;
  while (v >= 10 && v % 10 == 0) v /= 10, ++e;
  return v == 1 && e > 0 ? "1e" + std::to_string(e) : std::to_string(d);
}

void keepBest(Cell& best, Cell c) {
  if (!best.ran || (c.ran && c.ms < best.ms)) {
    if (c.ran || best.error.empty()) best = std::move(c);
  }
}

std::string fmtMs(const Cell& c) {
  if (!c.ran) return c.error.empty() ? "—" : "fail";
  char buf[64];
  std::snprintf(buf, sizeof buf, c.ms < 1 ? "%.3f" : (c.ms < 100 ? "%.2f" : "%.1f"), c.ms);
  return std::string(buf) + (c.checked() ? "" : " (!)");
}

void printTables(const std::vector<Row>& rows, double bw, unsigned cores, bool keyed) {
  std::printf(
      "\n| P | d | Starling shm ms | Starling tcp ms | MPI (ob1) ms | MPI (pml ucx) ms | MPI (tcp) ms |"
      " TCP sockets ms | floor ms | Starling GB/s | Starling/MPI | tcp/MPI tcp | sockets/MPI tcp |"
      " rounds | check |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const auto& r : rows) {
    // What a round must touch per rank: write the outgoing d floats, read them once to send,
    // write the 2d received, read 3d and write d in the combine: 8d floats.
    const double bytesPerRank = 8.0 * sizeof(float) * static_cast<double>(r.dim);
    const double floorMs = 1e3 * r.peers * bytesPerRank / (bw * std::min<unsigned>(r.peers, cores));
    const double star = bestMs({&r.shm, &r.tcp});
    const double mpi = bestMs({&r.ob1, &r.ucx});
    const double moved =
        2.0 * r.peers * static_cast<double>(compression::denseFrameBytes<float>(r.dim));
    bool allChecked = true;
    for (const Cell* c : {&r.shm, &r.tcp, &r.sockets, &r.ob1, &r.ucx, &r.mpiTcp}) {
      allChecked &= !c->ran || c->checked();
    }
    const double starTcp = bestMs({&r.tcp});
    const double sockets = bestMs({&r.sockets});
    const double mpiTcp = bestMs({&r.mpiTcp});
    std::printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n",
                r.peers, dimName(r.dim).c_str(), fmtMs(r.shm).c_str(), fmtMs(r.tcp).c_str(),
                fmtMs(r.ob1).c_str(), fmtMs(r.ucx).c_str(), fmtMs(r.mpiTcp).c_str(),
                fmtMs(r.sockets).c_str(), fmt("%.3g", floorMs).c_str(),
                star > 0 ? fmt("%.2f", moved / (star * 1e-3) / 1e9).c_str() : "—",
                star > 0 && mpi > 0 ? fmt("%.2f", star / mpi).c_str() : "—",
                starTcp > 0 && mpiTcp > 0 ? fmt("%.2f", starTcp / mpiTcp).c_str() : "—",
                sockets > 0 && mpiTcp > 0 ? fmt("%.2f", sockets / mpiTcp).c_str() : "—",
                std::max({r.shm.rounds, r.tcp.rounds, r.sockets.rounds, r.ob1.rounds, r.ucx.rounds,
                          r.mpiTcp.rounds}),
                allChecked ? "ok" : "WRONG x");
  }

  // The same runs by time per round (what a training run of R rounds takes, over R).
  std::printf(
      "\nTime per round (ms: the slowest rank's total over its timed rounds, from the repetition "
      "kept above):\n\n| P | d | Starling shm | Starling tcp | MPI (ob1) | MPI (pml ucx) | "
      "MPI (tcp) | TCP sockets | Starling/MPI | tcp/MPI tcp | sockets/MPI tcp |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const auto meanOf = [](const Cell& c) { return c.ran && c.checked() ? c.meanMs : 0.0; };
  const auto fmtMean = [](double v) { return v > 0 ? fmt(v < 1 ? "%.3f" : "%.2f", v) : "—"; };
  for (const auto& r : rows) {
    double mpi = 0;
    for (const Cell* c : {&r.ob1, &r.ucx}) {
      if (meanOf(*c) > 0 && (mpi == 0 || meanOf(*c) < mpi)) mpi = meanOf(*c);
    }
    double star = 0;
    for (const Cell* c : {&r.shm, &r.tcp}) {
      if (meanOf(*c) > 0 && (star == 0 || meanOf(*c) < star)) star = meanOf(*c);
    }
    const auto ratio = [&](const Cell& a, const Cell& b) {
      return meanOf(a) > 0 && meanOf(b) > 0 ? fmt("%.2f", meanOf(a) / meanOf(b)) : "—";
    };
    std::printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.peers,
                dimName(r.dim).c_str(), fmtMean(meanOf(r.shm)).c_str(),
                fmtMean(meanOf(r.tcp)).c_str(), fmtMean(meanOf(r.ob1)).c_str(),
                fmtMean(meanOf(r.ucx)).c_str(), fmtMean(meanOf(r.mpiTcp)).c_str(),
                fmtMean(meanOf(r.sockets)).c_str(),
                star > 0 && mpi > 0 ? fmt("%.2f", star / mpi).c_str() : "—",
                ratio(r.tcp, r.mpiTcp).c_str(), ratio(r.sockets, r.mpiTcp).c_str());
  }

  std::printf(
      "\nWhere a rank's round goes (ms, mean over ranks and timed rounds; sum = a rank's mean "
      "round):\n\n| P | d | run |");
  for (const char* n : kPhaseNames) std::printf(" %s |", n);
  std::printf(" sum |\n|---:|---:|---|");
  for (size_t i = 0; i <= kPhases; ++i) std::printf("---:|");
  std::printf("\n");
  for (const auto& r : rows) {
    const std::pair<const char*, const Cell*> runs[] = {{"Starling shm", &r.shm},
                                                        {"Starling tcp", &r.tcp},
                                                        {"TCP sockets", &r.sockets},
                                                        {"MPI ob1", &r.ob1},
                                                        {"MPI ucx", &r.ucx},
                                                        {"MPI tcp", &r.mpiTcp}};
    for (const auto& [name, c] : runs) {
      if (!c->ran) continue;
      std::printf("| %d | %s | %s |", r.peers, dimName(r.dim).c_str(), name);
      const bool mpiRun = name[0] == 'M';
      for (size_t i = 0; i < kPhases; ++i) {
        // bench-gossip-mpi reports two phases: the allgather (exchange) and the combine.
        const size_t src = mpiRun ? (i == kExchange ? 0 : i == kCombine ? 1 : SIZE_MAX) : i;
        std::printf(" %s |", src < c->phasesMs.size() ? fmt("%.3g", c->phasesMs[src]).c_str() : "");
      }
      // The mean round of a rank: total time over rounds, below the median of the slowest rank.
      double sum = 0;
      for (double p : c->phasesMs) sum += p;
      std::printf(" %s |\n", fmt("%.3g", sum).c_str());
    }
  }
  if (keyed) {
    // The cost of the cluster key: each secured column next to the same transport without it,
    // measured in the same run (interleaved repetitions).
    std::printf("\nThe cluster key (ms per round; ratio to the same transport without a key):\n\n"
                "| P | d | run | ms | × unauthenticated | check |\n|---:|---:|---|---:|---:|---|\n");
    for (const auto& r : rows) {
      for (const auto& [name, c] : r.secured) {
        const Cell& base = name.rfind("shm", 0) == 0 ? r.shm : r.tcp;
        std::printf("| %d | %s | %s | %s | %s | %s |\n", r.peers, dimName(r.dim).c_str(),
                    name.c_str(), fmtMs(c).c_str(),
                    c.ran && base.ran && base.ms > 0 ? fmt("%.2f", c.ms / base.ms).c_str() : "—",
                    c.checked() ? "ok" : "WRONG x");
      }
    }
  }
}

}  // namespace starling::bench::gossip
