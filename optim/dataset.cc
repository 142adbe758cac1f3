#include "optim/dataset.h"

#include <cassert>

namespace starling::optim {

void Dataset::addRow(double label, std::span<const int32_t> cols, std::span<const double> vals) {
  assert(cols.size() == vals.size());
  for (size_t k = 0; k < cols.size(); ++k) {
    assert(cols[k] >= 0 && cols[k] < features);
    assert(k == 0 || cols[k - 1] < cols[k]);
  }
  labels.push_back(label);
  colIdx.insert(colIdx.end(), cols.begin(), cols.end());
  values.insert(values.end(), vals.begin(), vals.end());
  rowPtr.push_back(static_cast<int64_t>(values.size()));
}

Dataset Dataset::subset(std::span<const size_t> indices) const {
  Dataset out;
  out.features = features;
  out.labels.reserve(indices.size());
  out.rowPtr.reserve(indices.size() + 1);
  for (size_t j : indices) {
    assert(j < samples());
    const int64_t begin = rowPtr[j];
    const int64_t end = rowPtr[j + 1];
    out.labels.push_back(labels[j]);
    out.colIdx.insert(out.colIdx.end(), colIdx.begin() + begin, colIdx.begin() + end);
    out.values.insert(out.values.end(), values.begin() + begin, values.begin() + end);
    out.rowPtr.push_back(static_cast<int64_t>(out.values.size()));
  }
  return out;
}

}  // namespace starling::optim
