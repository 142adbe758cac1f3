// The GPU codecs and combine against the CPU ones (docs/cuda.md), on a real GPU: frames byte for
// byte, decodes bit for bit, QSGD's statistics, the combine bit for bit (top-k and Count-Sketch
// in gpu_sparse_test.cc, the same program). Without a driver or a
// device it prints why and exits 77, which meson counts as skipped; tools/gpu_check runs it on a
// machine with a GPU (also under compute-sanitizer and with nvcc's PTX).
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "compression/codecs/elementwise.h"
#include "compression/compressor.h"
#include "core/rng.h"
#include "cuda/codecs.h"
#include "cuda/driver.h"
#include "optim/choco.h"
#include "optim/combine.h"
#include "optim/lead.h"
#include "optim/regularizer.h"
#include "tests/catch_runner.h"
#include "tests/cuda/gpu_testing.h"

using namespace starling;
using compression::CompressorSpec;
using Kind = CompressorSpec::Kind;
namespace ew = starling::compression::elementwise;

namespace {

using namespace starling::gpu_testing;

TEST_CASE("GPU fp16 and bf16 frames are the CPU codecs' byte for byte, and decode alike", "[gpu]") {
  cuda::GpuCodecs gpu(*theGpu);
  for (Kind kind : {Kind::kFp16, Kind::kBf16}) {
    for (size_t n : {size_t{1}, size_t{1000}, quick ? size_t{20011} : size_t{1} << 20 | 3}) {
      CompressorSpec spec;
      spec.kind = kind;
      const auto x = values(n, static_cast<uint32_t>(n), true);
      OnDevice<float> dx(x);
      auto frame = gpu.encode(spec, dx.ptr(), n, 0);
      REQUIRE(frame);
      const auto cpu = cpuFrame(spec, x, 1);
      INFO("kind " << static_cast<int>(kind) << " n " << n);
      REQUIRE(frame->size() == cpu.size());
      REQUIRE(std::memcmp(frame->data(), cpu.data(), cpu.size()) == 0);
      OnDevice<float> out(n);
      REQUIRE(gpu.decode(spec, cpu, out.ptr(), n).isOk());
      REQUIRE(sameBits(out.read(n), cpuDecode(spec, cpu, n)));
      // From an address that is not 16-byte aligned (a tensor's view): the one-at-a-time path.
      if (n > 1) {
        auto shifted = gpu.encode(spec, dx.ptr() + sizeof(float), n - 1, 0);
        REQUIRE(shifted);
        const auto cpuShifted = cpuFrame(spec, std::span<const float>(x).subspan(1), 1);
        REQUIRE(shifted->size() == cpuShifted.size());
        REQUIRE(std::memcmp(shifted->data(), cpuShifted.data(), cpuShifted.size()) == 0);
      }
    }
  }
}

// The reference of a GPU frame of scaled codes, written here: the CPU codec's header and scales
// (scales are deterministic), and codes from the shared rounding rules with the counter-based
// bits, packed by hand, low bits first. s, the level bits and the bucket as the format defines
// them per codec (docs/wire_format.md).
std::vector<std::byte> scaledReference(const CompressorSpec& spec, std::span<const float> x,
                                       uint64_t seed) {
  std::vector<std::byte> frame = cpuFrame(spec, x, 99);
  const uint64_t n = x.size();
  const bool exponential = spec.kind != Kind::kQsgd;
  const uint32_t s = spec.kind == Kind::kNaturalDithering ? static_cast<uint32_t>(spec.levels)
                                                          : (1u << (spec.bits - 1)) - 1;
  const int levelBits = spec.kind == Kind::kQsgd ? spec.bits - 1 : std::bit_width(s);
  const int width = levelBits + 1;
  const uint32_t signBit = 1u << levelBits;
  const uint64_t bucket = spec.kind == Kind::kNaturalDithering ? n : spec.bucket;
  const uint64_t buckets = (n + bucket - 1) / bucket;
  const size_t payloadBytes = 4 * buckets + (n * width + 7) / 8;
  std::byte* payload = frame.data() + frame.size() - 4 - payloadBytes;
  std::byte* stream = payload + 4 * buckets;
  std::memset(stream, 0, payloadBytes - 4 * buckets);
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t scaleBits;
    std::memcpy(&scaleBits, payload + 4 * (i / bucket), 4);
    const float scale = std::bit_cast<float>(scaleBits);
    uint32_t code = 0;
    const uint32_t u = ew::counterUniform16(seed, i);
    const double a = std::fabs(static_cast<double>(x[i]));
    if (std::isfinite(scale) && scale > 0.0f && exponential) {
      const double inv = 1.0 / static_cast<double>(scale);
      code = s <= 31 && inv >= 1.1754943508222875e-38 && inv <= 3.4028234663852886e38
                 ? ew::exponentialCodeFloat(x[i], static_cast<float>(inv), s,
                                            ew::exponentialBelowFactorFloat(s), u, signBit)
                 : ew::exponentialCodeDouble(a, x[i] < 0, inv, s, ew::exponentialBelowFactor(s), u,
                                             signBit);
    } else if (std::isfinite(scale) && scale > 0.0f) {
      const double k = static_cast<double>(s) * 65536.0 / static_cast<double>(scale);
      code = s <= 63 && k <= 3.4028234663852886e38
                 ? ew::uniformCodeFloat(x[i], static_cast<float>(k), s << 16, u, signBit)
                 : ew::uniformCodeDouble(a, x[i] < 0, k, s << 16, u, signBit);
    }
    for (int b = 0; b < width; ++b) {
      if ((code >> b) & 1u) {
        const uint64_t bit = i * width + b;
        stream[bit / 8] |= static_cast<std::byte>(1u << (bit % 8));
      }
    }
  }
  return frame;  // its trailer is the CPU frame's: compare all but the last 4 bytes
}

void checkScaled(cuda::GpuCodecs& gpu, const CompressorSpec& spec, size_t n, uint32_t dataSeed) {
  auto x = values(n, dataSeed, false);
  for (size_t i = 0; i < std::min<size_t>(n, 40); ++i) x[i] = 0.0f;  // an all-zero bucket
  if (n > 1000) x[777] = 3.0e-39f;                                   // a float32 subnormal
  OnDevice<float> dx(x);
  const uint64_t seed = 0xabcdef12345ULL + dataSeed;
  auto frame = gpu.encode(spec, dx.ptr(), n, seed);
  REQUIRE(frame);
  const auto want = scaledReference(spec, x, seed);
  REQUIRE(frame->size() == want.size());
  REQUIRE(std::memcmp(frame->data(), want.data(), want.size() - 4) == 0);
  // The CPU decoder accepts it (the trailer's CRC included) ...
  const std::vector<std::byte> copy(frame->begin(), frame->end());
  const auto cpuValues = cpuDecode(spec, copy, n);
  // ... and the GPU decoder gives the CPU decoder's values bit for bit.
  OnDevice<float> out(n);
  REQUIRE(gpu.decode(spec, copy, out.ptr(), n).isOk());
  REQUIRE(sameBits(out.read(n), cpuValues));
}

TEST_CASE("GPU scaled-code frames: the CPU codec's scales, the counter-based codes, decodable",
          "[gpu]") {
  cuda::GpuCodecs gpu(*theGpu);
  const size_t n = quick ? 20011 : 300001;
  for (int bits : {2, 3, 4, 5, 8}) {
    for (uint64_t bucket :
         {uint64_t{1}, uint64_t{7}, uint64_t{512}, uint64_t{100000}, uint64_t{1} << 21}) {
      for (bool linf : {false, true}) {
        CompressorSpec spec;
        spec.kind = Kind::kQsgd;
        spec.bits = bits;
        spec.bucket = bucket;
        spec.linf = linf;
        INFO("qsgd bits " << bits << " bucket " << bucket << " linf " << linf);
        checkScaled(gpu, spec, n, static_cast<uint32_t>(bits * 31 + bucket + linf));
      }
      CompressorSpec spec;
      spec.kind = Kind::kNuqsgd;
      spec.bits = bits;
      spec.bucket = bucket;
      INFO("nuqsgd bits " << bits << " bucket " << bucket);
      checkScaled(gpu, spec, n, static_cast<uint32_t>(bits * 37 + bucket));
    }
  }
  for (int levels : {1, 3, 8, 30}) {
    for (bool linf : {false, true}) {
      CompressorSpec spec;
      spec.kind = Kind::kNaturalDithering;
      spec.levels = levels;
      spec.linf = linf;
      INFO("natural dithering levels " << levels << " linf " << linf);
      checkScaled(gpu, spec, n, static_cast<uint32_t>(levels * 41 + linf));
      checkScaled(gpu, spec, 1, 3);
    }
  }
}

// Vectors of ones: the sum of squares n is exact and its square root a float32 when n is a power
// of four, so the parallel sum's bounds always round apart and the scale needs the serial sum:
// on the device for a bucket of up to 65536 elements, on the host above.
TEST_CASE("GPU scales that need the serial sum, on the device and on the host", "[gpu]") {
  struct Case {
    Kind kind;
    uint64_t bucket;
    size_t n;
    bool onHost;
  };
  for (const Case& c :
       {Case{Kind::kQsgd, 4096, 16384, false}, Case{Kind::kQsgd, 1u << 20, 1u << 20, true},
        Case{Kind::kNaturalDithering, 0, quick ? 1u << 18 : 1u << 22, true}}) {
    cuda::GpuCodecs gpu(*theGpu);
    CompressorSpec spec;
    spec.kind = c.kind;
    spec.bucket = c.bucket;
    spec.levels = 3;
    const std::vector<float> x(c.n, 1.0f);
    OnDevice<float> dx(x);
    auto frame = gpu.encode(spec, dx.ptr(), c.n, 5);
    REQUIRE(frame);
    const auto want = scaledReference(spec, x, 5);
    INFO("kind " << static_cast<int>(c.kind) << " bucket " << c.bucket << " n " << c.n);
    REQUIRE(frame->size() == want.size());
    REQUIRE(std::memcmp(frame->data(), want.data(), want.size() - 4) == 0);
    REQUIRE((gpu.serialScalesOnHost() > 0) == c.onHost);
  }
}

// Unbiasedness: the mean of F decoded frames within 5 standard deviations of x. One decode's
// error is within one level spacing, so its standard deviation is at most half of it: scale / s
// for QSGD's uniform levels, scale / 2 for exponential ones (the widest gap, 1/2 to 1).
TEST_CASE("GPU scaled codecs are unbiased: the mean of many frames approaches x", "[gpu]") {
  cuda::GpuCodecs gpu(*theGpu);
  for (Kind kind : {Kind::kQsgd, Kind::kNuqsgd, Kind::kNaturalDithering}) {
    CompressorSpec spec;
    spec.kind = kind;
    spec.bits = 3;
    spec.levels = 3;
    spec.bucket = 64;
    const size_t n = 4096;
    const uint64_t bucket = kind == Kind::kNaturalDithering ? n : spec.bucket;
    const auto x = values(n, 5, false);
    OnDevice<float> dx(x);
    OnDevice<float> out(n);
    std::vector<double> mean(n, 0.0);
    const int frames = quick ? 40 : 400;
    for (int f = 0; f < frames; ++f) {
      auto frame = gpu.encode(spec, dx.ptr(), n, core::mix64(f));
      REQUIRE(frame);
      const std::vector<std::byte> copy(frame->begin(), frame->end());
      REQUIRE(gpu.decode(spec, copy, out.ptr(), n).isOk());
      const auto v = out.read(n);
      for (size_t i = 0; i < n; ++i) mean[i] += v[i] / frames;
    }
    const double spacing = kind == Kind::kQsgd ? 1.0 / 3.0 : 0.5;  // of the scale
    for (size_t b = 0; b < n / bucket; ++b) {
      double norm = 0.0;
      for (size_t i = b * bucket; i < (b + 1) * bucket; ++i)
        norm += static_cast<double>(x[i]) * x[i];
      const double tol =
          5.0 * std::sqrt(norm) * spacing / (2.0 * std::sqrt(static_cast<double>(frames)));
      INFO("kind " << static_cast<int>(kind));
      for (size_t i = b * bucket; i < (b + 1) * bucket; ++i) {
        REQUIRE(std::fabs(mean[i] - x[i]) <= tol);
      }
    }
  }
}

// Vectors of n standard normal values in T, from a seeded generator.
template <typename T>
struct RandomVectors {
  std::mt19937 gen;
  std::normal_distribution<double> normal{0.0, 1.0};
  size_t n;
  RandomVectors(uint32_t seed, size_t size) : gen(seed), n(size) {}
  std::vector<T> operator()() {
    std::vector<T> v(n);
    for (auto& e : v) e = static_cast<T>(normal(gen));
    return v;
  }
};

// A round's neighbour messages, on the host for the CPU algorithm and on the device for the GPU
// one, each with weight w.
template <typename T>
struct Neighbours {
  std::vector<std::vector<T>> host;
  std::vector<std::unique_ptr<OnDevice<T>>> device;
  std::vector<cuda::DevicePtr> ptrs;
  std::vector<T> w;
  std::vector<optim::NeighborMessage<T>> cpu;
  template <typename Make>
  Neighbours(size_t count, double weight, Make&& make) {
    for (size_t j = 0; j < count; ++j) host.push_back(make());
    for (size_t j = 0; j < count; ++j) {
      device.push_back(std::make_unique<OnDevice<T>>(host[j]));
      ptrs.push_back(device.back()->ptr());
      w.push_back(static_cast<T>(weight));
      cpu.push_back({static_cast<int>(j), weight, host[j]});
    }
  }
};

template <typename T>
void checkCombine(size_t neighbours, size_t n) {
  cuda::GpuCodecs gpu(*theGpu);
  RandomVectors<T> vec(static_cast<uint32_t>(neighbours * 7 + n), n);
  const auto start = vec(), self = vec();
  const Neighbours<T> nb(neighbours, 1.0 / static_cast<double>(neighbours + 1), vec);
  std::vector<T> cpu(n);
  optim::detail::combine<T>(cpu.data(), nullptr, start.data(), self.data(), nb.cpu, T(1), 0, n,
                            nullptr);
  OnDevice<T> dStart(start), dSelf(self), dOut(n);
  REQUIRE(gpu.combine(dOut.ptr(), dStart.ptr(), dSelf.ptr(), nb.ptrs, std::span<const T>(nb.w), n)
              .isOk());
  const auto got = dOut.read(n);
  INFO("neighbours " << neighbours << " n " << n);
  REQUIRE(std::memcmp(got.data(), cpu.data(), n * sizeof(T)) == 0);
}

TEST_CASE("GPU combine equals the CPU combine bit for bit", "[gpu]") {
  for (size_t k : {0, 1, 2, 4, 5, 16, 17, 40}) {
    checkCombine<float>(k, quick ? 10007 : 100003);
    checkCombine<double>(k, quick ? 10007 : 100003);
  }
}

// A gradient the test can compute for either side: g = a x + b, elementwise.
template <typename T>
struct LinearOracle final : optim::GradientOracle<T> {
  std::vector<T> a, b;
  void gradient(std::span<const T> x, std::span<T> out) override {
    for (size_t k = 0; k < x.size(); ++k) out[k] = a[k] * x[k] + b[k];
  }
};

// A linear gradient g = a x + b with random a and b, and a random starting point.
template <typename T>
struct LinearOracleWithStart {
  LinearOracle<T> oracle;
  std::vector<T> x0;
  explicit LinearOracleWithStart(RandomVectors<T>& vec) {
    oracle.a = vec();
    oracle.b = vec();
    x0 = vec();
  }
};

// Three rounds of CHOCO-SGD (static W) on the GPU against optim's CPU algorithm: the messages
// and the model bit for bit.
template <typename T>
void checkChoco(size_t neighbours, size_t n) {
  cuda::GpuCodecs gpu(*theGpu);
  RandomVectors<T> vec(static_cast<uint32_t>(neighbours * 13 + n), n);
  const LinearOracleWithStart<T> problem(vec);
  LinearOracle<T> oracle = problem.oracle;
  const auto& x0 = problem.x0;
  optim::AlgorithmSpec spec;
  spec.gamma = 0.4;
  auto cpu = optim::createChoco<T>(spec, x0, oracle);
  const std::vector<T> zeros(n, T(0));
  OnDevice<T> dx(x0), ds(zeros), dhat(zeros), dout(n), dg(n);
  for (uint64_t round = 0; round < 3; ++round) {
    optim::RoundInfo info;
    info.round = round;
    info.stepSize = 0.05;
    info.selfWeight = 1.0 / static_cast<double>(neighbours + 1);
    std::vector<T> want(n);
    cpu->prepare(info, want);
    const auto x = dx.read(n);
    std::vector<T> g(n);
    oracle.gradient(x, g);
    REQUIRE(theGpu->copyToDevice(dg.ptr(), g.data(), n * sizeof(T)).isOk());
    REQUIRE(gpu.chocoPrepare(dx.ptr(), dg.ptr(), ds.ptr(), dhat.ptr(), dout.ptr(),
                             static_cast<T>(info.stepSize), static_cast<T>(spec.gamma), n)
                .isOk());
    INFO("neighbours " << neighbours << " round " << round);
    REQUIRE(std::memcmp(dout.read(n).data(), want.data(), n * sizeof(T)) == 0);
    const Neighbours<T> nb(neighbours, info.selfWeight, vec);
    cpu->absorb(info, want, nb.cpu);
    REQUIRE(gpu.chocoAbsorb(dhat.ptr(), ds.ptr(), dout.ptr(), static_cast<T>(info.selfWeight),
                            nb.ptrs, std::span<const T>(nb.w), n)
                .isOk());
  }
  const auto model = cpu->model();
  REQUIRE(std::memcmp(dx.read(n).data(), model.data(), n * sizeof(T)) == 0);
}

TEST_CASE("GPU CHOCO-SGD steps equal the CPU algorithm bit for bit", "[gpu]") {
  for (size_t k : {0, 1, 3, 16, 20}) {
    checkChoco<float>(k, quick ? 10007 : 100003);
    checkChoco<double>(k, quick ? 10007 : 100003);
  }
}

// Four rounds of LEAD (and Prox-LEAD with an l1 term and a box) on the GPU against optim's CPU
// algorithm: the messages and the model bit for bit.
template <typename T>
void checkLead(size_t neighbours, size_t n, const optim::RegularizerSpec& r) {
  cuda::GpuCodecs gpu(*theGpu);
  RandomVectors<T> vec(static_cast<uint32_t>(neighbours * 17 + n), n);
  const LinearOracleWithStart<T> problem(vec);
  LinearOracle<T> oracle = problem.oracle;
  const auto& x0 = problem.x0;
  optim::AlgorithmSpec spec;
  spec.alpha = 0.3;
  spec.gamma = 0.7;
  spec.regularizer = r;
  auto cpu = optim::createLead<T>(spec, x0, oracle);
  const std::vector<T> zeros(n, T(0));
  OnDevice<T> dx(x0), dz(zeros), dg(zeros), dd(zeros), dLost(zeros), de(zeros), dh(zeros), dout(n);
  const cuda::GpuCodecs::LeadBuffers<T> b{dx.ptr(),    dz.ptr(), dg.ptr(), dd.ptr(),
                                          dLost.ptr(), de.ptr(), dh.ptr()};
  const double eta = 0.05;
  const auto prox = optim::proxParams<T>(r, eta);
  auto gradientAtX = [&] {
    const auto x = dx.read(n);
    std::vector<T> g(n);
    oracle.gradient(x, g);
    REQUIRE(theGpu->copyToDevice(dg.ptr(), g.data(), n * sizeof(T)).isOk());
  };
  gradientAtX();
  REQUIRE(gpu.leadStart(b, static_cast<T>(eta), prox, n).isOk());
  for (uint64_t round = 0; round < 4; ++round) {
    optim::RoundInfo info;
    info.round = round;
    info.stepSize = eta;
    info.selfWeight = 1.0 / static_cast<double>(neighbours + 1);
    std::vector<T> want(n);
    cpu->prepare(info, want);  // the first one starts the algorithm, as leadStart did
    gradientAtX();
    REQUIRE(gpu.leadPrepare(b, dout.ptr(), static_cast<T>(eta), n).isOk());
    INFO("neighbours " << neighbours << " round " << round << " l1 " << r.l1);
    REQUIRE(std::memcmp(dout.read(n).data(), want.data(), n * sizeof(T)) == 0);
    const Neighbours<T> nb(neighbours, info.selfWeight, vec);
    cpu->absorb(info, want, nb.cpu);
    REQUIRE(gpu.leadAbsorb(b, dout.ptr(), nb.ptrs, std::span<const T>(nb.w), static_cast<T>(eta),
                           static_cast<T>(spec.gamma / (2.0 * eta)), static_cast<T>(spec.alpha),
                           prox, n)
                .isOk());
  }
  const auto model = cpu->model();
  REQUIRE(std::memcmp(dx.read(n).data(), model.data(), n * sizeof(T)) == 0);
}

TEST_CASE("GPU LEAD and Prox-LEAD steps equal the CPU algorithm bit for bit", "[gpu]") {
  optim::RegularizerSpec none, l1Box;
  l1Box.l1 = 0.3;
  l1Box.lower = -0.8;
  l1Box.upper = 0.9;
  for (size_t k : {0, 1, 2, 16}) {
    for (const auto& r : {none, l1Box}) {
      checkLead<float>(k, quick ? 10007 : 100003, r);
      checkLead<double>(k, quick ? 10007 : 100003, r);
    }
  }
}

TEST_CASE("hostile frames are rejected before any byte reaches the device", "[gpu]") {
  cuda::GpuCodecs gpu(*theGpu);
  for (Kind kind : {Kind::kQsgd, Kind::kTopK, Kind::kCountSketch}) {
    CompressorSpec spec;
    spec.kind = kind;
    spec.k = 20;
    spec.cols = 64;
    const size_t n = 1000;
    const auto x = values(n, 3, false);
    auto frame = cpuFrame(spec, x, 5);
    OnDevice<float> out(n);
    for (size_t cut = 0; cut < frame.size(); cut += 7) {
      REQUIRE_FALSE(
          gpu.decode(spec, std::span<const std::byte>(frame).first(cut), out.ptr(), n).isOk());
    }
    for (size_t i = 0; i < frame.size(); i += 5) {
      auto bad = frame;
      bad[i] ^= std::byte{0x10};
      REQUIRE_FALSE(gpu.decode(spec, bad, out.ptr(), n).isOk());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto gpu = cuda::Gpu::open(0);
  if (!gpu) {
    std::printf("cuda_gpu: skipped, no GPU here: %s\n", gpu.status().message().c_str());
    return 77;
  }
  std::printf("cuda_gpu: %s (sm_%d, %d SMs), kernels from %s PTX\n", (*gpu)->name().c_str(),
              (*gpu)->computeCapability(), (*gpu)->multiprocessors(), (*gpu)->ptxSource().c_str());
  theGpu = gpu->get();
  const int failed = starling::testing::runCatch(argc, argv);
  theGpu = nullptr;
  return failed == 0 ? 0 : 1;
}
