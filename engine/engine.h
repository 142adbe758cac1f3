// Engine: the round loop of one peer, shared by every way Starling runs a peer over a network
// transport: `node-launcher peer` (runPeer, the problem's own gradients) and the public
// starling::Peer inside a user's trainer (the trainer's gradients). It drives Nodes one round at
// a time over a borrowed Transport, stops on the stop flag, names failed rounds, keeps the peer
// log (engine/peer_log.h has its format) and hands the last messages to the network at the end.
//
// The simulator drives its n nodes round-robin on one thread (start all, then finish all) and
// therefore uses Node directly; everything a round does is in Node either way.
// Thread-safety: none; an Engine, its nodes and its transport are driven by one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/line_file.h"
#include "core/status.h"
#include "engine/node.h"
#include "engine/options.h"
#include "topology/schedule.h"
#include "transport/transport.h"

namespace starling::engine {

struct EngineOptions {
  int rank = 0;
  std::filesystem::path outDir;  // peers/rank-R.jsonl goes here; empty: no peer log
  std::string logHeader;         // the peer log's first line (scenario::peerLogHeader)
  // Polled between waits (at least every 200 ms); when it becomes true the round stops with
  // kCancelled. Owned by the caller (a signal handler's flag).
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const std::string&)> log;  // diagnostics; default stderr
  // Sees every line appended to the peer log, also without an out dir (`simulate` reads its
  // sessions' loss and membership lines from here).
  std::function<void(const std::string&)> tap;
  // A resumed peer (runtime/checkpoint.h): the engine starts at round `resumeRound`, appends to
  // the peer log after its first `resumeLogBytes` bytes (cutting off the rest) instead of
  // creating it, and counts wall time from `wallOffset` seconds.
  std::optional<uint64_t> resumeRound;
  uint64_t resumeLogBytes = 0;
  double wallOffset = 0;
};

template <typename T>
class Engine {
 public:
  // `schedule` and `net` are borrowed and must outlive the engine.
  Engine(Options run, const topology::Schedule& schedule, transport::Transport& net,
         EngineOptions options);

  // Creates the peer log (when there is an out dir) and writes its header; a resumed engine
  // reopens it instead (EngineOptions::resumeRound).
  core::Status open();
  // Before open(): start at round `round`, appending to the peer log after its first `logBytes`
  // bytes and counting wall time from `wallOffset` (what EngineOptions' resume fields say).
  void resumeAt(uint64_t round, uint64_t logBytes, double wallOffset) {
    opt_.resumeRound = round;
    opt_.resumeLogBytes = logBytes;
    opt_.wallOffset = wallOffset;
  }

  // One round on `node`: start it (the algorithm prepares and sends), drive the transport until
  // every neighbour's message is in, finish it (absorb). `stepSize` overrides the run's
  // schedule for this round. begin + complete is the same round split in two. On error the engine
  // is failed (see fail()).
  core::Status round(Node<T>& node, std::optional<double> stepSize = std::nullopt);
  core::Status begin(Node<T>& node, std::optional<double> stepSize = std::nullopt);
  // begin() on a topology other than the schedule's (the survivors' after a peer loss).
  core::Status begin(Node<T>& node, const topology::RoundTopology& topology,
                     std::optional<double> stepSize = std::nullopt);
  // complete() also waits until `done()` is true (another exchange of the same round, such as
  // the membership gossip), under the same deadline.
  void setAlsoWaitFor(std::function<bool()> done) { alsoWaitFor_ = std::move(done); }
  transport::Clock::time_point deadline() const { return deadline_; }
  // Moves this round's deadline (a neighbour said it is alive but delayed).
  void extendDeadline(transport::Clock::time_point until) { deadline_ = std::max(deadline_, until); }
  // Called while a round waits, each time another third of the round timeout has passed.
  void setOnLongWait(std::function<void()> f) { onLongWait_ = std::move(f); }
  core::Status complete(Node<T>& node);
  bool inRound() const { return inRound_ != nullptr; }
  // Whether complete() would find everything of the round in flight on `node` there (its
  // messages and what setAlsoWaitFor waits for), without waiting.
  bool roundReady(const Node<T>& node) const {
    return node.roundComplete() && (!alsoWaitFor_ || alsoWaitFor_());
  }
  // Runs the transport's ready completions without waiting (a round in flight progresses while
  // the caller computes). Returns the failure, if the engine has one.
  core::Status poll();

  // Rounds completed.
  uint64_t rounds() const { return round_; }
  // The step size of the next round: the run's schedule unless overridden.
  double stepSizeAt(std::optional<double> stepSize) const;

  // Appends one line to the peer log (nothing without an out dir). Round lines are written by
  // the engine's users (runPeer, the public Peer), which know what their model is.
  core::Status append(const std::string& line);
  // The peer log's length and its flush to disk (before a checkpoint records the length).
  uint64_t logBytes() const { return out_ ? out_->size() : 0; }
  core::Status syncLog() { return out_ ? out_->sync() : core::Status::ok(); }

  // Makes `st` the engine's failure: explains it (explainRoundFailure), writes the failure line
  // naming the neighbour `node` lost, and returns it. Later calls return it again.
  core::Status fail(const core::Status& st, const Node<T>* node);
  const core::Status& failure() const { return failure_; }

  // Drives the transport until every send of `nodes` has completed (their neighbours still need
  // this peer's last messages), at most connect_timeout_ms.
  core::Status flush(const std::vector<const Node<T>*>& nodes);

  double wallSeconds() const;
  void say(const std::string& line) const;

 private:
  core::Status wait(Node<T>& node);

  const Options run_;
  const topology::Schedule& schedule_;
  transport::Transport& net_;
  EngineOptions opt_;
  std::unique_ptr<core::LineFile> out_;
  uint64_t round_ = 0;
  bool started_ = false;  // a round ran in this process (the first also waits for connections)
  Node<T>* inRound_ = nullptr;
  transport::Clock::time_point deadline_{};
  transport::Clock::time_point start_;
  core::Status failure_;
  std::function<bool()> alsoWaitFor_;
  std::function<void()> onLongWait_;
};

}  // namespace starling::engine
