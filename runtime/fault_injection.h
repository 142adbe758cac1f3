// FaultInjector: a Transport that wraps another and applies the scenario's scripted link faults
// (faults.script "corrupt" and "delay_ms" events, runtime/scenario.h) to the model messages this
// rank sends. The same wrapper sits on the in-process transports of `simulate` and on the UCX
// transport of each peer, and draws its coin flips from one stream per rank
// (deriveSeed(seed, "FAULTS", rank)) in the order the node sends, so a corruption script gives
// the same metrics in both. Delays hold a message back for real time (in `simulate` no time
// passes, so they change nothing there). Thread-safety: none, as the wrapped transport.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "runtime/scenario.h"
#include "runtime/transport/transport.h"

namespace starling::runtime {

class FaultInjector final : public transport::Transport {
 public:
  // `inner` is borrowed. `events` are the script's corrupt and delay events. Without
  // `realTime` (the simulator, which has no clock) delays are left out.
  FaultInjector(transport::Transport& inner, std::vector<FaultEvent> events, uint64_t seed,
                uint32_t channel, bool realTime);

  // True when the scenario scripts any link fault (then peers and the simulator wrap).
  static bool wanted(const Scenario& s);

  int rank() const override { return inner_.rank(); }
  void send(int to, transport::Tag tag, transport::SharedBytes bytes,
            transport::SendCallback done) override;
  void recv(int from, transport::Tag tag, transport::Clock::time_point deadline,
            transport::RecvCallback done) override {
    inner_.recv(from, tag, deadline, std::move(done));
  }
  core::Result<int> progress(transport::Clock::time_point until) override;
  transport::TransportStats stats() const override { return inner_.stats(); }
  std::optional<transport::OutgoingMessage> allocate(size_t size) override {
    return inner_.allocate(size);
  }

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
  struct Held {
    transport::Clock::time_point release;
    int to;
    transport::Tag tag;
    transport::SharedBytes bytes;
    transport::SendCallback done;
  };
  bool applies(const FaultEvent& e, int to, transport::Tag tag) const;

  transport::Transport& inner_;
  std::vector<FaultEvent> events_;
  core::Rng rng_;
  uint32_t channel_;
  bool realTime_;
  std::deque<Held> held_;
  uint64_t injected_ = 0;
};

}  // namespace starling::runtime
