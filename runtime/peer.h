// One peer of a multi-process run: node `rank` of the scenario, over the network transport.
//
// The peer trains, and at every logged round appends one JSON line to
// <outDir>/peers/rank-<R>.jsonl (flushed at once): the round, its cumulative bytes sent and
// corrupt messages, its wall time, and its model x_i. The launcher (or `node-launcher merge`)
// turns the n peer logs into metrics.jsonl and summary.json, exactly as the simulator computes
// them. Format: README.md "Output files".
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/experiment.h"

namespace starling::runtime {

struct PeerOptions {
  int rank = 0;
  std::filesystem::path outDir;
  std::vector<std::string> addresses;  // "host:port" per rank; empty: from the scenario
  // Polled between waits (at least every 200 ms); when it becomes true the peer stops with
  // kCancelled. Owned by the caller (a signal handler's flag).
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const std::string&)> log;  // diagnostics; default stderr
};

// Runs every round of the scenario as peer `rank`. Errors name the round and the neighbour:
// kTimeout (a neighbour's message did not come within round_timeout_ms), kUnavailable (a
// neighbour could not be reached within connect_timeout_ms), kPeerGone, kCorruption.
core::Status runPeer(const Experiment& e, const PeerOptions& options);

std::filesystem::path peerLogPath(const std::filesystem::path& outDir, int rank);

}  // namespace starling::runtime
