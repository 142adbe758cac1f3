// An in-memory labelled dataset in compressed sparse row (CSR) form.
//
// Dense synthetic data and sparse LIBSVM data share this one representation. Values are double;
// a Problem converts its shard to the run's precision once. Thread-safety: a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace starling::optim {

struct Dataset {
  int features = 0;                   // d: every column index is < features
  std::vector<double> labels;         // one per sample (raw; logistic maps > 0 to +1, else -1)
  std::vector<int64_t> rowPtr{0};     // samples + 1 offsets into colIdx/values
  std::vector<int32_t> colIdx;        // 0-based, strictly increasing within a row
  std::vector<double> values;

  size_t samples() const { return labels.size(); }
  size_t nonZeros() const { return values.size(); }
  // Appends one sample; cols must be strictly increasing and < features.
  void addRow(double label, std::span<const int32_t> cols, std::span<const double> vals);
  // The samples at `indices`, in that order.
  Dataset subset(std::span<const size_t> indices) const;
};

}  // namespace starling::optim
