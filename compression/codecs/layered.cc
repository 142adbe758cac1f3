// Layer-aware compression (docs/compression.md, "Layer-aware compression"): the model's tensors
// fall into groups, each with a codec of its own (the papers' uncompressed first and last layers,
// top-k elsewhere), and one frame, codec 14 (docs/wire_format.md), carries every group's complete
// inner frame. The decoder takes only its own group map: the layout is configuration both ends
// share, like the element count.
#include <algorithm>
#include <cassert>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

constexpr size_t kLayeredParamsBytes = 8;  // u32 groups, u32 segments
constexpr size_t kLengthBytes = 8;  // the u64 before each inner frame

constexpr size_t pad8(size_t n) { return (n + 7) & ~size_t{7}; }

template <typename T>
struct LayeredState final : CodecState {
  std::vector<std::unique_ptr<CodecState>> inner;  // one per group; null for a stateless codec
  std::vector<T> gathered, seen;                   // scratch of one encode (scattered groups)
  void visitState(core::StateVisitor& v) override {
    uint64_t groups = inner.size();
    v.scalar("groups", groups);
    if (v.failed()) return;
    if (groups != inner.size()) {
      return v.fail("checkpoint: the layered codec's state has " + std::to_string(groups) +
                    " groups; this codec has " + std::to_string(inner.size()));
    }
    for (size_t g = 0; g < inner.size(); ++g) {
      core::StateVisitor::Scope scope(v, "group_" + std::to_string(g));
      bool has = inner[g] != nullptr;
      v.flag("has_state", has);
      if (v.failed()) return;
      if (has != (inner[g] != nullptr)) {
        return v.fail("checkpoint: group " + std::to_string(g) + "'s codec state is " +
                      (has ? "saved but this codec keeps none" : "missing"));
      }
      if (inner[g]) inner[g]->visitState(v);
    }
  }
};

// What a receiver keeps per sender for the groups whose codec needs it (LGC's decoder
// versions); null for the other groups.
struct LayeredReceiverState final : CodecState {
  std::vector<std::unique_ptr<CodecState>> inner;
  void visitState(core::StateVisitor& v) override {
    for (size_t g = 0; g < inner.size(); ++g) {
      if (!inner[g]) continue;
      core::StateVisitor::Scope scope(v, "group_" + std::to_string(g));
      inner[g]->visitState(v);
    }
  }
};

template <typename T>
class Layered final : public Compressor<T>, public ReceiverDecoding<T> {
 public:
  Layered(std::vector<std::unique_ptr<Compressor<T>>> inner, std::vector<LayeredSegment> segments)
      : inner_(std::move(inner)), segments_(std::move(segments)), groups_(inner_.size()) {
    uint64_t offset = 0;
    for (const LayeredSegment& s : segments_) {
      assert(s.length > 0 && s.group < groups_.size());
      groups_[s.group].pieces.push_back({offset, s.length});
      groups_[s.group].count += s.length;
      offset += s.length;
      appendVarint(map_, s.length);
      appendVarint(map_, s.group);
    }
    total_ = offset;
    for (size_t g = 0; g < groups_.size(); ++g) {
      assert(!groups_[g].pieces.empty());
      groups_[g].bound = inner_[g]->maxEncodedBytes(groups_[g].count);
      groups_[g].receiver = inner_[g]->capabilities().receiver != nullptr;
      receiver_ = receiver_ || groups_[g].receiver;
      if (groups_[g].pieces.size() > 1) widest_ = std::max<size_t>(widest_, groups_[g].count);
    }
    storeLe<uint32_t>(params_, static_cast<uint32_t>(groups_.size()));
    storeLe<uint32_t>(params_ + 4, static_cast<uint32_t>(segments_.size()));
  }

  CodecId id() const override { return CodecId::kLayered; }

  bool unbiased() const override {
    return std::all_of(inner_.begin(), inner_.end(), [](const auto& c) { return c->unbiased(); });
  }

  // The codec is built for vectors of total_ elements; the bound is for those.
  size_t maxEncodedBytes(size_t /*d*/) const override {
    size_t n = kFrameHeaderBytes + pad8(kLayeredParamsBytes) + pad8(map_.size()) + kFrameTrailerBytes;
    for (const Group& g : groups_) n += kLengthBytes + pad8(g.bound);
    return n;
  }

  // Each group's inner encode() (a fresh stream for every group), as the inner codecs define it.
  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    toVector(out, [&](std::span<std::byte> span) {
      std::vector<T> gathered(widest_);
      return assemble(x, span, {}, gathered, {},
                      [&](size_t g, std::span<const T> xg, std::span<std::byte> dst,
                          std::span<T>) -> core::Result<size_t> {
                        std::vector<std::byte> frame;
                        inner_[g]->encode(xg, rng, frame);
                        if (frame.size() > dst.size()) return tooSmall(dst.size());
                        std::memcpy(dst.data(), frame.data(), frame.size());
                        return frame.size();
                      });
    });
  }

  void encodeStream(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                    std::vector<std::byte>& out) const override {
    std::vector<T> seen(x.size());
    (void)encodeSeen(x, rng, ctx, out, seen);
  }

  core::Status encodeSeen(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                          std::vector<std::byte>& out, std::span<T> seen) const override {
    core::Status st;
    toVector(out, [&](std::span<std::byte> span) {
      auto n = encodeInto(x, rng, ctx, span, seen);
      if (!n.isOk()) st = n.status();
      return n;
    });
    return st;
  }

  // Every group's inner encodeInto writes its frame straight into `out`, behind its length, and
  // its part of `seen` (a scattered group's through the state's scratch).
  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng& rng, const StreamContext& ctx,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    assert(seen.size() == x.size());
    auto* s = dynamic_cast<LayeredState<T>*>(ctx.state);
    std::vector<T> localGathered, localSeen;
    if (s == nullptr) {
      localGathered.resize(widest_);
      localSeen.resize(widest_);
    }
    std::span<T> gathered = s ? std::span<T>(s->gathered) : std::span<T>(localGathered);
    std::span<T> seenScratch = s ? std::span<T>(s->seen) : std::span<T>(localSeen);
    return assemble(x, out, seen, gathered, seenScratch,
                    [&](size_t g, std::span<const T> xg, std::span<std::byte> dst,
                        std::span<T> seenG) -> core::Result<size_t> {
                      const StreamContext inner{ctx.round, ctx.sharedSeed,
                                                s ? s->inner[g].get() : nullptr, nullptr};
                      return inner_[g]->encodeInto(xg, rng, inner, dst, seenG);
                    });
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    // Into a copy first: a group that fails to decode must leave `out` untouched.
    std::vector<T> values(out.size());
    STARLING_RETURN_IF_ERROR(decodeInto(frame, values, Checksum::kVerify, nullptr));
    std::copy(values.begin(), values.end(), out.begin());
    return core::Status::ok();
  }

  core::Result<std::span<const T>> decodeView(std::span<const std::byte> frame, size_t count,
                                              std::vector<T>& scratch,
                                              Checksum checksum) const override {
    scratch.resize(count);
    STARLING_RETURN_IF_ERROR(decodeInto(frame, scratch, checksum, nullptr));
    return std::span<const T>(scratch);
  }

  // Receiver state only when a group's codec keeps it (LGC): the engine then decodes this
  // sender's frames with decodeFrom, which hands that group its part of the state. Never linear,
  // even when every group's codec is: the sum of layered frames would need an accumulator per
  // group over its own slice, which no algorithm has asked for yet; receivers decode each frame
  // instead.
  CodecCapabilities<T> capabilities() const override {
    return {.receiver = receiver_ ? this : nullptr};
  }
  std::unique_ptr<CodecState> newReceiverState(size_t /*d*/) const override {
    auto s = std::make_unique<LayeredReceiverState>();
    for (size_t g = 0; g < groups_.size(); ++g) {
      s->inner.push_back(groups_[g].receiver ? inner_[g]->newReceiverState(groups_[g].count)
                                             : nullptr);
    }
    return s;
  }

  core::Result<std::span<const T>> decodeFrom(std::span<const std::byte> frame, size_t count,
                                              std::vector<T>& scratch, Checksum checksum,
                                              CodecState* sender) const override {
    auto* s = dynamic_cast<LayeredReceiverState*>(sender);
    assert(sender == nullptr || s != nullptr);
    scratch.resize(count);
    STARLING_RETURN_IF_ERROR(decodeInto(frame, scratch, checksum, s));
    return std::span<const T>(scratch);
  }

  // Each receiver-state group's end of round, with its part of this node's stream state and of
  // the states of the neighbours heard.
  void endRound(const StreamContext& ctx, std::span<CodecState* const> heard) const override {
    auto* own = dynamic_cast<LayeredState<T>*>(ctx.state);
    std::vector<CodecState*> heardG;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (!groups_[g].receiver) continue;
      heardG.clear();
      for (CodecState* h : heard) {
        auto* r = dynamic_cast<LayeredReceiverState*>(h);
        if (r != nullptr && r->inner[g]) heardG.push_back(r->inner[g].get());
      }
      const StreamContext inner{ctx.round, ctx.sharedSeed, own ? own->inner[g].get() : nullptr,
                                nullptr};
      inner_[g]->endRound(inner, heardG);
    }
  }

  std::unique_ptr<CodecState> newState(size_t d) const override {
    assert(d == total_);
    (void)d;
    auto s = std::make_unique<LayeredState<T>>();
    for (size_t g = 0; g < groups_.size(); ++g) {
      s->inner.push_back(inner_[g]->newState(groups_[g].count));
    }
    s->gathered.resize(widest_);
    s->seen.resize(widest_);
    return s;
  }


 private:
  struct Piece {
    uint64_t offset, length;
  };
  struct Group {
    std::vector<Piece> pieces;  // its segments, in order
    uint64_t count = 0;
    size_t bound = 0;       // the inner codec's maxEncodedBytes(count)
    bool receiver = false;  // its codec keeps receiver state (at most one group: createCompressor)
  };

  static core::Status tooSmall(size_t have) {
    return core::invalidArgument("the layered frame does not fit: " + std::to_string(have) +
                                 " bytes left for a group's frame");
  }

  // A vector encode through the span encode: sized by the bound, cut to the frame. A failed
  // encode leaves a frame with a zeroed header, which every decoder rejects.
  template <typename Encode>
  void toVector(std::vector<std::byte>& out, Encode&& encode) const {
    out.assign(maxEncodedBytes(total_), std::byte{0});
    const core::Result<size_t> n = encode(std::span<std::byte>(out));
    if (n.isOk()) out.resize(*n);
  }

  // Lays out the frame in `out` (docs/wire_format.md, codec 14): the map, then for each group the
  // length and the frame encodeGroup(g, xg, dst, seenG) writes at dst, then the header and the
  // CRC. `seen` may be empty (encode(), which fills none). On an error the header is zeroed.
  template <typename EncodeGroup>
  core::Result<size_t> assemble(std::span<const T> x, std::span<std::byte> out, std::span<T> seen,
                                std::span<T> gathered, std::span<T> seenScratch,
                                EncodeGroup&& encodeGroup) const {
    assert(x.size() == total_);
    const size_t payloadAt = kFrameHeaderBytes + pad8(kLayeredParamsBytes);
    size_t pos = payloadAt + pad8(map_.size());
    if (out.size() < pos + kFrameTrailerBytes) return tooSmall(out.size());
    std::memset(out.data() + payloadAt, 0, pos - payloadAt);
    std::memcpy(out.data() + payloadAt, map_.data(), map_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      const Group& group = groups_[g];
      if (out.size() < pos + kLengthBytes + kFrameTrailerBytes) return fail(out, tooSmall(0));
      const std::span<std::byte> dst =
          out.subspan(pos + kLengthBytes, out.size() - pos - kLengthBytes - kFrameTrailerBytes);
      const bool whole = group.pieces.size() == 1;
      std::span<const T> xg;
      std::span<T> seenG;
      if (whole) {
        xg = x.subspan(group.pieces[0].offset, group.count);
        if (!seen.empty()) seenG = seen.subspan(group.pieces[0].offset, group.count);
      } else {
        size_t at = 0;
        for (const Piece& p : group.pieces) {
          std::copy_n(x.data() + p.offset, p.length, gathered.data() + at);
          at += p.length;
        }
        xg = gathered.first(group.count);
        if (!seen.empty()) seenG = seenScratch.first(group.count);
      }
      const core::Result<size_t> n = encodeGroup(g, xg, dst, seenG);
      if (!n.isOk()) return fail(out, n.status());
      storeLe<uint64_t>(out.data() + pos, *n);
      pos += kLengthBytes + *n;
      const size_t padded = pad8(pos);
      if (out.size() < padded + kFrameTrailerBytes) return fail(out, tooSmall(0));
      std::memset(out.data() + pos, 0, padded - pos);
      pos = padded;
      if (!whole && !seen.empty()) {
        size_t at = 0;
        for (const Piece& p : group.pieces) {
          std::copy_n(seenG.data() + at, p.length, seen.data() + p.offset);
          at += p.length;
        }
      }
    }
    writeFrameHead(CodecId::kLayered, elementTypeOf<T>(), total_, {params_, kLayeredParamsBytes},
                   pos - payloadAt, out.data());
    const size_t size = pos + kFrameTrailerBytes;
    sealFrame(out.first(size));
    return size;
  }

  static core::Status fail(std::span<std::byte> out, core::Status st) {
    std::memset(out.data(), 0, std::min(out.size(), kFrameHeaderBytes));
    return st;
  }

  // Every length, padding and the map are checked before any group is decoded; the groups whose
  // codec keeps no receiver state are decoded before the one that does, so a frame rejected
  // anywhere teaches that one nothing (decodeFrom's contract).
  core::Status decodeInto(std::span<const std::byte> frame, std::span<T> out, Checksum checksum,
                          LayeredReceiverState* sender) const {
    auto parsed = parseFrame(frame, checksum);
    if (!parsed) return parsed.status();
    const FrameView& v = *parsed;
    if (v.codec != CodecId::kLayered) {
      return core::corruption("expected codec 14 (layered), frame has codec " +
                              std::to_string(static_cast<int>(v.codec)));
    }
    if (v.elementType != elementTypeOf<T>()) return core::corruption("element type mismatch");
    if (v.elementCount != total_ || out.size() != total_) {
      return core::corruption("layered frame: expected " + std::to_string(out.size()) +
                              " elements (the layout holds " + std::to_string(total_) +
                              "), frame has " + std::to_string(v.elementCount));
    }
    if (v.params.size() != kLayeredParamsBytes ||
        std::memcmp(v.params.data(), params_, kLayeredParamsBytes) != 0) {
      return core::corruption("layered frame: its group and segment counts are not this "
                              "layout's");
    }
    const std::span<const std::byte> payload = v.payload;
    // The map's varints are minimal, so its bytes are equal exactly when the maps are.
    size_t pos = pad8(map_.size());
    if (payload.size() < pos || std::memcmp(payload.data(), map_.data(), map_.size()) != 0) {
      return core::corruption("layered frame: its group map is not this layout's");
    }
    if (!zeros(payload.subspan(map_.size(), pos - map_.size()))) {
      return core::corruption("layered frame: nonzero padding after the group map");
    }
    std::vector<std::span<const std::byte>> frames(groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (payload.size() - pos < kLengthBytes) {
        return core::corruption("layered frame: truncated before group " + std::to_string(g));
      }
      const uint64_t length = loadLe<uint64_t>(payload.data() + pos);
      pos += kLengthBytes;
      if (length > payload.size() - pos) {
        return core::corruption("layered frame: group " + std::to_string(g) + "'s frame of " +
                                std::to_string(length) + " bytes exceeds the " +
                                std::to_string(payload.size() - pos) + " left");
      }
      frames[g] = payload.subspan(pos, length);
      pos += length;
      const size_t padded = pad8(pos);
      if (padded > payload.size() || !zeros(payload.subspan(pos, padded - pos))) {
        return core::corruption("layered frame: bad padding after group " + std::to_string(g));
      }
      pos = padded;
    }
    if (pos != payload.size()) {
      return core::corruption("layered frame: " + std::to_string(payload.size() - pos) +
                              " bytes after the last group");
    }
    std::vector<T> values;
    for (const bool receivers : {false, true}) {
      for (size_t g = 0; g < groups_.size(); ++g) {
        const Group& group = groups_[g];
        if (group.receiver != receivers) continue;
        core::Status st;
        std::span<const T> decoded;
        if (group.receiver) {
          CodecState* state = sender != nullptr ? sender->inner[g].get() : nullptr;
          auto r = inner_[g]->decodeFrom(frames[g], group.count, values, checksum, state);
          if (r.isOk()) decoded = *r;
          st = r.status();
        } else if (group.pieces.size() == 1) {
          st = inner_[g]->decode(frames[g], out.subspan(group.pieces[0].offset, group.count));
        } else {
          values.resize(group.count);
          st = inner_[g]->decode(frames[g], values);
          decoded = values;
        }
        if (!st.isOk()) {
          return core::corruption("layered frame, group " + std::to_string(g) + ": " +
                                  st.message());
        }
        if (!decoded.empty()) {
          size_t at = 0;
          for (const Piece& p : group.pieces) {
            std::copy_n(decoded.data() + at, p.length, out.data() + p.offset);
            at += p.length;
          }
        }
      }
    }
    return core::Status::ok();
  }

  static bool zeros(std::span<const std::byte> bytes) {
    return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
  }

  std::vector<std::unique_ptr<Compressor<T>>> inner_;
  std::vector<LayeredSegment> segments_;
  std::vector<Group> groups_;
  std::vector<std::byte> map_;  // the segment map as the payload carries it
  std::byte params_[kLayeredParamsBytes] = {};
  uint64_t total_ = 0;
  size_t widest_ = 0;  // the most elements of a scattered group (the gather scratch)
  bool receiver_ = false;  // some group's codec keeps receiver state
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeLayered(std::vector<std::unique_ptr<Compressor<T>>> inner,
                                           std::vector<LayeredSegment> segments) {
  assert(inner.size() >= 2 && !segments.empty());
  return std::make_unique<Layered<T>>(std::move(inner), std::move(segments));
}

template std::unique_ptr<Compressor<float>> makeLayered<float>(
    std::vector<std::unique_ptr<Compressor<float>>>, std::vector<LayeredSegment>);
template std::unique_ptr<Compressor<double>> makeLayered<double>(
    std::vector<std::unique_ptr<Compressor<double>>>, std::vector<LayeredSegment>);

}  // namespace starling::compression::codecs
