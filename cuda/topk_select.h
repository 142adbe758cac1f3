// Top-k on a GPU, the host's part (docs/cuda.md "Top-k"): the radix select's choices between its
// passes and the compaction's block offsets. The kernels (cuda/kernels.cu) compute histograms and
// counts and apply these choices element by element; the tests (tests/cuda/math_test.cc) drive
// the same functions with histograms and counts computed on the CPU and compare the selection with
// the CPU codec's (compression/codecs/bits.h: largestIndices).
//
// The order is top-k's (compression/codecs/elementwise.h): larger magnitude key first, equal keys
// by lower index. Four passes find K, the k-th largest key, one byte at a time from the top (each
// pass keeps the candidates whose higher bytes are the digits chosen so far and picks the digit
// of the k'-th largest of them); the kept elements are then those with a key above K, and the
// `equalKept` with key K of lowest index.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compression/codecs/elementwise.h"
#include "core/status.h"

namespace starling::cuda {

struct TopkThreshold {
  uint32_t key = 0;        // K, the k-th largest key
  uint64_t equalKept = 0;  // how many elements with key K are kept (those of lowest index)
};

// K and equalKept for 1 <= k <= n elements, given `histogram(pass, prefix, counts)`, which
// writes into counts[256] the digits in pass `pass` of the candidates with that prefix
// (elementwise.h: topkCandidate, topkDigit) and returns a Status.
template <typename Histogram>
core::Result<TopkThreshold> topkThreshold(uint64_t k, const Histogram& histogram) {
  namespace ew = compression::elementwise;
  uint32_t prefix = 0;
  uint64_t remaining = k;
  for (int pass = 0; pass < 4; ++pass) {
    uint32_t counts[256] = {};
    STARLING_RETURN_IF_ERROR(histogram(pass, prefix, counts));
    uint64_t candidates = 0;
    for (uint32_t c : counts) candidates += c;
    if (remaining == 0 || remaining > candidates) {
      return core::internalError("top-k: pass " + std::to_string(pass) + " has " +
                            std::to_string(candidates) + " candidates for the " +
                            std::to_string(remaining) + "th largest");
    }
    const ew::TopkDigit step = ew::topkSelectDigit(counts, remaining);
    remaining -= step.above;
    prefix = (prefix << 8) | step.digit;
  }
  return TopkThreshold{prefix, remaining};
}

// The compaction's blocks: block b holds a contiguous run of elements, `greater[b]` of them with
// a key above K and `equal[b]` with key K. equalBefore[b] counts the elements with key K in the
// blocks before b, keptBefore[b] the kept ones (where block b's first kept element goes).
struct TopkBlocks {
  std::vector<uint32_t> equalBefore, keptBefore;
};
inline TopkBlocks topkBlockOffsets(std::span<const uint32_t> greater,
                                   std::span<const uint32_t> equal, uint64_t equalKept) {
  TopkBlocks out;
  out.equalBefore.resize(greater.size());
  out.keptBefore.resize(greater.size());
  uint64_t eq = 0, kept = 0;
  for (size_t b = 0; b < greater.size(); ++b) {
    out.equalBefore[b] = static_cast<uint32_t>(eq);
    out.keptBefore[b] = static_cast<uint32_t>(kept);
    const uint64_t keptEqual = eq >= equalKept ? 0 : std::min<uint64_t>(equal[b], equalKept - eq);
    eq += equal[b];
    kept += greater[b] + keptEqual;
  }
  return out;
}

}  // namespace starling::cuda
