#include "optim/adasum.h"

#include <algorithm>
#include <cassert>
#include <vector>

namespace starling::optim {
namespace {

// Adasum of the tensor [begin, end) of a and b into out.
template <typename T>
void pairRange(const T* a, const T* b, T* out, size_t begin, size_t end) {
  double dot = 0.0, aa = 0.0, bb = 0.0;
  for (size_t k = begin; k < end; ++k) {
    const double x = a[k], y = b[k];
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  const auto [ca, cb] = adasumCoefficients(dot, aa, bb);
  for (size_t k = begin; k < end; ++k) {
    out[k] = static_cast<T>(ca * static_cast<double>(a[k]) + cb * static_cast<double>(b[k]));
  }
}

template <typename T>
bool sameOrApart(const T* p, const T* q, size_t n) {
  return p == q || p + n <= q || q + n <= p;
}

}  // namespace

std::pair<double, double> adasumCoefficients(double dot, double aa, double bb) {
  const double ca = aa == 0.0 ? 1.0 : 1.0 - dot / (2.0 * aa);
  const double cb = bb == 0.0 ? 1.0 : 1.0 - dot / (2.0 * bb);
  return {ca, cb};
}

template <typename T>
void adasumPair(std::span<const T> a, std::span<const T> b, std::span<T> out) {
  assert(a.size() == b.size() && out.size() == a.size());
  assert(sameOrApart<T>(out.data(), a.data(), a.size()) &&
         sameOrApart<T>(out.data(), b.data(), a.size()));
  pairRange(a.data(), b.data(), out.data(), 0, a.size());
}

template <typename T>
void adasumPair(const ParameterLayout& layout, std::span<const T> a, std::span<const T> b,
                std::span<T> out) {
  assert(layout.dim() == a.size() && a.size() == b.size() && out.size() == a.size());
  assert(sameOrApart<T>(out.data(), a.data(), a.size()) &&
         sameOrApart<T>(out.data(), b.data(), a.size()));
  size_t begin = 0;
  for (size_t size : layout.sizes) {
    pairRange(a.data(), b.data(), out.data(), begin, begin + size);
    begin += size;
  }
}

template <typename T>
void adasumCombine(std::span<const std::span<const T>> vectors, const ParameterLayout& layout,
                   std::span<T> out) {
  const size_t d = layout.dim();
  assert(!vectors.empty() && out.size() == d);
  for ([[maybe_unused]] const auto& v : vectors) {
    assert(v.size() == d);
    assert(out.data() + d <= v.data() || v.data() + d <= out.data());
  }
  if (vectors.size() == 1) {
    std::copy(vectors[0].begin(), vectors[0].end(), out.begin());
    return;
  }
  // The items of the current level: an input (read only) or a scratch buffer (written in place).
  std::vector<std::vector<T>> scratch;
  scratch.reserve(vectors.size() / 2);
  std::vector<std::span<const T>> level(vectors.begin(), vectors.end());
  std::vector<T*> writable(level.size(), nullptr);
  while (level.size() > 2) {
    std::vector<std::span<const T>> next;
    std::vector<T*> nextWritable;
    for (size_t i = 0; i + 1 < level.size(); i += 2) {
      // The first of a pair is always an input at level 1 or a scratch buffer above it (only
      // the last item of a level can be carried up unchanged).
      T* dst = writable[i];
      if (dst == nullptr) {
        scratch.emplace_back(d);
        dst = scratch.back().data();
      }
      adasumPair<T>(layout, level[i], level[i + 1], std::span<T>(dst, d));
      next.emplace_back(dst, d);
      nextWritable.push_back(dst);
    }
    if (level.size() % 2 == 1) {
      next.push_back(level.back());
      nextWritable.push_back(writable.back());
    }
    level = std::move(next);
    writable = std::move(nextWritable);
  }
  adasumPair<T>(layout, level[0], level[1], out);
}

template void adasumPair<float>(std::span<const float>, std::span<const float>, std::span<float>);
template void adasumPair<double>(std::span<const double>, std::span<const double>,
                                 std::span<double>);
template void adasumPair<float>(const ParameterLayout&, std::span<const float>,
                                std::span<const float>, std::span<float>);
template void adasumPair<double>(const ParameterLayout&, std::span<const double>,
                                 std::span<const double>, std::span<double>);
template void adasumCombine<float>(std::span<const std::span<const float>>, const ParameterLayout&,
                                   std::span<float>);
template void adasumCombine<double>(std::span<const std::span<const double>>,
                                    const ParameterLayout&, std::span<double>);

}  // namespace starling::optim
