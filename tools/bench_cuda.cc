// bench-cuda: the GPU codecs' and combine's throughput on one device, side by side with the
// device's own copy (cuMemcpyDtoD) in the same run (docs/cuda.md, "Benchmarks"). Each kernel's
// rate counts the bytes it must read and write once (float32 in, codes out), so a kernel at the
// copy's rate would be as fast as memory allows. Times are CUDA events around `reps` launches
// after a warm-up; the median of 5 such runs is reported. Also the end-to-end encode (kernels,
// the frame's copy to pinned host memory, its CRC) of one training step's exchange.
//
// usage: bench-cuda [--json FILE] [--max-d N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compression/compressor.h"
#include "cuda/codecs.h"
#include "cuda/driver.h"

using namespace starling;
using compression::CompressorSpec;

namespace {

struct Row {
  std::string what;
  uint64_t d;
  double bytes;  // read + written per run
  double ms;
};

template <typename F>
double medianMs(cuda::Gpu& gpu, int reps, F&& once) {
  for (int w = 0; w < 2; ++w) {
    if (!once().isOk()) return -1;
  }
  if (!gpu.sync().isOk()) return -1;
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    auto ms = gpu.time([&]() -> core::Status {
      for (int i = 0; i < reps; ++i) STARLING_RETURN_IF_ERROR(once());
      return core::Status::ok();
    });
    if (!ms) {
      std::fprintf(stderr, "bench-cuda: %s\n", ms.status().message().c_str());
      return -1;
    }
    runs.push_back(*ms / reps);
  }
  std::sort(runs.begin(), runs.end());
  return runs[2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* jsonPath = nullptr;
  uint64_t maxD = 100000000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      jsonPath = argv[++i];
    else if (std::strcmp(argv[i], "--max-d") == 0 && i + 1 < argc)
      maxD = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: bench-cuda [--json FILE] [--max-d N]\n");
      return 2;
    }
  }
  auto opened = cuda::Gpu::open(0);
  if (!opened) {
    std::printf("bench-cuda: no GPU: %s\n", opened.status().message().c_str());
    return 77;
  }
  cuda::Gpu& gpu = **opened;
  std::printf("bench-cuda: %s (sm_%d, %d SMs), kernels from %s PTX\n", gpu.name().c_str(),
              gpu.computeCapability(), gpu.multiprocessors(), gpu.ptxSource().c_str());
  cuda::GpuCodecs codecs(gpu);
  std::vector<Row> rows;
  for (uint64_t d = 1000000; d <= maxD; d *= 10) {
    const int reps = d >= 100000000 ? 5 : d >= 10000000 ? 20 : 100;
    std::vector<float> host(d);
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    for (auto& v : host) v = normal(gen);
    cuda::Gpu::Scope scope(gpu);
    auto x = cuda::DeviceBuffer::allocate(4 * d).value();
    auto y = cuda::DeviceBuffer::allocate(4 * d).value();
    auto h = cuda::DeviceBuffer::allocate(2 * d).value();
    std::vector<cuda::DeviceBuffer> nb;
    for (int j = 0; j < 5; ++j) nb.push_back(cuda::DeviceBuffer::allocate(4 * d).value());
    if (!gpu.copyToDevice(x.ptr(), host.data(), 4 * d).isOk()) return 1;
    for (auto& b : nb) (void)gpu.copyOnDevice(b.ptr(), x.ptr(), 4 * d);
    uint64_t n = d;
    int vec4 = 1;  // cuMemAlloc's addresses are 256-byte aligned
    cuda::DevicePtr xp = x.ptr(), yp = y.ptr(), hp = h.ptr();
    auto add = [&](const std::string& what, double bytes, double ms) {
      rows.push_back({what, d, bytes, ms});
      std::printf("%-34s d=%-10llu %9.3f ms %8.1f GB/s\n", what.c_str(),
                  static_cast<unsigned long long>(d), ms, bytes / ms / 1e6);
    };
    add("copy (cuMemcpyDtoD)", 8.0 * d,
        medianMs(gpu, reps, [&] { return gpu.copyOnDevice(yp, xp, 4 * d); }));
    add("fp16 encode kernel", 6.0 * d, medianMs(gpu, reps, [&] {
          void* a[] = {&xp, &hp, &n, &vec4};
          return gpu.launch("starling_encode_f16", n / 4, a);
        }));
    add("bf16 encode kernel", 6.0 * d, medianMs(gpu, reps, [&] {
          void* a[] = {&xp, &hp, &n, &vec4};
          return gpu.launch("starling_encode_bf16", n / 4, a);
        }));
    add("fp16 decode kernel", 6.0 * d, medianMs(gpu, reps, [&] {
          void* a[] = {&hp, &yp, &n, &vec4};
          return gpu.launch("starling_decode_f16", n / 4, a);
        }));
    // The combine of 4 neighbours: reads start, self and 4 messages, writes out.
    std::vector<cuda::DevicePtr> m = {nb[0].ptr(), nb[1].ptr(), nb[2].ptr(), nb[3].ptr()};
    std::vector<float> c(4, 0.2f);
    add("combine, 4 neighbours (f32)", 28.0 * d,
        medianMs(gpu, reps, [&] { return codecs.combine(yp, nb[4].ptr(), xp, m, c, n); }));
    // The scaled codes' kernels alone (norms, scales, codes and packing): they must read x twice
    // (the norms, then the codes), counted once, and write the payload.
    for (auto [kind, bits, name] :
         {std::tuple{CompressorSpec::Kind::kQsgd, 4, "qsgd 4-bit kernels"},
          std::tuple{CompressorSpec::Kind::kQsgd, 2, "qsgd 2-bit kernels"},
          std::tuple{CompressorSpec::Kind::kNuqsgd, 4, "nuqsgd 4-bit kernels"},
          std::tuple{CompressorSpec::Kind::kNaturalDithering, 0,
                     "natural dithering (3 levels) kernels"}}) {
      CompressorSpec spec;
      spec.kind = kind;
      if (bits != 0) spec.bits = bits;
      spec.levels = 3;
      double payload = 0;
      const double ms = medianMs(gpu, reps, [&]() -> core::Status {
        auto written = codecs.encodePayload(spec, xp, n, 7);
        if (!written) return written.status();
        payload = static_cast<double>(*written);
        return core::Status::ok();
      });
      add(name, 4.0 * d + payload, ms);
    }
    // Top-k of 1% (the radix select's four histogram passes, the blocks' counts and the
    // compaction; the host picks each digit between passes): x read five times, counted once,
    // and the k (index, value) pairs written.
    {
      CompressorSpec spec;
      spec.kind = CompressorSpec::Kind::kTopK;
      spec.ratio = 0.01;
      double pairs = 0;
      const double ms = medianMs(gpu, std::max(1, reps / 5), [&]() -> core::Status {
        auto written = codecs.encodePayload(spec, xp, n, 0);
        if (!written) return written.status();
        pairs = static_cast<double>(*written);
        return core::Status::ok();
      });
      add("topk 1% kernels", 4.0 * d + pairs, ms);
    }
    // End to end: a whole frame on the host (kernels, the copy to pinned memory, the CRC).
    for (auto [kind, bits, name] :
         {std::tuple{CompressorSpec::Kind::kFp16, 0, "fp16 frame to host"},
          std::tuple{CompressorSpec::Kind::kQsgd, 4, "qsgd 4-bit frame to host"},
          std::tuple{CompressorSpec::Kind::kQsgd, 2, "qsgd 2-bit frame to host"},
          std::tuple{CompressorSpec::Kind::kTopK, 0, "topk 1% frame to host"},
          std::tuple{CompressorSpec::Kind::kCountSketch, 0,
                     "countsketch 5 x d/500, top-1% frame to host"}}) {
      CompressorSpec spec;
      spec.kind = kind;
      if (bits != 0) spec.bits = bits;
      spec.ratio = 0.01;
      // Count-Sketch as CSVec is used for gradients: 5 rows, a table of 1% of d, the top 1%.
      spec.rows = 5;
      spec.cols = std::max<uint64_t>(1, d / 500);
      uint64_t seed = 1;
      double frameBytes = 0;
      const double ms = medianMs(gpu, std::max(1, reps / 5), [&]() -> core::Status {
        auto f = codecs.encode(spec, xp, n, seed++);
        if (!f) return f.status();
        frameBytes = static_cast<double>(f->size());
        return core::Status::ok();
      });
      add(name, 4.0 * d + frameBytes, ms);
      // And back: the frame checked on the host, copied to the device and decoded there.
      auto frame = codecs.encode(spec, xp, n, seed);
      if (!frame) return 1;
      const std::vector<std::byte> copy(frame->begin(), frame->end());
      const double back =
          medianMs(gpu, std::max(1, reps / 5), [&] { return codecs.decode(spec, copy, yp, n); });
      add(std::string(name).replace(std::string(name).find(" to host"), 8, " from host, decoded"),
          4.0 * d + static_cast<double>(copy.size()), back);
    }
  }
  double copyRate = 0;
  if (jsonPath != nullptr) {
    FILE* f = std::fopen(jsonPath, "w");
    if (f == nullptr) return 1;
    std::fprintf(f, "{\"device\": \"%s\", \"ptx\": \"%s\", \"rows\": [\n", gpu.name().c_str(),
                 gpu.ptxSource().c_str());
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      if (r.what.rfind("copy", 0) == 0) copyRate = r.bytes / r.ms;
      std::fprintf(f,
                   "  {\"what\": \"%s\", \"d\": %llu, \"ms\": %.6f, \"gbps\": %.2f, "
                   "\"pct_of_copy\": %.1f}%s\n",
                   r.what.c_str(), static_cast<unsigned long long>(r.d), r.ms, r.bytes / r.ms / 1e6,
                   100.0 * (r.bytes / r.ms) / copyRate, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
