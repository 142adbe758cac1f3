// A Node's state beyond one round: the peers it counts lost, the algorithm's restart at a
// membership change with what the old one carries across, and the state a checkpoint saves.
// The round itself is in node.cc, the asynchronous mode in node_async.cc.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/node.h"

namespace starling::engine {

template <typename T>
void Node<T>::setLost(int peer) {
  auto it = std::lower_bound(lost_.begin(), lost_.end(), peer);
  if (it == lost_.end() || *it != peer) lost_.insert(it, peer);
}

template <typename T>
void Node<T>::setFound(int peer) {
  lost_.erase(std::remove(lost_.begin(), lost_.end(), peer), lost_.end());
  newlyLost_.erase(std::remove(newlyLost_.begin(), newlyLost_.end(), peer), newlyLost_.end());
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
  // What the replaced algorithm carries across a restart (optim::CarriedState), into its
  // successor: the same kind of algorithm on the same model, so it always fits.
  std::vector<double> carried;
  if (steps_.carry != nullptr) carried = steps_.carry->carried();
  algorithm_ = std::move(algorithm);
  steps_ = algorithm_->capabilities();
  if (steps_.carry != nullptr) (void)steps_.carry->carry(carried);
  kept_.clear();  // only the replaced algorithm read them
  newCodecStates(codecStates_.size());
}

template <typename T>
void Node<T>::newCodecStates(size_t streams) {
  codecStates_.clear();
  for (size_t k = 0; k < streams; ++k) codecStates_.push_back(codec_->newState(messageSize_));
}

template <typename T>
core::Status Node<T>::setCodecStreams(size_t streams) {
  streams = std::max<size_t>(1, streams);
  if (streams > 1 && receiverStateful_) {
    return core::failedPrecondition(
        "a codec whose receivers remember each sender's frames (lgc) keeps one sequence of "
        "frames; it cannot take " + std::to_string(streams) + " streams (fragments)");
  }
  newCodecStates(streams);
  return core::Status::ok();
}

template <typename T>
std::vector<double> Node<T>::carriedState() const {
  return steps_.carry != nullptr ? steps_.carry->carried() : std::vector<double>();
}

template <typename T>
core::Status Node<T>::carryState(std::span<const double> values) {
  if (values.empty()) return core::Status::ok();
  if (steps_.carry == nullptr) {
    return core::invalidArgument(std::to_string(values.size()) +
                                 " values to carry into an algorithm that keeps none");
  }
  return steps_.carry->carry(values);
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
      if (peer >= (uint64_t{1} << 30))
        return v.fail("checkpoint: node/lost holds rank " + std::to_string(peer));
      setLost(static_cast<int>(peer));
    }
  }
  {
    core::StateVisitor::Scope scope(v, "codec_rng");
    codecRng_.visitState(v);
  }
  // Stream 0's state as "codec_state" (as before streams), the others as "codec_state_<k>".
  bool hasCodecState = codecStates_[0] != nullptr;
  v.flag("has_codec_state", hasCodecState);
  if (v.failed()) return;
  if (hasCodecState != (codecStates_[0] != nullptr)) {
    return v.fail(std::string("checkpoint: the saved node ") +
                  (hasCodecState ? "has a codec stream state and this one has none"
                                 : "has no codec stream state and this one has one") +
                  " (another compression?)");
  }
  for (size_t k = 0; k < codecStates_.size() && codecStates_[k]; ++k) {
    core::StateVisitor::Scope scope(
        v, k == 0 ? std::string("codec_state") : "codec_state_" + std::to_string(k));
    codecStates_[k]->visitState(v);
  }
  core::StateVisitor::Scope scope(v, "algorithm");
  algorithm_->visitState(v);
}

#define STARLING_NODE_STATE(T)                                                   \
  template void Node<T>::setLost(int);                                           \
  template void Node<T>::setFound(int);                                          \
  template bool Node<T>::isLost(int) const;                                      \
  template std::vector<int> Node<T>::takeNewlyLost();                            \
  template std::string Node<T>::lostWhy(int) const;                              \
  template void Node<T>::restartAlgorithm(std::unique_ptr<optim::Algorithm<T>>); \
  template std::vector<double> Node<T>::carriedState() const;                    \
  template core::Status Node<T>::carryState(std::span<const double>);            \
  template void Node<T>::visitState(core::StateVisitor&);
STARLING_NODE_STATE(float)
STARLING_NODE_STATE(double)
#undef STARLING_NODE_STATE

}  // namespace starling::engine
