// Node's asynchronous mode (Node::setAsynchronous, docs/algorithms.md §26): one receive posted
// per neighbour for its next round, the newest frame of each kept, and a round that waits only for
// neighbours more than max_staleness rounds behind. The synchronous round is in node.cc.
#include <algorithm>
#include <cassert>
#include <string>

#include "engine/node.h"

namespace starling::engine {

template <typename T>
void Node<T>::setAsynchronous(uint64_t maxStaleness) {
  assert(steps_.frames == nullptr);  // (refused by its callers: optim::FrameMessages)
  async_ = true;
  maxStaleness_ = maxStaleness;
}

template <typename T>
int64_t Node<T>::newestRound(int peer) const {
  for (const Slot& slot : slots_) {
    if (slot.peer == peer) return slot.newest;
  }
  return -1;
}

template <typename T>
int64_t Node<T>::neededRound() const {
  // Round 0's messages are always awaited: before them a neighbour has nothing to mix.
  const uint64_t r = tag_.round;
  return r > maxStaleness_ ? static_cast<int64_t>(r - maxStaleness_) : 0;
}

template <typename T>
void Node<T>::postNextAsyncReceive(size_t s) {
  Slot& slot = slots_[s];
  // With max_staleness 0 never a message from beyond the round in flight, so that round r mixes
  // exactly the round-r messages, as the synchronous round does (later ones wait in the
  // transport). Otherwise the newest that has come, also from a neighbour ahead of this node.
  if (slot.posted || !slot.status.isOk() ||
      (maxStaleness_ == 0 && slot.newest + 1 > static_cast<int64_t>(tag_.round))) {
    return;
  }
  const bool needed = inRound_ && slot.newest < neededRound();
  postAsyncReceive(s, needed ? deadline_ : transport::Clock::now() + receiveWait_);
}

template <typename T>
void Node<T>::postAsyncReceive(size_t s, transport::Clock::time_point deadline) {
  Slot& slot = slots_[s];
  slot.posted = true;
  const uint64_t round = static_cast<uint64_t>(slot.newest + 1);
  transport_.recv(slot.peer, transport::Tag{round, channel_}, deadline,
                  [this, s, round, alive = std::weak_ptr<int>(alive_)](
                      const core::Status& st, transport::SharedBytes bytes) {
                    if (alive.expired()) return;
                    onAsyncMessage(s, round, st, std::move(bytes));
                  });
}

template <typename T>
void Node<T>::onAsyncMessage(size_t s, uint64_t round, const core::Status& st,
                             transport::SharedBytes bytes) {
  Slot& slot = slots_[s];
  slot.posted = false;
  const bool needed = inRound_ && slot.newest < neededRound();
  const auto now = transport::Clock::now();
  if (st.isOk()) {
    core::Status valid = core::Status::ok();
    std::span<const T> values;
    if (accumulator_) {
      valid = accumulator_->check(*bytes);
    } else {
      // Decoded into spare_ first: a rejected frame must not overwrite the newest message held.
      auto decoded = codec_->decodeView(
          *bytes, messageSize_, spare_,
          bytes.intact() ? compression::Checksum::kSkip : compression::Checksum::kVerify);
      if (decoded) {
        values = *decoded;
        if (!spare_.empty() && values.data() == spare_.data()) spare_.swap(scratch_[s]);
      }
      valid = decoded.status();
    }
    if (!valid.isOk()) {
      ++corruptMessages_;
      noteMismatch(slot, bytes);
      if (log_) {
        log_("rank " + std::to_string(rank_) + ": rejected a message claiming to be from rank " +
             std::to_string(slot.peer) + " for round " + std::to_string(round) + ": " +
             valid.message());
      }
      postAsyncReceive(s, needed ? deadline_ : now + receiveWait_);  // the genuine one may come
      return;
    }
    slot.bytes = std::move(bytes);
    slot.values = values;
    slot.newest = static_cast<int64_t>(round);
    slot.mismatch.clear();
    if (needed && slot.newest >= neededRound()) --pending_;
    postNextAsyncReceive(s);
    return;
  }
  if (st.code() == core::StatusCode::kTimeout) {
    // Within the bound a neighbour is never waited for, so its silence is no error (yet).
    if (!needed) return postAsyncReceive(s, now + receiveWait_);
    if (now < deadline_) return postAsyncReceive(s, deadline_);
  }
  slot.status = st;
  if (needed) --pending_;
}

template <typename T>
core::Status Node<T>::finishAsyncRound() {
  messages_.clear();
  const int64_t need = neededRound();
  uint64_t stalest = 0;
  for (const Slot& slot : slots_) {
    if (slot.newest < need) {
      lostNeighbour_ = slot.peer;
      const std::string where =
          "round " + std::to_string(info_.round) + " (asynchronous, " + "needs round " +
          std::to_string(need) + " or later; has " +
          (slot.newest < 0 ? std::string("none") : "round " + std::to_string(slot.newest)) + ")";
      if (!slot.mismatch.empty()) {
        return core::Status(slot.status.code(),
                            where + ": " + slot.mismatch + " (" + slot.status.message() + ")");
      }
      const core::Status st =
          slot.status.isOk() ? core::timeout("no message by the round's deadline") : slot.status;
      return st.withContext(where + ", message from rank " + std::to_string(slot.peer));
    }
    if (slot.newest < static_cast<int64_t>(info_.round)) {
      stalest = std::max<uint64_t>(stalest, info_.round - static_cast<uint64_t>(slot.newest));
    }
    messages_.push_back(optim::NeighborMessage<T>{slot.peer, slot.weight, slot.values});
  }
  lastStaleness_ = stalest;
  maxStalenessSeen_ = std::max(maxStalenessSeen_, stalest);
  STARLING_RETURN_IF_ERROR(absorbMessages());
  ownFrame_.reset();  // the neighbours' newest messages stay: later rounds may mix them again
  return core::Status::ok();
}

// The members above, for the element types node.cc instantiates the class with.
#define STARLING_NODE_ASYNC(T)                                                              \
  template void Node<T>::setAsynchronous(uint64_t);                                         \
  template int64_t Node<T>::newestRound(int) const;                                         \
  template int64_t Node<T>::neededRound() const;                                            \
  template void Node<T>::postNextAsyncReceive(size_t);                                      \
  template void Node<T>::postAsyncReceive(size_t, transport::Clock::time_point);            \
  template void Node<T>::onAsyncMessage(size_t, uint64_t, const core::Status&,              \
                                        transport::SharedBytes);                            \
  template core::Status Node<T>::finishAsyncRound();
STARLING_NODE_ASYNC(float)
STARLING_NODE_ASYNC(double)
#undef STARLING_NODE_ASYNC

}  // namespace starling::engine
