// The Count-Sketch's hash functions and its two passes over a vector, shared by the countsketch
// codec (compression/codecs/sketch.cc) and the sketched gossip of optim (optim/sketch_gossip.h),
// so that both sketch with the same functions (docs/algorithms.md §12.11, §27).
//
// Row j of an r x c table has a bucket hash h_j: [d] -> [c] and a sign hash s_j: [d] -> {+1, -1},
// both multiply-add-shift hashes of the coordinate index i (Dietzfelbinger 1996):
//   h_j(i) = (((a_j0 i + b_j0) mod 2^64) >> 32) * c >> 32
//   s_j(i) = -1 if the top bit of (a_j1 i + b_j1) mod 2^64 is set, else +1
// with (a_j0, b_j0, a_j1, b_j1) = core::deriveSeed(seed, kSketchHashSalt, j, w) for w = 0..3.
// The sketch of x is S(x)[j][h_j(i)] += s_j(i) x_i; it is linear in x.
//
// Thread-safety: SketchHashes is an immutable value; the functions touch only their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "compression/codecs/elementwise.h"
#include "core/rng.h"

namespace starling::compression {

inline constexpr uint64_t kSketchHashSalt = 0x534b4554;  // "SKET"
inline constexpr uint32_t kSketchMaxRows = 64;

// Per-row hash parameters drawn from one seed.
class SketchHashes {
 public:
  // rows in 1..kSketchMaxRows, cols >= 1 (the caller checks).
  SketchHashes(uint64_t seed, uint32_t rows, uint32_t cols) : cols_(cols), rows_(rows) {
    for (uint32_t j = 0; j < rows; ++j) {
      for (uint64_t w = 0; w < 4; ++w) coef_[j][w] = core::deriveSeed(seed, kSketchHashSalt, j, w);
    }
  }
  uint32_t rows() const { return rows_; }
  uint32_t cols() const { return cols_; }
  const uint64_t* coef(uint32_t j) const { return coef_[j]; }

  // h_j(i) and s_j(i) of one coordinate: the values the block kernels compute by induction.
  // (elementwise.h's sketchBucket and sketchNegative, which the GPU kernels call.)
  uint32_t bucket(uint32_t j, uint64_t i) const {
    return elementwise::sketchBucket(coef_[j][0], coef_[j][1], cols_, i);
  }
  bool negative(uint32_t j, uint64_t i) const {
    return elementwise::sketchNegative(coef_[j][2], coef_[j][3], i);
  }

 private:
  uint32_t cols_;
  uint32_t rows_;
  uint64_t coef_[kSketchMaxRows][4];
};

// table (rows x cols, row-major) += S(x). Each cell receives its terms in index order.
template <typename T>
void sketchAdd(std::span<const T> x, const SketchHashes& h, std::span<T> table);

// est_i = the lower median over rows (or, with `mean`, the mean) of s_j(i) table[j][h_j(i)].
template <typename T>
void sketchEstimate(std::span<const T> table, const SketchHashes& h, bool mean, std::span<T> est);

}  // namespace starling::compression
