// bench-send: what one lossy frame costs its sender, the way Node::startRound produced it before
// Compressor::encodeInto and the way it does now (docs/compression.md, "Writing into transport
// memory").
//
//   before: encodeSeen into a pooled vector (the codec's frame, then decode of that frame for what
//           the neighbours see), the compression-error pass as one running sum, and, on a
//           transport with shared memory, the transport's copy of the frame into a segment.
//   after:  encodeInto straight into the (lent) buffer, filling what the neighbours see as it
//           goes, and the compression error: measured by the codec as it writes (fp16, bf16,
//           sign) or one pass in eight partial sums (compression::SquaredErrorSum).
//
// Both columns run here on the same codecs and vectors; each time is the median of --reps frames
// of one node's stream, in this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), which a machine
// shared with other jobs disturbs far less than wall time (time spent descheduled is not counted).
//
//   bench-send [--dim 1000000] [--reps 41] [--codecs fp16,bf16,sign,qsgd,topk,randk,natural]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "compression/compressor.h"
#include "core/rng.h"

namespace {

using namespace starling;
// This thread's CPU time.
struct Clock {
  using time_point = double;  // microseconds
  static time_point now() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
  }
};

compression::CompressorSpec specFor(const std::string& name) {
  compression::CompressorSpec s;
  s.kind = *compression::compressorKindFromName(name);
  s.ratio = 0.01;  // topk, randk: 1%
  s.bits = 4;      // qsgd: 4 bits, buckets of 512
  return s;
}

// Node::startRound's error pass before: one running sum of each.
std::pair<double, double> serialErrorAndNorm(std::span<const float> x, std::span<const float> y) {
  double err = 0, norm = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    const double v = static_cast<double>(x[k]);
    const double e = static_cast<double>(y[k]) - v;
    err += e * e;
    norm += v * v;
  }
  return {err, norm};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double micros(Clock::time_point a, Clock::time_point b) { return b - a; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-send: a lossy frame's cost to its sender, before and after encodeInto"};
  size_t dim = 1000000;
  int reps = 41;
  std::string codecList = "fp16,bf16,sign,qsgd,topk,randk,natural";
  app.add_option("--dim", dim, "elements per message");
  app.add_option("--reps", reps, "frames timed per codec (the median is printed)");
  app.add_option("--codecs", codecList, "comma-separated codec names");
  CLI11_PARSE(app, argc, argv);

  std::vector<float> x(dim);
  core::Rng gen(7);
  for (float& v : x) v = static_cast<float>(gen.normal());
  std::vector<float> seen(dim);
  volatile double sink = 0;

  std::printf("d = %zu float32, median of %d frames, microseconds of CPU time per frame\n", dim,
              reps);
  std::printf("%-8s %10s %10s %10s %10s %10s %10s %9s\n", "codec", "bytes", "encodeSeen",
              "err(1sum)", "shm copy", "before", "after", "speedup");
  std::stringstream names(codecList);
  for (std::string name; std::getline(names, name, ',');) {
    if (!compression::compressorKindFromName(name)) {
      std::fprintf(stderr, "unknown codec %s\n", name.c_str());
      return 2;
    }
    auto made = compression::createCompressor<float>(specFor(name));
    if (!made) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), made.status().toString().c_str());
      return 2;
    }
    const compression::Compressor<float>& codec = **made;
    const size_t bound = codec.maxEncodedBytes(dim);
    std::vector<std::byte> pooled, segment(bound), lent(bound);
    std::vector<double> encodeTimes, errTimes, copyTimes, before, after;
    size_t bytes = 0;
    for (int r = 0; r < reps + 2; ++r) {  // two warm-up frames
      const compression::StreamContext ctx{static_cast<uint64_t>(r), 1, nullptr};
      core::Rng rngA(r), rngB(r);
      const auto t0 = Clock::now();
      const core::Status st = codec.encodeSeen(x, rngA, ctx, pooled, seen);
      const auto t1 = Clock::now();
      const auto [e1, n1] = serialErrorAndNorm(x, seen);
      const auto t2 = Clock::now();
      std::memcpy(segment.data(), pooled.data(), pooled.size());
      const auto t3 = Clock::now();
      // As Node::writeMessage does: the codec measures the error as it goes when it can.
      compression::SeenError error;
      const compression::StreamContext ctxB{ctx.round, ctx.sharedSeed, nullptr, &error};
      const core::Result<size_t> n = codec.encodeInto(x, rngB, ctxB, lent, seen);
      if (!error.measured) {
        compression::SquaredErrorSum sum;
        sum.add(x.data(), seen.data(), x.size());
        error = sum.result();
      }
      const auto t4 = Clock::now();
      const double e2 = error.errorSq, n2 = error.normSq;
      if (!st.isOk() || !n.isOk() || *n != pooled.size() ||
          std::memcmp(lent.data(), pooled.data(), *n) != 0) {
        std::fprintf(stderr, "%s: the two paths disagree\n", name.c_str());
        return 1;
      }
      sink = sink + e1 + n1 + e2 + n2;
      bytes = *n;
      if (r < 2) continue;
      encodeTimes.push_back(micros(t0, t1));
      errTimes.push_back(micros(t1, t2));
      copyTimes.push_back(micros(t2, t3));
      before.push_back(micros(t0, t3));
      after.push_back(micros(t3, t4));
    }
    const double b = median(before), a = median(after);
    std::printf("%-8s %10zu %10.0f %10.0f %10.0f %10.0f %10.0f %8.2fx\n", name.c_str(), bytes,
                median(encodeTimes), median(errTimes), median(copyTimes), b, a, b / a);
  }
  return 0;
}
