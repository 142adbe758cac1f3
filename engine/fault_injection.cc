#include "engine/fault_injection.h"

#include <algorithm>
#include <string>

namespace starling::engine {
namespace {
constexpr uint64_t kFaultSalt = 0x4641554c5453;  // "FAULTS"
constexpr uint64_t kCoinSalt = 0x434f494e53;     // "COINS", plus the event's index
// How long the receiving wrapper waits for the spare copy of a duplicated message once the node
// has its own. It travels right behind the first (the same sender, link and moment), so this
// only bounds a receive whose copy never comes (its sender failed in between).
constexpr auto kCollectWait = std::chrono::seconds(60);
}  // namespace

FaultInjector::FaultInjector(transport::Transport& inner, std::vector<FaultEvent> events,
                             uint64_t seed, uint32_t channel, bool realTime)
    : inner_(inner), events_(std::move(events)), seed_(seed),
      rng_(core::deriveSeed(seed, kFaultSalt, static_cast<uint64_t>(inner.rank()))),
      channel_(channel), extraChannel_(channel), realTime_(realTime) {
  for (const FaultEvent& e : events_) {
    anyChance_ = anyChance_ || e.kind == FaultEvent::Kind::kDrop ||
                 e.kind == FaultEvent::Kind::kDuplicate || e.kind == FaultEvent::Kind::kReorder;
    anyCorrupt_ = anyCorrupt_ || e.kind == FaultEvent::Kind::kCorrupt;
  }
}

bool FaultInjector::wanted(const std::vector<FaultEvent>& script) {
  return std::any_of(script.begin(), script.end(),
                     [](const FaultEvent& e) { return e.kind != FaultEvent::Kind::kKill; });
}

std::string FaultInjector::dropMessage(int from, int to, uint64_t round) {
  return "the fault script dropped rank " + std::to_string(from) + "'s model message to rank " +
         std::to_string(to) + " in round " + std::to_string(round) + " (link " +
         std::to_string(std::min(from, to)) + "-" + std::to_string(std::max(from, to)) + ")";
}

std::string FaultInjector::dropStopMessage(int from, int to, uint64_t round) {
  return dropMessage(from, to, round) +
         ": a lost message cannot be told from a silent peer (faults.on_peer_loss is \"stop\")";
}

bool FaultInjector::applies(const FaultEvent& e, int from, int to, transport::Tag tag) const {
  if (e.kind == FaultEvent::Kind::kKill || !faulted(tag.channel)) return false;
  if (tag.round < e.fromRound || tag.round >= e.toRound) return false;
  if (e.linkA < 0) return true;
  return (from == e.linkA && to == e.linkB) || (from == e.linkB && to == e.linkA);
}

double FaultInjector::coin(size_t event, int from, int to, uint64_t round) const {
  const uint64_t link = (static_cast<uint64_t>(static_cast<uint32_t>(from)) << 32) |
                        static_cast<uint32_t>(to);
  const uint64_t h = core::mix64(core::deriveSeed(seed_, kCoinSalt + event, link, round));
  return static_cast<double>(h >> 11) * 0x1.0p-53;  // uniform in [0, 1)
}

FaultInjector::Fate FaultInjector::fate(int from, int to, transport::Tag tag) const {
  Fate f;
  if (!anyChance_) return f;
  for (size_t k = 0; k < events_.size(); ++k) {
    const FaultEvent& e = events_[k];
    const bool chance = e.kind == FaultEvent::Kind::kDrop ||
                        e.kind == FaultEvent::Kind::kDuplicate ||
                        e.kind == FaultEvent::Kind::kReorder;
    if (!chance || !applies(e, from, to, tag)) continue;
    if (coin(k, from, to, tag.round) >= e.probability) continue;
    if (e.kind == FaultEvent::Kind::kDrop) f.drop = true;
    if (e.kind == FaultEvent::Kind::kDuplicate) f.duplicate = true;
    if (e.kind == FaultEvent::Kind::kReorder) f.reorder = true;
  }
  if (f.drop) f.duplicate = f.reorder = false;
  return f;
}

void FaultInjector::send(int to, transport::Tag tag, transport::SharedBytes bytes,
                         transport::SendCallback done) {
  const Fate f = fate(rank(), to, tag);
  if (f.drop) {
    // Lost on the way: the wrapped transport never sees it, and the send completes as any send
    // does (a sender cannot see a loss). The runner learns of it from takeDropped().
    ++counts_.dropped;
    dropped_.push_back(Drop{to, tag});
    ready_.push_back([done = std::move(done)] { done(core::Status::ok()); });
    return;
  }
  uint64_t delayMs = 0;
  for (const FaultEvent& e : events_) {
    if (!applies(e, rank(), to, tag)) continue;
    if (e.kind == FaultEvent::Kind::kCorrupt && bytes->size() > 0 &&
        rng_.uniform() < e.probability) {
      // A copy with one byte flipped goes first; the receiver must reject it and take the
      // genuine message that follows.
      auto bad = std::make_shared<transport::Bytes>(bytes->begin(), bytes->end());
      const size_t at = rng_.below(bad->size());
      (*bad)[at] ^= std::byte{static_cast<unsigned char>(1 + rng_.below(255))};
      ++injected_;
      inner_.send(to, tag, std::move(bad), [](const core::Status&) {});
    }
    if (e.kind == FaultEvent::Kind::kDelay && realTime_) delayMs = std::max(delayMs, e.delayMs);
  }
  if (delayMs > 0) {
    ++counts_.delayed;
    held_.push_back(Held{transport::Clock::now() + std::chrono::milliseconds(delayMs), to, tag,
                         std::move(bytes), std::move(done), f.duplicate});
    return;
  }
  if (f.reorder && !reordered_) {
    // Held back until the next message of this rank has gone (or it next waits).
    ++counts_.reordered;
    reordered_ = Held{{}, to, tag, std::move(bytes), std::move(done), f.duplicate};
    return;
  }
  forward(to, tag, std::move(bytes), std::move(done), f.duplicate);
  releaseHeld();
}

void FaultInjector::forward(int to, transport::Tag tag, transport::SharedBytes bytes,
                            transport::SendCallback done, bool duplicate) {
  if (!duplicate) {
    inner_.send(to, tag, std::move(bytes), std::move(done));
    return;
  }
  // The same immutable buffer twice; the node hears of the first send only.
  ++counts_.duplicated;
  inner_.send(to, tag, bytes, std::move(done));
  inner_.send(to, tag, std::move(bytes), [](const core::Status&) {});
}

void FaultInjector::releaseHeld() {
  if (!reordered_) return;
  Held h = std::move(*reordered_);
  reordered_.reset();
  forward(h.to, h.tag, std::move(h.bytes), std::move(h.done), h.duplicate);
}

std::vector<FaultInjector::Drop> FaultInjector::takeDropped() {
  std::vector<Drop> out;
  out.swap(dropped_);
  return out;
}

void FaultInjector::recv(int from, transport::Tag tag, transport::Clock::time_point deadline,
                         transport::RecvCallback done) {
  if (anyCorrupt_ && std::any_of(events_.begin(), events_.end(), [&](const FaultEvent& e) {
        return e.kind == FaultEvent::Kind::kCorrupt && applies(e, from, rank(), tag);
      })) {
    // The damage was done before the sender's transport, which therefore vouches for the
    // damaged bytes as for any others (SharedBytes::intact()): on this link the receiver must
    // check every frame's CRC, as it would over a real wire.
    done = [done = std::move(done)](const core::Status& st, transport::SharedBytes b) {
      done(st, std::move(b.setIntact(false)));
    };
  }
  if (faulted(tag.channel) && anyChance_) {
    const Fate f = fate(from, rank(), tag);
    if (f.drop && !realTime_) {
      // No clock to let the deadline pass: say at once what the network would say then.
      ready_.push_back([done = std::move(done), msg = dropMessage(from, rank(), tag.round)] {
        done(core::unavailable(msg), nullptr);
      });
      return;
    }
    if (f.duplicate) {
      const Key key{from, tag};
      ++nodeReceives_[key];
      inner_.recv(from, tag, deadline,
                  [this, key, done = std::move(done)](const core::Status& st,
                                                      transport::SharedBytes b) {
                    if (--nodeReceives_[key] <= 0) nodeReceives_.erase(key);
                    done(st, std::move(b));
                    // The node has its copy, unless it asked again (it rejected a corrupted
                    // one): then the spare is the next but one.
                    if (st.isOk() && nodeReceives_.count(key) == 0) collect(key);
                  });
      return;
    }
  }
  inner_.recv(from, tag, deadline, std::move(done));
}

void FaultInjector::collect(const Key& key) {
  if (!collecting_.emplace(key, true).second) return;
  inner_.recv(key.from, key.tag, transport::Clock::now() + kCollectWait,
              [this, key](const core::Status& st, transport::SharedBytes) {
                collecting_.erase(key);
                if (st.isOk()) ++counts_.collected;  // and the bytes go now
              });
}

core::Result<int> FaultInjector::progress(transport::Clock::time_point until) {
  const auto now = transport::Clock::now();
  // This rank waits: a message held back for reordering has waited long enough.
  releaseHeld();
  // Delayed messages leave in order (the delay is the same for all of one event).
  while (!held_.empty() && held_.front().release <= now) {
    Held h = std::move(held_.front());
    held_.pop_front();
    forward(h.to, h.tag, std::move(h.bytes), std::move(h.done), h.duplicate);
  }
  int ran = 0;
  if (!ready_.empty()) {
    std::deque<std::function<void()>> batch;
    batch.swap(ready_);
    for (auto& fn : batch) fn();
    ran = static_cast<int>(batch.size());
    until = now;  // something ran: do not wait for more
  }
  if (!held_.empty()) until = std::min(until, held_.front().release);
  auto inner = inner_.progress(until);
  if (!inner) return inner.status();
  return ran + *inner;
}

}  // namespace starling::engine
