#include "engine/node.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "compression/frame.h"
#include "core/within.h"

namespace starling::engine {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// Whether `values` lie within the frame `bytes`.
template <typename T>
bool inside(std::span<const T> values, const transport::SharedBytes& bytes) {
  if (!bytes || values.empty()) return false;
  const auto begin = reinterpret_cast<uintptr_t>(values.data());
  const auto frame = reinterpret_cast<uintptr_t>(bytes->data());
  return begin >= frame && begin + values.size_bytes() <= frame + bytes->size();
}

// The bound a model or message is checked against in T: max_abs, or T's largest value (inf is
// beyond it).
template <typename T>
T limitIn(double maxAbs) {
  return static_cast<T>(std::min<double>(maxAbs, std::numeric_limits<T>::max()));
}
}  // namespace

template <typename T>
Node<T>::Node(int rank, std::unique_ptr<optim::Algorithm<T>> algorithm,
              transport::Transport& transport, LogFn log, const compression::Compressor<T>* codec,
              uint64_t codecSeed, uint64_t codecSharedSeed)
    : rank_(rank), log_(std::move(log)), algorithm_(std::move(algorithm)), transport_(transport),
      codec_(codec), codecRng_(codecSeed), codecSharedSeed_(codecSharedSeed) {
  messageSize_ = algorithm_->messageSize();
  steps_ = algorithm_->capabilities();
  if (codec_ == nullptr) {
    auto identity = compression::createCompressor<T>(compression::CompressorSpec{});
    identity_ = std::move(*identity);  // the identity spec has no parameter to refuse
    codec_ = identity_.get();
  }
  // The codec's optional capabilities, asked for once.
  caps_ = codec_->capabilities();
  inPlace_ = caps_.inPlace != nullptr;
  // An algorithm that writes and reads its frames itself (optim::FrameMessages) has its own
  // codec: the node's stays the identity, unused but for naming a mismatched frame.
  assert(steps_.frames == nullptr || codec == nullptr);
  if (!inPlace_) {
    outgoing_.resize(messageSize_);
    ownDecoded_.resize(messageSize_);
  }
  newCodecStates(1);
  receiverStateful_ = caps_.receiver != nullptr;
  if (steps_.combined != nullptr && caps_.linear != nullptr) {
    accumulator_ = caps_.linear->newAccumulator(messageSize_);
    if (accumulator_) combined_.resize(messageSize_);
  }
}

template <typename T>
void Node<T>::configure(const Options& run, const topology::Graph* support, uint32_t channel) {
  setSupport(support);
  setDivergenceLimit(run.divergenceMaxAbs);
  setChannel(channel);
  if (run.maxStaleness) setAsynchronous(*run.maxStaleness);
}

template <typename T>
core::Status Node<T>::checkFinite(std::span<const T> values, const char* what,
                                  double maxAbs) const {
  // One branch-free pass (NaN fails the comparison); the slow search only when it failed.
  const T limit = limitIn<T>(maxAbs);
  if (core::allWithin(values, limit)) return core::Status::ok();
  size_t k = 0;
  while (k < values.size() && std::abs(values[k]) <= limit) ++k;
  const double v = static_cast<double>(values[k]);
  char detail[160];
  if (std::isfinite(v)) {
    std::snprintf(detail, sizeof detail, "%s coordinate %zu is %.3g, beyond divergence.max_abs %.3g",
                  what, k, v, maxAbs);
  } else {
    std::snprintf(detail, sizeof detail, "%s coordinate %zu is %s", what, k,
                  std::isnan(v) ? "nan" : (v > 0 ? "+inf" : "-inf"));
  }
  return core::diverged("diverged at round " + std::to_string(info_.round) + " (rank " +
                        std::to_string(rank_) + "): " + detail);
}

template <typename T>
core::Status Node<T>::checkAndSeal(std::span<std::byte> frame, std::span<T> payload,
                                   bool prepareBlocks) {
  // The message's finiteness check and the frame's CRC32C in one pass over the payload, a block
  // at a time while it is in L1, rather than two passes over d values. With `prepareBlocks` the
  // algorithm writes each block just before it is checked (optim::BlockPreparation), so the
  // message is written and read back in one pass too.
  constexpr size_t kBlock = 4096;
  const T limit = std::numeric_limits<T>::max();
  compression::Crc32c crc;
  const auto* begin = reinterpret_cast<const std::byte*>(payload.data());
  crc.update(frame.first(static_cast<size_t>(begin - frame.data())));
  bool ok = true;
  for (size_t b = 0; b < payload.size(); b += kBlock) {
    const auto block = payload.subspan(b, std::min(kBlock, payload.size() - b));
    // The algorithm may point at the same values where they are cheaper to read back.
    const std::span<const T> written =
        prepareBlocks ? steps_.blocks->prepareBlock(info_, b, block) : std::span<const T>(block);
    ok &= core::allWithin(written, limit);
    crc.update(std::as_bytes(written));
  }
  const auto* end = reinterpret_cast<const std::byte*>(payload.data() + payload.size());
  crc.update({end, static_cast<size_t>(frame.data() + frame.size() -
                                       compression::kFrameTrailerBytes - end)});
  if (!ok) return checkFinite(payload, "its message", kInf);
  compression::sealFrame(frame, crc.value());
  return core::Status::ok();
}

template <typename T>
core::Result<size_t> Node<T>::writeMessage(std::span<std::byte> frame) {
  if (steps_.frames != nullptr) {
    // The algorithm's own frame (a model in device memory): no values on the host to check
    // here; the model's check after the absorb catches a diverged model a round later.
    own_ = {};
    return steps_.frames->writeFrame(info_, frame);
  }
  if (inPlace_) {
    // The algorithm writes its message straight into the frame's payload (identity): no copy on
    // the way out, and the neighbours decode exactly what it wrote.
    const std::span<T> payload = caps_.inPlace->beginInPlace(messageSize_, frame);
    const bool inBlocks = steps_.blocks != nullptr;
    if (!inBlocks) algorithm_->prepare(info_, payload);
    STARLING_RETURN_IF_ERROR(checkAndSeal(frame, payload, inBlocks));
    own_ = payload;
    return frame.size();
  }
  // A lossy codec: the algorithm sees its own message exactly as the neighbours will decode it.
  // It writes its message into outgoing_, the node's own buffer, even where the codec's frame
  // goes into lent memory: nothing is lent to the algorithm.
  info_.messageLent = false;
  algorithm_->prepare(info_, outgoing_);
  STARLING_RETURN_IF_ERROR(checkFinite(outgoing_, "its message", kInf));
  // The codec measures the compression error as it writes ownDecoded_ when it can (while both
  // are in cache); otherwise one pass over the two here, with the same bits.
  compression::SeenError error;
  const compression::StreamContext ctx{info_.round, codecSharedSeed_, codecState(), &error};
  auto length = codec_->encodeInto(outgoing_, codecRng_, ctx, frame, ownDecoded_);
  if (!length) {
    return length.status().withContext("rank " + std::to_string(rank_) +
                                       " cannot decode its own frame");
  }
  own_ = ownDecoded_;
  if (!error.measured) {
    compression::SquaredErrorSum sum;
    sum.add(outgoing_.data(), ownDecoded_.data(), messageSize_);
    error = sum.result();
  }
  if (error.normSq > 0) {
    compressionErrorSum_ += error.errorSq / error.normSq;
    ++compressionErrorCount_;
  }
  return length;
}

template <typename T>
core::Status Node<T>::startAlgorithm(uint64_t round, double stepSize) {
  if (inRound_) return core::failedPrecondition("startAlgorithm during a round");
  info_ = optim::RoundInfo{round, stepSize, 1.0, rank_};
  if (steps_.start != nullptr && steps_.start->needsStart()) steps_.start->start(info_);
  return checkFinite(algorithm_->model(), "its model", divergenceLimit_);
}

template <typename T>
core::Status Node<T>::startRound(uint64_t round, const topology::RoundTopology& topology,
                                 double stepSize,
                                 transport::Clock::time_point deadline) {
  if (inRound_) return core::failedPrecondition("startRound called twice without finishRound");
  inRound_ = true;
  computedDuringExchange_ = false;
  const topology::MixingRow& row = topology.weights.rows[rank_];
  info_ = optim::RoundInfo{round, stepSize, row.self, rank_};
  if (!algorithm_->exchangesIn(round)) {
    // A round without messages (Algorithm::exchangesIn): the local work alone; finishRound
    // absorbs it with no neighbours.
    assert(!accumulator_);
    algorithm_->prepare(info_, {});
    own_ = {};
    slots_.clear();
    pending_ = 0;
    sendStatus_ = core::Status::ok();
    return core::Status::ok();
  }

  // One frame, in memory the transport sends without copying (shared memory its neighbours map)
  // when it lends some, in a pooled buffer otherwise; the codec writes it there directly.
  const size_t bound = steps_.frames != nullptr ? steps_.frames->maxFrameBytes()
                                                : codec_->maxEncodedBytes(messageSize_);
  transport::SharedBytes message;
  std::span<std::byte> bytes;
  std::shared_ptr<transport::Bytes> pooled;
  if (auto out = transport_.allocate(bound)) {
    bytes = out->bytes;
    message = std::move(out->message);
  } else {
    pooled = framePool_.acquire(bound);
    bytes = *pooled;
  }
  info_.messageLent = pooled == nullptr;
  auto length = writeMessage(bytes);
  info_.messageLent = false;
  if (!length) return length.status();
  if (pooled) {
    pooled->resize(*length);  // shrinks in place: the vector is the message
    message = std::move(pooled);
  } else if (*length < bytes.size()) {
    message = message.first(*length);
  }
  if (accumulator_) {
    accumulator_->reset();
    STARLING_RETURN_IF_ERROR(accumulator_->add(*message, row.self));
  }
  ownFrame_ = message;

  if (async_) {
    if (!startedOnce_) {
      for (const auto& e : row.peers) slots_.push_back(Slot{e.peer, e.weight, nullptr, {}, {}, {}});
      scratch_.resize(slots_.size());
      startedOnce_ = true;
    }
    sendStatus_ = core::Status::ok();
    tag_ = transport::Tag{round, channel_};
    deadline_ = deadline;
    // How long a receive for a neighbour within the bound waits before it is asked for again; at
    // least 100 ms, so that a deadline already past cannot make a timeout and its new receive
    // chase each other inside one progress() call.
    receiveWait_ = std::max<transport::Clock::duration>(std::chrono::milliseconds(100),
                                                        deadline - transport::Clock::now());
    for (const Slot& slot : slots_) {
      const int peer = slot.peer;
      bytesSent_ += message->size();
      ++sendsInFlight_;
      // A failed send does not fail the round: without a barrier a neighbour that has finished
      // its rounds may have left while this node still sends it its last ones, which it no
      // longer needs. A neighbour that is really gone fails the round where its message is
      // needed and does not come (the receive's deadline).
      transport_.send(peer, tag_, message,
                      [this, alive = std::weak_ptr<int>(alive_)](const core::Status&) {
                        if (!alive.expired()) --sendsInFlight_;
                      });
    }
    // Counted before any receive is posted: a message already in the transport may complete
    // its receive at once, and it must find the count it decrements.
    pending_ = 0;
    const int64_t need = neededRound();
    for (const Slot& slot : slots_) {
      // A neighbour whose receive already failed (it went away) fails the round at once.
      if (slot.newest < need && slot.status.isOk()) ++pending_;
    }
    for (size_t s = 0; s < slots_.size(); ++s) postNextAsyncReceive(s);
    return core::Status::ok();
  }

  slots_.clear();
  if (support_ != nullptr && algorithm_->tracksNeighbors()) {
    for (int peer : support_->neighbors(rank_)) {
      double w = 0.0;
      for (const auto& e : row.peers) {
        if (e.peer == peer) w = e.weight;
      }
      slots_.push_back(Slot{peer, w, nullptr, {}, {}, {}});
    }
  } else {
    for (const auto& e : row.peers) slots_.push_back(Slot{e.peer, e.weight, nullptr, {}, {}, {}});
  }
  if (scratch_.size() < slots_.size()) scratch_.resize(slots_.size());
  pending_ = slots_.size();
  sendStatus_ = core::Status::ok();
  tag_ = transport::Tag{round, channel_};
  deadline_ = deadline;
  for (size_t s = 0; s < slots_.size(); ++s) {
    const int peer = slots_[s].peer;
    if (isLost(peer)) {
      slots_[s].standIn = true;
      --pending_;
      continue;
    }
    bytesSent_ += message->size();
    ++sendsInFlight_;
    transport_.send(peer, tag_, message, [this, peer](const core::Status& st) {
      --sendsInFlight_;
      if (!st.isOk() && tolerateLoss_ && st.code() != core::StatusCode::kCancelled) {
        // Its message, if it ever comes, is awaited until the deadline; the neighbour is lost
        // either way (finishRound).
        if (!isLost(peer)) {
          setLost(peer);
          newlyLost_.push_back(peer);
          lostWhy_[peer] = "send failed: " + st.message();
        }
        return;
      }
      if (!st.isOk() && sendStatus_.isOk()) {
        sendStatus_ = st.withContext("send to rank " + std::to_string(peer));
        lostNeighbour_ = peer;
      }
    });
    postReceive(s);
  }
  return core::Status::ok();
}

template <typename T>
void Node<T>::extend(int peer, transport::Clock::time_point until) {
  if (!inRound_) return;
  for (Slot& slot : slots_) {
    if (slot.peer == peer) slot.extendedUntil = std::max(slot.extendedUntil, until);
  }
}

template <typename T>
std::vector<int> Node<T>::awaited() const {
  std::vector<int> out;
  if (!inRound_ || async_) return out;
  for (const Slot& slot : slots_) {
    if (!slot.standIn && !slot.bytes && slot.status.isOk() && !isLost(slot.peer)) {
      out.push_back(slot.peer);
    }
  }
  return out;
}

template <typename T>
void Node<T>::postReceive(size_t s) {
  postReceive(s, deadline_);
}

template <typename T>
void Node<T>::postReceive(size_t s, transport::Clock::time_point deadline) {
  transport_.recv(slots_[s].peer, tag_, deadline,
                  [this, s](const core::Status& st, transport::SharedBytes bytes) {
                    onMessage(s, st, std::move(bytes));
                  });
}

template <typename T>
core::Result<std::span<const T>> Node<T>::decodeMessage(size_t s,
                                                        const transport::SharedBytes& bytes) {
  // A frame the transport vouches for (read out of the sender's shared memory, or under a
  // verified MAC) need not be read a second time for its CRC (identity then reads it in place);
  // everything else about it is checked.
  const auto checksum =
      bytes.intact() ? compression::Checksum::kSkip : compression::Checksum::kVerify;
  if (receiverStateful_) {
    auto& state = receiverStates_[slots_[s].peer];
    if (!state) state = caps_.receiver->newReceiverState(messageSize_);
    return caps_.receiver->decodeFrom(*bytes, messageSize_, scratch_[s], checksum, state.get());
  }
  return codec_->decodeView(*bytes, messageSize_, scratch_[s], checksum);
}

template <typename T>
void Node<T>::noteMismatch(Slot& slot, const transport::SharedBytes& bytes) {
  if (auto view = compression::parseFrame(*bytes);
      view && (view->elementCount != messageSize_ ||
               (inPlace_ && view->elementType != compression::elementTypeOf<T>()))) {
    slot.mismatch =
        "rank " + std::to_string(slot.peer) + " sent " + std::to_string(view->elementCount) +
        " values" +
        (view->elementType == compression::ElementType::kFloat32 ? " (float32)" : " (float64)") +
        " where rank " + std::to_string(rank_) + " expects " + std::to_string(messageSize_) +
        (std::is_same_v<T, float> ? " (float32)" : " (float64)") +
        ": the peers' models differ in size or type";
  }
}

template <typename T>
void Node<T>::onMessage(size_t s, const core::Status& st, transport::SharedBytes bytes) {
  Slot& slot = slots_[s];
  if (st.code() == core::StatusCode::kTimeout && slot.extendedUntil > transport::Clock::now()) {
    postReceive(s, slot.extendedUntil);  // the neighbour said it is alive: wait on
    return;
  }
  if (st.isOk()) {
    // With an accumulator the frame is only checked now and added in peer order at the end of
    // the round, so the sum never depends on arrival order.
    core::Status valid = core::Status::ok();
    if (accumulator_) {
      valid = accumulator_->check(*bytes);
    } else if (steps_.frames != nullptr) {
      valid = steps_.frames->checkFrame(*bytes);
    } else {
      auto values = decodeMessage(s, bytes);
      if (values) slot.values = *values;
      valid = values.status();
    }
    if (!valid.isOk()) {
      ++corruptMessages_;
      // A frame that is whole but of another size or type is most likely the neighbour's own
      // (its parameter buffer differs from ours: a trainer bug), but it could also be a forgery,
      // so it never fails the round by itself; it only explains the timeout if nothing else comes.
      noteMismatch(slot, bytes);
      if (!slot.mismatch.empty() && bytes.intact()) {
        // ... unless the transport vouches that the neighbour sent exactly these bytes (a
        // verified MAC, or its own shared memory): then the sizes really differ, and waiting out
        // the round timeout would only delay saying so.
        slot.status = core::invalidArgument(
            "rank " + std::to_string(slot.peer) + "'s own frame (the transport vouches for it)");
        slot.bytes = std::move(bytes);
        --pending_;
        return;
      }
      if (log_) {
        log_("rank " + std::to_string(rank_) + ": rejected a message claiming to be from rank " +
             std::to_string(slot.peer) + " for round " + std::to_string(tag_.round) + ": " +
             valid.message());
      }
      postReceive(s);  // the genuine message may still come before the deadline
      return;
    }
  }
  slot.status = st;
  slot.bytes = std::move(bytes);
  --pending_;
}

template <typename T>
void Node<T>::computeDuringExchange(const std::function<void()>& poll) {
  if (!inRound_ || computedDuringExchange_ || steps_.overlap == nullptr) return;
  computedDuringExchange_ = true;
  steps_.overlap->computeDuringExchange(poll);
}

template <typename T>
core::Status Node<T>::finishRound() {
  if (!inRound_) return core::failedPrecondition("finishRound without startRound");
  if (!roundComplete()) return core::failedPrecondition("finishRound before the round completed");
  computeDuringExchange([] {});
  inRound_ = false;
  STARLING_RETURN_IF_ERROR(sendStatus_);
  if (async_) return finishAsyncRound();
  messages_.clear();
  for (Slot& slot : slots_) {
    const bool lossLike = slot.status.code() == core::StatusCode::kTimeout ||
                          slot.status.code() == core::StatusCode::kPeerGone ||
                          slot.status.code() == core::StatusCode::kUnavailable;
    if (!slot.standIn && !slot.status.isOk() && tolerateLoss_ && lossLike &&
        slot.mismatch.empty()) {
      if (!isLost(slot.peer)) {
        setLost(slot.peer);
        newlyLost_.push_back(slot.peer);
        lostWhy_[slot.peer] = slot.status.message();
      }
      slot.standIn = true;
    }
    if (slot.standIn) {
      slot.status = core::Status::ok();
      slot.bytes = ownFrame_;
      slot.values = own_;
    }
  }
  for (const Slot& slot : slots_) {
    if (!slot.status.isOk()) {
      lostNeighbour_ = slot.peer;
      if (!slot.mismatch.empty()) {
        // The receive's own status (a timeout: the mismatch is why, not a proof), or
        // kInvalidArgument when the transport vouched for the frame (a proof).
        return core::Status(slot.status.code(), "round " + std::to_string(info_.round) + ": " +
                                                    slot.mismatch + " (" + slot.status.message() +
                                                    ")");
      }
      return slot.status.withContext("round " + std::to_string(info_.round) +
                                     ", message from rank " + std::to_string(slot.peer));
    }
    messages_.push_back(optim::NeighborMessage<T>{slot.peer, slot.weight, slot.values});
  }
  // The frames may outlive the round where every value absorb reads lies in them (no decode
  // copy in scratch_, no lossy own_ in ownDecoded_, which the next round rewrites).
  info_.messagesKept = !accumulator_ && inside(own_, ownFrame_) &&
                       std::all_of(slots_.begin(), slots_.end(), [](const Slot& slot) {
                         return inside(slot.values, slot.bytes);
                       });
  const core::Status absorbed = absorbMessages();
  // The absorb replaced whatever the algorithm read from the previous round's frames.
  kept_.clear();
  if (info_.messagesKept && algorithm_->holdsMessages()) {
    kept_.push_back(ownFrame_);
    for (const Slot& slot : slots_) kept_.push_back(slot.bytes);
  }
  info_.messagesKept = false;
  STARLING_RETURN_IF_ERROR(absorbed);
  if (receiverStateful_) {
    // The codec's end of round (Compressor::endRound), with the states of the neighbours heard
    // from, in peer order.
    std::vector<compression::CodecState*> heard;
    for (const Slot& slot : slots_) {
      if (slot.standIn) continue;
      auto it = receiverStates_.find(slot.peer);
      if (it != receiverStates_.end()) heard.push_back(it->second.get());
    }
    const compression::StreamContext ctx{info_.round, codecSharedSeed_, codecState()};
    caps_.receiver->endRound(ctx, heard);
  }
  for (Slot& slot : slots_) slot.bytes.reset();  // the next round needs none (kept_ aside)
  ownFrame_.reset();
  return core::Status::ok();
}

template <typename T>
core::Status Node<T>::absorbMessages() {
  if (steps_.frames != nullptr) {
    std::vector<optim::NeighborFrame> frames;
    frames.reserve(slots_.size());
    for (const Slot& slot : slots_) frames.push_back({slot.peer, slot.weight, *slot.bytes});
    auto within = steps_.frames->absorbFrames(info_, *ownFrame_, frames, divergenceLimit_);
    if (!within) return within.status().withContext("round " + std::to_string(info_.round));
    // model() copies the model to the host only here, to name the coordinate.
    if (!*within) return checkFinite(algorithm_->model(), "its model", divergenceLimit_);
    return core::Status::ok();
  }
  if (accumulator_) {
    for (const Slot& slot : slots_) {
      STARLING_RETURN_IF_ERROR(accumulator_->add(*slot.bytes, slot.weight)
                                   .withContext("round " + std::to_string(info_.round) +
                                                ", message from rank " +
                                                std::to_string(slot.peer)));
    }
    accumulator_->finish(combined_);
  }
  // The model's divergence check, inside the algorithm's own last pass over it where it has one
  // (Algorithm::absorbWithin); checkFinite finds and names the coordinate only when it failed.
  const T limit = limitIn<T>(divergenceLimit_);
  bool within;
  if (accumulator_) {
    steps_.combined->absorbCombined(info_, own_, combined_);
    within = core::allWithin(algorithm_->model(), limit);
  } else {
    within = algorithm_->absorbWithin(info_, own_, messages_, limit);
  }
  if (!within) {
    STARLING_RETURN_IF_ERROR(checkFinite(algorithm_->model(), "its model", divergenceLimit_));
  }
  return core::Status::ok();
}

template class Node<float>;
template class Node<double>;

}  // namespace starling::engine
