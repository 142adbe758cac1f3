#include "scenario/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>

#include "core/read_file.h"

namespace starling::scenario {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const char* typeName(uint8_t t) {
  switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "short";
    case 0x0C: return "int";
    case 0x0D: return "float";
    case 0x0E: return "double";
    default: return "unknown";
  }
}

uint32_t bigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Inflates a gzip stream, refusing output beyond maxBytes.
core::Result<std::string> gunzip(std::string_view in, const std::string& name, uint64_t maxBytes) {
  if (in.size() > UINT32_MAX) {  // zlib counts input in 32 bits
    return core::corruption(name + ": compressed file larger than 4 GiB");
  }
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return core::internalError(name + ": zlib could not start inflating");
  }
  std::string out;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  constexpr size_t kStep = size_t{1} << 20;
  while (rc != Z_STREAM_END) {
    if (out.size() >= maxBytes) {
      inflateEnd(&zs);
      return core::corruption(name + ": inflates to more than the limit of " +
                              core::formatBytes(static_cast<double>(maxBytes)));
    }
    const size_t before = out.size();
    const size_t step = std::min<uint64_t>(kStep, maxBytes - before);
    out.resize(before + step);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + before);
    zs.avail_out = static_cast<uInt>(step);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(before + step - zs.avail_out);
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      return core::corruption(name + ": truncated gzip stream (it ends before its last block)");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string why = zs.msg ? zs.msg : "error " + std::to_string(rc);
      inflateEnd(&zs);
      return core::corruption(name + ": not a valid gzip stream: " + why);
    }
  }
  inflateEnd(&zs);
  return out;
}

}  // namespace

core::Result<IdxArray> parseIdx(std::string_view bytes, const std::string& name,
                                uint64_t maxBytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4) {
    return core::corruption(name + ": truncated: " + std::to_string(bytes.size()) +
                            " bytes, shorter than the 4-byte IDX magic");
  }
  if (p[0] != 0 || p[1] != 0 || p[3] == 0) {
    return core::corruption(name + ": bad magic " + hex32(bigEndian32(p)) +
                            "; expected 0x00 0x00, an element type, a dimension count >= 1 (an "
                            "IDX file)");
  }
  if (p[2] != kUnsignedByte) {
    char t[8];
    std::snprintf(t, sizeof t, "0x%02x", p[2]);
    return core::corruption(name + ": element type " + t + " (" + typeName(p[2]) +
                            ") is not supported; expected 0x08 (unsigned byte)");
  }
  const size_t ndims = p[3];
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) {
    return core::corruption(name + ": truncated: the header needs " + std::to_string(header) +
                            " bytes for " + std::to_string(ndims) + " dimensions, the file has " +
                            std::to_string(bytes.size()));
  }
  IdxArray a;
  uint64_t count = 1;
  std::string shape;
  for (size_t k = 0; k < ndims; ++k) {
    const uint32_t d = bigEndian32(p + 4 + 4 * k);
    a.dims.push_back(d);
    shape += (k ? " x " : "") + std::to_string(d);
  }
  for (uint32_t d : a.dims) {
    // count <= maxBytes < 2^63 holds before each step, so a product that exceeds the bound is
    // caught before it can wrap.
    if (d != 0 && count > maxBytes / d) {
      return core::corruption(name + ": dimensions " + shape + " hold more than the limit of " +
                              core::formatBytes(static_cast<double>(maxBytes)));
    }
    count *= d;
  }
  const uint64_t have = bytes.size() - header;
  if (have != count) {
    return core::corruption(name + (have < count ? ": truncated" : ": trailing bytes") +
                            ": the header says " + shape + " = " + std::to_string(count) +
                            " bytes of data, the file has " + std::to_string(have));
  }
  a.data.assign(p + header, p + header + count);
  return a;
}

core::Result<IdxArray> readIdx(const std::string& path, uint64_t maxBytes) {
  auto raw = core::readRegularFile(path, maxBytes, "IDX file");
  if (!raw) return raw.status();
  if (raw->size() >= 2 && static_cast<unsigned char>((*raw)[0]) == 0x1f &&
      static_cast<unsigned char>((*raw)[1]) == 0x8b) {
    auto inflated = gunzip(*raw, path, maxBytes);
    if (!inflated) return inflated.status();
    return parseIdx(*inflated, path, maxBytes);
  }
  return parseIdx(*raw, path, maxBytes);
}

core::Result<optim::ImageDataset> readIdxImages(const std::string& images,
                                                const std::string& labels, uint64_t maxBytes,
                                                int classes, uint64_t limit) {
  auto img = readIdx(images, maxBytes);
  if (!img) return img.status();
  auto lab = readIdx(labels, maxBytes);
  if (!lab) return lab.status();
  if (img->dims.size() != 2 && img->dims.size() != 3) {
    return core::corruption(images + ": expected images of 2 (count, features) or 3 (count, "
                            "rows, columns) dimensions, got " + std::to_string(img->dims.size()));
  }
  if (lab->dims.size() != 1) {
    return core::corruption(labels + ": expected labels of 1 dimension, got " +
                            std::to_string(lab->dims.size()));
  }
  const uint64_t count = img->dims[0];
  if (lab->dims[0] != count) {
    return core::corruption(labels + ": " + std::to_string(lab->dims[0]) + " labels for " +
                            std::to_string(count) + " images in " + images);
  }
  uint64_t features = 1;
  for (size_t k = 1; k < img->dims.size(); ++k) features *= img->dims[k];
  if (count == 0 || features == 0 || features > (uint64_t{1} << 24)) {
    return core::corruption(images + ": expected at least one image of 1 to 2^24 pixels, got " +
                            std::to_string(count) + " images of " + std::to_string(features));
  }
  const int top = *std::max_element(lab->data.begin(), lab->data.end());
  if (classes == 0) classes = top + 1;
  if (top >= classes) {
    return core::corruption(labels + ": label " + std::to_string(top) + " is not below the " +
                            std::to_string(classes) + " classes");
  }
  const uint64_t keep = limit == 0 ? count : std::min(limit, count);
  optim::ImageDataset d;
  d.features = static_cast<int>(features);
  d.classes = classes;
  img->data.resize(keep * features);
  d.pixels = std::move(img->data);
  lab->data.resize(keep);
  d.labels = std::move(lab->data);
  return d;
}

}  // namespace starling::scenario
