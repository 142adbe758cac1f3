// bench-codec-cost: what one message costs its sender and one receiver, per codec, as the
// engine calls them (a sender's encodeInto with its stream state, a receiver's decodeFrom with
// its state of that sender), on a message of d float32 values, next to the frame's bytes. The
// compute column of the bytes-to-accuracy table (docs/benchmarks.md, issue 16).
//
//   bench-codec-cost [--dim 508810] [--reps 21]
//
// The message is a Gaussian vector that changes a little every round (as a model's difference
// does). Each codec first sends 3 frames that are not timed, so LGC (warm-up 0) is in its coded
// mode, its network shipped; then `reps` frames are timed. Thread CPU time, median, microseconds.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "compression/compressor.h"
#include "core/rng.h"

namespace {

using namespace starling;
using compression::CompressorSpec;
using K = CompressorSpec::Kind;

double cpuMicros() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Case {
  const char* name;
  CompressorSpec spec;
};

std::vector<Case> cases(size_t d) {
  std::vector<Case> c;
  auto add = [&](const char* name, K k, auto&& set) {
    CompressorSpec s;
    s.kind = k;
    set(s);
    c.push_back({name, s});
  };
  add("identity", K::kIdentity, [](CompressorSpec&) {});
  add("topk 1%", K::kTopK, [](CompressorSpec& s) { s.ratio = 0.01; });
  add("topk 0.1%", K::kTopK, [](CompressorSpec& s) { s.ratio = 0.001; });
  add("qsgd 2-bit linf b16", K::kQsgd, [](CompressorSpec& s) {
    s.bits = 2;
    s.linf = true;
    s.bucket = 16;
  });
  add("qsgd 4-bit linf b16", K::kQsgd, [](CompressorSpec& s) {
    s.bits = 4;
    s.linf = true;
    s.bucket = 16;
  });
  add("natural dithering s=2 linf", K::kNaturalDithering, [](CompressorSpec& s) {
    s.levels = 2;
    s.linf = true;
  });
  add("countsketch 5 x d/100, top 1%", K::kCountSketch, [d](CompressorSpec& s) {
    s.rows = 5;
    s.cols = std::max<size_t>(1, d / 100);
    s.ratio = 0.01;
  });
  add("lgc 1% (C 32, H 64, L 4)", K::kLgc, [](CompressorSpec& s) {
    s.ratio = 0.01;
    s.warmup = 0;
  });
  add("lgc 1%, values as sent (warm-up)", K::kLgc, [](CompressorSpec& s) {
    s.ratio = 0.01;
    s.warmup = 1000000;
    s.shareEvery = 1000000;
  });
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-codec-cost: one message's CPU time at the sender and at a receiver"};
  size_t dim = 508810;
  int reps = 21;
  app.add_option("--dim", dim, "elements per message");
  app.add_option("--reps", reps, "frames timed per codec (the median is printed)");
  CLI11_PARSE(app, argc, argv);

  std::printf("d = %zu float32, median of %d frames, microseconds of thread CPU time\n", dim, reps);
  std::printf("| codec | frame bytes | x fewer than float32 | sender (encodeInto) | receiver "
              "(decodeFrom) |\n|---|---:|---:|---:|---:|\n");
  for (const Case& c : cases(dim)) {
    auto made = compression::createCompressor<float>(c.spec);
    if (!made) {
      std::fprintf(stderr, "%s: %s\n", c.name, made.status().toString().c_str());
      return 2;
    }
    const compression::Compressor<float>& codec = **made;
    auto state = codec.newState(dim);
    auto receiver = codec.newReceiverState(dim);
    std::vector<std::byte> frame(codec.maxEncodedBytes(dim));
    std::vector<float> x(dim), seen(dim), scratch;
    core::Rng gen(7), rng(1);
    for (float& v : x) v = static_cast<float>(gen.normal());
    std::vector<double> send, recv;
    size_t bytes = 0;
    for (int r = 0; r < reps + 3; ++r) {
      for (size_t i = 0; i < dim; i += 7) x[i] += static_cast<float>(0.1 * gen.normal());
      const compression::StreamContext ctx{static_cast<uint64_t>(r), 11, state.get()};
      const double t0 = cpuMicros();
      auto n = codec.encodeInto(x, rng, ctx, frame, seen);
      const double t1 = cpuMicros();
      if (!n) {
        std::fprintf(stderr, "%s: %s\n", c.name, n.status().toString().c_str());
        return 1;
      }
      auto got = codec.decodeFrom(std::span<const std::byte>(frame).first(*n), dim, scratch,
                                  compression::Checksum::kVerify, receiver.get());
      const double t2 = cpuMicros();
      if (!got) {
        std::fprintf(stderr, "%s: %s\n", c.name, got.status().toString().c_str());
        return 1;
      }
      if (r < 3) continue;
      bytes = *n;
      send.push_back(t1 - t0);
      recv.push_back(t2 - t1);
    }
    std::printf("| %s | %zu | %.0fx | %.0f | %.0f |\n", c.name, bytes,
                4.0 * static_cast<double>(dim) / static_cast<double>(bytes), median(send),
                median(recv));
  }
  return 0;
}
