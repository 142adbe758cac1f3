// DSGD (adapt-then-combine diffusion), exact diffusion and gradient tracking (DIGing), written
// from docs/algorithms.md §3-§5. The vector arithmetic goes through Eigen maps.
#include <Eigen/Core>
#include <algorithm>
#include <cassert>
#include <iterator>

#include "optim/algorithm.h"
#include "optim/adascale_gossip.h"
#include "optim/adasum_gossip.h"
#include "optim/choco.h"
#include "optim/combine.h"
#include "optim/diloco.h"
#include "optim/lead.h"
#include "optim/leader_gossip.h"
#include "optim/sketch_gossip.h"

namespace starling::optim {
namespace {

template <typename T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <typename T>
using Map = Eigen::Map<Vec<T>>;
template <typename T>
using CMap = Eigen::Map<const Vec<T>>;

template <typename T>
CMap<T> cmap(std::span<const T> s) { return CMap<T>(s.data(), static_cast<Eigen::Index>(s.size())); }
template <typename T>
Map<T> map(std::span<T> s) { return Map<T>(s.data(), static_cast<Eigen::Index>(s.size())); }

// out = own + sum_j scale * w_ij * (m_j - own), the combine in difference form (optim/combine.h,
// which also says how it is walked). It equals (1 - scale * sum_j w_ij) own + sum_j scale * w_ij
// m_j, but never uses the self weight, so the combine weights sum to exactly one whatever the
// rounding of w_ij in T. With the self weight written out, its rounding error (about 3e-8 in
// float32) biases the average of every round, and exact diffusion's invariant
// sum_i (w_i - psi_i) = 0 drifts linearly with the round count.
// With `base` (DSGD under a lossy codec) the sum starts from base instead of own:
// out = base + sum_j scale * w_ij * (m_j - own), so the compression error of the node's own
// message never replaces its exact state (DeepSqueeze's form, Tang et al. 2019).
//
// With `limit`, each block of `out` is also checked against it (core::allWithin) right after it is
// written, while it is in L1, and the return value says whether every |out_k| <= *limit: the
// engine's divergence check of a model that combine writes whole (Algorithm::absorbWithin),
// without a pass of its own over d values. Without, it returns true.
template <typename T>
bool combine(Map<T> out, CMap<T> own, std::span<const NeighborMessage<T>> nbrs, T scale,
             Eigen::Index offset, Eigen::Index len, const T* base = nullptr,
             const T* limit = nullptr) {
  const T* self = own.data() + offset;
  return detail::combine<T>(out.data(), nullptr, base != nullptr ? base + offset : self, self,
                            nbrs, scale, static_cast<size_t>(offset), static_cast<size_t>(len),
                            limit);
}

// The gradient at x over [offset, offset + n), for an algorithm that writes its message a block
// at a time: with the oracle's blocks, that block alone into `scratch` (started at offset 0);
// without, the whole gradient into `whole` at offset 0 and a pointer into it.
template <typename T>
const T* gradientAt(GradientOracle<T>& oracle, GradientBlocks<T>* blocks, std::span<const T> x,
                    size_t offset, size_t n, std::vector<T>& whole, std::vector<T>& scratch) {
  if (blocks == nullptr) {
    if (offset == 0) oracle.gradient(x, whole);
    return whole.data() + offset;
  }
  if (offset == 0) blocks->start(x);
  if (scratch.size() < n) scratch.resize(n);
  blocks->fill(offset, std::span<T>(scratch.data(), n));
  return scratch.data();
}

// Adapt-then-combine diffusion (docs/algorithms.md §3):
//   psi_i = x_i - eta g_i(x_i);  x_i = sum_j w_ij psi_j.   Sends psi (d values).
// Written as x_i = psi_i + sum_j w_ij (m_j - m_i) with m the messages as received; without a
// lossy codec m_i = psi_i and this is the line above. With one (error feedback), the node keeps
// its exact psi_i and only the differences carry compression error.
template <typename T>
class Dsgd final : public Algorithm<T>, public BlockPreparation<T> {
 public:
  Dsgd(double gamma, std::span<const T> x0, GradientOracle<T>& oracle)
      : gamma_(static_cast<T>(gamma)), x_(x0.begin(), x0.end()), psi_(x0.size()),
        oracle_(oracle), blocks_(oracle.gradientBlocks()) {
    if (!blocks_) grad_.resize(x0.size());
  }

  size_t messageSize() const override { return x_.size(); }

  void prepare(const RoundInfo& info, std::span<T> out) override { prepareBlock(info, 0, out); }

  // psi = x - alpha g a block at a time (BlockPreparation), with the gradient's own blocks where
  // the oracle has them (GradientBlocks), so the gradient is never stored whole.
  AlgorithmCapabilities<T> capabilities() override { return {.blocks = this}; }
  std::span<const T> prepareBlock(const RoundInfo& info, size_t offset, std::span<T> out) override {
    if (offset == 0) lossless_ = out.data();
    const T* g = gradientAt<T>(oracle_, blocks_.get(), x_, offset, out.size(), grad_, scratch_);
    const T alpha = static_cast<T>(info.stepSize);
    const T* x = x_.data() + offset;
    T* psi = psi_.data() + offset;
    // A large message written into a segment the neighbours read in place is streamed there from
    // psi's block, which the node then reads back (as plain gossip's; 4% faster at d = 1e6 here).
    if (info.messageLent && x_.size() * sizeof(T) >= detail::kStreamBytes) {
      for (size_t k = 0, n = out.size(); k < n; ++k) psi[k] = x[k] - alpha * g[k];
      detail::streamCopy(psi, out.data(), out.size_bytes());
      if (offset + out.size() == x_.size()) detail::streamFence();
      return {psi, out.size()};
    }
    T* o = out.data();
    for (size_t k = 0, n = out.size(); k < n; ++k) {
      o[k] = x[k] - alpha * g[k];
      psi[k] = o[k];
    }
    return out;
  }

  void absorb(const RoundInfo&, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const auto d = static_cast<Eigen::Index>(x_.size());
    // `own` is the buffer prepare wrote unless a codec decoded it into another one.
    const T* base = own.data() == lossless_ ? nullptr : psi_.data();
    combine<T>(map<T>(std::span<T>(x_)), cmap<T>(own), nbrs, gamma_, 0, d, base);
  }

  // The same combine, checking x block by block as it writes it.
  bool absorbWithin(const RoundInfo&, std::span<const T> own,
                    std::span<const NeighborMessage<T>> nbrs, T limit) override {
    const auto d = static_cast<Eigen::Index>(x_.size());
    const T* base = own.data() == lossless_ ? nullptr : psi_.data();
    return combine<T>(map<T>(std::span<T>(x_)), cmap<T>(own), nbrs, gamma_, 0, d, base, &limit);
  }

  std::span<const T> model() const override { return x_; }

  // psi_, grad_ and scratch_ are rewritten by every prepare before they are read.
  void visitState(core::StateVisitor& v) override { v.fixed("x", x_); }

 private:
  const T gamma_;
  std::vector<T> x_, psi_;
  std::vector<T> grad_;     // the whole gradient, where the oracle has no blocks
  std::vector<T> scratch_;  // one block of it, where it has
  const T* lossless_ = nullptr;
  GradientOracle<T>& oracle_;
  std::unique_ptr<GradientBlocks<T>> blocks_;
};

// Exact diffusion, ATC form (docs/algorithms.md §4; Yuan et al. 2019, Part I Alg. 1):
//   psi_i = w_i - mu grad J_i(w_i);  phi_i = psi_i + w_i - psi_i^prev;  w_i = sum_l abar_il phi_l,
// with Abar = (I + W)/2 (abar_ii = (1 + w_ii)/2, abar_il = w_il/2). psi^prev starts at w^{-1} = x0,
// so the first round is a plain diffusion step. Sends phi (d values).
template <typename T>
class ExactDiffusion final : public Algorithm<T>, public BlockPreparation<T> {
 public:
  ExactDiffusion(std::span<const T> x0, GradientOracle<T>& oracle)
      : w_(x0.begin(), x0.end()), psiPrev_(x0.begin(), x0.end()), oracle_(oracle),
        blocks_(oracle.gradientBlocks()) {
    if (!blocks_) grad_.resize(x0.size());
  }

  size_t messageSize() const override { return w_.size(); }

  void prepare(const RoundInfo& info, std::span<T> out) override { prepareBlock(info, 0, out); }

  // The message a block at a time, so that the engine checks and seals each block while it is
  // in cache (BlockPreparation), with the gradient's own blocks where the oracle has them
  // (GradientBlocks): then w and psi_prev are the only d-vectors read, and the gradient is never
  // stored whole.
  AlgorithmCapabilities<T> capabilities() override { return {.blocks = this}; }
  std::span<const T> prepareBlock(const RoundInfo& info, size_t offset, std::span<T> out) override {
    const T* g = gradientAt<T>(oracle_, blocks_.get(), w_, offset, out.size(), grad_, scratch_);
    // psi = w - mu g, phi = psi + w - psi_prev, and psi the next round's psi_prev: one fused
    // pass (element k of psi_prev is read only here, so it is replaced in place).
    // The message is written in place, also into a shared-memory segment: streaming it there
    // from a block in L1, as DSGD does, measured 5-10% slower here (docs/bench_gossip.md).
    const T mu = static_cast<T>(info.stepSize);
    const T* w = w_.data() + offset;
    T* prev = psiPrev_.data() + offset;
    T* phi = out.data();
    for (size_t k = 0, n = out.size(); k < n; ++k) {
      const T psi = w[k] - mu * g[k];
      phi[k] = psi + w[k] - prev[k];
      prev[k] = psi;
    }
    return out;
  }

  void absorb(const RoundInfo&, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const auto d = static_cast<Eigen::Index>(w_.size());
    combine<T>(map<T>(std::span<T>(w_)), cmap<T>(own), nbrs, T(0.5), 0, d);
  }

  // The same combine, checking w block by block as it writes it.
  bool absorbWithin(const RoundInfo&, std::span<const T> own,
                    std::span<const NeighborMessage<T>> nbrs, T limit) override {
    const auto d = static_cast<Eigen::Index>(w_.size());
    return combine<T>(map<T>(std::span<T>(w_)), cmap<T>(own), nbrs, T(0.5), 0, d, nullptr, &limit);
  }

  std::span<const T> model() const override { return w_; }

  void visitState(core::StateVisitor& v) override {
    v.fixed("w", w_);
    v.fixed("psi_prev", psiPrev_);
  }

 private:
  std::vector<T> w_, psiPrev_;
  std::vector<T> grad_;     // the whole gradient, where the oracle has no blocks
  std::vector<T> scratch_;  // one block of it, where it has
  GradientOracle<T>& oracle_;
  std::unique_ptr<GradientBlocks<T>> blocks_;
};

// Gradient tracking, DIGing in its CTA form (docs/algorithms.md §5), so that one exchange per round
// carries both mixed quantities:
//   x_i <- sum_j w_ij x_j - alpha y_i;   y_i <- sum_j w_ij y_j + grad f_i(x_i new) - grad f_i(x_i old),
// with y_i^0 = grad f_i(x_i^0). Sends [x_i, y_i] (2d values).
// The gradient at the new x is asked for at the start of the next round (prepare), not at the end
// of absorb, so that every oracle call is at the current model (Algorithm::model()); absorb leaves
// y without its correction and prepare adds grad f_i(x new) - grad f_i(x old) with the same
// arithmetic as before, so the iterates are unchanged.
template <typename T>
class GradientTracking final : public Algorithm<T> {
 public:
  GradientTracking(std::span<const T> x0, GradientOracle<T>& oracle)
      : x_(x0.begin(), x0.end()), y_(x0.size()), gPrev_(x0.size()), gNew_(x0.size()), oracle_(oracle) {}

  size_t messageSize() const override { return 2 * x_.size(); }

  void prepare(const RoundInfo&, std::span<T> out) override {
    if (!started_) {
      started_ = true;
      oracle_.gradient(x_, gPrev_);
      y_ = gPrev_;
    } else {
      oracle_.gradient(x_, gNew_);
      map<T>(std::span<T>(y_)) += cmap<T>(gNew_) - cmap<T>(gPrev_);
      gPrev_.swap(gNew_);
    }
    std::copy(x_.begin(), x_.end(), out.begin());
    std::copy(y_.begin(), y_.end(), out.begin() + static_cast<std::ptrdiff_t>(x_.size()));
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const auto d = static_cast<Eigen::Index>(x_.size());
    auto x = map<T>(std::span<T>(x_));
    auto y = map<T>(std::span<T>(y_));
    combine<T>(x, cmap<T>(own), nbrs, T(1), 0, d);
    x -= static_cast<T>(info.stepSize) * y;  // y still holds y^k here
    combine<T>(y, cmap<T>(own), nbrs, T(1), d, d);
  }

  std::span<const T> model() const override { return x_; }

  // gNew_ is rewritten by every prepare before it is read.
  void visitState(core::StateVisitor& v) override {
    v.flag("started", started_);
    v.fixed("x", x_);
    v.fixed("y", y_);
    v.fixed("g_prev", gPrev_);
  }

 private:
  bool started_ = false;
  std::vector<T> x_, y_, gPrev_, gNew_;
  GradientOracle<T>& oracle_;
};

}  // namespace

namespace {

constexpr AlgorithmInfo kAlgorithms[] = {
    {AlgorithmKind::kDsgd, "dsgd", "adapt-then-combine diffusion (§3)", true, false, false, false},
    {AlgorithmKind::kExactDiffusion, "exact_diffusion", "diffusion with bias correction (§4)",
     false, false, false, false},
    {AlgorithmKind::kGradientTracking, "gradient_tracking", "DIGing (§5)", false, false, false,
     false},
    {AlgorithmKind::kChoco, "choco", "CHOCO-SGD: compressed model differences (§7)", true, false,
     true, false},
    {AlgorithmKind::kNids, "nids", "NIDS, with a proximal step (§6)", false, false, false, true},
    {AlgorithmKind::kLead, "lead", "LEAD: compressed exact diffusion (§8)", true, true, true,
     false},
    {AlgorithmKind::kProxLead, "prox_lead", "Prox-LEAD: LEAD with a proximal step (§8)", true,
     true, true, true},
    {AlgorithmKind::kDiloco, "diloco", "H local steps, gossip, an outer step (§29)", false, false,
     false, false},
};

constexpr bool inKindOrder() {
  for (size_t i = 0; i < std::size(kAlgorithms); ++i) {
    if (static_cast<size_t>(kAlgorithms[i].kind) != i) return false;
  }
  return true;
}
static_assert(inKindOrder() && std::size(kAlgorithms) ==
                                   static_cast<size_t>(AlgorithmKind::kDiloco) + 1,
              "kAlgorithms must list every AlgorithmKind, in order");

}  // namespace

std::span<const AlgorithmInfo> algorithmKinds() { return kAlgorithms; }

const AlgorithmInfo& algorithmInfo(AlgorithmKind kind) {
  return kAlgorithms[static_cast<size_t>(kind)];
}

bool sendsCompressedDifferences(AlgorithmKind kind) { return algorithmInfo(kind).sendsDifferences; }

bool handlesRegularizer(AlgorithmKind kind) { return algorithmInfo(kind).proximal; }

const char* algorithmKindName(AlgorithmKind kind) {
  const auto i = static_cast<size_t>(kind);
  return i < std::size(kAlgorithms) ? kAlgorithms[i].name : "unknown";
}

template <typename T>
std::unique_ptr<Algorithm<T>> createAlgorithm(const AlgorithmSpec& spec, std::span<const T> x0,
                                              GradientOracle<T>& oracle) {
  // Codistillation shares the neighbours' copies with the oracle: createCodistillationGossip.
  assert(!spec.codistillation.has_value());
  switch (spec.kind) {
    case AlgorithmKind::kDsgd:
      if (spec.combine == AlgorithmSpec::Combine::kAdasum) return createAdasumGossip<T>(spec, x0, oracle);
      if (spec.adascale) return createAdaScaleGossip<T>(spec, x0, oracle);
      if (spec.leader) return createLeaderGossip<T>(spec, x0, oracle);
      if (spec.sketch) return createSketchGossip<T>(spec, x0, oracle);
      return std::make_unique<Dsgd<T>>(spec.gamma, x0, oracle);
    case AlgorithmKind::kExactDiffusion: return std::make_unique<ExactDiffusion<T>>(x0, oracle);
    case AlgorithmKind::kGradientTracking: return std::make_unique<GradientTracking<T>>(x0, oracle);
    case AlgorithmKind::kChoco: return createChoco<T>(spec, x0, oracle);
    case AlgorithmKind::kNids: return createNids<T>(spec, x0, oracle);
    case AlgorithmKind::kLead:
    case AlgorithmKind::kProxLead: return createLead<T>(spec, x0, oracle);
    case AlgorithmKind::kDiloco: return createDiloco<T>(spec.diloco, x0, oracle);
  }
  return nullptr;
}

template std::unique_ptr<Algorithm<float>> createAlgorithm<float>(const AlgorithmSpec&,
                                                                  std::span<const float>,
                                                                  GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createAlgorithm<double>(const AlgorithmSpec&,
                                                                    std::span<const double>,
                                                                    GradientOracle<double>&);

}  // namespace starling::optim
