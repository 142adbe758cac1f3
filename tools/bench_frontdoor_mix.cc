// bench-frontdoor-mix D ROUNDS WARMUP OUTDIR: one rank of tools/bench_frontdoor.py's C++ column.
// Under `node-launcher run SCENARIO -- bench-frontdoor-mix ...`: starling::Peer::fromEnv(), then
// WARMUP + ROUNDS calls of mix() on a D-float32 buffer, timing each of the last ROUNDS, written
// to OUTDIR/bench-rank-R.json as {"round_s": [...]} (what the Python worker writes too).
#include <starling/peer.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: bench-frontdoor-mix D ROUNDS WARMUP OUTDIR\n");
    return 2;
  }
  const auto dim = static_cast<size_t>(std::strtod(argv[1], nullptr));
  const int rounds = std::atoi(argv[2]);
  const int warmup = std::atoi(argv[3]);
  auto peer = starling::Peer::fromEnv();
  if (!peer) {
    std::fprintf(stderr, "bench-frontdoor-mix: %s\n", peer.status().toString().c_str());
    return 1;
  }
  std::vector<float> x(dim, static_cast<float>((*peer)->rank()));
  std::vector<double> times;
  for (int i = 0; i < warmup + rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto s = (*peer)->mix(x); !s.isOk()) {
      std::fprintf(stderr, "bench-frontdoor-mix: %s\n", s.toString().c_str());
      return 1;
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup) times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::ofstream out(std::string(argv[4]) + "/bench-rank-" + std::to_string((*peer)->rank()) +
                    ".json");
  out << "{\"round_s\": [";
  for (size_t i = 0; i < times.size(); ++i) out << (i ? ", " : "") << times[i];
  out << "]}\n";
  if (auto s = (*peer)->close(); !s.isOk()) {
    std::fprintf(stderr, "bench-frontdoor-mix: %s\n", s.toString().c_str());
    return 1;
  }
  return out ? 0 : 1;
}
