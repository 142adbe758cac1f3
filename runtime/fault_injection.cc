#include "runtime/fault_injection.h"

#include <algorithm>

namespace starling::runtime {
namespace {
constexpr uint64_t kFaultSalt = 0x4641554c5453;  // "FAULTS"
}  // namespace

FaultInjector::FaultInjector(transport::Transport& inner, std::vector<FaultEvent> events,
                             uint64_t seed, uint32_t channel, bool realTime)
    : inner_(inner), events_(std::move(events)),
      rng_(core::deriveSeed(seed, kFaultSalt, static_cast<uint64_t>(inner.rank()))),
      channel_(channel), realTime_(realTime) {}

bool FaultInjector::wanted(const Scenario& s) {
  return std::any_of(s.faults.script.begin(), s.faults.script.end(),
                     [](const FaultEvent& e) { return e.kind != FaultEvent::Kind::kKill; });
}

bool FaultInjector::applies(const FaultEvent& e, int to, transport::Tag tag) const {
  if (e.kind == FaultEvent::Kind::kKill || tag.channel != channel_) return false;
  if (tag.round < e.fromRound || tag.round >= e.toRound) return false;
  if (e.linkA < 0) return true;
  const int from = inner_.rank();
  return (from == e.linkA && to == e.linkB) || (from == e.linkB && to == e.linkA);
}

void FaultInjector::send(int to, transport::Tag tag, transport::SharedBytes bytes,
                         transport::SendCallback done) {
  uint64_t delayMs = 0;
  for (const FaultEvent& e : events_) {
    if (!applies(e, to, tag)) continue;
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
  if (delayMs == 0) {
    inner_.send(to, tag, std::move(bytes), std::move(done));
    return;
  }
  held_.push_back(Held{transport::Clock::now() + std::chrono::milliseconds(delayMs), to, tag,
                       std::move(bytes), std::move(done)});
}

core::Result<int> FaultInjector::progress(transport::Clock::time_point until) {
  const auto now = transport::Clock::now();
  // Held messages leave in order (the delay is the same for all of one event).
  while (!held_.empty() && held_.front().release <= now) {
    Held h = std::move(held_.front());
    held_.pop_front();
    inner_.send(h.to, h.tag, std::move(h.bytes), std::move(h.done));
  }
  if (!held_.empty()) until = std::min(until, held_.front().release);
  return inner_.progress(until);
}

}  // namespace starling::runtime
