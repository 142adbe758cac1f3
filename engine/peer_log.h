// The peer log (OUT/peers/rank-R.jsonl): one JSON line per event of one peer, written by its
// Engine and read by `merge`. The header line comes from scenario::peerLogHeader
// (scenario/compile.h: it names the scenario); the engine writes the failure line defined here.
// Thread-safety: free functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace starling::engine {

inline constexpr int kPeerLogVersion = 1;

// A peer's failure as its log records it.
struct PeerFailure {
  int rank = 0;
  uint64_t round = 0;           // the round that failed
  std::string code;             // statusCodeName: "timeout", "peer gone", "diverged", ...
  std::optional<int> lostRank;  // the neighbour whose message did not come, if that was it
  std::string message;
};

// OUT/peers/rank-R.jsonl.
std::filesystem::path peerLogPath(const std::filesystem::path& outDir, int rank);

// The failure line: {"failed": {"round", "code", "lost_rank" (when known), "message"}}.
std::string peerFailureLine(const PeerFailure& f);

}  // namespace starling::engine
