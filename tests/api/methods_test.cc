// starling::Peer with the scenario's `leader` and `adascale` methods (docs/algorithms.md §22,
// §24): what the trainer says about its gradient (StepStats: the batch's loss, AdaScale's
// estimates) drives them. Peers on threads over the in-process transport, a complete graph
// (Metropolis weights 1/n), made-up gradients; after every step() each peer's parameters must
// equal the reference written out here by hand.
#include <starling/peer.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "methods_testing.h"
#include "peer_testing.h"

using namespace starling;
using starling::peer_testing::onThreads;

namespace methods_test {

namespace {

Vec gradient(int s, int rank) {
  Vec g(4);
  for (int k = 0; k < 4; ++k) g[k] = (0.5 + 0.25 * rank) * std::cos(1.0 + s + 2 * k) + 0.1 * k;
  return g;
}

void requireClose(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    INFO("coordinate " << k << ": " << a[k] << " vs " << b[k]);
    REQUIRE(std::abs(a[k] - b[k]) <= 1e-12 * (1.0 + std::abs(b[k])));
  }
}

}  // namespace

TEST_CASE("Peer::step with StepStats::loss: Leader SGD elects the lowest loss a trainer reports; "
          "a trainer that reports none never leads",
          "[api][methods]") {
  constexpr int kNodes = 3, kSteps = 4;
  const double eta = 0.1, cL = 0.5, cG = 0.25;
  // Complete graph: diameter 1, so an election started at round t ends at t. Proximal pulls off.
  const auto file = scenarioFile("leader", kNodes, R"({"kind": "dsgd", "step_size": 0.1,
      "leader": {"pull_local": 0.5, "pull_global": 0.25, "proximal_local": 0,
                 "proximal_global": 0, "local_period": 1, "global_period": 2}})");
  const std::optional<double> losses[kNodes] = {1.0, 0.5, std::nullopt};  // rank 1 leads
  std::vector<std::vector<Vec>> seen(kNodes);
  const auto st = onThreads(kNodes, [&](int r) -> Status {
    auto peer = Peer::fromScenario(file, r);
    if (!peer.isOk()) return peer.status();
    Vec x = start(r);
    for (int s = 0; s < kSteps; ++s) {
      const Vec g = gradient(s, r);
      StepStats stats;
      stats.loss = losses[r];
      if (auto t = (*peer)->step(std::span<double>(x), std::span<const double>(g), std::nullopt, stats);
          !t.isOk()) {
        return t;
      }
      seen[r].push_back(x);
    }
    return (*peer)->close();
  });
  for (size_t r = 0; r < st.size(); ++r) UNSCOPED_INFO("rank " << r << ": " << st[r].message());
  requireAllOk(st);
  std::filesystem::remove(file);

  std::vector<Vec> x(kNodes);
  for (int r = 0; r < kNodes; ++r) x[r] = start(r);
  Vec leaderAtElection;
  for (int s = 0; s < kSteps; ++s) {
    if (s % 2 == 0) leaderAtElection = x[1];  // rank 1's model when the election starts
    std::vector<Vec> psi(kNodes, Vec(4));
    for (int r = 0; r < kNodes; ++r) {
      const Vec g = gradient(s, r);
      for (int k = 0; k < 4; ++k) psi[r][k] = x[r][k] - eta * g[k];
    }
    for (int r = 0; r < kNodes; ++r) {
      for (int k = 0; k < 4; ++k) x[r][k] = (psi[0][k] + psi[1][k] + psi[2][k]) / 3.0;
      if (r == 1) continue;  // the leader pulls toward nobody
      if (s % 2 == 0) {      // the election ends in the round it starts (diameter 1)
        for (int k = 0; k < 4; ++k) x[r][k] += cG * (leaderAtElection[k] - x[r][k]);
      }
      for (int k = 0; k < 4; ++k) x[r][k] += cL * (psi[1][k] - x[r][k]);  // the local leader
    }
    for (int r = 0; r < kNodes; ++r) {
      INFO("step " << s << ", rank " << r);
      requireClose(seen[r][s], x[r]);
    }
  }
}

TEST_CASE("Peer::step with AdaScale's estimates: gains from the consensus estimate, the "
          "scenario's schedule at floor(tau), and lr refused",
          "[api][methods]") {
  constexpr int kNodes = 2, kSteps = 3;
  const double S = 4.0;
  // smoothing 0: the gain is formed from this round's consensus estimate alone.
  const auto file = scenarioFile("adascale", kNodes, R"({"kind": "dsgd",
      "step_size": {"kind": "step", "value": 0.2, "every": 2, "factor": 0.5},
      "adascale": {"scale": 4, "smoothing": 0}})");
  const double variance[kNodes] = {3.0, 1.0}, squaredMean[kNodes] = {0.5, 1.5};
  std::vector<std::vector<Vec>> seen(kNodes);
  Status lrRefused;
  const auto st = onThreads(kNodes, [&](int r) -> Status {
    auto peer = Peer::fromScenario(file, r);
    if (!peer.isOk()) return peer.status();
    Vec x = start(r);
    if (r == 0) {
      const Vec g = gradient(0, r);
      lrRefused = (*peer)->step(std::span<double>(x), std::span<const double>(g), 0.1);
    }
    for (int s = 0; s < kSteps; ++s) {
      const Vec g = gradient(s, r);
      StepStats stats;
      stats.gradientVariance = variance[r];
      stats.gradientSquaredMean = squaredMean[r];
      if (auto t = (*peer)->step(std::span<double>(x), std::span<const double>(g), std::nullopt, stats);
          !t.isOk()) {
        return t;
      }
      seen[r].push_back(x);
    }
    return (*peer)->close();
  });
  requireAllOk(st);
  std::filesystem::remove(file);
  CHECK(lrRefused.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(lrRefused.message(), Catch::Contains("leave lr out"));

  const auto gain = [S](double v, double m) { return (v + m) / (v / S + m); };
  std::vector<Vec> x(kNodes);
  for (int r = 0; r < kNodes; ++r) x[r] = start(r);
  double tau[kNodes] = {0, 0};
  for (int s = 0; s < kSteps; ++s) {
    std::vector<Vec> psi(kNodes, Vec(4));
    for (int r = 0; r < kNodes; ++r) {
      // Round 0: each node's own sample; then e = mean of last round's e + s - s_prev, and with
      // constant samples that is the mean of the samples.
      const double v = s == 0 ? variance[r] : (variance[0] + variance[1]) / 2;
      const double m = s == 0 ? squaredMean[r] : (squaredMean[0] + squaredMean[1]) / 2;
      const double rGain = gain(v, m);
      const double eta = rGain * 0.2 * std::pow(0.5, std::floor(std::floor(tau[r]) / 2));
      tau[r] += rGain;
      const Vec g = gradient(s, r);
      for (int k = 0; k < 4; ++k) psi[r][k] = x[r][k] - eta * g[k];
    }
    for (int r = 0; r < kNodes; ++r) {
      for (int k = 0; k < 4; ++k) x[r][k] = (psi[0][k] + psi[1][k]) / 2.0;
    }
    for (int r = 0; r < kNodes; ++r) {
      INFO("step " << s << ", rank " << r);
      requireClose(seen[r][s], x[r]);
    }
  }
}

TEST_CASE("Peer::step with asynchronous gossip: max_staleness 0 is the synchronous round bit "
          "for bit; with a slow trainer and max_staleness 2 the peers reach the same point",
          "[api][methods]") {
  constexpr int kNodes = 3, kSteps = 150;
  // f_i(x) = ||x - c_i||^2 / 2: DSGD's fixed point on the complete graph is near mean(c).
  const auto target = [](int r) { return Vec{1.0 * r, -2.0 + r, 0.5 * r * r, 3.0}; };
  const auto train = [&](const std::string& name, const std::string& extra, int slowRank) {
    const auto file = scenarioFile(name, kNodes,
                                   R"({"kind": "dsgd", "step_size": 0.1)" + extra + "}");
    std::vector<Vec> out(kNodes);
    const auto st = onThreads(kNodes, [&](int r) -> Status {
      auto peer = Peer::fromScenario(file, r);
      if (!peer.isOk()) return peer.status();
      Vec x = start(r);
      const Vec c = target(r);
      for (int s = 0; s < kSteps; ++s) {
        if (r == slowRank) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        Vec g(4);
        for (int k = 0; k < 4; ++k) g[k] = x[k] - c[k];
        if (auto t = (*peer)->step(std::span<double>(x), std::span<const double>(g)); !t.isOk()) {
          return t;
        }
      }
      out[r] = x;
      return (*peer)->close();
    });
    std::filesystem::remove(file);
    for (size_t r = 0; r < st.size(); ++r) UNSCOPED_INFO(name << " rank " << r << ": " << st[r].message());
    for (const auto& s : st) REQUIRE(s.isOk());
    return out;
  };
  const auto sync = train("sync", "", -1);
  const auto s0 = train("async0", R"(, "asynchronous": {"max_staleness": 0})", 2);
  for (int r = 0; r < kNodes; ++r) CHECK(s0[r] == sync[r]);  // bit for bit, even with a slow rank
  const auto s2 = train("async2", R"(, "asynchronous": {"max_staleness": 2})", 2);
  // The synchronous run has converged (contraction 0.9 a step: 0.9^150 ~ 1e-7 of the start);
  // stale messages have the same fixed point and slow the contraction only by a bounded delay,
  // so the asynchronous peers end there too (0.06 away after 60 steps; printed below).
  double worst = 0;
  for (int r = 0; r < kNodes; ++r) {
    for (int k = 0; k < 4; ++k) {
      INFO("rank " << r << ", coordinate " << k);
      CHECK(std::abs(s2[r][k] - sync[r][k]) < 0.01);
      worst = std::max(worst, std::abs(s2[r][k] - sync[r][k]));
    }
  }
  std::printf("asynchronous trainers, max_staleness 2, rank 2 slow: %d steps end within %.2e of "
              "the synchronous models\n", kSteps, worst);
}

TEST_CASE("Peer::step refuses diloco: its inner steps are the trainer's, and mix() averages",
          "[api][methods][diloco]") {
  constexpr int kNodes = 2;
  const auto file = scenarioFile("diloco", kNodes, R"({"kind": "diloco", "step_size": 0.1,
      "inner_steps": 4})");
  std::vector<Status> refused(kNodes);
  std::vector<Vec> mixed(kNodes);
  const auto st = onThreads(kNodes, [&](int r) -> Status {
    auto peer = Peer::fromScenario(file, r);
    if (!peer.isOk()) return peer.status();
    Vec x = start(r);
    const Vec g = gradient(0, r);
    refused[r] = (*peer)->step(std::span<double>(x), std::span<const double>(g));
    // What a trainer does instead: its own inner steps, then a mix every inner_steps steps.
    if (auto m = (*peer)->mix(std::span<double>(x)); !m.isOk()) return m;
    mixed[r] = x;
    return (*peer)->close();
  });
  requireAllOk(st);
  std::filesystem::remove(file);
  for (int r = 0; r < kNodes; ++r) {
    CHECK(refused[r].code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(refused[r].message(), Catch::Contains("inner_steps") && Catch::Contains("mix()"));
    // Two nodes on their graph: each keeps half its own model and takes half the other's.
    const Vec a = start(0), b = start(1);
    for (size_t k = 0; k < a.size(); ++k) CHECK(mixed[r][k] == Approx(0.5 * (a[k] + b[k])));
  }
}

}  // namespace methods_test
