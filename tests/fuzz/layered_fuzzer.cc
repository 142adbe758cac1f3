// libFuzzer target for the layered codec's decode() (codec 14, docs/wire_format.md). Its codecs
// are built over a fixed layout, so unlike codec_fuzzer.cc it has no kind name: two layouts and
// rule sets, the second picked by the control byte's variant bit (fuzz_input.h).
//
// Properties checked for every input:
//  - decode() returns ok or kCorruption, and reads and writes only inside its spans;
//  - a failed decode leaves the output untouched, bit for bit;
//  - a successful decode writes every element, the same way every time;
//  - decodeView() agrees with decode() on every input, with and without the CRC check skipped
//    on a frame whose CRC is right;
//  - a frame that decodes for d elements does not decode for d - 1 or d + 1, nor as the other
//    element type.
//
// With --make-corpus=DIR it writes seeds (frames encodeStream() wrote, three rounds of a stream
// with error feedback) and exits; --print-frame=FILE shows the frame an input decodes.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compression/compressor.h"
#include "core/rng.h"
#include "core/status.h"
#include "tests/fuzz/fuzz_input.h"

namespace starling::fuzz {
namespace {

using compression::Compressor;
using compression::CompressorSpec;
using compression::LayerRule;
using Kind = CompressorSpec::Kind;

// Variant 0: an mlp-like layout, first and last layers with identity, top-10% in between, one
// tensor with qsgd. Variant 1: tiny tensors, fp16 and sign and natural dithering with error
// feedback, a group scattered over three runs.
const std::vector<size_t> kLayouts[2] = {{300, 20, 200, 10, 60, 3}, {3, 1, 2, 1, 4, 1, 5}};

CompressorSpec specFor(bool variant) {
  CompressorSpec s;
  if (!variant) {
    s.kind = Kind::kTopK;
    s.ratio = 0.1;
    CompressorSpec id;
    CompressorSpec q;
    q.kind = Kind::kQsgd;
    q.bits = 3;
    q.bucket = 16;
    s.layers = {LayerRule{{0, 1, -2, -1}, id}, LayerRule{{2}, q}};
  } else {
    s.kind = Kind::kNaturalDithering;
    s.levels = 3;
    s.errorFeedback = true;
    CompressorSpec f;
    f.kind = Kind::kFp16;
    CompressorSpec sign;
    sign.kind = Kind::kSign;
    sign.errorFeedback = true;
    s.layers = {LayerRule{{0, 3, -1}, f}, LayerRule{{1}, sign}};
  }
  return s;
}

template <typename T>
std::unique_ptr<Compressor<T>> make(bool variant) {
  auto c = compression::createCompressor<T>(specFor(variant), kLayouts[variant ? 1 : 0]);
  if (!c) {
    std::fprintf(stderr, "createCompressor(layered): %s\n", c.status().toString().c_str());
    std::abort();
  }
  require((*c)->id() == compression::CodecId::kLayered, "the spec does not build codec 14");
  return std::move(*c);
}

struct Codecs {
  std::unique_ptr<Compressor<float>> f[2] = {make<float>(false), make<float>(true)};
  std::unique_ptr<Compressor<double>> d[2] = {make<double>(false), make<double>(true)};
  const Compressor<float>& get(float*, bool variant) const { return *f[variant ? 1 : 0]; }
  const Compressor<double>& get(double*, bool variant) const { return *d[variant ? 1 : 0]; }
};

const Codecs& codecs() {
  static const Codecs c;
  return c;
}

template <typename T>
std::vector<T> filled(size_t n, uint8_t byte) {
  std::vector<T> v(n);
  if (n > 0) std::memset(v.data(), byte, n * sizeof(T));
  return v;
}

template <typename T>
bool allBytes(const std::vector<T>& v, uint8_t byte) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) {
    if (p[i] != byte) return false;
  }
  return true;
}

constexpr uint8_t kSentinel = 0xA5;
constexpr uint8_t kOtherSentinel = 0x5A;

template <typename T, typename Other>
void check(const Compressor<T>& codec, const Compressor<Other>& other,
           std::span<const std::byte> frame, size_t d) {
  std::vector<T> out = filled<T>(d, kSentinel);
  const core::Status st = codec.decode(frame, out);
  std::vector<T> scratch;
  const auto view = codec.decodeView(frame, d, scratch, compression::Checksum::kVerify);
  require(view.isOk() == st.isOk(), "decodeView() and decode() disagree on a frame");
  if (!st.isOk()) {
    require(st.code() == core::StatusCode::kCorruption, "decode() failed but not with kCorruption");
    require(view.status().code() == core::StatusCode::kCorruption,
            "decodeView() failed but not with kCorruption");
    require(allBytes(out, kSentinel), "a failed decode() wrote into its output");
    return;
  }
  require(d == 0 || std::memcmp(view->data(), out.data(), d * sizeof(T)) == 0,
          "decodeView() and decode() give different values");
  std::vector<T> skipScratch;
  const auto skipped = codec.decodeView(frame, d, skipScratch, compression::Checksum::kSkip);
  require(skipped.isOk(), "a frame that decodes fails with the CRC check skipped");
  std::vector<T> again = filled<T>(d, kOtherSentinel);
  require(codec.decode(frame, again).isOk(), "a second decode() of the same frame failed");
  require(d == 0 || std::memcmp(out.data(), again.data(), d * sizeof(T)) == 0,
          "decode() left elements unwritten, or two decodes of one frame differ");
  std::vector<T> longer(d + 1);
  require(!codec.decode(frame, longer).isOk(), "a frame decoded for d and for d + 1 elements");
  if (d > 0) {
    std::vector<T> shorter(d - 1);
    require(!codec.decode(frame, shorter).isOk(), "a frame decoded for d and for d - 1 elements");
  }
  std::vector<Other> asOther(d);
  require(!other.decode(frame, asOther).isOk(), "a frame decoded as float32 and as float64");
}

template <typename T>
void writeSeeds(const std::string& dir) {
  core::Rng rng(20261125);
  std::vector<std::byte> frame;
  for (bool variant : {false, true}) {
    const Compressor<T>& codec = codecs().get(static_cast<T*>(nullptr), variant);
    size_t d = 0;
    for (size_t n : kLayouts[variant ? 1 : 0]) d += n;
    for (int vector = 0; vector < 3; ++vector) {
      std::vector<T> x(d);
      const double scale = std::pow(10.0, 4.0 * rng.uniform() - 2.0);
      for (T& v : x) v = rng.below(4) == 0 ? T{0} : static_cast<T>(scale * rng.normal());
      auto state = codec.newState(d);
      for (uint64_t round = 0; round < 3; ++round) {
        compression::StreamContext ctx;
        ctx.round = round;
        ctx.sharedSeed = 7;
        ctx.state = state.get();
        codec.encodeStream(x, rng, ctx, frame);
        const uint8_t control = kFixCrc | kFixPayloadLength | kExactCount |
                                (sizeof(T) == 8 ? kDouble : 0) | (variant ? kVariant : 0);
        writeSeed(dir,
                  std::string(sizeof(T) == 8 ? "f64" : "f32") + (variant ? "-v1" : "-v0") + "-x" +
                      std::to_string(vector) + "-r" + std::to_string(round),
                  control, frame);
        for (T& v : x) v = static_cast<T>(static_cast<double>(v) + 0.1 * scale * rng.normal());
      }
    }
  }
}

}  // namespace
}  // namespace starling::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using namespace starling::fuzz;
  const std::string dir = handleArguments(*argc, *argv);
  if (!dir.empty()) {
    writeSeeds<float>(dir);
    writeSeeds<double>(dir);
    std::exit(0);
  }
  (void)codecs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace starling::fuzz;
  const FuzzFrame input(data, size);
  const bool v = input.wantsVariant();
  const Codecs& c = codecs();
  if (input.wantsDouble()) {
    check(c.get(static_cast<double*>(nullptr), v), c.get(static_cast<float*>(nullptr), v),
          input.frame(), input.outputSize());
  } else {
    check(c.get(static_cast<float*>(nullptr), v), c.get(static_cast<double*>(nullptr), v),
          input.frame(), input.outputSize());
  }
  return 0;
}
