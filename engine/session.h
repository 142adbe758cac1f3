// Session: one peer of a run, as every runner drives it. It owns the peer's Engine (rounds, the
// peer log, deadlines) and its Survival (faults.on_peer_loss "continue": stand-ins, membership
// gossip, changes, returns), applies the fault script to this rank (its kills; its link faults
// through the FaultInjector the owner wrapped the transport in), keeps the list of the peer's
// nodes (one for `node-launcher peer`; a trainer's step and mix nodes) and rejoins a run as a
// lost rank's restarted process. The hooks between them are registered once, here.
//
// The three runners differ only in where the gradients come from and who decides when a round
// runs: `node-launcher peer` (runtime/peer.cc: the scenario's problem, one round after another),
// starling::Peer (api/: the trainer's step() and mix() calls) and `simulate` (runtime/
// simulator.cc: n Sessions over the in-process transport on one thread, a scheduler starting and
// completing their rounds), so a peer loss in `simulate` goes through the membership gossip of
// real peers.
//
// Use: construct; for a restarted process rejoin() (before open()); open(); add() each node; then
// per round prepare(), begin(node) and complete(node) (or round(node)); flush() at the end.
// Thread-safety: none; a Session, its nodes and its transport are driven by one thread.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/state.h"
#include "core/status.h"
#include "engine/engine.h"
#include "engine/fault_injection.h"
#include "engine/node.h"
#include "engine/options.h"
#include "engine/rejoin.h"
#include "engine/survival.h"
#include "topology/schedule.h"
#include "transport/transport.h"

namespace starling::engine {

struct SessionOptions {
  EngineOptions engine;  // rank, peer log, stop flag, diagnostics, resume
  std::string who;       // names the peer in messages ("node-launcher peer 3")
  // Scripted link faults: the FaultInjector the transport is wrapped in (borrowed; may be null).
  FaultInjector* faults = nullptr;
  // Set when the peer leaves the run (may be null): dropped messages, or declared lost.
  bool* leftRun = nullptr;
  // A scripted kill of this rank ({"kill": R, "at_round": N}): the process sends itself
  // SIGKILL before round N, a real crash with nothing flushed (a peer process, a trainer). Off
  // (`simulate`, whose ranks share one process): begin() returns kPeerGone instead and killed()
  // says so; the scheduler stops driving the rank.
  bool killProcess = true;
};

template <typename T>
class Session {
 public:
  using Restart = typename Survival<T>::Restart;

  // `schedule` and `net` are borrowed and must outlive the session.
  Session(Options run, const topology::Schedule& schedule, transport::Transport& net,
          SessionOptions options);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Options& run() const { return run_; }
  int rank() const { return opt_.engine.rank; }
  Engine<T>& engine() { return engine_; }
  const Engine<T>& engine() const { return engine_; }
  Survival<T>& survival() { return survival_; }
  transport::Transport& net() { return net_; }
  FaultInjector* faults() const { return opt_.faults; }

  // A lost rank's restarted process (engine/rejoin.h), before open(): asks the schedule's
  // support neighbours to take it back and waits for the state they agreed on (round 0: the run
  // ends first). The engine then starts at that round, appending to the peer log of the old
  // process (cut after its last whole line); the membership and proposals are taken over.
  core::Result<JoinState> rejoin(size_t dim, std::function<void(const std::string&)> log);

  // Opens the engine (the peer log) and registers the survival hooks. A resumed peer's
  // checkpointed state (visitState) is loaded before.
  core::Status open();
  // Registers a node: it is flushed at the end and, with on_peer_loss "continue", tolerates
  // losses, exchanges over the survivors' support graph and restarts from its model by
  // `restart` at a membership change.
  core::Status add(Node<T>& node, Restart restart);
  // A survivor's model for a rejoining neighbour's join state, and what its algorithm carries
  // across a restart (Node::carriedState).
  void setJoinSource(typename Survival<T>::ModelSource source) {
    survival_.setJoinSource(std::move(source));
  }
  void setJoinCarried(typename Survival<T>::ModelSource source) {
    survival_.setJoinCarried(std::move(source));
  }

  // Whether the fault script kills this rank before round `round`.
  bool killedBefore(uint64_t round) const;
  // Set once prepare() stopped at a scripted kill (killProcess off).
  bool killed() const { return killed_; }
  // The start of round engine().rounds(), before anything reads the round's algorithm: the
  // scripted kill, and the membership change due then (`channel`: the calling node's, which a
  // returning trainer lines its calls up by).
  core::Status prepare(uint32_t channel = kModelChannel);
  // The round on `node`: the algorithm's message and the round's gossip (after prepare()).
  core::Status begin(Node<T>& node, std::optional<double> stepSize = std::nullopt);
  // begin() on the round's topology the caller computed once for all its sessions (the
  // simulator's wavefront, n sessions on one time-varying schedule); only without survival and
  // scripted link faults, whose rounds run on the survivors' topology and are checked for drops.
  core::Status begin(Node<T>& node, const topology::RoundTopology& topology);
  // Waits for the round's messages and absorbs them; the round's losses.
  core::Status complete(Node<T>& node);
  // prepare(), begin() and complete().
  core::Status round(Node<T>& node, std::optional<double> stepSize = std::nullopt,
                     uint32_t channel = kModelChannel);
  // Hands every registered node's last messages to the network (its neighbours still need them).
  core::Status flush();

  // Checkpoints (core/state.h): the fault injector's stream, the membership and its gossip.
  void visitState(core::StateVisitor& v);
  // "; link faults: ..." for the last line, when the script has link faults; empty otherwise.
  std::string faultSummary() const;
  void say(const std::string& line) const { engine_.say(line); }

 private:
  const Options run_;
  const topology::Schedule& schedule_;
  transport::Transport& net_;
  SessionOptions opt_;
  Engine<T> engine_;
  Survival<T> survival_;
  std::vector<const Node<T>*> nodes_;
  std::vector<uint64_t> killRounds_;  // this rank's scripted kills
  bool killed_ = false;
};

}  // namespace starling::engine
