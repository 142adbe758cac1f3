// Rejoin: how a lost peer's restarted process gets back into a run (faults.restart, or
// `node-launcher peer ... --rejoin`; docs/algorithms.md §19).
//
// The restarted process loads what it needs (scenario, data, transport) without anyone waiting
// for it, then asks its neighbours of the schedule's support graph to take it back: a join
// request (kJoinChannel, round 0) carrying a random attempt id. A survivor that gets it proposes
// "rank j returns at round q + D" in the membership gossip (the same agreement as a departure,
// so every survivor applies it at the same round Y), and at round Y, after applying the change,
// every neighbour of j in the new graph sends j its join state (kJoinStateChannel, round 0): the
// round Y, the membership, the gossip's proposals, its current model and what its algorithm
// carries across a restart (DiLoCo's outer momentum). That is a state transfer, not a replay: j
// starts its algorithm at round Y from that model and carried state, as every survivor
// restarts its own from its model at a membership change (§18), so the exact methods converge to
// the optimum of everyone's data again. A survivor that knows the run ends too soon for a return
// answers at once with a state of round 0 (a refusal).
// Thread-safety: none; driven by the peer's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/membership_gossip.h"
#include "topology/graph.h"
#include "transport/transport.h"

namespace starling::engine {

inline constexpr uint32_t kJoinChannel = 4;
inline constexpr uint32_t kJoinStateChannel = 5;

// What a rejoining peer gets from a neighbour.
struct JoinState {
  uint64_t round = 0;  // the round it takes part from; 0: refused (the run ends before)
  uint64_t epoch = 0;  // the membership's epoch from that round
  std::vector<bool> alive;
  std::vector<MembershipGossip::Entry> entries;
  std::vector<double> model;
  // What the sponsor's algorithm carries across a restart (optim::CarriedState: DiLoCo's outer
  // momentum): empty, or as many values as the model.
  std::vector<double> carried;
  // The channel of the call in which the sponsor applied the return at round Y: a trainer's
  // Peer that calls both step() (channel 0) and mix() (channel 1) lines its calls up with its
  // neighbours' by it (api/peer.cc). 0 for `node-launcher peer`.
  uint32_t channel = 0;
};

// The frames (checksummed, float64; exact for every count below 2^53).
transport::Bytes encodeJoinRequest(uint64_t attempt);
// kCorruption for anything else.
core::Result<uint64_t> decodeJoinRequest(std::span<const std::byte> bytes);
transport::Bytes encodeJoinState(const JoinState& state);
// Checks every field against the run (`nodes`, model dimension `dim`): kCorruption otherwise.
core::Result<JoinState> decodeJoinState(std::span<const std::byte> bytes, int nodes, size_t dim);

struct RejoinOptions {
  int rank = 0;
  int nodes = 0;
  size_t dim = 0;
  std::vector<int> ask;                     // the neighbours asked (support graph)
  transport::Clock::time_point deadline{};  // no join state by then: kTimeout
  const std::atomic<bool>* stop = nullptr;  // kCancelled when set
  std::function<void(const std::string&)> log;
};

// The length of a rejoining peer's log at `path` up to its last whole line (its old process may
// have died mid-line); a peer without a log yet (restarted on another machine) gets one, with
// `header` as its first line.
core::Result<uint64_t> rejoinLogBytes(const std::filesystem::path& path, const std::string& header);

// Sends the join request to every rank in `ask` and waits for the first join state (or
// refusal). Errors: kTimeout naming the ranks asked, kUnavailable when none of them could be
// reached, kCancelled on the stop flag.
core::Result<JoinState> requestRejoin(transport::Transport& net, const RejoinOptions& options);

}  // namespace starling::engine
