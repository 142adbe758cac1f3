#include "transport/inproc/inproc_transport.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>

namespace starling::transport::inproc {

struct MessageKey {
  int from;
  Tag tag;
  friend auto operator<=>(const MessageKey&, const MessageKey&) = default;
};

struct PendingRecv {
  Clock::time_point deadline;
  RecvCallback done;
};

struct Mailbox {
  std::map<MessageKey, std::deque<SharedBytes>> arrived;  // sent, not yet asked for
  size_t queued = 0;                                       // messages in `arrived`
  std::map<MessageKey, PendingRecv> waiting;  // asked for, not yet sent
  std::deque<std::function<void()>> ready;    // completions to run in the owner's progress()
  TransportStats stats;
};

// The frames every rank's allocate() hands out, on one free list for the whole hub: a frame goes
// back on top when its last holder lets go, and the next rank to send takes it from there, while
// it is still in cache. A simulation drives its n ranks one after another on one thread, and a
// frame of each rank's own (Node's pool) had last been touched a whole round, n frames, earlier:
// on a 1,024-node ring with d = 1e4 it came from memory and went back every round
// (docs/benchmarks.md, "The simulator at scale"). Its own lock, never held while taking the
// hub's: the last holder may let go with the hub's lock held. Kept alive by the frames it lent.
class FramePool : public std::enable_shared_from_this<FramePool> {
 public:
  OutgoingMessage take(size_t size) {
    std::unique_ptr<Bytes> buffer;
    {
      std::lock_guard lock(mu_);
      // The most recently released frame that is large enough, among the last few released.
      constexpr size_t kLook = 8;
      for (size_t i = free_.size(); i-- > 0 && free_.size() - i <= kLook;) {
        if (free_[i]->capacity() >= size) {
          buffer = std::move(free_[i]);
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
    if (buffer) {
      buffer->resize(size);  // contents unspecified: the sender writes the whole frame
    } else {
      buffer = std::make_unique<Bytes>(size);
    }
    Bytes* raw = buffer.release();
    std::shared_ptr<Bytes> frame(raw, [pool = shared_from_this()](Bytes* b) { pool->giveBack(b); });
    const std::span<std::byte> bytes(*frame);
    return OutgoingMessage{bytes, SharedBytes(std::move(frame))};
  }

 private:
  void giveBack(Bytes* b) {
    std::unique_ptr<Bytes> owned(b);
    std::lock_guard lock(mu_);
    free_.push_back(std::move(owned));
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<Bytes>> free_;
};

struct InprocHub::State {
  explicit State(int ranks) : boxes_(ranks) {}
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Mailbox> boxes_;
  std::map<int, std::string> closed;  // rank -> why its process is gone (closeRank)
  std::shared_ptr<FramePool> frames = std::make_shared<FramePool>();
};

InprocHub::InprocHub(int ranks) : state_(std::make_unique<State>(ranks)) {}
InprocHub::~InprocHub() = default;

// Ends every receive waiting in `box` that `pick(key, pending)` chooses with kTimeout, as its
// deadline does; returns how many. The hub's lock is held.
template <typename Pick>
size_t timeOutLocked(Mailbox& box, Pick pick) {
  size_t n = 0;
  for (auto it = box.waiting.begin(); it != box.waiting.end();) {
    if (!pick(it->first, it->second)) {
      ++it;
      continue;
    }
    const int from = it->first.from;
    const uint64_t round = it->first.tag.round;
    box.stats.timeouts++;
    box.ready.push_back([cb = std::move(it->second.done), from, round] {
      cb(core::timeout("no message from rank " + std::to_string(from) + " for round " +
                       std::to_string(round)),
         nullptr);
    });
    it = box.waiting.erase(it);
    ++n;
  }
  return n;
}

namespace {

class InprocTransport final : public Transport {
 public:
  InprocTransport(InprocHub& hub, int rank, bool vouch)
      : hub_(hub.state()), rank_(rank), vouch_(vouch) {}

  int rank() const override { return rank_; }

  void send(int to, Tag tag, SharedBytes bytes, SendCallback done) override {
    bytes.setIntact(vouch_);  // nothing lies between this process's ranks
    {
      std::lock_guard lock(hub_.mu);
      Mailbox& self = hub_.boxes_[rank_];
      if (to < 0 || to >= static_cast<int>(hub_.boxes_.size())) {
        self.ready.push_back([done = std::move(done), to] {
          done(core::peerGone("no rank " + std::to_string(to) + " in this process"));
        });
        return;
      }
      const size_t size = bytes->size();
      self.stats.messagesSent++;
      self.stats.bytesSent += size;
      Mailbox& box = hub_.boxes_[to];
      const MessageKey key{rank_, tag};
      if (hub_.closed.count(to) != 0) {
        // Its process is gone: the message goes nowhere (a network send to a dead peer may
        // complete too; its receives failing is what tells the others).
      } else if (auto it = box.waiting.find(key); it != box.waiting.end()) {
        box.ready.push_back([cb = std::move(it->second.done), b = std::move(bytes)]() mutable {
          cb(core::Status::ok(), std::move(b));
        });
        box.waiting.erase(it);
        box.stats.messagesReceived++;
        box.stats.bytesReceived += size;
      } else if (box.queued >= kMaxQueuedMessages) {
        box.stats.corruptMessages++;
      } else if (auto& queue = box.arrived[key]; queue.size() < kMaxQueuedPerKey) {
        queue.push_back(std::move(bytes));
        box.queued++;
      } else {
        box.stats.corruptMessages++;  // a flood of one (sender, round, channel): drop
      }
      self.ready.push_back([done = std::move(done)] { done(core::Status::ok()); });
    }
    hub_.cv.notify_all();
  }

  void recv(int from, Tag tag, Clock::time_point deadline, RecvCallback done) override {
    std::lock_guard lock(hub_.mu);
    Mailbox& box = hub_.boxes_[rank_];
    const MessageKey key{from, tag};
    if (auto it = box.arrived.find(key); it != box.arrived.end()) {
      SharedBytes bytes = std::move(it->second.front());
      it->second.pop_front();
      box.queued--;
      if (it->second.empty()) box.arrived.erase(it);
      box.stats.messagesReceived++;
      box.stats.bytesReceived += bytes->size();
      box.ready.push_back([cb = std::move(done), b = std::move(bytes)]() mutable {
        cb(core::Status::ok(), std::move(b));
      });
    } else if (auto gone = hub_.closed.find(from); gone != hub_.closed.end()) {
      box.ready.push_back([cb = std::move(done), why = gone->second] {
        cb(core::peerGone(why), nullptr);
      });
    } else if (box.waiting.count(key) != 0) {
      // One receive per key at a time; the second completes at once, with an error.
      box.ready.push_back([cb = std::move(done), from, round = tag.round] {
        cb(core::failedPrecondition("a receive from rank " + std::to_string(from) + " for round " +
                                    std::to_string(round) + " is already pending"),
           nullptr);
      });
    } else {
      box.waiting.emplace(key, PendingRecv{deadline, std::move(done)});
    }
  }

  core::Result<int> progress(Clock::time_point until) override {
    std::deque<std::function<void()>> batch;
    {
      std::unique_lock lock(hub_.mu);
      Mailbox& box = hub_.boxes_[rank_];
      for (;;) {
        expireLocked(box, Clock::now());
        if (!box.ready.empty()) break;
        Clock::time_point wake = until;
        for (const auto& [key, pending] : box.waiting) wake = std::min(wake, pending.deadline);
        if (Clock::now() >= until) break;
        hub_.cv.wait_until(lock, wake);
      }
      batch.swap(box.ready);
    }
    for (auto& fn : batch) fn();
    return static_cast<int>(batch.size());
  }

  // Frames from the hub's pool (FramePool): the sender writes its message in place and every
  // receiver reads that same buffer, as before, but the buffer is one that was let go of
  // recently, not the sender's own from a round ago.
  std::optional<OutgoingMessage> allocate(size_t size) override { return hub_.frames->take(size); }

  void ping(int peer, Clock::time_point /*deadline*/, PingCallback done) override {
    {
      std::lock_guard lock(hub_.mu);
      core::Status answer = core::Status::ok();
      if (peer < 0 || peer >= static_cast<int>(hub_.boxes_.size())) {
        answer = core::unavailable("no rank " + std::to_string(peer) + " in this process");
      } else if (auto gone = hub_.closed.find(peer); gone != hub_.closed.end()) {
        answer = core::unavailable("rank " + std::to_string(peer) + " is gone: " + gone->second);
      }
      hub_.boxes_[rank_].ready.push_back(
          [done = std::move(done), answer = std::move(answer)] { done(answer); });
    }
    hub_.cv.notify_all();
  }

  TransportStats stats() const override {
    std::lock_guard lock(hub_.mu);
    return hub_.boxes_[rank_].stats;
  }

 private:
  void expireLocked(Mailbox& box, Clock::time_point now) {
    timeOutLocked(box,
                  [now](const MessageKey&, const PendingRecv& p) { return p.deadline <= now; });
  }

  InprocHub::State& hub_;
  const int rank_;
  const bool vouch_;
};

}  // namespace

void closeRank(InprocHub& hub, int rank, const std::string& why) {
  InprocHub::State& st = hub.state();
  {
    std::lock_guard lock(st.mu);
    st.closed[rank] = why;
    for (Mailbox& box : st.boxes_) {
      for (auto it = box.waiting.begin(); it != box.waiting.end();) {
        if (it->first.from != rank) {
          ++it;
          continue;
        }
        box.ready.push_back([cb = std::move(it->second.done), why] {
          cb(core::peerGone(why), nullptr);
        });
        it = box.waiting.erase(it);
      }
    }
  }
  st.cv.notify_all();
}

size_t expireWaiting(InprocHub& hub, int rank,
                     const std::function<bool(int from, const Tag& tag)>& expire) {
  InprocHub::State& st = hub.state();
  size_t n = 0;
  {
    std::lock_guard lock(st.mu);
    n = timeOutLocked(st.boxes_[rank], [&](const MessageKey& key, const PendingRecv&) {
      return expire(key.from, key.tag);
    });
  }
  st.cv.notify_all();
  return n;
}

std::unique_ptr<InprocHub> createHub(int ranks) { return std::make_unique<InprocHub>(ranks); }

std::unique_ptr<Transport> createTransport(InprocHub& hub, int rank, bool vouch) {
  return std::make_unique<InprocTransport>(hub, rank, vouch);
}

}  // namespace starling::transport::inproc
