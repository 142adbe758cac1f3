#include "runtime/node.h"

#include <string>

#include "compression/frame.h"

namespace starling::runtime {

template <typename T>
Node<T>::Node(int rank, std::unique_ptr<optim::Algorithm<T>> algorithm,
              transport::Transport& transport)
    : rank_(rank), algorithm_(std::move(algorithm)), transport_(transport) {
  messageSize_ = algorithm_->messageSize();
}

template <typename T>
core::Status Node<T>::startRound(uint64_t round, const topology::RoundTopology& topology,
                                 double stepSize,
                                 transport::Clock::time_point deadline) {
  if (inRound_) return core::failedPrecondition("startRound called twice without finishRound");
  inRound_ = true;
  const topology::MixingRow& row = topology.weights.rows[rank_];
  info_ = optim::RoundInfo{round, stepSize, row.self};

  // The algorithm writes its message straight into the frame's payload: no copy on the way out.
  auto frame = std::make_shared<transport::Bytes>();
  const std::span<T> payload = compression::beginDense<T>(messageSize_, *frame);
  algorithm_->prepare(info_, payload);
  compression::sealFrame(*frame);
  own_ = payload;
  ownFrame_ = frame;

  slots_.clear();
  for (const auto& e : row.peers) slots_.push_back(Slot{e.peer, e.weight, nullptr, {}});
  pending_ = slots_.size();
  sendStatus_ = core::Status::ok();
  const transport::Tag tag{round, kModelChannel};
  for (size_t s = 0; s < slots_.size(); ++s) {
    const int peer = slots_[s].peer;
    bytesSent_ += frame->size();
    transport_.send(peer, tag, frame, [this, peer](const core::Status& st) {
      if (!st.isOk() && sendStatus_.isOk()) {
        sendStatus_ = st.withContext("send to rank " + std::to_string(peer));
      }
    });
    transport_.recv(peer, tag, deadline,
                    [this, s](const core::Status& st, transport::SharedBytes bytes) {
                      slots_[s].status = st;
                      slots_[s].bytes = std::move(bytes);
                      --pending_;
                    });
  }
  return core::Status::ok();
}

template <typename T>
core::Status Node<T>::finishRound() {
  if (!inRound_) return core::failedPrecondition("finishRound without startRound");
  if (pending_ != 0) return core::failedPrecondition("finishRound before the round completed");
  inRound_ = false;
  STARLING_RETURN_IF_ERROR(sendStatus_);
  if (scratch_.size() < slots_.size()) scratch_.resize(slots_.size());
  messages_.clear();
  for (size_t s = 0; s < slots_.size(); ++s) {
    Slot& slot = slots_[s];
    const std::string who = "round " + std::to_string(info_.round) + ", message from rank " +
                            std::to_string(slot.peer);
    if (!slot.status.isOk()) return slot.status.withContext(who);
    auto values = compression::decodeDense<T>(*slot.bytes, messageSize_, scratch_[s]);
    if (!values) {
      ++corruptMessages_;
      return values.status().withContext(who);
    }
    messages_.push_back(optim::NeighborMessage<T>{slot.peer, slot.weight, *values});
  }
  algorithm_->absorb(info_, own_, messages_);
  for (Slot& slot : slots_) slot.bytes.reset();  // release the frames before the next round
  ownFrame_.reset();
  return core::Status::ok();
}

template class Node<float>;
template class Node<double>;

}  // namespace starling::runtime
