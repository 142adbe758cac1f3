// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
//
// An IDX file is a 4-byte magic (0x00 0x00, the element type, the number of dimensions), one
// big-endian uint32 per dimension, then the elements in row-major order. Only unsigned bytes
// (type 0x08) are read: images and labels are stored that way. A file that starts with the gzip
// magic (0x1f 0x8b) is inflated first, with zlib.
//
// Nothing in the file is trusted: the compressed file must be a regular file of at most
// maxBytes, it may inflate to at most maxBytes, the dimensions' product is checked for overflow
// and against maxBytes before anything is allocated, and the data must be exactly as long as the
// header says. Every error is kCorruption (or the read error of core/read_file.h) and starts
// with the path, then says what is wrong: "t.gz: bad magic 0x1f8b0800; expected 0x00 0x00, an
// element type, a dimension count (an IDX file)".
// Thread-safety: free functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "optim/image_dataset.h"
#include "core/status.h"

namespace starling::scenario {

struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;  // product of dims elements, row-major
};

// Parses the (already inflated) bytes of an IDX file. `name` prefixes every message.
core::Result<IdxArray> parseIdx(std::string_view bytes, const std::string& name,
                                uint64_t maxBytes);

// Reads `path` (gzip or plain), at most maxBytes compressed and inflated.
core::Result<IdxArray> readIdx(const std::string& path, uint64_t maxBytes);

// An image set from an images file (3 dimensions: count, rows, columns; or 2: count, features)
// and a labels file (1 dimension: count) of the same count. `classes` is the number of classes
// (every label must be below it); 0 takes the largest label + 1. `limit`, when non-zero, keeps
// only the first `limit` samples.
core::Result<optim::ImageDataset> readIdxImages(const std::string& images,
                                                const std::string& labels, uint64_t maxBytes,
                                                int classes = 0, uint64_t limit = 0);

}  // namespace starling::scenario
