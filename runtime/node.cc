#include "runtime/node.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "compression/frame.h"
#include "core/within.h"

namespace starling::runtime {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

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
  if (codec_) {
    outgoing_.resize(messageSize_);
    ownDecoded_.resize(messageSize_);
    codecState_ = codec_->newState(messageSize_);
    if (algorithm_->absorbsCombined()) {
      accumulator_ = codec_->newAccumulator(messageSize_);
      if (accumulator_) combined_.resize(messageSize_);
    }
  }
}

template <typename T>
void Node<T>::setLost(int peer) {
  auto it = std::lower_bound(lost_.begin(), lost_.end(), peer);
  if (it == lost_.end() || *it != peer) lost_.insert(it, peer);
}

template <typename T>
void Node<T>::setFound(int peer) {
  lost_.erase(std::remove(lost_.begin(), lost_.end(), peer), lost_.end());
  newlyLost_.erase(std::remove(newlyLost_.begin(), newlyLost_.end(), peer), newlyLost_.end());
  losing_.erase(std::remove(losing_.begin(), losing_.end(), peer), losing_.end());
  lostWhy_.erase(peer);
}

template <typename T>
bool Node<T>::isLost(int peer) const {
  return std::binary_search(lost_.begin(), lost_.end(), peer);
}

template <typename T>
std::vector<int> Node<T>::takeNewlyLost() {
  std::vector<int> out;
  out.swap(newlyLost_);
  return out;
}

template <typename T>
std::string Node<T>::lostWhy(int peer) const {
  auto it = lostWhy_.find(peer);
  return it == lostWhy_.end() ? std::string() : it->second;
}

template <typename T>
void Node<T>::restartAlgorithm(std::unique_ptr<optim::Algorithm<T>> algorithm) {
  algorithm_ = std::move(algorithm);
  if (codec_) codecState_ = codec_->newState(messageSize_);
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
core::Status Node<T>::checkAndSeal(std::span<std::byte> frame, std::span<const T> payload) const {
  // The message's finiteness check and the frame's CRC32C in one pass over the payload, a block
  // at a time while it is in L1, rather than two passes over d values.
  constexpr size_t kBlock = 4096;
  const T limit = std::numeric_limits<T>::max();
  compression::Crc32c crc;
  const auto* begin = reinterpret_cast<const std::byte*>(payload.data());
  crc.update(frame.first(static_cast<size_t>(begin - frame.data())));
  bool ok = true;
  for (size_t b = 0; b < payload.size(); b += kBlock) {
    const auto block = payload.subspan(b, std::min(kBlock, payload.size() - b));
    ok &= core::allWithin(block, limit);
    crc.update(std::as_bytes(block));
  }
  const auto* end = reinterpret_cast<const std::byte*>(payload.data() + payload.size());
  crc.update({end, static_cast<size_t>(frame.data() + frame.size() -
                                       compression::kFrameTrailerBytes - end)});
  if (!ok) return checkFinite(payload, "its message", kInf);
  compression::sealFrame(frame, crc.value());
  return core::Status::ok();
}

template <typename T>
core::Status Node<T>::startAlgorithm(uint64_t round, double stepSize) {
  if (inRound_) return core::failedPrecondition("startAlgorithm during a round");
  info_ = optim::RoundInfo{round, stepSize, 1.0};
  if (algorithm_->needsStart()) algorithm_->start(info_);
  return checkFinite(algorithm_->model(), "its model", divergenceLimit_);
}

template <typename T>
core::Status Node<T>::startRound(uint64_t round, const topology::RoundTopology& topology,
                                 double stepSize,
                                 transport::Clock::time_point deadline) {
  if (inRound_) return core::failedPrecondition("startRound called twice without finishRound");
  inRound_ = true;
  const topology::MixingRow& row = topology.weights.rows[rank_];
  info_ = optim::RoundInfo{round, stepSize, row.self};

  const size_t frameBytes = compression::denseFrameBytes<T>(messageSize_);
  transport::SharedBytes message;
  if (!codec_) {
    // The algorithm writes its message straight into the frame's payload: no copy on the way out.
    // The frame lives in memory the transport sends without copying (shared memory its
    // neighbours map) when it has some, in a pooled buffer otherwise.
    std::span<std::byte> bytes;
    if (auto out = transport_.allocate(frameBytes)) {
      bytes = out->bytes;
      message = std::move(out->message);
    } else {
      auto frame = framePool_.acquire(frameBytes);
      bytes = *frame;
      message = std::move(frame);
    }
    const std::span<T> payload = compression::beginDense<T>(messageSize_, bytes);
    algorithm_->prepare(info_, payload);
    STARLING_RETURN_IF_ERROR(checkAndSeal(bytes, payload));
    own_ = payload;
  } else {
    std::shared_ptr<transport::Bytes> frame = framePool_.acquire(frameBytes);
    // Lossy codec: the algorithm sees its own message exactly as the neighbours will decode it.
    algorithm_->prepare(info_, outgoing_);
    STARLING_RETURN_IF_ERROR(checkFinite(outgoing_, "its message", kInf));
    const compression::StreamContext ctx{round, codecSharedSeed_, codecState_.get()};
    STARLING_RETURN_IF_ERROR(codec_->encodeSeen(outgoing_, codecRng_, ctx, *frame, ownDecoded_)
                                 .withContext("rank " + std::to_string(rank_) +
                                              " cannot decode its own frame"));
    own_ = ownDecoded_;
    double err = 0, norm = 0;
    for (size_t k = 0; k < messageSize_; ++k) {
      const double v = static_cast<double>(outgoing_[k]);
      const double e = static_cast<double>(ownDecoded_[k]) - v;
      err += e * e;
      norm += v * v;
    }
    if (norm > 0) {
      compressionErrorSum_ += err / norm;
      ++compressionErrorCount_;
    }
    if (accumulator_) {
      accumulator_->reset();
      STARLING_RETURN_IF_ERROR(accumulator_->add(*frame, row.self));
    }
    message = std::move(frame);
  }
  ownFrame_ = message;

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
    const bool losing = std::find(losing_.begin(), losing_.end(), peer) != losing_.end();
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
    if (losing) {
      slots_[s].standIn = true;
      --pending_;
      continue;
    }
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
  if (!codec_) {
    // A frame the transport vouches for (read out of the sender's shared memory, or under a
    // verified MAC) is not read a second time for its CRC; everything else about it is checked.
    return compression::decodeDense<T>(*bytes, messageSize_, scratch_[s],
                                       bytes.intact() ? compression::Checksum::kSkip
                                                      : compression::Checksum::kVerify);
  }
  scratch_[s].resize(messageSize_);
  STARLING_RETURN_IF_ERROR(codec_->decode(*bytes, scratch_[s]));
  return std::span<const T>(scratch_[s]);
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
      if (auto view = compression::parseFrame(*bytes);
          view && (view->elementCount != messageSize_ ||
                   (!codec_ && view->elementType != compression::elementTypeOf<T>()))) {
        slot.mismatch = "rank " + std::to_string(slot.peer) + " sent " +
                        std::to_string(view->elementCount) + " values" +
                        (view->elementType == compression::ElementType::kFloat32 ? " (float32)"
                                                                                 : " (float64)") +
                        " where rank " + std::to_string(rank_) + " expects " +
                        std::to_string(messageSize_) +
                        (std::is_same_v<T, float> ? " (float32)" : " (float64)") +
                        ": the peers' models differ in size or type";
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
core::Status Node<T>::finishRound() {
  if (!inRound_) return core::failedPrecondition("finishRound without startRound");
  if (!roundComplete()) return core::failedPrecondition("finishRound before the round completed");
  inRound_ = false;
  STARLING_RETURN_IF_ERROR(sendStatus_);
  messages_.clear();
  for (int peer : losing_) setLost(peer);
  losing_.clear();
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
        // Still the receive's own status (a timeout): the mismatch is why, not a proof.
        return core::Status(slot.status.code(), "round " + std::to_string(info_.round) + ": " +
                                                    slot.mismatch + " (" + slot.status.message() +
                                                    ")");
      }
      return slot.status.withContext("round " + std::to_string(info_.round) +
                                     ", message from rank " + std::to_string(slot.peer));
    }
    messages_.push_back(optim::NeighborMessage<T>{slot.peer, slot.weight, slot.values});
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
  const bool within = accumulator_
                          ? algorithm_->absorbCombinedWithin(info_, own_, combined_, limit)
                          : algorithm_->absorbWithin(info_, own_, messages_, limit);
  if (!within) {
    STARLING_RETURN_IF_ERROR(checkFinite(algorithm_->model(), "its model", divergenceLimit_));
  }
  for (Slot& slot : slots_) slot.bytes.reset();  // release the frames before the next round
  ownFrame_.reset();
  return core::Status::ok();
}

template <typename T>
void Node<T>::visitState(core::StateVisitor& v) {
  if (inRound_) return v.fail("a node's state can only be saved between rounds");
  v.scalar("bytes_sent", bytesSent_);
  v.scalar("corrupt_messages", corruptMessages_);
  v.scalar("compression_error_sum", compressionErrorSum_);
  v.scalar("compression_error_count", compressionErrorCount_);
  std::vector<uint64_t> lost(lost_.begin(), lost_.end());
  v.sized("lost", lost);
  if (v.loading() && !v.failed()) {
    lost_.clear();
    for (uint64_t peer : lost) {
      if (peer >= (uint64_t{1} << 30)) return v.fail("checkpoint: node/lost holds rank " +
                                                     std::to_string(peer));
      setLost(static_cast<int>(peer));
    }
  }
  {
    core::StateVisitor::Scope scope(v, "codec_rng");
    codecRng_.visitState(v);
  }
  bool hasCodecState = codecState_ != nullptr;
  v.flag("has_codec_state", hasCodecState);
  if (v.failed()) return;
  if (hasCodecState != (codecState_ != nullptr)) {
    return v.fail(std::string("checkpoint: the saved node ") +
                  (hasCodecState ? "has a codec stream state and this one has none"
                                 : "has no codec stream state and this one has one") +
                  " (another compression?)");
  }
  if (codecState_) {
    core::StateVisitor::Scope scope(v, "codec_state");
    codecState_->visitState(v);
  }
  core::StateVisitor::Scope scope(v, "algorithm");
  algorithm_->visitState(v);
}

template class Node<float>;
template class Node<double>;

}  // namespace starling::runtime
