// starling::Peer's local optimizer (PeerConfig::localOptimizer, PeerOptions::layout): two Peers
// on two threads over the in-process transport, a complete graph of 2 (Metropolis weights 1/2),
// DSGD with gamma 1, float parameters in a 5-element buffer made of two tensors [3, 2], and
// gradients the test makes up per step and rank. After each step() every peer's parameters must
// equal the reference written out below: each node's optimizer by hand (Adam, LAMB with its
// per-tensor trust ratio, Nesterov momentum), psi_i = x_i - lr u_i, then x_i = (psi_0 + psi_1)/2.
#include <starling/peer.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <span>
#include <thread>
#include <vector>

#include "peer_testing.h"

using namespace starling;
using starling::peer_testing::onThreads;

namespace local_optimizer_test {
using Catch::Matchers::Contains;

namespace {

constexpr int kNodes = 2;
constexpr int kSteps = 5;
const std::vector<size_t> kLayout = {3, 2};

// The start: both ranks' second tensor is 0 (LAMB's ||x_l|| = 0 guard at the first step).
std::vector<double> start(int rank) {
  return {0.5 + 0.25 * rank, -1.0 + 0.5 * rank, 2.0 - rank, 0.0, 0.0};
}

// The trainer's made-up gradient at step s: away from 0 (Adam's ratio is sensitive there) except
// where `zeroAt0` asks rank 1's first tensor to be exactly 0 at step 0 (LAMB's ||r_l|| = 0 guard).
std::vector<double> gradient(int s, int rank, bool zeroAt0) {
  std::vector<double> g(5);
  for (int k = 0; k < 5; ++k) {
    g[k] = (k % 2 == 0 ? 1.0 : -1.0) * (0.3 + 0.1 * k + 0.2 * rank) * (1.0 + 0.5 * std::sin(s + k));
  }
  if (zeroAt0 && s == 0 && rank == 1) g[0] = g[1] = g[2] = 0.0;
  return g;
}

double lrAt(int s) { return 0.1 / (1.0 + s); }

struct Opt {
  PeerConfig::LocalOptimizer kind;
  double weightDecay = 0.0, momentum = 0.9, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool nesterov = false, biasCorrection = true;
};

// One node's optimizer, written from the equations (docs/algorithms.md §20), in double.
struct Reference {
  explicit Reference(const Opt& o) : o(o), m(5, 0.0), v(5, 0.0) {}
  Opt o;
  std::vector<double> m, v;
  int t = 0;

  std::vector<double> direction(const std::vector<double>& x, const std::vector<double>& g) {
    using K = PeerConfig::LocalOptimizer;
    ++t;
    std::vector<double> u(5);
    if (o.kind == K::kMomentum) {
      for (int k = 0; k < 5; ++k) {
        m[k] = o.momentum * m[k] + g[k];
        u[k] = (o.nesterov ? g[k] + o.momentum * m[k] : m[k]) + o.weightDecay * x[k];
      }
      return u;
    }
    // Adam (and LAMB's r): bias-corrected moments, then decoupled decay.
    for (int k = 0; k < 5; ++k) {
      m[k] = o.beta1 * m[k] + (1 - o.beta1) * g[k];
      v[k] = o.beta2 * v[k] + (1 - o.beta2) * g[k] * g[k];
      const double mh = o.biasCorrection ? m[k] / (1 - std::pow(o.beta1, t)) : m[k];
      const double vh = o.biasCorrection ? v[k] / (1 - std::pow(o.beta2, t)) : v[k];
      u[k] = mh / (std::sqrt(vh) + o.eps) + o.weightDecay * x[k];
    }
    if (o.kind == K::kLamb) {
      size_t begin = 0;
      for (size_t n : kLayout) {
        double xn = 0, rn = 0;
        for (size_t k = begin; k < begin + n; ++k) {
          xn += x[k] * x[k];
          rn += u[k] * u[k];
        }
        const double trust = (xn == 0 || rn == 0) ? 1.0 : std::sqrt(xn) / std::sqrt(rn);
        for (size_t k = begin; k < begin + n; ++k) u[k] *= trust;
        begin += n;
      }
    }
    return u;
  }
};

// Every step's parameters of both ranks by the reference: [step][rank][k].
std::vector<std::vector<std::vector<double>>> referenceRun(const Opt& o, bool zeroAt0) {
  std::vector<Reference> nodes(kNodes, Reference(o));
  std::vector<std::vector<double>> x = {start(0), start(1)};
  std::vector<std::vector<std::vector<double>>> out;
  for (int s = 0; s < kSteps; ++s) {
    std::vector<std::vector<double>> psi(kNodes, std::vector<double>(5));
    for (int i = 0; i < kNodes; ++i) {
      const auto u = nodes[i].direction(x[i], gradient(s, i, zeroAt0));
      for (int k = 0; k < 5; ++k) psi[i][k] = x[i][k] - lrAt(s) * u[k];
    }
    for (int i = 0; i < kNodes; ++i) {
      for (int k = 0; k < 5; ++k) x[i][k] = 0.5 * (psi[0][k] + psi[1][k]);  // W = [[1/2, 1/2], ...]
    }
    out.push_back(x);
  }
  return out;
}

PeerConfig config(const Opt& o) {
  PeerConfig c;
  c.nodes = kNodes;
  c.topology = PeerConfig::Topology::kComplete;
  c.algorithm = PeerConfig::Algorithm::kDsgd;
  c.gamma = 1.0;
  c.stepSize = 0.01;  // every step() passes its own lr
  c.transport = PeerConfig::Transport::kInProcess;
  c.localOptimizer = o.kind;
  c.weightDecay = o.weightDecay;
  c.momentum = o.momentum;
  c.nesterov = o.nesterov;
  c.beta1 = o.beta1;
  c.beta2 = o.beta2;
  c.eps = o.eps;
  c.biasCorrection = o.biasCorrection;
  return c;
}

// Runs both ranks through Peer::step and checks each step against the reference. `viaSetLayout`:
// the layout goes in through setLayout() instead of PeerConfig::layout.
void checkAgainstReference(const Opt& o, bool zeroAt0, bool viaSetLayout = false) {
  const auto want = referenceRun(o, zeroAt0);
  std::vector<std::vector<std::vector<float>>> got(kNodes);
  const auto statuses = onThreads(kNodes, [&](int rank) -> Status {
    PeerConfig c = config(o);
    c.rank = rank;
    if (!viaSetLayout) c.layout = kLayout;
    auto peer = Peer::fromConfig(c);
    if (!peer) return peer.status();
    if (viaSetLayout) {
      if (Status st = (*peer)->setLayout(kLayout); !st.isOk()) return st;
    }
    const auto x0 = start(rank);
    std::vector<float> x(x0.begin(), x0.end());
    for (int s = 0; s < kSteps; ++s) {
      const auto g64 = gradient(s, rank, zeroAt0);
      const std::vector<float> g(g64.begin(), g64.end());
      Status st = (*peer)->step(std::span<float>(x), std::span<const float>(g), lrAt(s));
      if (!st.isOk()) return st;
      got[rank].push_back(x);
    }
    if ((*peer)->round() != kSteps) return Status(StatusCode::kInternal, "round() is wrong");
    return (*peer)->close();
  });
  for (const auto& st : statuses) {
    INFO(st.toString());
    REQUIRE(st.isOk());
  }
  for (int s = 0; s < kSteps; ++s) {
    for (int r = 0; r < kNodes; ++r) {
      for (int k = 0; k < 5; ++k) {
        CAPTURE(s, r, k, got[r][s][k], want[s][r][k]);
        CHECK(std::abs(double(got[r][s][k]) - want[s][r][k]) <=
              2e-6 * (1.0 + std::abs(want[s][r][k])));
      }
    }
  }
}

}  // namespace

TEST_CASE("step with a local optimizer is the optimizer per node, then the average",
          "[api][unit]") {
  using K = PeerConfig::LocalOptimizer;
  SECTION("adam with weight decay") {
    Opt o{K::kAdam};
    o.weightDecay = 0.01;
    checkAgainstReference(o, false);
  }
  SECTION("adam without bias correction, the layout through setLayout") {
    Opt o{K::kAdam};
    o.biasCorrection = false;
    o.beta2 = 0.99;
    checkAgainstReference(o, false, /*viaSetLayout=*/true);
  }
  SECTION("lamb with weight decay: per-tensor trust ratio, 1 where ||x_l|| = 0") {
    Opt o{K::kLamb};
    o.weightDecay = 0.01;
    o.eps = 1e-6;
    checkAgainstReference(o, false);
  }
  SECTION("lamb without decay: trust ratio 1 where ||r_l|| = 0 (a zero gradient)") {
    Opt o{K::kLamb};
    o.eps = 1e-6;
    checkAgainstReference(o, /*zeroAt0=*/true);
  }
  SECTION("nesterov momentum") {
    Opt o{K::kMomentum};
    o.momentum = 0.8;
    o.nesterov = true;
    o.weightDecay = 0.05;
    checkAgainstReference(o, false);
  }
}

TEST_CASE("the layout and the local optimizer are refused with clear errors", "[api][unit]") {
  using K = PeerConfig::LocalOptimizer;
  PeerConfig c;
  c.nodes = 1;
  c.transport = PeerConfig::Transport::kInProcess;
  c.localOptimizer = K::kAdam;
  std::vector<float> x(5, 1.0f), g(5, 0.5f);
  SECTION("a layout whose sum is not the buffer's size") {
    c.layout = {3, 3};
    auto peer = Peer::fromConfig(c);
    REQUIRE(peer);
    const Status st = (*peer)->step(std::span<float>(x), std::span<const float>(g));
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Contains("the layout's 2 tensors hold 6 parameters, but the "
                                      "parameter buffer has 5"));
    CHECK(x == std::vector<float>(5, 1.0f));  // untouched
    // The layout can still be fixed before a step has run.
    REQUIRE((*peer)->setLayout({3, 2}).isOk());
    CHECK((*peer)->layout() == std::vector<size_t>{3, 2});
    REQUIRE((*peer)->step(std::span<float>(x), std::span<const float>(g)).isOk());
    const Status late = (*peer)->setLayout({5});
    CHECK(late.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(late.message(), Contains("step() has run"));
  }
  SECTION("even with plain sgd, a wrong layout is a mistake") {
    c.localOptimizer = K::kSgd;
    c.layout = {4};
    auto peer = Peer::fromConfig(c);
    REQUIRE(peer);
    const Status st = (*peer)->step(std::span<float>(x), std::span<const float>(g));
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Contains("hold 4 parameters, but the parameter buffer has 5"));
  }
  SECTION("an empty tensor") {
    c.layout = {3, 0, 2};
    auto peer = Peer::fromConfig(c);
    REQUIRE_FALSE(peer);
    CHECK(peer.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(peer.status().message(), Contains("layout: tensor 1 of 3 has size 0"));
  }
  SECTION("an algorithm that corrects its gradients takes no adam") {
    c.algorithm = PeerConfig::Algorithm::kExactDiffusion;
    auto peer = Peer::fromConfig(c);
    REQUIRE_FALSE(peer);
    CHECK(peer.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(peer.status().message(), Contains("/algorithm/local_optimizer/kind"));
  }
  SECTION("a parameter out of its range gets the scenario parser's message") {
    c.beta1 = 1.0;
    auto peer = Peer::fromConfig(c);
    REQUIRE_FALSE(peer);
    CHECK_THAT(peer.status().message(), Contains("/algorithm/local_optimizer/beta1"));
  }
  SECTION("without a layout the buffer is one tensor (one node: x - lr u, u = 1 for adam's "
          "first step with a constant gradient)") {
    auto peer = Peer::fromConfig(c);
    REQUIRE(peer);
    REQUIRE((*peer)->step(std::span<float>(x), std::span<const float>(g), 0.25).isOk());
    // m^ = g, v^ = g^2: u = g / (|g| + eps) = 1 - 2e-8.
    for (float v : x) CHECK(v == Approx(0.75).epsilon(1e-6));
  }
}

}  // namespace local_optimizer_test
