// A dense labelled data set of 8-bit samples (images), as IDX files hold them.
//
// One byte per pixel, samples stored row after row: Fashion-MNIST's 60,000 x 784 training images
// take 47 MB here, where a CSR of doubles would take 560 MB. A model reads pixel / 255 (in its
// own precision) as it gathers a batch, so no float copy of the whole set is ever made.
// Thread-safety: a value type.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace starling::optim {

struct ImageDataset {
  int features = 0;             // pixels per sample
  int classes = 0;              // every label is < classes
  std::vector<uint8_t> pixels;  // samples() x features, row-major
  std::vector<uint8_t> labels;  // one per sample

  size_t samples() const { return labels.size(); }
  std::span<const uint8_t> sample(size_t j) const {
    assert(j < samples());
    return {pixels.data() + j * static_cast<size_t>(features), static_cast<size_t>(features)};
  }
  // The samples at `indices`, in that order.
  ImageDataset subset(std::span<const size_t> indices) const {
    ImageDataset out;
    out.features = features;
    out.classes = classes;
    out.pixels.reserve(indices.size() * static_cast<size_t>(features));
    out.labels.reserve(indices.size());
    for (size_t j : indices) {
      const auto s = sample(j);
      out.pixels.insert(out.pixels.end(), s.begin(), s.end());
      out.labels.push_back(labels[j]);
    }
    return out;
  }
};

}  // namespace starling::optim
