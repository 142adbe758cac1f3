// MembershipGossip: how the survivors of a run agree on who is gone, with no central party
// (faults.on_peer_loss "continue"; docs/algorithms.md §18).
//
// A peer that loses a neighbour in round r (its message did not come by the deadline, or its
// connection failed) proposes "rank j leaves at round r + D", D = agreementRounds(), computed
// by every peer from the same graph without the lost ranks. A peer asked by a lost rank's new
// process to take it back proposes "rank j returns at round r + D" the same way (faults.restart;
// engine/rejoin.h). Each rank's changes are numbered (1: its first departure, 2: its return,
// 3: its second departure, ...), so news of an old change never undoes a newer one. Every round
// each peer sends its proposals to each live neighbour of the support graph, in a small frame on
// its own channel, and merges what it receives, keeping the earliest round per rank. News travels
// one hop per round, so when it can reach every survivor within D - 1 rounds, all survivors hold
// the same proposals before the earliest one takes effect and apply the same change at the same
// round. A peer that hears of a change whose round has already passed without it is told so
// (disagreement(): the run stops with a clear error instead of splitting silently).
// Messages are checked like any frame (CRC32C, bounded size, ranks in range); a malformed one is
// counted and ignored. Thread-safety: none; driven by the peer's one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/state.h"
#include "core/status.h"
#include "transport/transport.h"
#include "topology/graph.h"

namespace starling::engine {

inline constexpr uint32_t kMembershipChannel = 2;
// Liveness notices: "I am alive, still in round q" (see MembershipGossip::notify).
inline constexpr uint32_t kLivenessChannel = 3;

class MembershipGossip {
 public:
  // Bounds on what a message may carry: changes per rank, and changes in all.
  static constexpr uint64_t kMaxChange = uint64_t{1} << 20;
  static constexpr size_t kMaxEntries = size_t{1} << 16;

  MembershipGossip(int rank, int nodes, transport::Transport& net)
      : rank_(rank), nodes_(nodes), net_(net) {}

  // Round `round`: sends this peer's proposals to every neighbour of `support` that is not known
  // lost and asks for theirs, by `deadline`.
  void start(uint64_t round, const topology::Graph& support, transport::Clock::time_point deadline);
  bool complete() const { return pending_ == 0; }
  // After the round: merges what came. Neighbours whose message did not come are returned (lost).
  std::vector<int> finish();

  // This peer noticed the loss of `rank` in `round`: it leaves at round + agreement
  // (agreementRounds()). Nothing when the rank is already known out.
  void propose(int rank, uint64_t round, uint64_t agreement);
  // A lost rank's restarted process asked this peer to take it back (faults.restart): it joins
  // at round + agreement. Only for a rank whose departure has been applied and that has no join
  // under way; returns whether it proposed.
  bool proposeJoin(int rank, uint64_t round, uint64_t agreement);
  // The changes that take effect at `round`: ranks that leave and ranks that come back, sorted;
  // each change is returned once.
  struct Due {
    std::vector<int> left;
    std::vector<int> joined;
    bool empty() const { return left.empty() && joined.empty(); }
  };
  Due dueAt(uint64_t round);
  // Every rank that is out now: lost (its departure proposed or applied) and not yet back.
  std::vector<int> knownLost() const;
  bool isKnownLost(int rank) const;
  // Whether `rank` is out with its departure applied and no join under way (it may rejoin).
  bool mayRejoin(int rank) const;
  // The round `rank`'s pending join takes effect, if one is under way.
  std::optional<uint64_t> joinRound(int rank) const;
  // The round `rank`'s pending departure takes effect, if one is under way (proposed, not applied).
  std::optional<uint64_t> departureRound(int rank) const;

  // Every proposal, as a rejoining peer takes them over from its sponsor (engine/rejoin.h).
  // Changes of one rank are numbered from 1: odd ones are departures, even ones returns.
  struct Entry {
    int rank;
    uint64_t change;
    uint64_t at;
    bool applied;
  };
  std::vector<Entry> entries() const;
  core::Status adopt(const std::vector<Entry>& entries);

  // Stragglers and the cascade a timeout would start. A peer that waits in a round past a third
  // of the round timeout tells its live neighbours so (notify(): "alive, in round q"); a peer
  // that hears it extends its wait for that neighbour's next messages by two round timeouts
  // (onAlive), so only the neighbours of a peer that is really silent declare it lost, and a peer
  // delayed by detecting a loss is not mistaken for one. listen() keeps one receive posted per
  // live neighbour for these notices.
  void listen(const topology::Graph& support);
  // The same for `peers` (those known lost skipped).
  void listen(const std::vector<int>& peers);
  void notify(uint64_t round, const topology::Graph& support);
  // The same to `peers` (those known lost skipped).
  void notify(uint64_t round, const std::vector<int>& peers);
  void setOnAlive(std::function<void(int peer, uint64_t round)> f) { onAlive_ = std::move(f); }
  // Extends this round's wait for `peer`'s gossip until `until` (a notice came from it).
  void extend(int peer, transport::Clock::time_point until);
  // Gossip across a gap: a peer found alive behind a dead neighbour (Survival's pings), which the
  // support graph joins to this one only once the loss takes effect. Until then the proposals
  // go to it every round and it is waited for like a neighbour, but it is never taken for a
  // loss (one that does not answer is dropped): so peers that kills cut off from each other's
  // gossip (an island between two dead ranks) keep in step and agree on every change. Both ends
  // find each other the same way, in the same round.
  void addBridge(int peer);
  void clearBridges() { bridges_.clear(); }
  // Whether a departure is proposed and not applied yet (bridges stay while one is).
  bool pendingDepartures() const;

  // Set when a neighbour's proposal for a round already past reached this peer.
  const core::Status& disagreement() const { return disagreement_; }
  // A neighbour proposed this peer's own departure (it stalled past the round timeout): it is
  // out of the run and must leave.
  bool excluded() const { return excluded_; }
  uint64_t corruptMessages() const { return corrupt_; }

  // Checkpoints (core/state.h), between rounds: the proposals (rank, round it leaves at) and
  // which of them were applied.
  void visitState(core::StateVisitor& v);

 private:
  void merge(int from, std::span<const std::byte> bytes);
  void postReceive(int peer, transport::Clock::time_point deadline);
  void postNotice(int peer);

  const int rank_;
  const int nodes_;
  transport::Transport& net_;
  struct Proposal {
    uint64_t at;  // the round it takes effect (the earliest heard)
    bool applied;
  };
  // The latest change number known for `rank` (0: none) and whether it was applied.
  std::pair<uint64_t, bool> latest(int rank) const;
  std::map<std::pair<int, uint64_t>, Proposal> proposals_;  // (rank, change) -> proposal
  uint64_t round_ = 0;
  size_t pending_ = 0;
  std::vector<int> missing_;
  std::vector<int> expected_;
  core::Status disagreement_;
  std::function<void(int, uint64_t)> onAlive_;
  std::map<int, bool> listening_;
  std::set<int> bridges_;
  std::map<int, transport::Clock::time_point> extended_;  // this round's extensions
  transport::Clock::time_point deadline_{};
  bool excluded_ = false;
  uint64_t corrupt_ = 0;
};

}  // namespace starling::engine
