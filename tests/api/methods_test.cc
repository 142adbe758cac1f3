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

#include "peer_testing.h"

using namespace starling;
using starling::peer_testing::onThreads;

namespace methods_test {

namespace {

using Vec = std::vector<double>;

std::string scenarioFile(const std::string& name, int nodes, const std::string& algorithm) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("starling-api-methods-" + name + "-" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"schema_version": 1, "name": ")" << name << R"(", "nodes": )"
                      << nodes << R"(, "topology": {"kind": "complete"},
      "transport": {"kind": "inproc"}, "algorithm": )" << algorithm << "}";
  return path.string();
}

Vec gradient(int s, int rank) {
  Vec g(4);
  for (int k = 0; k < 4; ++k) g[k] = (0.5 + 0.25 * rank) * std::cos(1.0 + s + 2 * k) + 0.1 * k;
  return g;
}

Vec start(int rank) { return {1.0 * rank, -0.5 * rank, 0.25, 2.0 - rank}; }

// Node r's quadratic in the dilocoStep tests: f_r(x) = 1/2 sum_k (k + 1 + r) (x_k - r + k)^2.
Vec quadraticGradient(int r, const Vec& x) {
  Vec g(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    g[k] = (static_cast<double>(k) + 1 + r) * (x[k] - r + static_cast<double>(k));
  }
  return g;
}

// `nodes` trainers of the scenario `file`, each from start(0): dilocoStep once, then `steps`
// gradient steps of `lr` on its quadratic, each followed by dilocoStep. Each node's final
// parameters and the outer rounds its calls reported.
struct DilocoRun {
  std::vector<Vec> params;
  std::vector<int> rounds;
};
DilocoRun runDilocoSteps(const std::string& file, int nodes, int steps, double lr) {
  DilocoRun out{std::vector<Vec>(nodes), std::vector<int>(nodes, 0)};
  const auto st = onThreads(nodes, [&](int r) -> Status {
    auto peer = Peer::fromScenario(file, r);
    if (!peer.isOk()) return peer.status();
    Vec x = start(0);  // every node starts from the same model
    // The first call takes the outer model; then one after every inner step.
    if (auto t = (*peer)->dilocoStep(std::span<double>(x)); !t.isOk()) return t;
    for (int s = 0; s < steps; ++s) {
      const Vec g = quadraticGradient(r, x);
      for (size_t k = 0; k < x.size(); ++k) x[k] -= lr * g[k];
      bool round = false;
      if (auto t = (*peer)->dilocoStep(std::span<double>(x), &round); !t.isOk()) return t;
      out.rounds[r] += round;
    }
    out.params[r] = x;
    return (*peer)->close();
  });
  for (const auto& s : st) {
    INFO(s.message());
    REQUIRE(s.isOk());
  }
  std::filesystem::remove(file);
  return out;
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
  for (const auto& s : st) {
    INFO(s.message());
    REQUIRE(s.isOk());
  }
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
  for (const auto& s : st) {
    INFO(s.message());
    REQUIRE(s.isOk());
  }
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
  for (const auto& s : st) {
    INFO(s.message());
    REQUIRE(s.isOk());
  }
  std::filesystem::remove(file);
  for (int r = 0; r < kNodes; ++r) {
    CHECK(refused[r].code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(refused[r].message(), Catch::Contains("inner_steps") && Catch::Contains("mix()"));
    // Two nodes on their graph: each keeps half its own model and takes half the other's.
    const Vec a = start(0), b = start(1);
    for (size_t k = 0; k < a.size(); ++k) CHECK(mixed[r][k] == Approx(0.5 * (a[k] + b[k])));
  }
}

TEST_CASE("Peer::dilocoStep: a trainer's inner steps and the outer Nesterov step are all-reduce "
          "DiLoCo on the complete graph", "[api][methods][diloco]") {
  constexpr int kNodes = 3, kInner = 4, kOuter = 5;
  const double lr = 0.05;
  const auto file = scenarioFile("diloco-step", kNodes, R"({"kind": "diloco", "step_size": 0.1,
      "inner_steps": 4, "outer": {"kind": "nesterov", "lr": 0.7, "momentum": 0.9}})");
  const DilocoRun run = runDilocoSteps(file, kNodes, kInner * kOuter, lr);
  const auto& got = run.params;
  const auto& outerRounds = run.rounds;
  // All-reduce DiLoCo: theta, delta = mean_r (theta - x_r), buf = 0.9 buf + delta,
  // theta -= 0.7 (delta + 0.9 buf).
  Vec theta = start(0), buf(theta.size(), 0.0);
  for (int o = 0; o < kOuter; ++o) {
    Vec delta(theta.size(), 0.0);
    for (int r = 0; r < kNodes; ++r) {
      Vec x = theta;
      for (int s = 0; s < kInner; ++s) {
        const Vec g = quadraticGradient(r, x);
        for (size_t k = 0; k < x.size(); ++k) x[k] -= lr * g[k];
      }
      for (size_t k = 0; k < x.size(); ++k) delta[k] += (theta[k] - x[k]) / kNodes;
    }
    for (size_t k = 0; k < theta.size(); ++k) {
      buf[k] = 0.9 * buf[k] + delta[k];
      theta[k] -= 0.7 * (delta[k] + 0.9 * buf[k]);
    }
  }
  for (int r = 0; r < kNodes; ++r) {
    CHECK(outerRounds[r] == kOuter);
    for (size_t k = 0; k < theta.size(); ++k) CHECK(got[r][k] == Approx(theta[k]).epsilon(1e-12));
  }
}

TEST_CASE("Peer::dilocoStep in fragments, with nesterov and noloco, against all-reduce DiLoCo "
          "written out", "[api][methods][diloco]") {
  // 3 nodes on the complete graph, 4 parameters in 3 fragments (2, 2 and 0 values: ceil(4 / 3)
  // = 2, so the third fragment is empty and its rounds only count), inner_steps 6: a round every
  // 2 steps. Each round mixes fragment r mod 3 of every node's local model: x-bar is the mean
  // there, and (noloco) theta-bar the mean of the outer models, which stay equal on the complete
  // graph. Only that fragment of each node's parameters takes its new theta.
  constexpr int kNodes = 3, kInner = 6, kFragments = 3, kOuter = 4;
  const double lr = 0.05;
  for (const std::string outer : {"nesterov", "noloco"}) {
    CAPTURE(outer);
    const bool noloco = outer == "noloco";
    const double olr = 0.7, mu = noloco ? 0.5 : 0.9, pull = 0.3;
    const auto file = scenarioFile(
        "diloco-fragments", kNodes,
        R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 6, "fragments": 3,
            "outer": {"kind": ")" + outer + R"(", "lr": 0.7, "momentum": )" +
            (noloco ? std::string("0.5, \"pull\": 0.3") : std::string("0.9")) + "}}");
    const DilocoRun run = runDilocoSteps(file, kNodes, kInner * kOuter, lr);
    const auto& got = run.params;
    const auto& rounds = run.rounds;
    // The recursion written out: theta and m are the same on every node.
    const size_t d = start(0).size(), width = (d + kFragments - 1) / kFragments;
    Vec theta = start(0), m(d, 0.0);
    std::vector<Vec> x(kNodes, start(0));
    for (int round = 0; round < kOuter * kFragments; ++round) {
      for (int r = 0; r < kNodes; ++r) {
        for (int s = 0; s < kInner / kFragments; ++s) {
          const Vec g = quadraticGradient(r, x[r]);
          for (size_t k = 0; k < d; ++k) x[r][k] -= lr * g[k];
        }
      }
      const size_t lo = std::min(d, static_cast<size_t>(round % kFragments) * width);
      for (size_t k = lo; k < std::min(d, lo + width); ++k) {
        double xbar = 0;
        for (int r = 0; r < kNodes; ++r) xbar += x[r][k] / kNodes;
        if (noloco) {
          m[k] = mu * m[k] - olr * (theta[k] - xbar);  // theta-bar = theta: no pull
          theta[k] += m[k];
        } else {
          const double delta = theta[k] - xbar;
          m[k] = mu * m[k] + delta;
          theta[k] -= olr * (delta + mu * m[k]);
        }
        for (int r = 0; r < kNodes; ++r) x[r][k] = theta[k];
      }
    }
    (void)pull;
    for (int r = 0; r < kNodes; ++r) {
      CHECK(rounds[r] == kOuter * kFragments);
      for (size_t k = 0; k < d; ++k) CHECK(got[r][k] == Approx(x[r][k]).epsilon(1e-12));
    }
    // Something moved, and fragment 0's last theta is not what plain averaging would leave.
    CHECK(std::abs(got[0][0] - start(0)[0]) > 1e-3);
  }
}

TEST_CASE("Peer::mixReference: diloco's compressed differences start at the common model, and "
          "mix() leaves the mix of the reference points", "[api][methods][diloco]") {
  constexpr int kNodes = 2;
  const auto path = std::filesystem::temp_directory_path() /
                    ("starling-api-methods-mixref-" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"schema_version": 1, "name": "mixref", "nodes": 2,
      "topology": {"kind": "complete"}, "transport": {"kind": "inproc"},
      "algorithm": {"kind": "diloco", "step_size": 0.1, "inner_steps": 3},
      "compression": {"kind": "topk", "k": 1}})";
  const Vec common = start(0);
  const auto local = [&](int r) {  // where each node's inner steps took it
    Vec x = common;
    x[static_cast<size_t>(r)] += 2.0 + r;  // the largest change: what top-1 keeps
    x[3] -= 0.5;                           // dropped by top-1
    return x;
  };
  std::vector<Vec> mixed(kNodes);
  std::vector<Status> late(kNodes);
  const auto st = onThreads(kNodes, [&](int r) -> Status {
    auto peer = Peer::fromScenario(path.string(), r);
    if (!peer.isOk()) return peer.status();
    if (auto m = (*peer)->mixReference(std::span<const double>(common)); !m.isOk()) return m;
    Vec x = local(r);
    if (auto m = (*peer)->mix(std::span<double>(x)); !m.isOk()) return m;
    mixed[r] = x;
    late[r] = (*peer)->mixReference(std::span<const double>(common));
    return (*peer)->close();
  });
  for (const auto& s : st) {
    INFO(s.message());
    REQUIRE(s.isOk());
  }
  std::filesystem::remove(path);
  // x-hat_r = common + top-1(x_r - common); both nodes end at (x-hat_0 + x-hat_1) / 2: the
  // dropped coordinate 3 stays at the common model's value on both.
  Vec want = common;
  want[0] += 0.5 * 2.0;
  want[1] += 0.5 * 3.0;
  for (int r = 0; r < kNodes; ++r) {
    for (size_t k = 0; k < want.size(); ++k) CHECK(mixed[r][k] == Approx(want[k]).epsilon(1e-15));
    CHECK(late[r].code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(late[r].message(), Catch::Contains("before the first mix()"));
  }
}

TEST_CASE("Peer::mixReference of another size than the model is refused at the first mix()",
          "[api][methods][diloco]") {
  const auto path = std::filesystem::temp_directory_path() /
                    ("starling-api-methods-mixref-size-" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"schema_version": 1, "name": "mixref-size", "nodes": 1,
      "topology": {"kind": "complete"}, "transport": {"kind": "inproc"},
      "algorithm": {"kind": "diloco", "step_size": 0.1, "inner_steps": 3},
      "compression": {"kind": "topk", "k": 1}})";
  auto peer = Peer::fromScenario(path.string(), 0);
  REQUIRE(peer.isOk());
  const Vec three = {1.0, 2.0, 3.0};
  REQUIRE((*peer)->mixReference(std::span<const double>(three)).isOk());
  Vec x = start(0);
  const Status s = (*peer)->mix(std::span<double>(x));
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("mixReference() was given 3"));
  (void)(*peer)->close();
  std::filesystem::remove(path);
}

TEST_CASE("Peer::dilocoStep refuses a scenario that is not diloco with outer sgd, nesterov or "
          "noloco, overlap, and fragments with error feedback", "[api][methods][diloco]") {
  for (const std::string& algorithm :
       {std::string(R"({"kind": "dsgd", "step_size": 0.1})"),
        std::string(R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 2,
                       "outer": {"kind": "exact_diffusion"}})"),
        std::string(R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 2,
                       "overlap": true})"),
        std::string(R"({"kind": "diloco", "step_size": 0.1,
                       "inner_steps": {"kind": "by_time", "seconds": 1}})"),
        std::string(R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 2, "fragments": 2},
                       "compression": {"kind": "topk", "k": 1, "error_feedback": true})")}) {
    const auto file = scenarioFile("diloco-refused", 1, algorithm);
    auto peer = Peer::fromScenario(file, 0);
    REQUIRE(peer.isOk());
    Vec x = start(0);
    const Status s = (*peer)->dilocoStep(std::span<double>(x));  // refused at the first call
    CHECK(s.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(s.message(), Catch::Contains("dilocoStep"));
    CHECK((*peer)->close().isOk());
    std::filesystem::remove(file);
  }
}

}  // namespace methods_test
