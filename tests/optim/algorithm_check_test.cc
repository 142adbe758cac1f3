// Algorithm::absorbWithin: the engine's divergence check of the model, folded into absorb by the
// algorithms that can (optim/algorithms.cc). For every algorithm it must absorb exactly as absorb
// does and answer exactly core::allWithin(model(), limit) on the model it leaves, whatever it
// checks inside its own loops; a fold that skipped the check, or checked only part of the model
// (a block, the tail), fails here.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/within.h"
#include "optim/algorithm.h"
#include "optim/gossip.h"

namespace starling::optim {
namespace {

// grad f(x) = x - c: every algorithm's state stays finite and moves every round.
template <typename T>
class ShiftOracle final : public GradientOracle<T> {
 public:
  void gradient(std::span<const T> x, std::span<T> out) override {
    for (size_t k = 0; k < x.size(); ++k) out[k] = x[k] - static_cast<T>(0.5 + 1e-4 * k);
  }
};

// d spans two full blocks of the combine (1,024 values) and a partial third, and is odd, so the
// vector loop of core::allWithin leaves a scalar tail.
constexpr size_t kDim = 2 * 1024 + 515;

template <typename T>
std::vector<T> neighbourMessage(size_t size, int peer, uint64_t round) {
  std::vector<T> m(size);
  for (size_t k = 0; k < size; ++k) {
    m[k] = static_cast<T>(0.25 * peer + 0.001 * static_cast<double>(k % 97) + 0.01 * round);
  }
  return m;
}

// Equal value for value, NaN equal to NaN (a poisoned state stays NaN from round to round).
template <typename T>
bool sameValues(std::span<const T> a, std::span<const T> b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (!(a[k] == b[k] || (std::isnan(a[k]) && std::isnan(b[k])))) return false;
  }
  return true;
}

struct Poison {
  size_t at;     // coordinate of the message that is poisoned, or SIZE_MAX for none
  double value;  // what it is set to
};

template <typename T>
std::vector<T> startingPoint() {
  std::vector<T> x0(kDim);
  for (size_t k = 0; k < kDim; ++k) x0[k] = static_cast<T>(0.1 * static_cast<double>(k % 13));
  return x0;
}

// `poisonReaches`: a poisoned coordinate of a message reaches the model in the same round.
template <typename T>
void checkPair(Algorithm<T>* folded, Algorithm<T>* plain, bool poisonReaches);

template <typename T>
void checkAlgorithm(AlgorithmKind kind) {
  AlgorithmSpec spec;
  spec.kind = kind;
  spec.stepSize = StepSizeSchedule{};
  if (kind == AlgorithmKind::kProxLead || kind == AlgorithmKind::kNids) spec.regularizer.l1 = 1e-3;
  const auto x0 = startingPoint<T>();
  ShiftOracle<T> oracleA, oracleB;
  auto folded = createAlgorithm<T>(spec, x0, oracleA);
  auto plain = createAlgorithm<T>(spec, x0, oracleB);
  REQUIRE(folded);
  REQUIRE(plain);
  checkPair<T>(folded.get(), plain.get(),
               kind != AlgorithmKind::kChoco && kind != AlgorithmKind::kLead &&
                   kind != AlgorithmKind::kProxLead && kind != AlgorithmKind::kNids);
}

template <typename T>
void checkPair(Algorithm<T>* folded, Algorithm<T>* plain, bool poisonReaches) {
  const size_t size = folded->messageSize();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Round by round, the message of neighbour 2 poisoned in one coordinate (first block, a block
  // boundary, last block, the scalar tail, the second half of gradient tracking's [x, y]); the
  // poisoned rounds come last, since the state is then poisoned for good.
  const std::vector<Poison> rounds = {
      {SIZE_MAX, 0}, {SIZE_MAX, 0}, {0, nan},       {1023, inf},    {1024, -inf},
      {2100, 1e30},  {kDim - 1, -1e30}, {kDim - 2, nan}, {size - 1, nan},
  };
  for (const T limit : {std::numeric_limits<T>::max(), T(1e3), T(0.75)}) {
    CAPTURE(static_cast<double>(limit));
    for (size_t r = 0; r < rounds.size(); ++r) {
      CAPTURE(r, rounds[r].at);
      RoundInfo info{r, 0.05, 0.5};
      std::vector<T> ownA(size), ownB(size);
      folded->prepare(info, ownA);
      plain->prepare(info, ownB);
      REQUIRE(sameValues<T>(ownA, ownB));
      auto m1 = neighbourMessage<T>(size, 1, r);
      auto m2 = neighbourMessage<T>(size, 2, r);
      if (rounds[r].at < size) m2[rounds[r].at] = static_cast<T>(rounds[r].value);
      const std::vector<NeighborMessage<T>> nbrs = {{1, 0.25, m1}, {2, 0.25, m2}};
      const bool within = folded->absorbWithin(info, ownA, nbrs, limit);
      plain->absorb(info, ownB, nbrs);
      const auto a = folded->model();
      const auto b = plain->model();
      // Value for value (NaN included): absorbWithin absorbs exactly as absorb does.
      CHECK(sameValues<T>(a, b));
      const bool expected = core::allWithin(b, limit);
      CHECK(within == expected);
      if (limit == std::numeric_limits<T>::max() && rounds[r].at < kDim && poisonReaches) {
        // The poison reaches the model in the plain combines: the check must have failed.
        CHECK_FALSE(within);
      }
    }
  }
}

TEST_CASE("absorbWithin absorbs as absorb does and checks the whole model", "[optim][unit]") {
  const auto kind = GENERATE(AlgorithmKind::kDsgd, AlgorithmKind::kExactDiffusion,
                             AlgorithmKind::kGradientTracking, AlgorithmKind::kChoco,
                             AlgorithmKind::kNids, AlgorithmKind::kLead, AlgorithmKind::kProxLead);
  CAPTURE(algorithmKindName(kind));
  SECTION("double") { checkAlgorithm<double>(kind); }
  SECTION("float") { checkAlgorithm<float>(kind); }
}

}  // namespace
}  // namespace starling::optim

namespace starling::optim {
namespace {

// The public Peer's mix() (plain gossip): the same fold, and its message written a block at a time
// (prepareBlock, Node's one pass that writes, checks and seals it) equal to prepare's.
TEMPLATE_TEST_CASE("plain gossip folds the check and prepares in blocks as it prepares whole",
                   "[optim][unit]", float, double) {
  const auto x0 = startingPoint<TestType>();
  auto folded = createGossip<TestType>(1.0, kDim, /*compressed=*/false, /*timeVarying=*/false);
  auto plain = createGossip<TestType>(1.0, kDim, false, false);
  folded->setModel(x0);
  plain->setModel(x0);
  REQUIRE(folded->preparesInBlocks());
  RoundInfo info{0, 0.0, 0.5};
  std::vector<TestType> whole(kDim), blocks(kDim, TestType(-7));
  plain->prepare(info, whole);
  for (size_t b = 0; b < kDim; b += 1000) {  // not the node's block size: any split must do
    const size_t n = std::min<size_t>(1000, kDim - b);
    folded->prepareBlock(info, b, std::span<TestType>(blocks).subspan(b, n));
  }
  CHECK(blocks == whole);
  CHECK(whole == x0);
  checkPair<TestType>(folded.get(), plain.get(), /*poisonReaches=*/true);
}

}  // namespace
}  // namespace starling::optim

namespace starling::optim {
namespace {

// Exact diffusion writes its message a block at a time too (its gradient at the first block,
// psi_prev's swap after the last): driven the way Node drives it, in blocks that do not divide d,
// it must follow the recursion written out here by hand (docs/algorithms.md §4), bit for bit.
TEMPLATE_TEST_CASE("exact diffusion's block-wise message follows the hand-written recursion",
                   "[optim][unit]", float, double) {
  AlgorithmSpec spec;
  spec.kind = AlgorithmKind::kExactDiffusion;
  spec.stepSize = StepSizeSchedule{};
  const auto x0 = startingPoint<TestType>();
  ShiftOracle<TestType> oracle;
  auto ed = createAlgorithm<TestType>(spec, x0, oracle);
  REQUIRE(ed);
  REQUIRE(ed->preparesInBlocks());
  std::vector<TestType> w = x0, prev = x0;  // psi^{-1} = x0
  const TestType mu = static_cast<TestType>(0.05);
  for (uint64_t r = 0; r < 4; ++r) {
    RoundInfo info{r, 0.05, 0.5};
    std::vector<TestType> phi(kDim, TestType(-3));
    for (size_t b = 0; b < kDim; b += 1000) {
      const size_t n = std::min<size_t>(1000, kDim - b);
      ed->prepareBlock(info, b, std::span<TestType>(phi).subspan(b, n));
    }
    // By hand: psi = w - mu (w - c), phi = psi + w - psi_prev.
    std::vector<TestType> want(kDim);
    for (size_t k = 0; k < kDim; ++k) {
      const TestType g = w[k] - static_cast<TestType>(0.5 + 1e-4 * k);
      const TestType psi = w[k] - mu * g;
      want[k] = psi + w[k] - prev[k];
      prev[k] = psi;
    }
    REQUIRE(phi == want);
    const auto m1 = neighbourMessage<TestType>(kDim, 1, r);
    const auto m2 = neighbourMessage<TestType>(kDim, 2, r);
    const std::vector<NeighborMessage<TestType>> nbrs = {{1, 0.25, m1}, {2, 0.25, m2}};
    CHECK(ed->absorbWithin(info, phi, nbrs, std::numeric_limits<TestType>::max()));
    // w = phi + sum_j (w_ij / 2) (m_j - phi): Abar = (I + W) / 2 in difference form.
    for (size_t k = 0; k < kDim; ++k) {
      TestType acc = phi[k];
      acc += static_cast<TestType>(0.25) * static_cast<TestType>(0.5) * (m1[k] - phi[k]);
      acc += static_cast<TestType>(0.25) * static_cast<TestType>(0.5) * (m2[k] - phi[k]);
      w[k] = acc;
    }
    const auto model = ed->model();
    CHECK(std::vector<TestType>(model.begin(), model.end()) == w);
  }
}

}  // namespace
}  // namespace starling::optim
