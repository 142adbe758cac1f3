// The worker side of bench-gossip: one process of the ring, started by the driver
// (bench_gossip.cc) as `bench-gossip --worker`. Over Starling's UCX transport
// (bench_gossip_worker.cc), or over plain TCP sockets, the floor any TCP transport starts from
// (bench_gossip_sockets.cc). Internal to the benchmark.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <span>
#include <vector>

#include "core/status.h"

namespace starling::bench::gossip {

// Frames of the timed rounds and of the round-count agreement.
constexpr uint32_t kModelChannel = 0;
constexpr uint32_t kControlChannel = 1;

// Where a rank's round goes, in seconds summed over the timed rounds. The sender's CRC is taken
// inside the combine, a block at a time while the block it just wrote is in cache.
enum Phase { kExchange, kVerify, kFrame, kCombine, kRelease, kPhases };
constexpr std::array<const char*, kPhases> kPhaseNames = {
    "exchange", "CRC recv", "next frame", "combine + CRC send", "release"};

struct WorkerOptions {
  int rank = 0;
  std::vector<std::string> addresses;
  size_t dim = 0;
  std::string tls = "shm";  // shm or tcp (Starling), or sockets (runSocketWorker)
  std::string ucxTls;
  std::string out;
  int warmup = 8;
  int settle = 16;  // untimed rounds after the round count is agreed (bench_gossip.cc says why)
  int roundsMax = 200;
  double minSeconds = 1.0;
  bool spin = false;
  int spinUs = 50;
  std::string busyPoll = "auto";  // the scenario's transport.busy_poll: auto, on or off
  bool noShmFrames = false;
  // "none", "auth" (the cluster key: tags on every message) or "encrypt" (AES-GCM as well); the
  // benchmark's ranks share a fixed key (not a secret: it only measures the cost).
  std::string security = "none";
};

// Runs the warm-up and timed rounds and writes the rank's result file: "rounds R", "maxerr E",
// "phases ..." (seconds per round), then one line per timed round.
core::Status runWorker(const WorkerOptions& o);

// The same rounds over plain TCP sockets, with the same frames (Starling's header and CRC32C,
// checked by every receiver) and the same combine: what a round costs with the two kernel copies
// per byte that any TCP transport makes. A rank connects to its right neighbour and accepts its
// left one on its own address; same result file as runWorker.
core::Status runSocketWorker(const WorkerOptions& o);

// How many rounds to time, from the length of a warm-up round (rank 0 decides for all).
int roundsFor(double roundS, const WorkerOptions& o);

// out = (x + left + right) / 3, written into the payload of `frame` (`out` views it) a block at a
// time, each block checksummed while it is still in L1 (as runtime::Node's checkAndSeal seals the
// engine's messages), then the frame sealed: the CRC costs no pass over d of its own. `out` may
// be `x`.
void combineAndSeal(std::span<std::byte> frame, std::span<float> out, std::span<const float> x,
                    std::span<const float> left, std::span<const float> right);

}  // namespace starling::bench::gossip
