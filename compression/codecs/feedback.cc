// Error feedback (docs/algorithms.md §13; Karimireddy et al. 2019's EF, GRACE's ResidualMemory):
// the sender compresses p = C(e + v) and keeps the residual e <- e + v - p, so whatever a biased
// codec drops this round is sent in a later one. Sender-side only: the frame is the inner
// codec's, and receivers decode it as such.
#include <cassert>
#include <memory>
#include <string>
#include <vector>

#include "compression/codecs/codecs.h"

namespace starling::compression::codecs {
namespace {

template <typename T>
struct FeedbackState final : CodecState {
  std::vector<T> residual, compensated, sent;  // compensated and sent: scratch of one encode
  std::unique_ptr<CodecState> inner;
  void visitState(core::StateVisitor& v) override {
    v.fixed("residual", residual);
    bool hasInner = inner != nullptr;
    v.flag("has_inner", hasInner);
    if (v.failed()) return;
    if (hasInner != (inner != nullptr)) {
      return v.fail("checkpoint: error feedback's inner codec state is " +
                    std::string(hasInner ? "saved but this codec keeps none"
                                         : "missing"));
    }
    if (inner) {
      core::StateVisitor::Scope scope(v, "inner");
      inner->visitState(v);
    }
  }
};

template <typename T>
class ErrorFeedback final : public Compressor<T>, public ReceiverDecoding<T> {
 public:
  explicit ErrorFeedback(std::unique_ptr<Compressor<T>> inner)
      : inner_(std::move(inner)), innerCaps_(inner_->capabilities()) {}

  CodecId id() const override { return inner_->id(); }
  bool unbiased() const override { return inner_->unbiased(); }
  size_t maxEncodedBytes(size_t d) const override { return inner_->maxEncodedBytes(d); }

  // The first frame of a stream: the residual is zero, so this is the inner codec's frame.
  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    inner_->encode(x, rng, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    return inner_->decode(frame, out);
  }

  core::Result<std::span<const T>> decodeView(std::span<const std::byte> frame, size_t count,
                                              std::vector<T>& scratch,
                                              Checksum checksum) const override {
    return inner_->decodeView(frame, count, scratch, checksum);
  }

  std::unique_ptr<CodecState> newState(size_t d) const override {
    auto s = std::make_unique<FeedbackState<T>>();
    s->residual.assign(d, T(0));
    s->compensated.resize(d);
    s->sent.resize(d);
    s->inner = inner_->newState(d);
    return s;
  }

  void encodeStream(std::span<const T> v, core::Rng& rng, const StreamContext& ctx,
                    std::vector<std::byte>& out) const override {
    auto* s = dynamic_cast<FeedbackState<T>*>(ctx.state);
    assert(s != nullptr);
    (void)encodeSeen(v, rng, ctx, out, s->sent);
  }

  // The residual needs what the receivers see, and so does the caller: one decode serves both
  // (before, the engine decoded the frame a second time).
  core::Status encodeSeen(std::span<const T> v, core::Rng& rng, const StreamContext& ctx,
                          std::vector<std::byte>& out, std::span<T> seen) const override {
    auto* s = dynamic_cast<FeedbackState<T>*>(ctx.state);
    assert(s != nullptr && s->residual.size() == v.size() && seen.size() == v.size());
    for (size_t i = 0; i < v.size(); ++i) s->compensated[i] = s->residual[i] + v[i];
    const StreamContext innerCtx{ctx.round, ctx.sharedSeed, s->inner.get()};
    const core::Status st = inner_->encodeSeen(s->compensated, rng, innerCtx, out, seen);
    // A non-finite input: the frame is rejected downstream and the run fails; keep the residual
    // as it was rather than poisoning it.
    if (!st.isOk()) return st;
    for (size_t i = 0; i < v.size(); ++i) s->residual[i] = s->compensated[i] - seen[i];
    return st;
  }

  // The same with the inner codec writing into the caller's buffer: its `seen` is the residual's
  // p as well.
  core::Result<size_t> encodeInto(std::span<const T> v, core::Rng& rng, const StreamContext& ctx,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    auto* s = dynamic_cast<FeedbackState<T>*>(ctx.state);
    assert(s != nullptr && s->residual.size() == v.size() && seen.size() == v.size());
    for (size_t i = 0; i < v.size(); ++i) s->compensated[i] = s->residual[i] + v[i];
    const StreamContext innerCtx{ctx.round, ctx.sharedSeed, s->inner.get()};
    const core::Result<size_t> n = inner_->encodeInto(s->compensated, rng, innerCtx, out, seen);
    if (!n.isOk()) return n;  // the residual stays as it was, as in encodeSeen
    for (size_t i = 0; i < v.size(); ++i) s->residual[i] = s->compensated[i] - seen[i];
    return n;
  }

  // The frames are the inner codec's: its accumulator sums them, and its receiver state decodes
  // them (this codec's only to hand the inner codec its part of the stream state at endRound).
  // Never in place: the residual needs what the frame carries.
  CodecCapabilities<T> capabilities() const override {
    return {.linear = innerCaps_.linear, .receiver = innerCaps_.receiver ? this : nullptr};
  }
  std::unique_ptr<CodecState> newReceiverState(size_t d) const override {
    return inner_->newReceiverState(d);
  }
  core::Result<std::span<const T>> decodeFrom(std::span<const std::byte> frame, size_t count,
                                              std::vector<T>& scratch, Checksum checksum,
                                              CodecState* sender) const override {
    return inner_->decodeFrom(frame, count, scratch, checksum, sender);
  }
  void endRound(const StreamContext& ctx, std::span<CodecState* const> heard) const override {
    auto* s = dynamic_cast<FeedbackState<T>*>(ctx.state);
    if (s == nullptr) return;
    const StreamContext innerCtx{ctx.round, ctx.sharedSeed, s->inner.get()};
    inner_->endRound(innerCtx, heard);
  }

 private:
  std::unique_ptr<Compressor<T>> inner_;
  CodecCapabilities<T> innerCaps_;
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeErrorFeedback(std::unique_ptr<Compressor<T>> inner) {
  assert(inner != nullptr);
  return std::make_unique<ErrorFeedback<T>>(std::move(inner));
}

template std::unique_ptr<Compressor<float>> makeErrorFeedback<float>(
    std::unique_ptr<Compressor<float>>);
template std::unique_ptr<Compressor<double>> makeErrorFeedback<double>(
    std::unique_ptr<Compressor<double>>);

}  // namespace starling::compression::codecs
