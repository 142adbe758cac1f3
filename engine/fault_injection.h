// FaultInjector: a Transport that wraps another and applies the scenario's scripted link faults
// (faults.script "corrupt", "delay_ms", "drop", "duplicate" and "reorder" events,
// scenario/scenario.h) to the model messages this rank sends. The same wrapper sits on the
// in-process transports of `simulate` and on the UCX transport of each peer, so a script gives
// the same metrics in both.
//
// Coin flips. Corruption draws from one stream per rank (deriveSeed(seed, "FAULTS", rank)) in
// the order the node sends. Drop, duplicate and reorder flip one coin per (event, sender,
// receiver, round), a pure function of the seed: the sender's wrapper decides with it, and the
// receiver's wrapper can tell what the sender decided without a word between them. The receiver
// uses that to collect the spare copy of a duplicated message, and `simulate` (no clock) to fail
// the receive of a dropped message at once, where a network would let its deadline pass.
//
// What each fault does (scenarios/README.md, docs/algorithms.md §18):
// - corrupt: a copy with one byte flipped goes first; the receiver rejects it and takes the
//   genuine message that follows.
// - delay_ms: the message leaves D ms late (real time only).
// - drop: the message never reaches the wrapped transport; the node's send still completes (a
//   sender cannot see a loss) and the drop is recorded for takeDropped(): the runner stops the
//   run naming the link (on_peer_loss "stop") or makes this rank leave in that round, once its
//   messages are sent, since its receiver will take it for lost ("continue").
// - duplicate: the message goes twice. The receiving wrapper knows (the coin) and, once the node
//   has taken its copy, takes the spare itself and lets it go (counts().collected), so nothing is
//   left queued in the transport (which would hold it for good).
// - reorder: the message is held back and leaves right after the next message this rank sends
//   (to any neighbour, on any channel), or when this rank next calls progress(), whichever comes
//   first; so it cannot hold a round up. One message is held at a time.
// Thread-safety: none, as the wrapped transport.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/rng.h"
#include "engine/options.h"
#include "transport/transport.h"

namespace starling::engine {

class FaultInjector final : public transport::Transport {
 public:
  // What the wrapper has done so far (this rank's sends; `collected` counts spare copies of
  // duplicated messages sent to this rank that it took and let go).
  struct Counts {
    uint64_t corrupted = 0;
    uint64_t delayed = 0;
    uint64_t dropped = 0;
    uint64_t duplicated = 0;
    uint64_t reordered = 0;
    uint64_t collected = 0;
  };
  // A model message the wrapper dropped.
  struct Drop {
    int to;
    transport::Tag tag;
  };

  // `inner` is borrowed. `events` are the script's events (kills are ignored). `realTime`: a
  // peer over a network. Without it (the simulator, which has no clock) delays are left out and
  // the receive of a dropped message fails at once with kUnavailable, where a network would let
  // the receive's deadline pass (kTimeout) or report the sender gone (kPeerGone).
  FaultInjector(transport::Transport& inner, std::vector<FaultEvent> events, uint64_t seed,
                uint32_t channel, bool realTime);

  // Messages on `channel` get the link faults too (a trainer's Peer: its step and mix channels).
  void addChannel(uint32_t channel) { extraChannel_ = channel; }

  // True when `script` has any link fault (then peers and the simulator wrap).
  static bool wanted(const std::vector<FaultEvent>& script);

  int rank() const override { return inner_.rank(); }
  void send(int to, transport::Tag tag, transport::SharedBytes bytes,
            transport::SendCallback done) override;
  void recv(int from, transport::Tag tag, transport::Clock::time_point deadline,
            transport::RecvCallback done) override;
  core::Result<int> progress(transport::Clock::time_point until) override;
  transport::TransportStats stats() const override { return inner_.stats(); }
  void revive(int peer) override { inner_.revive(peer); }
  void ping(int peer, transport::Clock::time_point deadline, PingCallback done) override {
    inner_.ping(peer, deadline, std::move(done));
  }
  std::optional<transport::OutgoingMessage> allocate(size_t size) override {
    return inner_.allocate(size);
  }

  // The text of a dropped message's failure, as the runners say it.
  static std::string dropMessage(int from, int to, uint64_t round);
  // The error that stops a run (on_peer_loss "stop") at a dropped message.
  static std::string dropStopMessage(int from, int to, uint64_t round);
  // The model messages dropped since the last call, in send order.
  std::vector<Drop> takeDropped();
  // Hands a held-back (reordered) message to the wrapped transport now. The simulator calls it
  // once every node has sent, before it drives any transport (a message held until the sender's
  // next progress() would keep a node driven before it waiting).
  void releaseHeld();
  Counts counts() const {
    Counts c = counts_;
    c.corrupted = injected_;
    return c;
  }
  // Corrupted copies sent (counts().corrupted).
  uint64_t injected() const { return injected_; }

  // Checkpoints (core/state.h): the coin-flip stream and the count. Messages held back for a
  // delay belong to a round every peer has finished by then and are not saved.
  void visitState(core::StateVisitor& v) {
    {
      core::StateVisitor::Scope scope(v, "rng");
      rng_.visitState(v);
    }
    v.scalar("injected", injected_);
  }

 private:
  // What the coins decided for one message (drop wins over the others).
  struct Fate {
    bool drop = false;
    bool duplicate = false;
    bool reorder = false;
  };
  struct Held {
    transport::Clock::time_point release;
    int to;
    transport::Tag tag;
    transport::SharedBytes bytes;
    transport::SendCallback done;
    bool duplicate;
  };
  struct Key {
    int from;
    transport::Tag tag;
    friend auto operator<=>(const Key&, const Key&) = default;
  };

  bool applies(const FaultEvent& e, int from, int to, transport::Tag tag) const;
  double coin(size_t event, int from, int to, uint64_t round) const;
  Fate fate(int from, int to, transport::Tag tag) const;
  void forward(int to, transport::Tag tag, transport::SharedBytes bytes,
               transport::SendCallback done, bool duplicate);
  void collect(const Key& key);

  transport::Transport& inner_;
  std::vector<FaultEvent> events_;
  uint64_t seed_;
  core::Rng rng_;          // corruption's stream
  uint64_t injected_ = 0;  // corrupted copies sent
  bool faulted(uint32_t channel) const { return channel == channel_ || channel == extraChannel_; }
  uint32_t channel_;
  uint32_t extraChannel_;  // the same as channel_ unless addChannel() was called
  bool realTime_;
  bool anyChance_ = false;  // a drop, duplicate or reorder event
  bool anyCorrupt_ = false;  // a corrupt event: its damage is done before the sender's transport
  std::deque<Held> held_;   // delayed, in release order
  std::optional<Held> reordered_;
  std::deque<std::function<void()>> ready_;  // completions of our own, run from progress()
  std::vector<Drop> dropped_;
  // Duplicated messages to this rank: the node's receives in flight per key, and the keys whose
  // spare copy is being collected.
  std::map<Key, int> nodeReceives_;
  std::map<Key, bool> collecting_;
  Counts counts_;
};

}  // namespace starling::engine
