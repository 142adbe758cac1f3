// GradientBlocks (optim/objective.h): the linear problems' full gradient written a block of
// coordinates at a time, which exact diffusion and DSGD fuse into the pass that writes their
// message (optim/algorithms.cc). Every block must equal LocalObjective::gradient bit for bit
// (kernel_test.cc checks gradient() against a naive loop), whatever the block sizes, the layout
// and the rounds; and the two algorithms must then write the messages and models their
// recursions give, written out here by hand, into lent memory (DSGD then streams its message) or
// not.
#include <bit>
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <vector>

#include "optim/algorithm.h"
#include "optim/oracle.h"
#include "optim/problem.h"
#include "tests/optim/random_data.h"

namespace starling::optim {
namespace {

using testing::randomDataset;
using testing::randomVector;

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Bit for bit, so that a -0 where gradient() has +0 fails.
template <typename T>
bool sameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The gradient through `blocks`, in consecutive blocks of `block` coordinates.
template <typename T>
std::vector<T> inBlocks(GradientBlocks<T>& blocks, const std::vector<T>& x, size_t block) {
  std::vector<T> g(x.size(), T(-7));
  blocks.start(x);
  for (size_t at = 0; at < x.size(); at += block) {
    const size_t n = std::min(block, x.size() - at);
    blocks.fill(at, std::span<T>(g).subspan(at, n));
  }
  return g;
}

TEMPLATE_TEST_CASE("Gradient blocks equal the whole gradient bit for bit", "[optim][unit]", float,
                   double) {
  using T = TestType;
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  // Dense (every entry stored), sparse, and sparse with many empty rows and columns.
  const double density = GENERATE(1.0, 0.3, 0.02);
  const int d = 9000;  // three blocks of 4,096 at most, the last one partial
  const size_t m = density == 1.0 ? 6 : 40;
  const Dataset data = randomDataset(m, d, density, 77 + m);
  const ProblemSpec spec{loss, 0.1};
  const auto f = LocalObjective<T>::create(spec, data, 3 * m, 3);
  REQUIRE(f->dense() == (density == 1.0));
  auto blocks = f->gradientBlocks();
  REQUIRE(blocks);

  for (int round = 0; round < 2; ++round) {  // start() must begin again from the first row entry
    std::vector<T> x = cast<T>(randomVector(d, 0.5, 10 + round));
    // Negative zeros: where no sample stores the column, gradient() gives l2 * -0 = -0.
    for (int k = 0; k < d; k += 97) x[k] = T(-0.0);
    std::vector<T> whole(d);
    f->gradient(x, whole);
    for (const size_t block : {size_t{1}, size_t{7}, size_t{1000}, size_t{4096}, size_t{9000}}) {
      CAPTURE(round, block);
      CHECK(sameBits(inBlocks<T>(*blocks, x, block), whole));
    }
  }
}

TEST_CASE("Gradient blocks are offered only where they are cheaper than the whole gradient",
          "[optim][unit]") {
  // A sparse shard of 5,000 rows over 3 blocks of coordinates: a pass over the rows per block
  // (15,000 row visits) costs more than its ~1,350 entries and d = 9,000, so there are no blocks.
  const Dataset many = randomDataset(5000, 9000, 0.00003, 3);
  REQUIRE(many.nonZeros() + 9000 < 15000);
  const auto sparse = LocalObjective<float>::create({LossKind::kLeastSquares, 0.1}, many, 5000, 1);
  CHECK(sparse->gradientBlocks() == nullptr);
  const Dataset few = randomDataset(4, 9000, 0.01, 4);
  const auto cheap = LocalObjective<float>::create({LossKind::kLeastSquares, 0.1}, few, 4, 1);
  CHECK(cheap->gradientBlocks() != nullptr);
  // Only full gradients come in blocks: a minibatch draws from the oracle's Rng.
  ObjectiveOracle<float> full(*cheap, 0, 1), minibatch(*cheap, 2, 1);
  CHECK(full.gradientBlocks() != nullptr);
  CHECK(minibatch.gradientBlocks() == nullptr);
}

// The objective's gradient() and nothing else: no blocks, so an algorithm takes the whole
// gradient first (the path every other oracle takes).
template <typename T>
class WholeOracle final : public GradientOracle<T> {
 public:
  explicit WholeOracle(const Objective<T>& f) : f_(f) {}
  void gradient(std::span<const T> x, std::span<T> out) override { f_.gradient(x, out); }

 private:
  const Objective<T>& f_;
};

template <typename T>
std::vector<T> neighbour(size_t d, int peer, uint64_t round) {
  std::vector<T> m(d);
  for (size_t k = 0; k < d; ++k) {
    m[k] = static_cast<T>(0.2 * peer - 0.001 * static_cast<double>(k % 89) + 0.01 * round);
  }
  return m;
}

// d large enough that a lent message is streamed (1 MiB or more in either precision).
constexpr int kBig = 300'001;

TEMPLATE_TEST_CASE("Exact diffusion and DSGD fused with gradient blocks follow their recursions",
                   "[optim][unit]", float, double) {
  using T = TestType;
  const AlgorithmKind kind = GENERATE(AlgorithmKind::kExactDiffusion, AlgorithmKind::kDsgd);
  const bool lent = GENERATE(false, true);
  CAPTURE(static_cast<int>(kind), lent);
  const Dataset data = randomDataset(5, kBig, 0.0002, 9);
  const auto f = LocalObjective<T>::create({LossKind::kLogistic, 0.05}, data, 15, 3);
  ObjectiveOracle<T> blocked(*f, 0, 1);
  WholeOracle<T> whole(*f);
  REQUIRE(blocked.gradientBlocks() != nullptr);

  AlgorithmSpec spec;
  spec.kind = kind;
  spec.stepSize = StepSizeSchedule{};
  spec.gamma = 0.8;
  const std::vector<T> x0 = cast<T>(randomVector(kBig, 0.3, 2));
  auto fused = createAlgorithm<T>(spec, x0, blocked);
  auto plain = createAlgorithm<T>(spec, x0, whole);
  REQUIRE(fused);
  REQUIRE(fused->preparesInBlocks());

  std::vector<T> x = x0, prev = x0;  // by hand: the model, and exact diffusion's psi_prev
  const T mu = static_cast<T>(0.05);
  for (uint64_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    RoundInfo info{r, 0.05, 0.5};
    info.messageLent = lent;
    // The node's blocks of 4,096 values, the last one partial; read back where prepareBlock says.
    std::vector<T> out(kBig, T(-3)), readBack(kBig, T(-5));
    for (size_t b = 0; b < static_cast<size_t>(kBig); b += 4096) {
      const auto block = std::span<T>(out).subspan(b, std::min<size_t>(4096, kBig - b));
      const std::span<const T> at = fused->prepareBlock(info, b, block);
      REQUIRE(at.size() == block.size());
      std::copy(at.begin(), at.end(), readBack.begin() + static_cast<ptrdiff_t>(b));
    }
    CHECK(sameBits(readBack, out));
    std::vector<T> plainOut(kBig);
    plain->prepare(info, plainOut);
    CHECK(sameBits(plainOut, out));

    // By hand, from gradient(): psi = x - mu g; exact diffusion sends psi + x - psi_prev.
    std::vector<T> g(kBig), want(kBig);
    f->gradient(x, g);
    for (int k = 0; k < kBig; ++k) {
      const T psi = x[k] - mu * g[k];
      if (kind == AlgorithmKind::kExactDiffusion) {
        want[k] = psi + x[k] - prev[k];
        prev[k] = psi;
      } else {
        want[k] = psi;
      }
    }
    REQUIRE(sameBits(out, want));

    const auto m1 = neighbour<T>(kBig, 1, r);
    const auto m2 = neighbour<T>(kBig, 2, r);
    const std::vector<NeighborMessage<T>> nbrs = {{1, 0.25, m1}, {2, 0.25, m2}};
    fused->absorb(info, out, nbrs);
    plain->absorb(info, plainOut, nbrs);
    // x = own + sum_j c w_ij (m_j - own): exact diffusion's c is 1/2 ((I + W) / 2), DSGD's gamma.
    const T c = kind == AlgorithmKind::kExactDiffusion ? T(0.5) : static_cast<T>(0.8);
    for (int k = 0; k < kBig; ++k) {
      T acc = out[k];
      acc += static_cast<T>(0.25) * c * (m1[k] - out[k]);
      acc += static_cast<T>(0.25) * c * (m2[k] - out[k]);
      x[k] = acc;
    }
    const auto model = fused->model();
    CHECK(sameBits(std::vector<T>(model.begin(), model.end()), x));
    const auto plainModel = plain->model();
    CHECK(sameBits(std::vector<T>(plainModel.begin(), plainModel.end()), x));
  }
}

}  // namespace
}  // namespace starling::optim
