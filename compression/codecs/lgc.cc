// LGC, learned gradient compression for gossip (docs/algorithms.md §28, docs/compression.md
// "LGC", frame layout in docs/wire_format.md, codec 15).
//
// The sender keeps the k largest |x_i| like top-k. For the first `warmup` rounds it sends them
// as they are (mode 0), together with its autoencoder's parameters, and trains the autoencoder
// (lgc_net.h) on the chunks of the values it has just sent; at the end of each round it averages
// its parameters with those its neighbours shipped that round (endRound), so the peers agree on
// one autoencoder without a server. From the warm-up's end it sends, per chunk of C kept values,
// L fp16 latent numbers and a float32 scale (mode 1). A decoder is frozen under a version
// number: the frame that starts a version carries the sender's whole network (mode 2), every
// frame names its version, and a receiver keeps the last kKeptVersions decoders of each sender
// (ReceiverState). A frame naming a version its receiver does not hold is rejected as corrupt,
// never decoded with another decoder.
//
// Reconstruction: chunk c (the kept values in index order, the last one shorter) is scaled to
// u = c / max|c|; the decoder's y = Dec(fp16(Enc(u))) is then fitted to c by least squares,
// lambda = <c, y> / ||y||^2, and the receivers see lambda y. So ||lambda y - c|| <= ||c||: the
// frame never sends something farther from x than top-k's zeros would be, and the codec is a
// contraction like top-k (CHOCO's and LEAD's requirement) whatever the network has learned.
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/float16.h"
#include "compression/codecs/lgc_net.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

constexpr size_t kParamsBytes = 32;
constexpr size_t kKeptVersions = 4;
constexpr uint64_t kLgcSalt = 0x4c4743;  // "LGC"

enum Mode : uint8_t { kValues = 0, kCodes = 1, kCodesWithNetwork = 2 };

// The parameters of one frame (docs/wire_format.md, codec 15).
struct LgcParams {
  uint8_t mode = kValues;
  uint32_t version = 0;
  uint64_t k = 0;
  uint16_t chunk = 0, hidden = 0, latent = 0;
  uint32_t networkCount = 0;  // float32 parameters before the indices (0 or the whole network)
};

void storeParams(const LgcParams& p, std::byte* out) {
  std::memset(out, 0, kParamsBytes);
  out[0] = static_cast<std::byte>(p.mode);
  storeLe<uint32_t>(out + 4, p.version);
  storeLe<uint64_t>(out + 8, p.k);
  storeLe<uint16_t>(out + 16, p.chunk);
  storeLe<uint16_t>(out + 18, p.hidden);
  storeLe<uint16_t>(out + 20, p.latent);
  storeLe<uint32_t>(out + 24, p.networkCount);
}

size_t varintBytes(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

std::byte* putVarint(std::byte* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<std::byte>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<std::byte>(v);
  return p;
}

// What a sender carries from round to round.
struct SenderState final : CodecState {
  bool started = false;
  std::vector<float> theta, m, v, grad;  // the network being trained, Adam's moments
  uint64_t steps = 0;
  uint32_t version = 0;        // of `frozen`; 0 before the first coded frame
  std::vector<float> frozen;   // the network this version encodes with (its decoder was shipped)
  void visitState(core::StateVisitor& vis) override {
    vis.flag("started", started);
    vis.sized("theta", theta);
    vis.sized("adam_m", m);
    vis.sized("adam_v", v);
    vis.scalar("steps", steps);
    uint64_t ver = version;
    vis.scalar("version", ver);
    version = static_cast<uint32_t>(ver);
    vis.sized("frozen", frozen);
    grad.resize(theta.size());
  }
};

// What a receiver keeps about one sender.
struct ReceiverState final : CodecState {
  std::vector<std::pair<uint32_t, std::vector<float>>> decoders;  // oldest first
  std::vector<float> network;  // the last network the sender shipped
  bool fresh = false;          // shipped in the round being decoded (endRound takes it)
  void visitState(core::StateVisitor& vis) override {
    vis.fail("lgc keeps its neighbours' decoders, which checkpoints do not save");
  }
};

template <typename T>
class LgcCompressor final : public Compressor<T>, public ReceiverDecoding<T> {
 public:
  explicit LgcCompressor(const CompressorSpec& spec)
      : k_(spec.k), ratio_(spec.ratio), warmup_(spec.warmup), refresh_(spec.refresh),
        shareEvery_(std::max<uint64_t>(1, spec.shareEvery)), lr_(spec.learningRate) {
    shape_.chunk = spec.chunk;
    shape_.hidden = spec.hidden;
    shape_.latent = spec.latent;
    network_ = lgc::parameterCount(shape_);
    encoderSize_ = lgc::encoderCount(shape_);
  }

  CodecId id() const override { return CodecId::kLgc; }
  bool unbiased() const override { return false; }

  size_t maxEncodedBytes(size_t d) const override {
    const uint64_t k = kept(d);
    const uint64_t chunks = (k + shape_.chunk - 1) / shape_.chunk;
    const size_t values = std::max<size_t>(k * sizeof(T), chunks * (4 + 2 * shape_.latent));
    const size_t indices = k == d ? 0 : k * varintBytes(d == 0 ? 0 : d - 1);
    return frameBytesFor(kParamsBytes, network_ * 4 + indices + values);
  }

  std::unique_ptr<CodecState> newState(size_t) const override {
    return std::make_unique<SenderState>();
  }
  CodecCapabilities<T> capabilities() const override { return {.receiver = this}; }
  std::unique_ptr<CodecState> newReceiverState(size_t) const override {
    return std::make_unique<ReceiverState>();
  }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    SenderState fresh;
    const StreamContext ctx{0, 0, &fresh};
    encodeStream(x, rng, ctx, out);
  }

  void encodeStream(std::span<const T> x, core::Rng&, const StreamContext& ctx,
                    std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    (void)write(x, ctx, frame, {});
  }

  core::Status encodeSeen(std::span<const T> x, core::Rng&, const StreamContext& ctx,
                          std::vector<std::byte>& out, std::span<T> seen) const override {
    FrameOut frame(out);
    return write(x, ctx, frame, seen);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng&, const StreamContext& ctx,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    FrameOut frame(out);
    const core::Status st = write(x, ctx, frame, seen);
    if (!frame.ok()) return frame.status();
    if (!st.isOk()) return st;
    return frame.frame().size();
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    return decodeWith(frame, out, Checksum::kVerify, nullptr);
  }

  core::Result<std::span<const T>> decodeFrom(std::span<const std::byte> frame, size_t count,
                                              std::vector<T>& scratch, Checksum checksum,
                                              CodecState* sender) const override {
    auto* state = dynamic_cast<ReceiverState*>(sender);
    assert(sender == nullptr || state != nullptr);
    scratch.resize(count);
    STARLING_RETURN_IF_ERROR(decodeWith(frame, scratch, checksum, state));
    return std::span<const T>(scratch);
  }

  core::Result<std::span<const T>> decodeView(std::span<const std::byte> frame, size_t count,
                                              std::vector<T>& scratch,
                                              Checksum checksum) const override {
    scratch.resize(count);
    STARLING_RETURN_IF_ERROR(decodeWith(frame, scratch, checksum, nullptr));
    return std::span<const T>(scratch);
  }

  void endRound(const StreamContext& ctx, std::span<CodecState* const> heard) const override {
    auto* s = dynamic_cast<SenderState*>(ctx.state);
    if (s == nullptr || !s->started) return;
    // The gossip average of the networks: this node's and every one shipped to it this round,
    // with equal weights (docs/algorithms.md §28), summed in peer order in float64.
    std::vector<double> sum(s->theta.begin(), s->theta.end());
    size_t count = 1;
    for (CodecState* c : heard) {
      auto* r = dynamic_cast<ReceiverState*>(c);
      if (r == nullptr || !r->fresh) continue;
      r->fresh = false;
      if (r->network.size() != sum.size()) continue;
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += r->network[k];
      ++count;
    }
    if (count == 1) return;
    const double inv = 1.0 / static_cast<double>(count);
    for (size_t k = 0; k < sum.size(); ++k) s->theta[k] = static_cast<float>(sum[k] * inv);
  }

 private:
  uint64_t kept(uint64_t d) const {
    if (d == 0) return 0;
    return std::min<uint64_t>(keptCount(k_, ratio_, d), UINT32_MAX);
  }

  uint32_t versionAt(uint64_t round) const {
    if (round < warmup_) return 0;
    const uint64_t v = 1 + (refresh_ > 0 ? (round - warmup_) / refresh_ : 0);
    return static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX));
  }

  void start(SenderState& s, uint64_t sharedSeed) const {
    if (s.started) return;
    s.theta = lgc::initialParameters(shape_, core::deriveSeed(sharedSeed, kLgcSalt, 0, 0));
    s.m.assign(network_, 0.0f);
    s.v.assign(network_, 0.0f);
    s.grad.assign(network_, 0.0f);
    s.started = true;
  }

  // One frame for x into `frame`, and what its receivers decode into `seen` (if not empty).
  core::Status write(std::span<const T> x, const StreamContext& ctx, FrameOut& frame,
                     std::span<T> seen) const {
    SenderState scratchState;
    SenderState& s = ctx.state != nullptr ? *dynamic_cast<SenderState*>(ctx.state) : scratchState;
    start(s, ctx.sharedSeed);
    const size_t d = x.size();
    assert(d <= kMaxFrameElements);
    const uint64_t k = kept(d);
    const std::vector<uint32_t> indices = largestIndices<T>(x, k);
    const uint32_t C = shape_.chunk, L = shape_.latent;
    const size_t chunks = (k + C - 1) / C;

    // Chunks scaled to max |c| = 1 (the autoencoder's input, and its training batch).
    bool finite = true;
    std::vector<float> u(chunks * C, 0.0f);
    for (size_t c = 0; c < chunks; ++c) {
      const size_t first = c * C, last = std::min<size_t>(k, first + C);
      // The chunk's root mean square: the network sees every chunk at unit energy, so its loss
      // is the relative error the receivers will see, whatever the message's scale.
      double sumSq = 0.0;
      for (size_t j = first; j < last; ++j) {
        const double v = static_cast<double>(x[indices[j]]);
        finite &= std::isfinite(v);
        sumSq += v * v;
      }
      const double top = std::sqrt(sumSq / static_cast<double>(last - first));
      if (top > 0.0 && std::isfinite(top)) {
        for (size_t j = first; j < last; ++j) {
          u[j] = static_cast<float>(static_cast<double>(x[indices[j]]) / top);
        }
      }
    }

    const uint32_t version = versionAt(ctx.round);
    LgcParams p;
    p.version = version;
    p.k = k;
    p.chunk = static_cast<uint16_t>(C);
    p.hidden = static_cast<uint16_t>(shape_.hidden);
    p.latent = static_cast<uint16_t>(L);
    if (version == 0 || !finite) {
      p.mode = kValues;  // warm-up (or a non-finite input, which no receiver accepts anyway)
      p.version = 0;
      // The network for the gossip average, every share_every rounds of the warm-up.
      p.networkCount = ctx.round % shareEvery_ == 0 ? static_cast<uint32_t>(network_) : 0;
    } else if (s.version != version) {
      s.frozen = s.theta;
      s.version = version;
      p.mode = kCodesWithNetwork;
      p.networkCount = static_cast<uint32_t>(network_);
    } else {
      p.mode = kCodes;
    }
    const std::span<const float> network = p.mode == kValues ? std::span<const float>(s.theta)
                                                             : std::span<const float>(s.frozen);

    // Codes and scales (modes 1 and 2), computed exactly as decode recomputes them.
    std::vector<uint16_t> codes;
    std::vector<float> scales;
    std::vector<float> y;
    if (p.mode != kValues) {
      codes.resize(chunks * L);
      scales.resize(chunks);
      y.resize(chunks * C);
      std::vector<float> z(L), zq(L);
      const std::span<const float> encoder = network.first(encoderSize_);
      const std::span<const float> decoder = network.subspan(encoderSize_);
      for (size_t c = 0; c < chunks; ++c) {
        lgc::encodeChunk<float>(shape_, encoder, u.data() + c * C, z.data());
        for (uint32_t l = 0; l < L; ++l) {
          codes[c * L + l] = halfFromDouble(z[l]);
          zq[l] = static_cast<float>(doubleFromHalf(codes[c * L + l]));
        }
        lgc::decodeChunk<float>(shape_, decoder, zq.data(), y.data() + c * C);
        const size_t first = c * C, last = std::min<size_t>(k, first + C);
        double dot = 0.0, norm = 0.0;
        for (size_t j = first; j < last; ++j) {
          const double yj = y[j];
          dot += static_cast<double>(x[indices[j]]) * yj;
          norm += yj * yj;
        }
        const float lambda = norm > 0.0 ? static_cast<float>(dot / norm) : 0.0f;
        scales[c] = std::isfinite(lambda) ? lambda : 0.0f;
      }
    }

    // Every element kept (ratio 1): the index list is implied and not sent.
    const bool allKept = k == d;
    size_t indexBytes = 0;
    for (size_t j = 0; j < k && !allKept; ++j) {
      indexBytes += varintBytes(j == 0 ? indices[0] : indices[j] - indices[j - 1]);
    }
    const size_t valueBytes = p.mode == kValues ? k * sizeof(T) : chunks * (4 + 2 * size_t{L});
    std::byte params[kParamsBytes];
    storeParams(p, params);
    std::byte* out = frame.begin(CodecId::kLgc, elementTypeOf<T>(), d, params,
                                 size_t{p.networkCount} * 4 + indexBytes + valueBytes);
    if (out == nullptr) return frame.status();
    for (uint32_t i = 0; i < p.networkCount; ++i, out += 4) storeValue<float>(out, network[i]);
    for (size_t j = 0; j < k && !allKept; ++j) {
      out = putVarint(out, j == 0 ? indices[0] : indices[j] - indices[j - 1]);
    }
    if (p.mode == kValues) {
      for (size_t j = 0; j < k; ++j, out += sizeof(T)) storeValue<T>(out, x[indices[j]]);
    } else {
      for (size_t c = 0; c < chunks; ++c, out += 4) storeValue<float>(out, scales[c]);
      for (uint16_t code : codes) {
        storeLe<uint16_t>(out, code);
        out += 2;
      }
    }
    frame.seal();

    if (!seen.empty()) {
      std::fill(seen.begin(), seen.end(), T(0));
      for (size_t j = 0; j < k; ++j) {
        seen[indices[j]] = p.mode == kValues
                               ? x[indices[j]]
                               : static_cast<T>(static_cast<double>(scales[j / C]) *
                                                static_cast<double>(y[j]));
      }
    }
    if (!finite) return core::corruption("lgc: a kept value is not finite");

    // Learn from what was just sent, while another decoder version may still come.
    if (ctx.state != nullptr && chunks > 0 && (version == 0 || refresh_ > 0)) {
      (void)lgc::lossAndGradient<float>(shape_, s.theta, u, chunks, s.grad);
      lgc::adamStep(s.theta, s.grad, s.m, s.v, ++s.steps, lr_);
    }
    return core::Status::ok();
  }

  // Decodes into `out` only once the whole frame checked out; with a receiver state, learns the
  // network a frame ships (after the same checks) and looks up the version a frame names.
  core::Status decodeWith(std::span<const std::byte> bytes, std::span<T> out, Checksum checksum,
                          ReceiverState* state) const {
    auto view = parseFrame(bytes, checksum);
    if (!view) return view.status();
    if (view->codec != CodecId::kLgc) return core::corruption("not an lgc frame");
    if (view->elementType != elementTypeOf<T>()) return core::corruption("lgc element type");
    if (view->elementCount != out.size()) {
      return core::corruption("lgc frame of " + std::to_string(view->elementCount) +
                              " elements where " + std::to_string(out.size()) + " expected");
    }
    if (view->params.size() != kParamsBytes) return core::corruption("lgc params length");
    const std::byte* pp = view->params.data();
    LgcParams p;
    p.mode = std::to_integer<uint8_t>(pp[0]);
    p.version = loadLe<uint32_t>(pp + 4);
    p.k = loadLe<uint64_t>(pp + 8);
    p.chunk = loadLe<uint16_t>(pp + 16);
    p.hidden = loadLe<uint16_t>(pp + 18);
    p.latent = loadLe<uint16_t>(pp + 20);
    p.networkCount = loadLe<uint32_t>(pp + 24);
    for (size_t i : {1, 2, 3, 22, 23, 28, 29, 30, 31}) {
      if (pp[i] != std::byte{0}) return core::corruption("lgc reserved byte " + std::to_string(i));
    }
    if (p.mode > kCodesWithNetwork) return core::corruption("lgc mode " + std::to_string(p.mode));
    if (p.chunk != shape_.chunk || p.hidden != shape_.hidden || p.latent != shape_.latent) {
      return core::corruption("lgc frame of shape chunk " + std::to_string(p.chunk) + ", hidden " +
                              std::to_string(p.hidden) + ", latent " + std::to_string(p.latent) +
                              " where this run's is " + std::to_string(shape_.chunk) + ", " +
                              std::to_string(shape_.hidden) + ", " +
                              std::to_string(shape_.latent));
    }
    const size_t d = out.size();
    if (p.k > d) return core::corruption("lgc keeps " + std::to_string(p.k) + " of " +
                                         std::to_string(d) + " elements");
    if ((p.mode == kValues) != (p.version == 0)) {
      return core::corruption("lgc mode " + std::to_string(p.mode) + " with version " +
                              std::to_string(p.version));
    }
    const bool shipsNetwork = p.networkCount != 0;
    if ((shipsNetwork && p.networkCount != network_) || (p.mode == kCodes && shipsNetwork) ||
        (p.mode == kCodesWithNetwork && !shipsNetwork)) {
      return core::corruption("lgc network of " + std::to_string(p.networkCount) +
                              " parameters in mode " + std::to_string(p.mode));
    }
    Reader r(view->payload);
    if (r.remaining() / 4 < p.networkCount) return core::corruption("lgc network truncated");
    std::vector<float> network(p.networkCount);
    for (float& v : network) {
      uint32_t bits = 0;
      (void)r.readLe(bits);
      v = std::bit_cast<float>(bits);
      if (!std::isfinite(v)) return core::corruption("lgc network parameter not finite");
    }
    std::vector<uint32_t> indices;
    if (p.k == d) {
      indices.resize(d);  // every element kept: no index list
      for (size_t i = 0; i < d; ++i) indices[i] = static_cast<uint32_t>(i);
    } else if (p.k > 0) {
      STARLING_RETURN_IF_ERROR(readIndexGaps(r, p.k, d, indices));
    }
    const uint32_t C = shape_.chunk, L = shape_.latent;
    const size_t chunks = (p.k + C - 1) / C;
    std::vector<T> values(p.k);
    if (p.mode == kValues) {
      if (r.remaining() != p.k * sizeof(T)) return core::corruption("lgc values length");
      for (T& v : values) {
        BitsOf<T> bits = 0;
        (void)r.readLe(bits);
        v = std::bit_cast<T>(bits);
        if (!std::isfinite(static_cast<double>(v))) return core::corruption("lgc value not finite");
      }
    } else {
      if (r.remaining() != chunks * (4 + 2 * size_t{L})) {
        return core::corruption("lgc codes length");
      }
      std::span<const float> decoder;
      if (p.mode == kCodesWithNetwork) {
        decoder = std::span<const float>(network).subspan(encoderSize_);
      } else {
        const std::vector<float>* held = nullptr;
        if (state != nullptr) {
          for (const auto& [version, dec] : state->decoders) {
            if (version == p.version) held = &dec;
          }
        }
        if (held == nullptr) return unknownVersion(p.version, state);
        decoder = *held;
      }
      std::vector<float> scales(chunks);
      for (float& s : scales) {
        uint32_t bits = 0;
        (void)r.readLe(bits);
        s = std::bit_cast<float>(bits);
        if (!std::isfinite(s)) return core::corruption("lgc chunk scale not finite");
      }
      std::vector<float> z(L), y(C);
      for (size_t c = 0; c < chunks; ++c) {
        for (uint32_t l = 0; l < L; ++l) {
          uint16_t h;
          (void)r.readLe(h);
          const double v = doubleFromHalf(h);
          if (!std::isfinite(v)) return core::corruption("lgc latent code not finite");
          z[l] = static_cast<float>(v);
        }
        lgc::decodeChunk<float>(shape_, decoder, z.data(), y.data());
        const size_t first = c * C, last = std::min<size_t>(p.k, first + C);
        for (size_t j = first; j < last; ++j) {
          values[j] = static_cast<T>(static_cast<double>(scales[c]) *
                                     static_cast<double>(y[j - first]));
        }
      }
    }
    // Every check passed: the state learns, and `out` is written.
    if (state != nullptr && shipsNetwork) {
      if (p.mode == kCodesWithNetwork) {
        auto& held = state->decoders;
        std::erase_if(held, [&](const auto& e) { return e.first == p.version; });
        held.emplace_back(p.version, std::vector<float>(network.begin() + encoderSize_,
                                                        network.end()));
        if (held.size() > kKeptVersions) held.erase(held.begin());
      }
      state->network = std::move(network);
      state->fresh = true;
    }
    std::fill(out.begin(), out.end(), T(0));
    for (size_t j = 0; j < p.k; ++j) out[indices[j]] = values[j];
    return core::Status::ok();
  }

  static core::Status unknownVersion(uint32_t version, const ReceiverState* state) {
    std::string held;
    if (state != nullptr) {
      for (const auto& e : state->decoders) {
        held += (held.empty() ? "" : ", ") + std::to_string(e.first);
      }
    }
    return core::corruption("lgc frame names decoder version " + std::to_string(version) +
                            ", which this receiver does not hold (" +
                            (state == nullptr ? std::string("a decode without the sender's state "
                                                            "holds none")
                                              : held.empty() ? std::string("it holds none")
                                                             : "it holds " + held) +
                            ")");
  }

  lgc::Shape shape_;
  size_t network_ = 0, encoderSize_ = 0;
  uint64_t k_;
  double ratio_;
  uint64_t warmup_, refresh_, shareEvery_;
  double lr_;
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeLgc(const CompressorSpec& spec) {
  return std::make_unique<LgcCompressor<T>>(spec);
}

template std::unique_ptr<Compressor<float>> makeLgc<float>(const CompressorSpec&);
template std::unique_ptr<Compressor<double>> makeLgc<double>(const CompressorSpec&);

}  // namespace starling::compression::codecs
