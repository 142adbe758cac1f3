// Small helpers shared by the training-methods tests (local_optimizer_test.cc,
// training_methods_test.cc): deterministic vectors, tensors of a flat vector, and a closeness
// check that names the coordinate.
#pragma once

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <map>
#include <string>

#include "core/rng.h"
#include "core/state.h"

namespace starling::optim::testing {

using Vec = std::vector<double>;

inline Vec randomVec(size_t d, double scale, uint64_t seed) {
  core::Rng rng(seed);
  Vec v(d);
  for (double& x : v) x = scale * rng.normal();
  return v;
}

// Splits a flat vector into tensors of the given sizes (the references work on tensors).
inline std::vector<Vec> split(const Vec& flat, const std::vector<size_t>& sizes) {
  std::vector<Vec> out;
  size_t at = 0;
  for (size_t s : sizes) {
    out.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(at),
                     flat.begin() + static_cast<std::ptrdiff_t>(at + s));
    at += s;
  }
  return out;
}

inline void checkClose(const Vec& got, const Vec& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("k = " << k);
    CHECK(got[k] == Approx(want[k]).epsilon(rel).margin(rel));
  }
}

inline Vec join(const std::vector<Vec>& tensors) {
  Vec out;
  for (const auto& t : tensors) out.insert(out.end(), t.begin(), t.end());
  return out;
}

// A state store in memory: a saving visitor fills it, a loading one reads it back, checking the
// names and the sizes the object asks for.
struct Store {
  std::map<std::string, std::vector<double>> reals;  // floats widened (exactly)
  std::map<std::string, std::vector<uint64_t>> words;
  std::map<std::string, std::string> texts;
};

class MemoryVisitor final : public core::StateVisitor {
 public:
  MemoryVisitor(Store& store, bool loading) : store_(store), loading_(loading) {}
  bool loading() const override { return loading_; }
  void values(std::string_view n, std::span<float> v) override { fixedValues(n, v); }
  void values(std::string_view n, std::span<double> v) override { fixedValues(n, v); }
  void sized(std::string_view n, std::vector<float>& v) override { sizedValues(n, v); }
  void sized(std::string_view n, std::vector<double>& v) override { sizedValues(n, v); }
  void sized(std::string_view n, std::vector<uint64_t>& v) override {
    if (failed()) return;
    if (!loading_) {
      store_.words[qualified(n)] = v;
    } else if (auto it = store_.words.find(qualified(n)); it != store_.words.end()) {
      v = it->second;
    } else {
      fail("missing " + qualified(n));
    }
  }
  void scalar(std::string_view n, uint64_t& v) override {
    std::vector<uint64_t> w{v};
    sized(n, w);
    if (loading_ && !failed()) {
      if (w.size() != 1) return fail("not a scalar: " + qualified(n));
      v = w[0];
    }
  }
  void scalar(std::string_view n, double& v) override { fixedValues(n, std::span<double>(&v, 1)); }
  void text(std::string_view n, std::string& s) override {
    if (failed()) return;
    if (!loading_) {
      store_.texts[qualified(n)] = s;
    } else if (auto it = store_.texts.find(qualified(n)); it != store_.texts.end()) {
      s = it->second;
    } else {
      fail("missing " + qualified(n));
    }
  }
  using core::StateVisitor::scalar;

 private:
  template <typename E>
  void fixedValues(std::string_view n, std::span<E> v) {
    if (failed()) return;
    if (!loading_) {
      store_.reals[qualified(n)].assign(v.begin(), v.end());
      return;
    }
    auto it = store_.reals.find(qualified(n));
    if (it == store_.reals.end()) return fail("missing " + qualified(n));
    if (it->second.size() != v.size()) return fail("size of " + qualified(n));
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<E>(it->second[k]);
  }
  template <typename E>
  void sizedValues(std::string_view n, std::vector<E>& v) {
    if (failed()) return;
    if (!loading_) {
      store_.reals[qualified(n)].assign(v.begin(), v.end());
      return;
    }
    auto it = store_.reals.find(qualified(n));
    if (it == store_.reals.end()) return fail("missing " + qualified(n));
    v.assign(it->second.begin(), it->second.end());
  }

  Store& store_;
  bool loading_;
};

}  // namespace starling::optim::testing
