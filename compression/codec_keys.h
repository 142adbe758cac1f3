// Each codec's keys in a scenario's `compression` object (and in each of its `layers` rules):
// name, type, range and default, and where the value lives in CompressorSpec. The scenario
// reader and writer go through this table, in its order, and a test checks it against the key
// reference in scenarios/README.md both ways: a codec's new key is one row here (and its line in
// the reference). "kind" and "error_feedback", which every codec has, are not rows.
// Thread-safety: immutable tables.
#pragma once

#include <array>
#include <optional>
#include <span>

#include "compression/compressor.h"

namespace starling::compression {

struct CodecKey {
  enum class Type {
    kInteger,  // an integer in [lo, hi]
    kNumber,   // a finite number in [lo, hi], or (lo, hi] with openLo
    kBoolean,
    kChoice,   // one of `choices`, stored as its index
    // Not one key but a rule over several (they are read and written at this row's place):
    kKeep,        // exactly one of "k" (1 ... 2^40) or "ratio" ((0, 1]): the elements kept
    kSketchKeep,  // countsketch: with "estimate" "median" exactly one of "k", "ratio" or
                  // "threshold" ((0, 1]); with "mean" none of them
  };
  const char* name;  // the JSON key; for kKeep and kSketchKeep a label
  Type type;
  double lo = 0;
  double hi = 0;
  bool openLo = false;
  std::optional<double> def;  // nullopt: required
  std::array<const char*, 2> choices{};
  // Bounds set by a key read before this one: lo = that key's value (dqsgd's max_bits), or
  // hi = that key's value - 1 (lgc's latent, whose default is then clamped to hi).
  const char* loKey = nullptr;
  const char* hiKey = nullptr;
  double (*get)(const CompressorSpec&) = nullptr;
  void (*set)(CompressorSpec&, double) = nullptr;
};

// The keys of `kind`'s object besides "kind" and "error_feedback", in reading order.
std::span<const CodecKey> codecKeys(CompressorSpec::Kind kind);

// The value of `kind`'s key `name` in `c` (a kInteger, kNumber, kBoolean or kChoice row).
std::optional<double> codecKeyValue(const CompressorSpec& c, const char* name);

}  // namespace starling::compression
