// libFuzzer target for one codec's decode(). tests/fuzz/meson.build links this file into one
// target per codec, each with its own codec_name.cc that names the codec (a compressorKindName).
//
// Properties checked for every input (fuzz_input.h describes the input):
//  - decode() returns ok or kCorruption, and reads and writes only inside its spans (ASan, UBSan
//    and _GLIBCXX_ASSERTIONS catch the rest);
//  - a failed decode leaves the output untouched, bit for bit;
//  - a successful decode writes every element, the same way every time: decoding again into a
//    buffer filled with another sentinel gives the same bits;
//  - a frame that decodes for d elements does not decode for d - 1 or d + 1 elements, nor as the
//    other element type;
//  - a linear codec's accumulator accepts exactly the frames decode() accepts, and one it rejects
//    leaves the sum at zero.
//
// With --make-corpus=DIR the binary writes seed inputs into DIR (frames that encodeStream() wrote
// for random vectors, two rounds of one stream) and exits; --print-frame=FILE shows the frame an
// input decodes (fuzz_input.h). Fuzzing and --make-corpus exit with 77, meson's "skipped", while
// the codec's factory is a placeholder that aborts (a codec being written).
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compression/compressor.h"
#include "core/rng.h"
#include "core/status.h"
#include "tests/fuzz/fuzz_input.h"

namespace starling::fuzz {

extern const char kCodecName[];  // codec_name.cc

namespace {

using compression::Compressor;
using compression::CompressorSpec;
using Kind = CompressorSpec::Kind;

Kind kindNamed(std::string_view name) {
  for (int k = 0;; ++k) {
    const auto kind = static_cast<Kind>(k);
    const std::string_view n = compression::compressorKindName(kind);
    if (n == name) return kind;
    if (n == "unknown") {
      std::fprintf(stderr, "fuzz target built for \"%s\": no codec has that name\n", name.data());
      std::exit(2);
    }
  }
}

// Two valid parameter sets per codec: a typical one and a corner (tiny buckets, fixed k, the
// other norm). Decoders take most parameters from the frame; encode() of the seeds uses them all.
CompressorSpec specFor(Kind kind, bool variant) {
  CompressorSpec s;
  s.kind = kind;
  s.ratio = 0.1;
  switch (kind) {
    case Kind::kTopK:
    case Kind::kTopKDithering:
      if (variant) s.k = 3;
      if (variant) s.levels = 1;
      break;
    case Kind::kRandK:
      if (variant) s.k = 3;
      s.scaled = !variant;
      break;
    case Kind::kQsgd:
    case Kind::kNuqsgd:
      if (variant) s.bits = kind == Kind::kQsgd ? 2 : 8;
      if (variant) s.bucket = 7;
      s.linf = variant;
      break;
    case Kind::kNaturalDithering:
      if (variant) s.levels = 30;
      s.linf = variant;
      break;
    case Kind::kCountSketch:
      s.rows = variant ? 3 : 5;
      s.cols = variant ? 16 : 64;
      s.meanEstimate = variant;
      break;
    case Kind::kAdaComp:
      if (variant) s.bin = 3;
      break;
    case Kind::kDqsgd:
      if (variant) s.maxBits = 3;
      if (variant) s.bucket = 7;
      break;
    case Kind::kInt8:
      if (variant) s.scaleChunk = 3;
      break;
    case Kind::kTopK2Bit:
    case Kind::kDctSign:
      // The typical set: chunks of 8, 2 kept (3-bit indices); the corner: chunks of 3, 2 kept.
      s.scaleChunk = variant ? 3 : 8;
      s.perChunk = 2;
      break;
    case Kind::kLgc:
      // Seeds of every mode: the typical set ships a new decoder every round (mode 2); the
      // corner has a warm-up round (mode 0), then one version kept (mode 2, then mode 1).
      s.chunk = variant ? 4 : 8;
      s.hidden = variant ? 3 : 8;
      s.latent = variant ? 1 : 2;
      s.warmup = variant ? 1 : 0;
      s.refresh = variant ? 0 : 1;
      break;
    default:
      break;
  }
  return s;
}

Kind fuzzedKind() {
  static const Kind kind = kindNamed(kCodecName);
  return kind;
}

// Exits with 77 when createCompressor aborts for this codec: its factory is still a placeholder.
// Probed in a child process, so the fuzzer itself never sees the abort.
void skipIfFactoryAborts() {
  const pid_t pid = fork();
  if (pid < 0) return;  // cannot probe: let the fuzzer run and report what happens
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);
    (void)compression::createCompressor<float>(specFor(fuzzedKind(), false));
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) {
    std::fprintf(stderr, "codec %s: createCompressor aborts (not implemented yet): skipped\n",
                 kCodecName);
    std::exit(77);
  }
}

template <typename T>
std::unique_ptr<Compressor<T>> make(bool variant) {
  auto c = compression::createCompressor<T>(specFor(fuzzedKind(), variant));
  if (!c) {
    std::fprintf(stderr, "createCompressor(%s): %s\n", kCodecName, c.status().toString().c_str());
    std::abort();
  }
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

// Fill patterns for output buffers. They differ in every bit, so an element that a decode leaves
// unwritten differs between two decodes into buffers filled with one and the other.
constexpr uint8_t kSentinel = 0xA5;
constexpr uint8_t kOtherSentinel = 0x5A;

template <typename T>
void checkAccumulator(const Compressor<T>& codec, std::span<const std::byte> frame, size_t d,
                      bool decoded) {
  auto acc = codec.newAccumulator(d);
  if (!acc) return;
  acc->reset();
  const core::Status st = acc->add(frame, 1.0);
  require(st.isOk() == decoded, "the accumulator and decode() disagree on a frame");
  std::vector<T> sum = filled<T>(d, kSentinel);
  acc->finish(sum);
  if (st.isOk()) return;
  require(st.code() == core::StatusCode::kCorruption, "accumulator add(): not kCorruption");
  for (T v : sum) require(v == T{0}, "a rejected frame changed the accumulator's sum");
}

// A codec with receiver state (LGC): decodeFrom with a fresh state accepts exactly what decode()
// accepts, with the same bits; with a state that has seen every earlier input (so it may hold
// decoder versions a later frame names) it returns ok or kCorruption.
template <typename T>
void checkReceiver(const Compressor<T>& codec, std::span<const std::byte> frame, size_t d,
                   const core::Status& decoded, const std::vector<T>& out) {
  auto fresh = codec.newReceiverState(d);
  if (!fresh) return;
  std::vector<T> scratch;
  auto got = codec.decodeFrom(frame, d, scratch, compression::Checksum::kVerify, fresh.get());
  require(got.isOk() == decoded.isOk(), "decodeFrom with a fresh state and decode() disagree");
  if (got.isOk()) {
    require(d == 0 || std::memcmp(got->data(), out.data(), d * sizeof(T)) == 0,
            "decodeFrom and decode() decode a frame differently");
  } else {
    require(got.status().code() == core::StatusCode::kCorruption, "decodeFrom: not kCorruption");
  }
  static std::unique_ptr<compression::CodecState> seasoned = codec.newReceiverState(d);
  auto again = codec.decodeFrom(frame, d, scratch, compression::Checksum::kVerify, seasoned.get());
  require(again.isOk() || again.status().code() == core::StatusCode::kCorruption,
          "decodeFrom with a used state: not ok and not kCorruption");
}

template <typename T, typename Other>
void check(const Compressor<T>& codec, const Compressor<Other>& other,
           std::span<const std::byte> frame, size_t d) {
  std::vector<T> out = filled<T>(d, kSentinel);
  const core::Status st = codec.decode(frame, out);
  checkReceiver(codec, frame, d, st, out);
  if (!st.isOk()) {
    require(st.code() == core::StatusCode::kCorruption, "decode() failed but not with kCorruption");
    require(allBytes(out, kSentinel), "a failed decode() wrote into its output");
    checkAccumulator(codec, frame, d, false);
    return;
  }
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
  checkAccumulator(codec, frame, d, true);
}

// A vector with a third of its entries zero and a magnitude between 1e-3 and 1e3.
template <typename T>
std::vector<T> seedVector(size_t d, core::Rng& rng) {
  std::vector<T> x(d);
  const double scale = std::pow(10.0, 6.0 * rng.uniform() - 3.0);
  for (T& v : x) v = rng.below(3) == 0 ? T{0} : static_cast<T>(scale * rng.normal());
  return x;
}

template <typename T>
void writeSeeds(const std::string& dir) {
  core::Rng rng(20240611);
  std::vector<std::byte> frame;
  for (bool variant : {false, true}) {
    const Compressor<T>& codec = codecs().get(static_cast<T*>(nullptr), variant);
    for (size_t d : {0, 1, 2, 7, 8, 9, 33, 100, 513, 1000}) {
      std::vector<T> x = seedVector<T>(d, rng);
      auto state = codec.newState(d);
      for (uint64_t round = 0; round < 2; ++round) {
        compression::StreamContext ctx;
        ctx.round = round;
        ctx.sharedSeed = 7;
        ctx.state = state.get();
        codec.encodeStream(x, rng, ctx, frame);
        const uint8_t control = kFixCrc | kFixPayloadLength | kExactCount |
                                (sizeof(T) == 8 ? kDouble : 0) | (variant ? kVariant : 0);
        writeSeed(dir,
                  std::string(sizeof(T) == 8 ? "f64" : "f32") + (variant ? "-v1" : "-v0") + "-d" +
                      std::to_string(d) + "-r" + std::to_string(round),
                  control, frame);
        for (T& v : x) v = static_cast<T>(static_cast<double>(v) + 0.1 * rng.normal());
      }
    }
  }
}

}  // namespace
}  // namespace starling::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using namespace starling::fuzz;
  const std::string dir = handleArguments(*argc, *argv);
  skipIfFactoryAborts();
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
