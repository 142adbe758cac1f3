// The layered codec (codec 14, docs/wire_format.md; docs/compression.md "Layer-aware
// compression"): each group of tensors through its own codec, every inner frame complete inside
// one outer frame. The references are the inner codecs called directly on hand-listed slices,
// and a frame written out byte by byte.
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec_testing.h"
#include "core/state.h"

namespace starling::compression {
namespace {

using namespace codec_testing;

template <typename T>
std::unique_ptr<Compressor<T>> makeLayered(const CompressorSpec& spec,
                                           const std::vector<size_t>& layout) {
  auto c = createCompressor<T>(spec, layout);
  INFO(c.status().toString());
  REQUIRE(c.isOk());
  return std::move(*c);
}

// Layout {5, 3, 8, 4, 6} (26 elements). Rule 0: tensors 0 and -1 with identity; rule 1: tensor 2
// with top-3; the rest (tensors 1 and 3) with 3-bit qsgd in buckets of 4. Groups in the order of
// their first tensor: 0 = identity on [0, 5) + [20, 26), 1 = qsgd on [5, 8) + [16, 20),
// 2 = top-3 on [8, 16).
const std::vector<size_t> kLayout = {5, 3, 8, 4, 6};

CompressorSpec threeGroups(bool feedback = false) {
  CompressorSpec spec = qsgdSpec(3, 4, false);
  spec.errorFeedback = feedback;
  LayerRule ends{{0, -1}, makeSpec(Kind::kIdentity)};
  LayerRule middle{{2}, topkSpec(3)};
  middle.codec.errorFeedback = feedback;
  spec.layers = {ends, middle};
  return spec;
}

// The elements of each group, in the order its codec sees them (written out by hand).
std::vector<std::vector<size_t>> groupIndices() {
  std::vector<std::vector<size_t>> g(3);
  for (size_t i = 0; i < 5; ++i) g[0].push_back(i);
  for (size_t i = 20; i < 26; ++i) g[0].push_back(i);
  for (size_t i = 5; i < 8; ++i) g[1].push_back(i);
  for (size_t i = 16; i < 20; ++i) g[1].push_back(i);
  for (size_t i = 8; i < 16; ++i) g[2].push_back(i);
  return g;
}

std::vector<CompressorSpec> groupSpecs(bool feedback = false) {
  CompressorSpec q = qsgdSpec(3, 4, false);
  CompressorSpec t = topkSpec(3);
  q.errorFeedback = feedback;
  t.errorFeedback = feedback;
  return {makeSpec(Kind::kIdentity), q, t};
}

template <typename T>
bool sameValues(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <typename T>
std::vector<T> gather(const std::vector<T>& x, const std::vector<size_t>& at) {
  std::vector<T> out;
  for (size_t i : at) out.push_back(x[i]);
  return out;
}

// The inner frames of a layered frame, read by the layout docs/wire_format.md gives (not by the
// codec): the map after the params, padded to 8, then per group a u64 length, the frame, padding.
std::vector<Frame> innerFrames(const Frame& frame, size_t groups) {
  const auto view = parseFrame(frame);
  REQUIRE(view.isOk());
  REQUIRE(view->codec == CodecId::kLayered);
  const auto& p = view->payload;
  size_t segments = 0;
  for (size_t i = 0; i < 4; ++i) segments |= std::to_integer<size_t>(view->params[4 + i]) << (8 * i);
  size_t pos = 0;
  for (size_t s = 0; s < 2 * segments; ++s) {  // LEB128: the high bit says another byte follows
    while (std::to_integer<unsigned>(p[pos]) >= 0x80) ++pos;
    ++pos;
  }
  pos = (pos + 7) / 8 * 8;
  std::vector<Frame> out;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t len = 0;
    for (size_t i = 0; i < 8; ++i) len |= std::to_integer<uint64_t>(p[pos + i]) << (8 * i);
    pos += 8;
    out.emplace_back(p.begin() + static_cast<std::ptrdiff_t>(pos),
                     p.begin() + static_cast<std::ptrdiff_t>(pos + len));
    pos = (pos + len + 7) / 8 * 8;
  }
  REQUIRE(pos == p.size());
  return out;
}

TEMPLATE_TEST_CASE("layered: each group is its inner codec on its slice, with the same draws",
                   "[compression][unit]", float, double) {
  using T = TestType;
  const auto layered = makeLayered<T>(threeGroups(), kLayout);
  REQUIRE(layered->id() == CodecId::kLayered);
  REQUIRE_FALSE(layered->unbiased());  // top-k is biased
  const auto idx = groupIndices();
  const auto specs = groupSpecs();
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<T> x = normalVector<T>(26, 50 + seed);
    // The reference: the three codecs called on their slices in group order, one rng.
    core::Rng rngRef(seed);
    std::vector<Frame> want;
    std::vector<T> expected(26, T(0));
    for (size_t g = 0; g < 3; ++g) {
      const auto inner = make<T>(specs[g]);
      Frame f;
      inner->encode(gather(x, idx[g]), rngRef, f);
      const std::vector<T> dec = decodeOk<T>(*inner, f, idx[g].size());
      for (size_t i = 0; i < idx[g].size(); ++i) expected[idx[g][i]] = dec[i];
      want.push_back(f);
    }
    // encode(): the inner frames byte for byte, the decode the reference's, the rng alike.
    core::Rng rng(seed);
    Frame frame;
    layered->encode(x, rng, frame);
    REQUIRE(innerFrames(frame, 3) == want);
    REQUIRE(sameValues(decodeOk<T>(*layered, frame, 26), expected));
    REQUIRE(rng.nextU64() == rngRef.nextU64());

    // encodeInto with a stream state: the inner codecs' encodeInto on the slices.
    core::Rng rngA(seed), rngB(seed);
    auto state = layered->newState(26);
    std::vector<std::byte> out(layered->maxEncodedBytes(26));
    std::vector<T> seen(26);
    const auto n = layered->encodeInto(x, rngA, StreamContext{4, 9, state.get()}, out, seen);
    REQUIRE(n.isOk());
    const Frame streamed(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(*n));
    const auto frames = innerFrames(streamed, 3);
    for (size_t g = 0; g < 3; ++g) {
      const auto inner = make<T>(specs[g]);
      auto innerState = inner->newState(idx[g].size());
      std::vector<std::byte> buf(inner->maxEncodedBytes(idx[g].size()));
      std::vector<T> innerSeen(idx[g].size());
      const auto m = inner->encodeInto(gather(x, idx[g]), rngB, StreamContext{4, 9, innerState.get()},
                                       buf, innerSeen);
      REQUIRE(m.isOk());
      REQUIRE(frames[g] == Frame(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*m)));
      REQUIRE(sameValues(gather(seen, idx[g]), innerSeen));
    }
    REQUIRE(sameValues(decodeOk<T>(*layered, streamed, 26), seen));
  }
}

TEMPLATE_TEST_CASE("layered: identity, top-k and qsgd groups round-trip", "[compression][unit]",
                   float, double) {
  using T = TestType;
  const auto layered = makeLayered<T>(threeGroups(), kLayout);
  const auto idx = groupIndices();
  const std::vector<T> x = normalVector<T>(26, 7);
  const std::vector<T> y = decodeOk<T>(*layered, encodeWith<T>(*layered, x, 3), 26);
  // Identity group: exact.
  for (size_t i : idx[0]) REQUIRE(y[i] == x[i]);
  // Top-3 group: the three largest magnitudes of x[8, 16) exactly, zeros elsewhere.
  std::vector<size_t> order = idx[2];
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return std::abs(x[a]) > std::abs(x[b]); });
  for (size_t r = 0; r < order.size(); ++r) REQUIRE(y[order[r]] == (r < 3 ? x[order[r]] : T(0)));
  // qsgd group (3 bits, s = 3, buckets of 4 over its 7 elements): each value a level of its
  // bucket's norm, within one level of x.
  const auto& q = idx[1];
  for (size_t b = 0; b < q.size(); b += 4) {
    double norm = 0;
    for (size_t j = b; j < std::min(q.size(), b + 4); ++j) norm += double(x[q[j]]) * x[q[j]];
    norm = std::sqrt(norm);
    for (size_t j = b; j < std::min(q.size(), b + 4); ++j) {
      REQUIRE(std::abs(double(y[q[j]]) - double(x[q[j]])) <= norm / 3 * 1.0001);
    }
  }
}

// Saves the float64 vectors a state visits, by name (enough for error feedback's residuals).
class Collect final : public core::StateVisitor {
 public:
  bool loading() const override { return false; }
  void values(std::string_view name, std::span<float> v) override {
    got[qualified(name)].assign(v.begin(), v.end());
  }
  void values(std::string_view name, std::span<double> v) override {
    got[qualified(name)].assign(v.begin(), v.end());
  }
  void sized(std::string_view, std::vector<float>&) override {}
  void sized(std::string_view, std::vector<double>&) override {}
  void sized(std::string_view, std::vector<uint64_t>&) override {}
  void scalar(std::string_view name, uint64_t& v) override {
    got[qualified(name)] = {static_cast<double>(v)};
  }
  void scalar(std::string_view, double&) override {}
  void text(std::string_view, std::string&) override {}
  using core::StateVisitor::scalar;
  std::map<std::string, std::vector<double>> got;
};

// Writes back what a Collect saved (a checkpoint's load, in memory).
class Restore final : public core::StateVisitor {
 public:
  explicit Restore(std::map<std::string, std::vector<double>> from) : from_(std::move(from)) {}
  bool loading() const override { return true; }
  void values(std::string_view name, std::span<float> v) override { load(name, v); }
  void values(std::string_view name, std::span<double> v) override { load(name, v); }
  void sized(std::string_view, std::vector<float>&) override {}
  void sized(std::string_view, std::vector<double>&) override {}
  void sized(std::string_view, std::vector<uint64_t>&) override {}
  void scalar(std::string_view name, uint64_t& v) override {
    v = static_cast<uint64_t>(from_.at(qualified(name)).at(0));
  }
  void scalar(std::string_view, double&) override {}
  void text(std::string_view, std::string&) override {}
  using core::StateVisitor::scalar;

 private:
  template <typename T>
  void load(std::string_view name, std::span<T> v) {
    const auto& src = from_.at(qualified(name));
    REQUIRE(src.size() == v.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(src[i]);
  }
  std::map<std::string, std::vector<double>> from_;
};

TEST_CASE("layered: error feedback per group keeps what it was given", "[compression][unit]") {
  using T = double;
  const auto layered = makeLayered<T>(threeGroups(/*feedback=*/true), kLayout);
  const auto idx = groupIndices();
  auto state = layered->newState(26);
  core::Rng rng(17);
  std::vector<double> given(26, 0.0), sent(26, 0.0);
  std::vector<T> seen(26);
  std::vector<std::byte> out(layered->maxEncodedBytes(26));
  for (uint64_t round = 0; round < 12; ++round) {
    // Inputs for six rounds, then zeros until top-3 has sent its group's whole residual (8 / 3).
    std::vector<T> v(26, T(0));
    if (round < 6) v = normalVector<T>(26, 300 + round);
    REQUIRE(layered->encodeInto(v, rng, StreamContext{round, 1, state.get()}, out, seen).isOk());
    for (size_t i = 0; i < 26; ++i) {
      given[i] += v[i];
      sent[i] += seen[i];
    }
    // Per group and per element: the frames so far plus the group's residual are the inputs.
    Collect c;
    state->visitState(c);
    REQUIRE(c.status().isOk());
    REQUIRE(c.got.at("groups") == std::vector<double>{3});
    for (size_t g : {1, 2}) {
      const auto& residual = c.got.at("group_" + std::to_string(g) + "/residual");
      REQUIRE(residual.size() == idx[g].size());
      for (size_t j = 0; j < idx[g].size(); ++j) {
        REQUIRE(sent[idx[g][j]] + residual[j] == Approx(given[idx[g][j]]).margin(1e-12));
      }
    }
    for (size_t i : idx[0]) REQUIRE(seen[i] == v[i]);  // identity: nothing held back
  }
  // Top-k sends exact values: six rounds of zeros emptied its residual, so all of it arrived.
  for (size_t i : idx[2]) REQUIRE(sent[i] == Approx(given[i]).margin(1e-12));
}

TEST_CASE("layered: a checkpointed stream state resumes the same frames", "[compression][unit]") {
  using T = float;
  const auto layered = makeLayered<T>(threeGroups(/*feedback=*/true), kLayout);
  auto a = layered->newState(26);
  core::Rng rng(5);
  std::vector<std::byte> out(layered->maxEncodedBytes(26));
  std::vector<T> seen(26);
  for (uint64_t r = 0; r < 3; ++r) {
    REQUIRE(layered->encodeInto(normalVector<T>(26, r), rng, StreamContext{r, 1, a.get()}, out,
                                seen).isOk());
  }
  Collect saved;
  a->visitState(saved);
  auto b = layered->newState(26);
  Restore load(saved.got);
  b->visitState(load);
  REQUIRE(load.status().isOk());
  core::Rng rngA(8), rngB(8);
  Frame fa, fb;
  const auto x = normalVector<T>(26, 99);
  layered->encodeStream(x, rngA, StreamContext{3, 1, a.get()}, fa);
  layered->encodeStream(x, rngB, StreamContext{3, 1, b.get()}, fb);
  REQUIRE(fa == fb);
  // A state of another group count is refused.
  std::map<std::string, std::vector<double>> wrong = saved.got;
  wrong["groups"] = {2};
  Restore bad(wrong);
  layered->newState(26)->visitState(bad);
  REQUIRE_FALSE(bad.status().isOk());
}

// Layout {2, 1}, float32: tensor 0 with identity (rule), tensor 1 with top-1 (the rest), for
// x = {1, -2.5, 3}.
CompressorSpec goldenSpec() {
  CompressorSpec spec = topkSpec(1);
  spec.layers = {LayerRule{{0}, makeSpec(Kind::kIdentity)}};
  return spec;
}

Frame goldenFrame() {
  const Frame identity = sealed(
      "5354524c 01 00 01 00"  // magic, version 1, codec 0 (identity), float32, reserved
      "0200000000000000"      // 2 elements
      "00000000 00000000"     // no params, reserved
      "0800000000000000"      // payload 8 bytes
      "0000803f 000020c0");   // 1.0, -2.5
  const Frame topk = sealed(
      "5354524c 01 03 01 00"  // codec 3 (topk)
      "0100000000000000"      // 1 element
      "00000000 00000000"
      "0900000000000000"      // payload 9 bytes
      "01000000 00 00004040");  // k = 1, index 0, 3.0
  REQUIRE(identity.size() == 44);
  REQUIRE(topk.size() == 45);
  return sealed(
      "5354524c 01 0e 01 00"   // codec 14 (layered), float32
      "0300000000000000"       // 3 elements
      "08000000 00000000"      // params 8 bytes, reserved
      "7800000000000000"       // payload 120 bytes
      "02000000 02000000"      // params: 2 groups, 2 segments
      "02 00 01 01 00000000"   // map: 2 elements of group 0, 1 of group 1; padding to 8
      "2c00000000000000" +     // group 0's frame: 44 bytes
      toHex(identity) + "00000000" +  // padded to 8
      "2d00000000000000" +     // group 1's frame: 45 bytes
      toHex(topk) + "000000");
}

TEST_CASE("layered: golden frame", "[compression][unit]") {
  const auto layered = makeLayered<float>(goldenSpec(), {2, 1});
  const std::vector<float> x = {1.0f, -2.5f, 3.0f};
  const Frame golden = goldenFrame();
  REQUIRE(golden.size() == 164);
  REQUIRE(toHex(encodeWith<float>(*layered, x)) == toHex(golden));
  REQUIRE(layered->maxEncodedBytes(3) >= golden.size());
  REQUIRE(decodeOk<float>(*layered, golden, 3) == x);
}

TEST_CASE("layered: every truncation and every single bit flip is refused", "[compression][unit]") {
  const auto layered = makeLayered<float>(goldenSpec(), {2, 1});
  const Frame golden = goldenFrame();
  for (size_t n = 0; n < golden.size(); ++n) {
    requireCorrupt(*layered, Frame(golden.begin(), golden.begin() + n), 3);
  }
  // Flips with the outer CRC made valid again: the inner CRCs, the map, the lengths, the padding
  // and the header checks must catch each one.
  for (size_t bit = 0; bit < 8 * (golden.size() - 4); ++bit) {
    INFO("bit " << bit);
    Frame f(golden.begin(), golden.end() - 4);
    f[bit / 8] ^= std::byte{static_cast<uint8_t>(1u << (bit % 8))};
    const uint32_t crc = crc32c(f);
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::byte>((crc >> (8 * i)) & 0xff));
    requireCorrupt(*layered, f, 3);
  }
  requireCorrupt(*layered, golden, 2);
  requireCorrupt(*layered, golden, 4);
  requireCorrupt(*makeLayered<double>(goldenSpec(), {2, 1}), golden, 3);
}

// A layered frame assembled from given inner frames (each padded to 8), with the golden map.
Frame assemble(const std::vector<Frame>& inner, const std::string& mapHex = "02000101") {
  Bytes payload = fromHex(mapHex);
  payload.resize((payload.size() + 7) / 8 * 8, std::byte{0});
  for (const Frame& f : inner) {
    for (int i = 0; i < 8; ++i) payload.push_back(static_cast<std::byte>((f.size() >> (8 * i)) & 0xff));
    payload.insert(payload.end(), f.begin(), f.end());
    payload.resize((payload.size() + 7) / 8 * 8, std::byte{0});
  }
  return craft<float>(CodecId::kLayered, 3, fromHex("0200000002000000"), payload);
}

TEST_CASE("layered: inner frames of the wrong count, order or overlap are refused",
          "[compression][unit]") {
  const auto layered = makeLayered<float>(goldenSpec(), {2, 1});
  const auto identity = make<float>(makeSpec(Kind::kIdentity));
  const auto topk = make<float>(topkSpec(1));
  const Frame id2 = encodeWith<float>(*identity, {1.0f, -2.5f});
  const Frame top1 = encodeWith<float>(*topk, {3.0f});
  // The assembly itself is right: it decodes.
  REQUIRE(decodeOk<float>(*layered, assemble({id2, top1}), 3) == std::vector<float>{1, -2.5f, 3});
  // Wrong element counts: group 0 with 3 or 1 elements, group 1 with 2.
  requireCorrupt(*layered, assemble({encodeWith<float>(*identity, {1, 2, 3}), top1}), 3);
  requireCorrupt(*layered, assemble({encodeWith<float>(*identity, {1}), top1}), 3);
  requireCorrupt(*layered, assemble({id2, encodeWith<float>(*topk, {3, 4})}), 3);
  // Wrong order, a group missing, one too many.
  requireCorrupt(*layered, assemble({top1, id2}), 3);
  requireCorrupt(*layered, assemble({id2}), 3);
  requireCorrupt(*layered, assemble({id2, top1, top1}), 3);
  // Maps that overlap or leave a gap (segments of 2 + 2, or 1 + 1, for 3 elements), swap the
  // groups, or say the same thing in a longer form.
  requireCorrupt(*layered, assemble({id2, top1}, "02000201"), 3);
  requireCorrupt(*layered, assemble({id2, top1}, "01000101"), 3);
  requireCorrupt(*layered, assemble({id2, top1}, "02010100"), 3);
  requireCorrupt(*layered, assemble({id2, top1}, "820000010101"), 3);
  // Same inner frames, but the codec of a group differs from the layout's (top-1 in group 0's
  // place as a 2-element frame).
  requireCorrupt(*layered, assemble({encodeWith<float>(*topk, {1, -2.5f}), top1}), 3);
  // A length that runs past the payload.
  Frame f = assemble({id2, top1});
  const auto view = parseFrame(f);
  Bytes payload(view->payload.begin(), view->payload.end());
  payload[8] = std::byte{0xff};
  requireCorrupt(*layered, craft<float>(CodecId::kLayered, 3, fromHex("0200000002000000"), payload), 3);
}

TEST_CASE("layered: an lgc group gets its receiver state, and its frames are lgc's on the slice",
          "[compression][unit]") {
  // Layout {30, 200, 20}: identity on tensors 0 and 2, lgc (k = 24, chunks of 8, warm-up of 3
  // rounds, a new decoder every 4) on tensor 1. Coded frames (mode 1) need the decoder version
  // the sender shipped earlier, which only a receiver state holds.
  CompressorSpec lgc;
  lgc.kind = Kind::kLgc;
  lgc.k = 24;
  lgc.chunk = 8;
  lgc.hidden = 16;
  lgc.latent = 2;
  lgc.warmup = 3;
  lgc.refresh = 4;
  CompressorSpec spec = makeSpec(Kind::kIdentity);
  spec.layers = {LayerRule{{1}, lgc}};
  const std::vector<size_t> layout = {30, 200, 20};
  const auto layered = makeLayered<float>(spec, layout);
  REQUIRE(layered->id() == CodecId::kLayered);
  const auto alone = make<float>(lgc);
  auto sender = layered->newState(250);
  auto senderAlone = alone->newState(200);
  auto receiver = layered->newReceiverState(250);
  auto receiverAlone = alone->newReceiverState(200);
  REQUIRE(receiver != nullptr);
  core::Rng rng(1), rngAlone(1);
  for (uint64_t round = 0; round < 12; ++round) {
    CAPTURE(round);
    const std::vector<float> x = normalVector<float>(250, 70 + round);
    const std::vector<float> middle(x.begin() + 30, x.begin() + 230);
    Frame f, fa;
    std::vector<float> seen(250), seenAlone(200);
    REQUIRE(layered->encodeSeen(x, rng, StreamContext{round, 5, sender.get()}, f, seen).isOk());
    REQUIRE(alone->encodeSeen(middle, rngAlone, StreamContext{round, 5, senderAlone.get()}, fa,
                              seenAlone)
                .isOk());
    REQUIRE(innerFrames(f, 2)[1] == fa);
    std::vector<float> scratch, scratchAlone;
    auto got = layered->decodeFrom(f, 250, scratch, Checksum::kVerify, receiver.get());
    INFO(got.status().toString());
    REQUIRE(got.isOk());
    REQUIRE(std::memcmp(got->data(), seen.data(), 250 * sizeof(float)) == 0);
    for (size_t i : {0, 29, 230, 249}) REQUIRE(seen[i] == x[i]);
    auto gotAlone = alone->decodeFrom(fa, 200, scratchAlone, Checksum::kVerify, receiverAlone.get());
    REQUIRE(gotAlone.isOk());
    REQUIRE(std::memcmp(got->data() + 30, gotAlone->data(), 200 * sizeof(float)) == 0);
    const bool coded = round >= 3 && (round - 3) % 4 != 0;
    if (coded) {
      // Without the sender's state a coded frame does not decode.
      requireCorrupt(*layered, f, 250);
    }
    CodecState* heard[] = {receiver.get()};
    CodecState* heardAlone[] = {receiverAlone.get()};
    layered->endRound(StreamContext{round, 5, sender.get()}, heard);
    alone->endRound(StreamContext{round, 5, senderAlone.get()}, heardAlone);
  }
  // Two lgc groups are refused: a receiver state could learn from a frame another group rejects.
  CompressorSpec two = lgc;
  two.layers = {LayerRule{{1}, lgc}};
  REQUIRE(createCompressor<float>(two, layout).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("createCompressor: what layers rules build", "[compression][unit]") {
  // No group but identity: plain identity, which keeps its in-place path.
  CompressorSpec ids = makeSpec(Kind::kIdentity);
  ids.layers = {LayerRule{{0}, makeSpec(Kind::kIdentity)}};
  auto id = makeLayered<float>(ids, {3, 4});
  REQUIRE(id->id() == CodecId::kIdentity);
  REQUIRE(id->writesInPlace());
  REQUIRE(sendsIdentityOnly(ids));
  // One rule covering the model: that codec's own frame.
  CompressorSpec one = makeSpec(Kind::kIdentity);
  one.layers = {LayerRule{{0, 1}, makeSpec(Kind::kFp16)}};
  REQUIRE(makeLayered<float>(one, {3, 4})->id() == CodecId::kFp16);
  REQUIRE_FALSE(sendsIdentityOnly(one));
  // Without a layout the model is one tensor: 0 and -1 name it.
  CompressorSpec whole = topkSpec(2);
  whole.layers = {LayerRule{{-1}, makeSpec(Kind::kSign)}};
  REQUIRE(makeLayered<double>(whole, {})->id() == CodecId::kSign);
  // The exact bound of fixed-size groups: header, params, map, and each group's length, frame
  // and padding.
  CompressorSpec fixed = makeSpec(Kind::kFp16);
  fixed.layers = {LayerRule{{1}, qsgdSpec(4, 512, false)}};
  auto c = makeLayered<float>(fixed, {10, 20, 30});
  // Groups: fp16 on tensors 0 and 2 (40 elements: 36 + 80 bytes, padded to 120), qsgd on tensor 1
  // (20 elements: 36 + 8 + 4 + 10 = 58, padded to 64); the map (10, 0), (20, 1), (30, 0) is 6
  // bytes, padded to 8.
  REQUIRE(c->maxEncodedBytes(60) == 32 + 8 + 8 + (8 + 120) + (8 + 64) + 4);
  REQUIRE(encodeWith<float>(*c, normalVector<float>(60, 1)).size() == c->maxEncodedBytes(60));

  // Errors, with the rule and the position.
  auto fault = [](CompressorSpec spec, size_t tensors) {
    LayerRuleFault f;
    auto g = layerGroups(spec, tensors, &f);
    REQUIRE_FALSE(g.isOk());
    REQUIRE(g.status().code() == StatusCode::kInvalidArgument);
    return std::make_pair(f, g.status().message());
  };
  CompressorSpec bad = topkSpec(1);
  bad.layers = {LayerRule{{0, 3}, makeSpec(Kind::kIdentity)}};
  auto [f1, m1] = fault(bad, 3);
  REQUIRE((f1.rule == 0 && f1.position == 1));
  REQUIRE(m1.find("outside") != std::string::npos);
  bad.layers = {LayerRule{{-4}, makeSpec(Kind::kIdentity)}};
  REQUIRE(fault(bad, 3).first.position == 0);
  bad.layers = {LayerRule{{1, 1}, makeSpec(Kind::kIdentity)}};
  REQUIRE(fault(bad, 3).first.position == 1);
  bad.layers = {LayerRule{{0}, makeSpec(Kind::kIdentity)}, LayerRule{{2, -3}, makeSpec(Kind::kSign)}};
  auto [f2, m2] = fault(bad, 3);
  REQUIRE((f2.rule == 1 && f2.position == 1));
  REQUIRE(m2.find("named by rule 0") != std::string::npos);
  bad.layers = {LayerRule{{}, makeSpec(Kind::kIdentity)}};
  REQUIRE(fault(bad, 3).first.position == LayerRuleFault::npos);
  // One rule reaching a tensor as 0 and as -1 names it once.
  CompressorSpec both = topkSpec(1);
  both.layers = {LayerRule{{0, -1}, makeSpec(Kind::kIdentity)}};
  REQUIRE(layerGroups(both, 1).isOk());
  // createCompressor reports the same, and an inner codec's own error names its rule.
  REQUIRE(createCompressor<float>(bad, std::vector<size_t>{1, 2, 3}).status().code() ==
          StatusCode::kInvalidArgument);
  CompressorSpec badInner = topkSpec(1);
  badInner.layers = {LayerRule{{0}, qsgdSpec(9, 512, false)}};
  const auto st = createCompressor<float>(badInner, std::vector<size_t>{1, 2}).status();
  REQUIRE(st.code() == StatusCode::kInvalidArgument);
  REQUIRE(st.message().find("rule 0") != std::string::npos);
}

}  // namespace
}  // namespace starling::compression
