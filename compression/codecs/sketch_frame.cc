#include "compression/codecs/sketch_frame.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "compression/codecs/wire.h"
#include "compression/sketch_hash.h"

namespace starling::compression::codecs {

void storeSketchParams(const CountSketchHeader& p, std::byte* out) {
  out[0] = static_cast<std::byte>(p.mean ? 1 : 0);
  out[1] = static_cast<std::byte>(p.rows);
  storeLe<uint32_t>(out + 2, p.cols);
  storeLe<uint64_t>(out + 6, p.k);
  storeLe<uint32_t>(out + 14, std::bit_cast<uint32_t>(p.threshold));
  storeLe<uint64_t>(out + 18, p.seed);
  storeLe<uint64_t>(out + 26, std::bit_cast<uint64_t>(p.scale));
}

core::Result<CountSketchHeader> loadSketchParams(std::span<const std::byte> in, uint64_t d) {
  CountSketchHeader p;
  const int mean = std::to_integer<int>(in[0]);
  if (mean > 1) return core::corruption("countsketch estimate flag " + std::to_string(mean));
  p.mean = mean == 1;
  p.rows = std::to_integer<uint32_t>(in[1]);
  p.cols = loadLe<uint32_t>(in.data() + 2);
  p.k = loadLe<uint64_t>(in.data() + 6);
  p.threshold = std::bit_cast<float>(loadLe<uint32_t>(in.data() + 14));
  p.seed = loadLe<uint64_t>(in.data() + 18);
  p.scale = std::bit_cast<double>(loadLe<uint64_t>(in.data() + 26));
  if (p.rows < 1 || p.rows > kSketchMaxRows) {
    return core::corruption("countsketch rows " + std::to_string(p.rows));
  }
  if (p.cols < 1 || p.cols > kSketchMaxCols) {
    return core::corruption("countsketch cols " + std::to_string(p.cols));
  }
  if (!std::isfinite(p.scale)) return core::corruption("countsketch scale is not finite");
  if (!std::isfinite(p.threshold) || p.threshold < 0.0f || p.threshold > 1.0f) {
    return core::corruption("countsketch threshold out of [0, 1]");
  }
  if (d > UINT32_MAX) return core::corruption("countsketch frame of more than 2^32-1 elements");
  if (p.mean || d == 0) {
    if (p.k != 0 || p.threshold != 0.0f) {
      return core::corruption("countsketch: k or threshold set where none applies");
    }
  } else if ((p.k == 0) == (p.threshold == 0.0f)) {
    return core::corruption("countsketch: exactly one of k and threshold must be set");
  } else if (p.k > d) {
    return core::corruption("countsketch k " + std::to_string(p.k) + " > " + std::to_string(d));
  }
  return p;
}

template <typename T>
void writeSketchFrame(const CountSketchHeader& p, uint64_t d, std::span<const T> table,
                      FrameOut& out) {
  std::byte params[kSketchParamsBytes];
  storeSketchParams(p, params);
  static_assert(std::endian::native == std::endian::little,
                "the table is copied as is; add a byte-swapping path for big-endian hosts");
  std::byte* payload =
      out.begin(CodecId::kCountSketch, elementTypeOf<T>(), d, params, table.size_bytes());
  if (payload == nullptr) return;
  if (!table.empty()) std::memcpy(payload, table.data(), table.size_bytes());
  out.seal();
}

template void writeSketchFrame<float>(const CountSketchHeader&, uint64_t, std::span<const float>,
                                      FrameOut&);
template void writeSketchFrame<double>(const CountSketchHeader&, uint64_t,
                                       std::span<const double>, FrameOut&);

CountSketchHeader countSketchHeader(const CompressorSpec& spec, uint64_t d, uint64_t seed) {
  CountSketchHeader p;
  p.mean = spec.meanEstimate;
  p.rows = static_cast<uint32_t>(spec.rows);
  p.cols = static_cast<uint32_t>(spec.cols);
  p.seed = seed;
  if (!p.mean && d > 0) {
    if (spec.threshold > 0.0) {
      p.threshold = static_cast<float>(spec.threshold);
    } else {
      p.k = keptCount(spec.k, spec.ratio, d);
    }
  }
  return p;
}

void writeCountSketchFrame(const CountSketchHeader& h, uint64_t d, std::span<const float> table,
                           FrameOut& out) {
  writeSketchFrame<float>(h, d, table, out);
}

core::Result<CountSketchHeader> readCountSketchFrame(const CompressorSpec& spec,
                                                     std::span<const std::byte> frame, uint64_t d,
                                                     std::span<const std::byte>& table) {
  auto v = openFrame<float>(frame, CodecId::kCountSketch, d, kSketchParamsBytes);
  if (!v) return v.status();
  auto p = loadSketchParams(v->params, d);
  if (!p) return p.status();
  if (p->mean != spec.meanEstimate) {
    return core::corruption("countsketch frame of the other estimate than this run's");
  }
  const uint64_t cells = static_cast<uint64_t>(p->rows) * p->cols;
  if (v->payload.size() != cells * sizeof(float)) {
    return core::corruption("countsketch payload of " + std::to_string(v->payload.size()) +
                            " bytes for a " + std::to_string(p->rows) + " x " +
                            std::to_string(p->cols) + " table");
  }
  for (size_t c = 0; c < cells; ++c) {
    const float f = std::bit_cast<float>(loadLe<uint32_t>(v->payload.data() + 4 * c));
    if (!std::isfinite(f)) return core::corruption("countsketch table value not finite");
  }
  table = v->payload;
  return *p;
}

}  // namespace starling::compression::codecs
