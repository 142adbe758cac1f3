// The CUDA path's checks that need no GPU (docs/cuda.md): the per-element math the kernels share
// with the CPU codecs against independent references, the counter-based rounding bits, the PTX
// the build made, and the clear no-driver answer.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/elementwise.h"
#include "compression/codecs/float16.h"
#include "compression/codecs/wire.h"
#include "compression/compressor.h"
#include "compression/sketch_hash.h"
#include "core/rng.h"
#include "cuda/device_vectors.h"
#include "cuda/driver.h"
#include "cuda/topk_select.h"

using namespace starling;
using compression::CompressorSpec;
using Kind = CompressorSpec::Kind;
namespace ew = starling::compression::elementwise;

namespace {

// Float32 inputs that cover every branch of the 16-bit conversions: zeros, subnormals of both
// formats, the rounding boundaries around each exponent, overflow, infinities and NaNs, and
// random patterns.
std::vector<uint32_t> edgeFloatBits() {
  std::vector<uint32_t> v = {
      0u,          0x80000000u, 1u,          0x7fffffu,   0x800000u,   0x7f7fffffu, 0x7f800000u,
      0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x477fe000u, 0x477ff000u, 0x477fefffu,
      0x477ff001u, 0x33000000u, 0x33000001u, 0x387fc000u, 0x38800000u, 0x7f7f8000u, 0x7f7f7fffu};
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t low : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x7fffu, 0x8000u,
                         0x8001u, 0x18000u, 0x7fffffu}) {
      v.push_back((e << 23) | low);
      v.push_back(0x80000000u | (e << 23) | low);
    }
  }
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i) v.push_back(gen());
  return v;
}

// The reference conversions of float16.h (from double, written independently of elementwise.h).
TEST_CASE("elementwise fp16/bf16 conversions equal the reference conversions", "[cuda][math]") {
  for (uint32_t u : edgeFloatBits()) {
    const double x = static_cast<double>(std::bit_cast<float>(u));
    INFO("float bits " << std::hex << u);
    REQUIRE(ew::halfFromFloatBits(u) == compression::codecs::halfFromDouble(x));
    REQUIRE(ew::bf16FromFloatBits(u) == compression::codecs::bf16FromDouble(x));
  }
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const double ref = compression::codecs::doubleFromHalf(static_cast<uint16_t>(h));
    const float got = std::bit_cast<float>(ew::floatBitsFromHalf(h));
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(static_cast<float>(ref)));
    }
    const double refB = compression::codecs::doubleFromBf16(static_cast<uint16_t>(h));
    const float gotB = std::bit_cast<float>(ew::floatBitsFromBf16(h));
    if (!std::isnan(refB)) REQUIRE(static_cast<double>(gotB) == refB);
  }
}

// QSGD's uniform level, against the definition: level floor(|x| s / scale) plus one with
// probability frac(|x| s / scale), decided by u < frac * 2^16 (to within the 2^-16 grid).
TEST_CASE("elementwise uniform codes follow the stochastic rounding rule", "[cuda][math]") {
  std::mt19937_64 gen(3);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (uint32_t s : {1u, 3u, 7u, 15u, 63u, 127u}) {
    const uint32_t levelBits = static_cast<uint32_t>(std::bit_width(s));
    const uint32_t signBit = 1u << levelBits;
    const float scale = 1.0f;
    const double k = static_cast<double>(s) * 0x1p16 / static_cast<double>(scale);
    for (int i = 0; i < 20000; ++i) {
      const float x = static_cast<float>(dist(gen));
      const uint32_t u = static_cast<uint32_t>(gen() & 0xffff);
      const double t = std::fabs(static_cast<double>(x)) * s / scale;  // in [0, s]
      const double lower = std::floor(t);
      const double frac16 = (t - lower) * 65536.0;
      const uint8_t code = s <= 63
                               ? ew::uniformCodeFloat(x, static_cast<float>(k), s << 16, u, signBit)
                               : ew::uniformCodeDouble(std::fabs(static_cast<double>(x)), x < 0, k,
                                                       s << 16, u, signBit);
      const uint32_t level = code & (signBit - 1);
      INFO("s " << s << " x " << x << " u " << u);
      // Away from the 2^-16 grid's rounding, the rule decides exactly.
      if (std::fabs(u + frac16 - 65536.0) > 1.0) {
        REQUIRE(level == static_cast<uint32_t>(lower) + (u + frac16 >= 65536.0 ? 1u : 0u));
      } else {
        REQUIRE((level == lower || level == lower + 1));
      }
      REQUIRE(((code & signBit) != 0) == (x < 0 && level != 0));
      // Decoding gives the level's value.
      REQUIRE(ew::uniformMagnitude(1.0, level, s) == static_cast<double>(level) / s);
    }
  }
}

// The counter-based generator: SplitMix64 (Steele, Lea and Flood 2014), written out here from
// its definition, sliced into four 16-bit lanes; and roughly uniform.
TEST_CASE("counter-based rounding bits are SplitMix64's outputs in 16-bit lanes", "[cuda][math]") {
  const uint64_t seed = 0x1234567890abcdefULL;
  uint64_t state = seed;
  auto splitmix = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::vector<uint32_t> counts(16, 0);
  for (uint64_t w = 0; w < 50000; ++w) {
    const uint64_t word = splitmix();
    for (uint64_t lane = 0; lane < 4; ++lane) {
      const uint32_t u = ew::counterUniform16(seed, 4 * w + lane);
      REQUIRE(u == ((word >> (16 * lane)) & 0xffff));
      ++counts[u >> 12];
    }
  }
  for (uint32_t c : counts)
    REQUIRE(std::abs(static_cast<double>(c) - 12500.0) < 5 * std::sqrt(12500.0));
}

TEST_CASE("the combine term is the difference form's, in order", "[cuda][math]") {
  const float acc = 0.25f, c = 0.3f, m = 1.5f, self = -0.75f;
  const float want = acc + c * (m - self);
  REQUIRE(std::bit_cast<uint32_t>(ew::combineTerm(acc, c, m, self)) ==
          std::bit_cast<uint32_t>(want));
  REQUIRE(ew::combineTerm(1.0, 0.5, 3.0, 1.0) == 2.0);
}

// The GPU top-k's selection driven on the CPU: the histograms of the radix select's passes and
// the blocks' counts computed here with plain loops, the host's choices (cuda/topk_select.h) and
// the kernels' rule (elementwise.h: topkKept) applied block by block as starling_topk_compact
// applies them. The result must be the CPU codec's selection (largestIndices), in index order.
std::vector<uint32_t> topkAsTheKernelsDo(const std::vector<float>& x, uint64_t k, uint64_t chunk) {
  auto t = cuda::topkThreshold(k, [&](int pass, uint32_t prefix, uint32_t* counts) {
    for (float v : x) {
      const uint32_t key = ew::topkKeyOfBits(std::bit_cast<uint32_t>(v));
      if (ew::topkCandidate(key, pass, prefix)) ++counts[ew::topkDigit(key, pass)];
    }
    return Status::ok();
  });
  REQUIRE(t.isOk());
  const size_t blocks = (x.size() + chunk - 1) / chunk;
  std::vector<uint32_t> greater(blocks, 0), equal(blocks, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t key = ew::topkKeyOfBits(std::bit_cast<uint32_t>(x[i]));
    greater[i / chunk] += key > t->key;
    equal[i / chunk] += key == t->key;
  }
  const cuda::TopkBlocks offsets = cuda::topkBlockOffsets(greater, equal, t->equalKept);
  std::vector<uint32_t> kept(k, UINT32_MAX);
  for (size_t b = 0; b < blocks; ++b) {
    uint64_t equalRank = offsets.equalBefore[b], at = offsets.keptBefore[b];
    for (size_t i = b * chunk; i < std::min(x.size(), (b + 1) * chunk); ++i) {
      const uint32_t key = ew::topkKeyOfBits(std::bit_cast<uint32_t>(x[i]));
      if (ew::topkKept(key, t->key, t->equalKept, equalRank)) {
        REQUIRE(at < k);
        kept[at++] = static_cast<uint32_t>(i);
      }
      equalRank += key == t->key;
    }
  }
  return kept;
}

TEST_CASE("top-k's radix select and compaction, as the kernels run them, select the CPU codec's "
          "elements", "[cuda][math][topk]") {
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> inputs;
  std::vector<float> v(1000);
  for (float& e : v) e = normal(gen);
  inputs.push_back(v);
  for (float& e : v) e = static_cast<float>(static_cast<int>(gen() % 5) - 2);  // ties everywhere
  inputs.push_back(v);
  for (size_t i = 0; i < v.size(); i += 37) v[i] = std::numeric_limits<float>::quiet_NaN();
  v[5] = std::numeric_limits<float>::infinity();
  v[6] = -std::numeric_limits<float>::infinity();
  v[7] = -0.0f;
  v[8] = std::bit_cast<float>(0xff800001u);  // a negative NaN: the same key as every NaN
  inputs.push_back(v);
  inputs.push_back(std::vector<float>(300, 0.5f));  // all equal
  inputs.push_back({-3.0f});
  for (size_t in = 0; in < inputs.size(); ++in) {
    const std::vector<float>& x = inputs[in];
    for (uint64_t k : {uint64_t{1}, uint64_t{2}, uint64_t{7}, x.size() / 3, x.size() - 1,
                       uint64_t{x.size()}}) {
      if (k < 1 || k > x.size()) continue;
      const std::vector<uint32_t> want =
          compression::codecs::largestIndices<float>(std::span<const float>(x), k);
      for (uint64_t chunk : {uint64_t{1}, uint64_t{3}, uint64_t{64}, uint64_t{x.size()}}) {
        CAPTURE(in, k, chunk);
        REQUIRE(topkAsTheKernelsDo(x, k, chunk) == want);
      }
    }
  }
}

TEST_CASE("writeTopKFrame writes the CPU top-k codec's frame from a selection, readTopKFrame "
          "reads it back and rejects a damaged one", "[cuda][math][topk]") {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(5000);
  for (float& e : x) e = normal(gen);
  x[4999] = 40.0f;  // a large last index: a gap of several varint bytes
  compression::CompressorSpec spec;
  spec.kind = compression::CompressorSpec::Kind::kTopK;
  spec.k = 50;
  auto codec = compression::createCompressor<float>(spec);
  REQUIRE(codec.isOk());
  core::Rng rng(1);
  std::vector<std::byte> cpu;
  (*codec)->encode(x, rng, cpu);
  const std::vector<uint32_t> idx = topkAsTheKernelsDo(x, 50, 512);
  std::vector<float> values;
  for (uint32_t i : idx) values.push_back(x[i]);
  std::vector<std::byte> gpu(compression::codecs::topkFrameBound(x.size(), idx.size()));
  compression::codecs::FrameOut frame(gpu);
  compression::codecs::writeTopKFrame(x.size(), idx, values, frame);
  REQUIRE(frame.ok());
  REQUIRE(std::vector<std::byte>(frame.frame().begin(), frame.frame().end()) == cpu);
  std::vector<uint32_t> readIdx;
  std::vector<float> readValues;
  REQUIRE(compression::codecs::readTopKFrame(cpu, x.size(), readIdx, readValues).isOk());
  REQUIRE(readIdx == idx);
  REQUIRE(readValues == values);
  // Cut short or with a flipped bit (the CRC), it is refused and the outputs stay as they were.
  for (size_t cut : {size_t{0}, size_t{10}, cpu.size() - 1}) {
    CHECK_FALSE(compression::codecs::readTopKFrame(std::span<const std::byte>(cpu).first(cut),
                                                   x.size(), readIdx, readValues)
                    .isOk());
  }
  std::vector<std::byte> flipped = cpu;
  flipped[flipped.size() / 2] ^= std::byte{4};
  CHECK_FALSE(compression::codecs::readTopKFrame(flipped, x.size(), readIdx, readValues).isOk());
  CHECK(readIdx == idx);
}

// Count-Sketch as the GPU builds it (cuda/kernels_sketch.cuh), driven on the CPU with the same
// functions: each row's buckets counted and scanned, the coordinates placed in a shuffled order
// (the kernels' atomics place them in any order), each bucket sorted (sortAscending) and summed;
// the estimate per coordinate (sketchBucket, sketchNegative, sketchMedian or the mean), the
// heavy hitters, the sender's scale; the frame (writeCountSketchFrame).
std::vector<float> sketchTableAsKernels(std::span<const float> x,
                                        const compression::codecs::CountSketchHeader& h,
                                        std::mt19937& gen) {
  namespace ew = compression::elementwise;
  const compression::SketchHashes hashes(h.seed, h.rows, h.cols);
  const uint64_t n = x.size(), cols = h.cols;
  std::vector<float> table(static_cast<size_t>(h.rows) * cols, 0.0f);
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  for (uint32_t j = 0; j < h.rows; ++j) {
    const uint64_t* k = hashes.coef(j);
    std::vector<uint32_t> counts(cols, 0), offsets(cols + 1, 0), fill(cols, 0), idx(n);
    for (uint64_t i = 0; i < n; ++i) ++counts[ew::sketchBucket(k[0], k[1], cols, i)];
    for (uint64_t c = 0; c < cols; ++c) offsets[c + 1] = offsets[c] + counts[c];
    std::shuffle(order.begin(), order.end(), gen);
    for (uint64_t i : order) {
      const uint32_t c = ew::sketchBucket(k[0], k[1], cols, i);
      idx[offsets[c] + fill[c]++] = static_cast<uint32_t>(i);
    }
    for (uint64_t c = 0; c < cols; ++c) {
      uint32_t* seg = idx.data() + offsets[c];
      const uint64_t len = offsets[c + 1] - offsets[c];
      ew::sortAscending(seg, len);
      float acc = 0.0f;
      for (uint64_t t = 0; t < len; ++t) {
        acc = acc + (ew::sketchNegative(k[2], k[3], seg[t]) ? -1.0f : 1.0f) * x[seg[t]];
      }
      table[j * cols + c] = acc;
    }
  }
  return table;
}

// The decoded estimate as the GPU decoder computes it, before its scale: per coordinate, then
// threshold's zeroing or the heavy hitters (largestIndices, which top-k's selection equals).
std::vector<float> sketchEstimateAsKernels(std::span<const float> table,
                                           const compression::codecs::CountSketchHeader& h,
                                           uint64_t n, std::vector<uint32_t>* kept) {
  namespace ew = compression::elementwise;
  const compression::SketchHashes hashes(h.seed, h.rows, h.cols);
  std::vector<float> y(n);
  const float inv = 1.0f / static_cast<float>(h.rows);
  for (uint64_t i = 0; i < n; ++i) {
    float v[7], e = 0.0f;
    for (uint32_t j = 0; j < h.rows; ++j) {
      const uint64_t* k = hashes.coef(j);
      const float sign = ew::sketchNegative(k[2], k[3], i) ? -1.0f : 1.0f;
      const float est = sign * table[j * h.cols + ew::sketchBucket(k[0], k[1], h.cols, i)];
      if (h.mean) {
        e += est;
      } else {
        v[j] = est;
      }
    }
    y[i] = h.mean ? e * inv : ew::sketchMedian(v, h.rows);
  }
  if (!h.mean && h.k == 0) {
    const double thr =
        static_cast<double>(h.threshold) * compression::codecs::countSketchL2(table, h.rows, h.cols);
    for (float& v : y) {
      if (!(static_cast<double>(std::abs(v)) >= thr)) v = 0.0f;
    }
  }
  kept->clear();
  if (!h.mean && h.k > 0 && h.k < n) {
    *kept = compression::codecs::largestIndices<float>(y, h.k);
  }
  return y;
}

TEST_CASE("Count-Sketch as the kernels build and decode it: the CPU codec's frames and values",
          "[cuda][math][countsketch]") {
  namespace cs = compression::codecs;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int checked = 0;
  for (uint64_t n : {uint64_t{1}, uint64_t{9}, uint64_t{700}, uint64_t{3000}}) {
    // Gaussian values, and small integers with zeros (cancelling cells, so +0 and -0 estimates
    // meet in the median networks).
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<float> x(n);
      for (float& v : x) {
        v = kind == 0 ? normal(gen) : static_cast<float>(static_cast<int>(gen() % 5) - 2);
      }
      for (uint32_t rows = 1; rows <= 7; ++rows) {
        for (uint64_t cols : {uint64_t{1}, uint64_t{5}, uint64_t{64}, uint64_t{1000}}) {
          for (int mode = 0; mode < 3; ++mode) {  // median + top-k, median + threshold, mean
            CompressorSpec spec;
            spec.kind = Kind::kCountSketch;
            spec.rows = rows;
            spec.cols = cols;
            spec.ratio = mode == 0 ? 0.05 : 0.0;
            spec.threshold = mode == 1 ? 0.05 : 0.0;
            spec.meanEstimate = mode == 2;
            CAPTURE(n, kind, rows, cols, mode);
            auto cpu = std::move(*compression::createCompressor<float>(spec));
            core::Rng rng(77 + rows);
            std::vector<std::byte> want;
            cpu->encode(x, rng, want);
            const uint64_t seed = core::Rng(77 + rows).nextU64();  // the encoder's one draw
            cs::CountSketchHeader h = cs::countSketchHeader(spec, n, seed);
            const std::vector<float> table = sketchTableAsKernels(x, h, gen);
            std::vector<uint32_t> kept;
            const std::vector<float> y = sketchEstimateAsKernels(table, h, n, &kept);
            double xy = 0, yy = 0;  // starling_sketch_dot's sums
            if (!kept.empty()) {
              for (uint32_t i : kept) {
                xy += static_cast<double>(x[i]) * y[i];
                yy += static_cast<double>(y[i]) * y[i];
              }
            } else {
              for (uint64_t i = 0; i < n; ++i) {
                if (y[i] == 0.0f) continue;
                xy += static_cast<double>(x[i]) * y[i];
                yy += static_cast<double>(y[i]) * y[i];
              }
            }
            h.scale = yy > 0 ? xy / yy : 0.0;
            std::vector<std::byte> got;
            cs::FrameOut frame(got);
            cs::writeCountSketchFrame(h, n, table, frame);
            REQUIRE(got == want);
            // Decoding the frame as the GPU decoder does: the CPU decoder's values, bit for bit.
            std::span<const std::byte> tableBytes;
            auto read = cs::readCountSketchFrame(spec, want, n, tableBytes);
            REQUIRE(read.isOk());
            std::vector<float> readTable(tableBytes.size() / 4);
            std::memcpy(readTable.data(), tableBytes.data(), tableBytes.size());
            std::vector<float> est = sketchEstimateAsKernels(readTable, *read, n, &kept);
            const float scale = static_cast<float>(read->scale);
            std::vector<float> out(n);
            if (!kept.empty()) {
              const float zero = scale * 0.0f;
              std::fill(out.begin(), out.end(), std::signbit(zero) ? zero : 0.0f);
              for (uint32_t i : kept) out[i] = scale * est[i];
            } else {
              for (uint64_t i = 0; i < n; ++i) out[i] = scale * est[i];
            }
            std::vector<float> cpuOut(n);
            REQUIRE(cpu->decode(want, cpuOut).isOk());
            REQUIRE(std::memcmp(out.data(), cpuOut.data(), 4 * n) == 0);
            ++checked;
          }
        }
      }
    }
  }
  CHECK(checked == 4 * 2 * 7 * 4 * 3);
  // readCountSketchFrame refuses what the CPU decoder refuses: a cut, a flipped bit, the other
  // estimate.
  CompressorSpec spec;
  spec.kind = Kind::kCountSketch;
  spec.rows = 5;
  spec.cols = 16;
  spec.ratio = 0.1;
  auto cpu = std::move(*compression::createCompressor<float>(spec));
  std::vector<float> x(100, 1.5f);
  core::Rng rng(1);
  std::vector<std::byte> frame;
  cpu->encode(x, rng, frame);
  std::span<const std::byte> table;
  CHECK_FALSE(cs::readCountSketchFrame(spec, std::span(frame).first(frame.size() - 1), 100, table)
                  .isOk());
  auto flipped = frame;
  flipped[40] ^= std::byte{4};
  CHECK_FALSE(cs::readCountSketchFrame(spec, flipped, 100, table).isOk());
  spec.meanEstimate = true;
  spec.ratio = 0;
  CHECK_FALSE(cs::readCountSketchFrame(spec, frame, 100, table).isOk());
}

// The PTX the build made: every kernel, for sm_80, no fused multiply-add anywhere (the shared
// math rounds each operation, as the CPU codecs do).
TEST_CASE("the build compiled every kernel to sm_80 PTX without FMA", "[cuda][ptx]") {
  const std::string ptx = cuda::kKernelsPtx;
  REQUIRE(ptx.find(".target sm_80") != std::string::npos);
  for (const char* k : {"starling_encode_f16",
                        "starling_encode_bf16",
                        "starling_decode_f16",
                        "starling_decode_bf16",
                        "starling_bucket_norms",
                        "starling_bucket_norms_warp",
                        "starling_bucket_scales",
                        "starling_scaled_codes",
                        "starling_scaled_codes_words",
                        "starling_scaled_decode",
                        "starling_combine_f32",
                        "starling_combine_f64",
                        "starling_any_beyond",
                        "starling_choco_prepare_f32",
                        "starling_choco_prepare_f64",
                        "starling_choco_absorb_f32",
                        "starling_choco_absorb_f64",
                        "starling_choco_absorb_more_f32",
                        "starling_choco_absorb_more_f64",
                        "starling_lead_start_f32",
                        "starling_lead_start_f64",
                        "starling_lead_prepare_f32",
                        "starling_lead_prepare_f64",
                        "starling_lead_absorb_f32",
                        "starling_lead_absorb_f64",
                        "starling_topk_histogram",
                        "starling_topk_block_counts",
                        "starling_topk_compact",
                        "starling_scatter",
                        "starling_sketch_count",
                        "starling_scan_u32",
                        "starling_sketch_place",
                        "starling_sketch_sum",
                        "starling_sketch_estimate",
                        "starling_sketch_threshold",
                        "starling_sketch_dot",
                        "starling_scale_f32",
                        "starling_fill_f32"}) {
    INFO(k);
    REQUIRE(ptx.find(std::string(".entry ") + k + "(") != std::string::npos);
  }
  REQUIRE(ptx.find("fma.") == std::string::npos);
  // The build left the PTX file in the build folder, and it is what the library embeds.
  const char* file = std::getenv("STARLING_KERNELS_PTX_FILE");
  REQUIRE(file != nullptr);
  std::ifstream in(file);
  REQUIRE(in.good());
  std::ostringstream text;
  text << in.rdbuf();
  REQUIRE(text.str() == ptx);
}

// Without a driver (here: a library path that does not exist) the GPU path answers kUnavailable
// and says why, and nothing crashes.
TEST_CASE("no CUDA driver: Gpu::open says so", "[cuda][driver]") {
  setenv("STARLING_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
  auto gpu = cuda::Gpu::open(0);
  REQUIRE_FALSE(gpu);
  REQUIRE(gpu.status().code() == StatusCode::kUnavailable);
  REQUIRE_THAT(gpu.status().message(),
               Catch::Contains("no CUDA driver") && Catch::Contains("/nonexistent/libcuda.so.1"));
}

// Device gossip's GPU: a codec without a GPU encoder is refused before any GPU is asked for;
// without a driver, kUnavailable as Gpu::open says.
TEST_CASE("no CUDA driver: openGpuVectors says so, and refuses codecs it lacks", "[cuda][driver]") {
  setenv("STARLING_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
  compression::CompressorSpec spec;
  auto none = cuda::openGpuVectors(0, spec);
  REQUIRE_FALSE(none);
  CHECK(none.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(none.status().message(), Catch::Contains("no CUDA driver"));
  spec.kind = compression::CompressorSpec::Kind::kSign;
  auto sign = cuda::openGpuVectors(0, spec);
  REQUIRE_FALSE(sign);
  CHECK(sign.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(sign.status().message(), Catch::Contains("compression.kind"));
  spec.kind = compression::CompressorSpec::Kind::kFp16;
  spec.errorFeedback = true;
  auto ef = cuda::openGpuVectors(0, spec);
  REQUIRE_FALSE(ef);
  CHECK_THAT(ef.status().message(), Catch::Contains("compression.error_feedback"));
}

}  // namespace
