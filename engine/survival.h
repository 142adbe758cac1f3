// Survival: a peer's part in carrying on when peers are lost (faults.on_peer_loss "continue",
// docs/algorithms.md §18), shared by `node-launcher peer` (runPeer) and the public starling::Peer
// inside a user's trainer. It stands in for a lost neighbour (its nodes tolerate the loss),
// proposes the neighbour's departure by the membership gossip, applies the agreed change at its
// round (membership, repaired graph, each node's algorithm restarted by the owner's Restart), and
// makes the peer leave when every live neighbour went silent at once or the others declared it
// lost.
//
// Use, per round r = engine.rounds(): prepare() (applies the change due at r; call it before
// anything reads the round's algorithm), begin(node, ...) and complete(node) in place of the
// engine's begin/complete. A peer may drive several nodes (the public Peer's step and mix nodes);
// each is registered with add(). Thread-safety: none; driven by the peer's one thread.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/state.h"
#include "core/status.h"
#include "engine/engine.h"
#include "engine/fault_injection.h"
#include "engine/membership.h"
#include "engine/membership_gossip.h"
#include "engine/node.h"
#include "engine/options.h"
#include "engine/rejoin.h"
#include "topology/schedule.h"

namespace starling::engine {

// A round that liveness notices keep waiting ends after this many round timeouts at most.
inline constexpr int kMaxExtendedWaits = 4;
// A silent neighbour that answers a ping is waited for this many round timeouts from the round's
// start at most: its process is alive, but it may not be the one that sends (a restarted process
// waiting to rejoin answers as its rank too), and a peer that waits longer than a notice's
// patience would make its own neighbours give up on it in turn.
inline constexpr int kPingExtendedWaits = 2;

template <typename T>
class Survival {
 public:
  // The node's algorithm afresh from `x0` (a copy of its current model) after a change: the
  // owner knows the algorithm and its oracle. Survival restarts the node with it.
  using Restart = std::function<std::unique_ptr<optim::Algorithm<T>>(std::vector<T> x0)>;

  // `schedule` and `net` are borrowed. `who` names the peer in messages ("node-launcher
  // peer 3"). `leftRun` (may be null) is set when the peer leaves the run.
  Survival(Options run, const topology::Schedule& schedule, int rank, transport::Transport& net,
           std::string who, bool* leftRun = nullptr);

  // on_peer_loss is "continue"; otherwise every call below is a plain engine round.
  bool enabled() const { return enabled_; }
  const Membership& membership() const { return membership_; }

  // Checkpoints (core/state.h), between rounds: the membership and the gossip's proposals.
  void visitState(core::StateVisitor& v);

  // Borrows the peer's engine (it must outlive this) and installs its hooks (the gossip is part of
  // every round; liveness notices). Once, before the first round (after a resumed peer's state
  // was loaded: visitState works without an engine).
  void install(Engine<T>& engine);
  // Registers a node: it tolerates losses and exchanges over the survivors' support graph.
  core::Status add(Node<T>& node, Restart restart);

  // The start of round engine.rounds(): applies the change due then, and answers the join
  // requests of lost ranks' restarted processes (engine/rejoin.h) when a join source is set.
  // `channel`: the calling node's (a trainer's Peer prepares in step() and in mix()); a return
  // applied here tells the returning peer which call its neighbours were in (JoinState).
  core::Status prepare(uint32_t channel = kModelChannel);

  // Rejoining (engine/rejoin.h). A survivor takes lost ranks back only with a source of its
  // model for their join state (runPeer: its node's model; a trainer's Peer: its last round's).
  using ModelSource = std::function<std::vector<double>()>;
  void setJoinSource(ModelSource source) { joinSource_ = std::move(source); }
  // What the join state carries besides the model (Node::carriedState); none when not set.
  void setJoinCarried(ModelSource source) { joinCarried_ = std::move(source); }
  // A restarted peer takes over the membership and proposals its sponsor sent (before
  // install(); its round is state.round).
  core::Status adopt(const JoinState& state);
  // engine.begin on the survivors' topology, and the round's gossip. `faults` (the scripted
  // link faults; may be null) is asked once the round's model messages are sent whether one of
  // them was dropped: its receiver will take this peer for lost, so with on_peer_loss
  // "continue" it proposes its own departure, writes its loss and leaves (kPeerGone); otherwise
  // the run stops at once naming the link (kUnavailable), as the receiver would after its
  // deadline. Every runner starts its rounds here (node-launcher peer, a trainer's step() and
  // mix()).
  core::Status begin(Node<T>& node, std::optional<double> stepSize = std::nullopt,
                     FaultInjector* faults = nullptr);
  // engine.complete, then the losses of the round: proposed and logged, or this peer leaves
  // (kPeerGone) when the others went silent at once or declared it lost.
  core::Status complete(Node<T>& node);

  // prepare(channel), begin(), complete(): one whole round.
  core::Status round(Node<T>& node, std::optional<double> stepSize, FaultInjector* faults,
                     uint32_t channel = kModelChannel);

 private:
  struct Registered {
    Node<T>* node;
    Restart restart;
  };
  core::Status applyChange(const MembershipGossip::Due& due, uint64_t round);
  void listenForJoins();
  core::Status answerJoins(uint64_t round);
  void sendJoinState(int to, uint64_t round);
  core::Status leave(const std::string& why);
  // Pings the silent neighbours, and behind each dead one its neighbours, wave by wave, within
  // one round timeout (Transport::ping).
  struct Probe {
    std::set<int> dead;        // no answer: refused, broken or timed out
    std::set<int> refused;     // of those, refused (the host answered: nobody listens there)
    std::set<int> beyond;      // dead and not a neighbour of this peer (found behind one)
    std::set<int> aliveBeyond; // alive behind a dead neighbour (a gossip bridge across the gap)
    bool othersAlive = false;  // a peer behind a dead neighbour answered
  };
  Probe probeLosses(const std::vector<int>& silent);
  // "Alive, in this round" to the live neighbours (MembershipGossip::notify): sent while this
  // peer waits long, so that they wait for its next message rather than take it for lost.
  void notifyAlive();
  // A long wait's other half: the neighbours still silent are pinged, and one that answers (its
  // process is alive and in its progress loop, only behind: a neighbour new to this peer since
  // the change may be rounds behind, waiting out a loss of its own that this peer never saw) is
  // waited for up to kPingExtendedWaits timeouts. A stopped or dead one does not answer (nor
  // does the old process of a restarted rank: Transport::ping), and is lost at the deadline.
  void pingSilent();
  // Waits longer for `peer`'s messages of this round (a notice or a ping says it is alive), but
  // no further than `cap` round timeouts from the round's start (0: no cap).
  void extendFor(int peer, int cap);
  // This peer's neighbours once every loss known here has taken effect (they get its liveness
  // notices before the change: at the change round they wait for it).
  const std::vector<int>& neighboursToBe();

  const Options run_;
  const topology::Schedule& schedule_;
  const int rank_;
  Engine<T>* engine_ = nullptr;
  const std::string who_;
  bool* leftRun_;
  const bool enabled_;
  Membership membership_;
  SurvivorSchedule survivors_;
  MembershipGossip gossip_;
  std::vector<Registered> nodes_;
  Node<T>* current_ = nullptr;  // the node of the round in flight (liveness extensions)
  transport::Clock::time_point roundStart_{};
  uint64_t roundsBegun_ = 0;  // counts begin() calls: a ping's answer is for its own round only
  std::set<int> pinging_;     // silent neighbours with a ping out in this round
  std::map<int, uint64_t> noticed_;  // the round of each neighbour's latest liveness notice
  bool toBeValid_ = false;           // neighboursToBe(), cached for the losses in toBeLost_
  std::vector<int> toBeLost_;
  std::vector<int> toBe_;
  const topology::Graph* support_ = nullptr;  // this round's
  transport::Transport& net_;
  ModelSource joinSource_;
  ModelSource joinCarried_;
  uint32_t prepareChannel_ = kModelChannel;  // of the prepare() applying a change
  std::vector<bool> joinListening_;
  std::vector<std::pair<int, uint64_t>> joinRequests_;  // (rank, attempt), not yet answered
  std::map<int, std::set<uint64_t>> honoured_;          // attempts answered, per rank
};

}  // namespace starling::engine
