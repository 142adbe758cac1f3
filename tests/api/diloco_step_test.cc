// starling::Peer's DiLoCo for a trainer's own inner steps (dilocoStep, dilocoGradient,
// dilocoFinish; docs/algorithms.md §29) and the reference points it starts (mixReference). Peers
// on threads over the in-process transport, on the complete graph, each node on its own
// quadratic; every result against the recursion written out here by hand.
#include <starling/peer.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "methods_testing.h"
#include "peer_testing.h"

using namespace starling;
using starling::peer_testing::onThreads;

namespace methods_test {

namespace {

// Node r's quadratic in the dilocoStep tests: f_r(x) = 1/2 sum_k (k + 1 + r) (x_k - r + k)^2.
Vec quadraticGradient(int r, const Vec& x) {
  Vec g(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    g[k] = (static_cast<double>(k) + 1 + r) * (x[k] - r + static_cast<double>(k));
  }
  return g;
}

// `nodes` trainers of the scenario `file`, each from start(0): dilocoStep once, then `steps`
// gradient steps of `lr` on its quadratic (each gradient through dilocoGradient, which adds
// exact_diffusion's correction), each followed by dilocoStep, and dilocoFinish at the end (which
// lands overlap's last round). Each node's final parameters and the outer rounds its calls
// reported.
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
      Vec g = quadraticGradient(r, x);
      if (auto t = (*peer)->dilocoGradient(std::span<double>(g), lr); !t.isOk()) return t;
      for (size_t k = 0; k < x.size(); ++k) x[k] -= lr * g[k];
      bool round = false;
      if (auto t = (*peer)->dilocoStep(std::span<double>(x), &round); !t.isOk()) return t;
      out.rounds[r] += round;
    }
    if (auto t = (*peer)->dilocoFinish(std::span<double>(x)); !t.isOk()) return t;
    out.params[r] = x;
    return (*peer)->close();
  });
  requireAllOk(st);
  std::filesystem::remove(file);
  return out;
}

}  // namespace

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
  requireAllOk(st);
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

TEST_CASE("Peer::dilocoStep refuses a scenario that is not diloco", "[api][methods][diloco]") {
  for (const std::string& algorithm : {std::string(R"({"kind": "dsgd", "step_size": 0.1})")}) {
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

TEST_CASE("Peer::dilocoStep by_time: each rank's own steps a round on its clock, the mix "
          "weighted by them, as written out from the counts", "[api][methods][diloco]") {
  // 3 nodes on the complete graph, 0.1 s a round, at most 8 steps (max_steps 8 * F). Rank 0's
  // steps take no time (it takes the cap), rank 1's 15 ms, rank 2's 50 ms (at most 2 a round).
  // Each trainer counts its rounds to kRounds and records its steps in each; the reference mixes
  // the fragments weighted by the recorded steps since their last exchange, so it holds whatever
  // the clock gave. Nesterov whole, and noloco in 2 fragments with overlap.
  constexpr int kNodes = 3, kRounds = 4;
  const double lr = 0.05;
  const int sleepMs[kNodes] = {0, 15, 50};
  for (const bool streamed : {false, true}) {
    CAPTURE(streamed);
    const size_t F = streamed ? 2 : 1;
    const std::string outer = streamed ? R"("kind": "noloco", "lr": 0.7, "momentum": 0.5,
                                            "pull": 0.3)"
                                       : R"("kind": "nesterov", "lr": 0.7, "momentum": 0.9)";
    const auto file = scenarioFile(
        "diloco-by-time", kNodes,
        R"({"kind": "diloco", "step_size": 0.05, "fragments": )" + std::to_string(F) +
            R"(, "overlap": )" + (streamed ? "true" : "false") +
            R"(, "inner_steps": {"kind": "by_time", "seconds": )" + (streamed ? "0.2" : "0.1") +
            R"(, "max_steps": )" + std::to_string(8 * F) + R"(}, "outer": {)" + outer + "}}");
    std::vector<Vec> got(kNodes);
    std::vector<std::vector<int>> counts(kNodes);  // each rank's steps in each round
    const auto st = onThreads(kNodes, [&](int r) -> Status {
      auto peer = Peer::fromScenario(file, r);
      if (!peer.isOk()) return peer.status();
      Vec x = start(0);
      if (auto t = (*peer)->dilocoStep(std::span<double>(x)); !t.isOk()) return t;
      int steps = 0;
      while (static_cast<int>(counts[r].size()) < kRounds) {
        const Vec g = quadraticGradient(r, x);
        for (size_t k = 0; k < x.size(); ++k) x[k] -= lr * g[k];
        std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs[r]));
        ++steps;
        bool round = false;
        if (auto t = (*peer)->dilocoStep(std::span<double>(x), &round); !t.isOk()) return t;
        if (round) {
          counts[r].push_back(steps);
          steps = 0;
        }
      }
      if (auto t = (*peer)->dilocoFinish(std::span<double>(x)); !t.isOk()) return t;
      got[r] = x;
      return (*peer)->close();
    });
    requireAllOk(st);
    std::filesystem::remove(file);
    for (int r = 0; r < kNodes; ++r) {
      for (int c : counts[r]) {
        CHECK(c >= 1);
        CHECK(c <= 8);
      }
    }
    for (int c : counts[2]) CHECK(c <= 2);  // 50 ms a step: 0.1 s is up after 2
    // The reference, from the recorded counts.
    const size_t d = start(0).size(), width = (d + F - 1) / F;
    const double mu = streamed ? 0.5 : 0.9;
    Vec theta = start(0), m(d, 0.0);
    std::vector<Vec> thetas(kNodes, theta), ms(kNodes, m), x(kNodes, theta), sent(kNodes);
    std::vector<std::vector<double>> since(kNodes, std::vector<double>(F, 0.0));
    std::vector<double> h(kNodes);
    size_t pending = SIZE_MAX;
    const auto land = [&](size_t f) {
      const size_t lo = f * width, hi = std::min(d, lo + width);
      double total = 0;
      for (int j = 0; j < kNodes; ++j) total += h[j] / kNodes;
      std::vector<Vec> old = thetas;
      for (int r = 0; r < kNodes; ++r) {
        for (size_t k = lo; k < hi; ++k) {
          double xbar = 0, tbar = 0;
          for (int j = 0; j < kNodes; ++j) {
            xbar += h[j] * sent[j][k - lo] / kNodes;
            tbar += old[j][k] / kNodes;
          }
          xbar /= total;
          double& t = thetas[r][k];
          double& mm = ms[r][k];
          if (streamed) {
            mm = mu * mm - 0.7 * (tbar - xbar) - 0.3 * (t - tbar);
            t += mm;
          } else {
            const double delta = t - xbar;
            mm = mu * mm + delta;
            t -= 0.7 * (delta + mu * mm);
          }
          x[r][k] = t + (x[r][k] - sent[r][k - lo]);
        }
      }
    };
    for (int round = 0; round < kRounds; ++round) {
      const size_t f = static_cast<size_t>(round) % F, lo = f * width;
      for (int r = 0; r < kNodes; ++r) {
        for (int s = 0; s < counts[r][static_cast<size_t>(round)]; ++s) {
          const Vec g = quadraticGradient(r, x[r]);
          for (size_t k = 0; k < d; ++k) x[r][k] -= lr * g[k];
        }
        for (double& v : since[r]) v += counts[r][static_cast<size_t>(round)];
      }
      if (streamed && pending != SIZE_MAX) land(pending);
      for (int r = 0; r < kNodes; ++r) {
        h[r] = since[r][f];
        since[r][f] = 0;
        sent[r].assign(x[r].begin() + lo, x[r].begin() + std::min(d, lo + width));
      }
      if (streamed) {
        pending = f;
      } else {
        land(f);
      }
    }
    if (streamed) land(pending);
    for (int r = 0; r < kNodes; ++r) {
      INFO("rank " << r << " took " << counts[r][0] << ", " << counts[r][1] << ", ... steps");
      for (size_t k = 0; k < d; ++k) CHECK(got[r][k] == Approx(x[r][k]).epsilon(1e-12));
    }
  }
}

TEST_CASE("Peer::dilocoStep with outer exact_diffusion: dilocoGradient's correction, against the "
          "recursion written out, reaches the central optimum where outer sgd stays biased",
          "[api][methods][diloco]") {
  // 3 nodes on the complete graph, each on its own quadratic f_r; 4 inner SGD steps of 0.05 a
  // round. exact_diffusion: every inner gradient gets y_r; after the mix x-bar = mean_r x_r,
  // y_r += (x_r - x-bar) / (2 lr H) and theta = x-bar (outer lr 1). The central optimum of
  // sum_r f_r is x*_k = sum_r a_rk b_rk / sum_r a_rk with a_rk = k + 1 + r, b_rk = r - k.
  constexpr int kNodes = 3, kInner = 4;
  const double lr = 0.05;
  const size_t d = start(0).size();
  Vec optimum(d);
  for (size_t k = 0; k < d; ++k) {
    double num = 0, den = 0;
    for (int r = 0; r < kNodes; ++r) {
      const double a = static_cast<double>(k) + 1 + r, b = r - static_cast<double>(k);
      num += a * b;
      den += a;
    }
    optimum[k] = num / den;
  }
  const auto relError = [&](const Vec& x) {
    double e = 0, o = 0;
    for (size_t k = 0; k < d; ++k) {
      e += (x[k] - optimum[k]) * (x[k] - optimum[k]);
      o += optimum[k] * optimum[k];
    }
    return std::sqrt(e / o);
  };
  SECTION("a few rounds against the recursion") {
    constexpr int kOuter = 6;
    const auto file = scenarioFile("diloco-exact", kNodes, R"({"kind": "diloco",
        "step_size": 0.05, "inner_steps": 4, "outer": {"kind": "exact_diffusion"}})");
    const DilocoRun run = runDilocoSteps(file, kNodes, kInner * kOuter, lr);
    Vec theta = start(0);
    std::vector<Vec> y(kNodes, Vec(d, 0.0));
    for (int o = 0; o < kOuter; ++o) {
      std::vector<Vec> x(kNodes, theta);
      Vec xbar(d, 0.0);
      for (int r = 0; r < kNodes; ++r) {
        for (int s = 0; s < kInner; ++s) {
          const Vec g = quadraticGradient(r, x[r]);
          for (size_t k = 0; k < d; ++k) x[r][k] -= lr * (g[k] + y[r][k]);
        }
        for (size_t k = 0; k < d; ++k) xbar[k] += x[r][k] / kNodes;
      }
      for (int r = 0; r < kNodes; ++r) {
        for (size_t k = 0; k < d; ++k) y[r][k] += (x[r][k] - xbar[k]) / (2 * lr * kInner);
      }
      theta = xbar;
    }
    for (int r = 0; r < kNodes; ++r) {
      CHECK(run.rounds[r] == kOuter);
      for (size_t k = 0; k < d; ++k) CHECK(run.params[r][k] == Approx(theta[k]).epsilon(1e-12));
    }
  }
  SECTION("many rounds: exact where outer sgd (local SGD) is biased") {
    constexpr int kOuter = 400;
    const auto exactFile = scenarioFile("diloco-exact-long", kNodes, R"({"kind": "diloco",
        "step_size": 0.05, "inner_steps": 4, "outer": {"kind": "exact_diffusion"}})");
    const auto sgdFile = scenarioFile("diloco-sgd-long", kNodes, R"({"kind": "diloco",
        "step_size": 0.05, "inner_steps": 4, "outer": {"kind": "sgd", "lr": 1}})");
    const DilocoRun exact = runDilocoSteps(exactFile, kNodes, kInner * kOuter, lr);
    const DilocoRun sgd = runDilocoSteps(sgdFile, kNodes, kInner * kOuter, lr);
    for (int r = 0; r < kNodes; ++r) {
      INFO("node " << r << ": exact_diffusion " << relError(exact.params[r]) << ", sgd "
                   << relError(sgd.params[r]));
      CHECK(relError(exact.params[r]) <= 1e-8);
      CHECK(relError(sgd.params[r]) >= 1e-3);
    }
  }
}

TEST_CASE("Peer::dilocoStep with overlap: in fragments, with nesterov and exact_diffusion, each "
          "round lands one round late under the inner steps taken since, as written out",
          "[api][methods][diloco]") {
  // 3 nodes on the complete graph, 4 parameters in 2 fragments, inner_steps 4: a round every 2
  // steps. At round t each node finishes the exchange of round t - 1 (fragment (t - 1) mod 2):
  // x-bar is the mean of the fragments as sent, theta's outer step takes it (exact_diffusion's y
  // from the sent values), and the node's fragment becomes theta + (x - sent); then it sends
  // fragment t mod 2 of its local model. dilocoFinish lands the last round.
  constexpr int kNodes = 3, kInner = 4, kFragments = 2, kOuter = 5;
  const double lr = 0.05;
  for (const std::string outer : {"nesterov", "exact_diffusion"}) {
    CAPTURE(outer);
    const bool exact = outer == "exact_diffusion";
    const double olr = exact ? 1.0 : 0.7, mu = 0.9;
    const auto file = scenarioFile(
        "diloco-overlap", kNodes,
        R"({"kind": "diloco", "step_size": 0.05, "inner_steps": 4, "fragments": 2,
            "overlap": true, "outer": {"kind": ")" + outer + R"("}})");
    const DilocoRun run = runDilocoSteps(file, kNodes, kInner * kOuter, lr);
    const size_t d = start(0).size(), width = (d + kFragments - 1) / kFragments;
    Vec theta = start(0), m(d, 0.0);
    std::vector<Vec> x(kNodes, start(0)), y(kNodes, Vec(d, 0.0)), sent(kNodes);
    int pending = -1;  // the fragment in flight
    const auto land = [&]() {
      const size_t lo = static_cast<size_t>(pending) * width;
      for (size_t k = lo; k < std::min(d, lo + width); ++k) {
        double xbar = 0;
        for (int r = 0; r < kNodes; ++r) xbar += sent[r][k - lo] / kNodes;
        const double delta = theta[k] - xbar;
        double u = delta;
        if (exact) {
          for (int r = 0; r < kNodes; ++r) y[r][k] += (sent[r][k - lo] - xbar) / (2 * lr * kInner);
        } else {
          m[k] = mu * m[k] + delta;
          u = delta + mu * m[k];
        }
        theta[k] = xbar + (delta - olr * u);
        for (int r = 0; r < kNodes; ++r) x[r][k] = theta[k] + (x[r][k] - sent[r][k - lo]);
      }
    };
    for (int round = 0; round < kOuter * kFragments; ++round) {
      for (int r = 0; r < kNodes; ++r) {
        for (int s = 0; s < kInner / kFragments; ++s) {
          const Vec g = quadraticGradient(r, x[r]);
          for (size_t k = 0; k < d; ++k) x[r][k] -= lr * (g[k] + y[r][k]);
        }
      }
      if (pending >= 0) land();
      pending = round % kFragments;
      const size_t lo = static_cast<size_t>(pending) * width;
      for (int r = 0; r < kNodes; ++r) sent[r].assign(x[r].begin() + lo, x[r].begin() + lo + width);
    }
    land();
    for (int r = 0; r < kNodes; ++r) {
      CHECK(run.rounds[r] == kOuter * kFragments);
      for (size_t k = 0; k < d; ++k) CHECK(run.params[r][k] == Approx(x[r][k]).epsilon(1e-12));
    }
    // The nodes' fragments are not equal (each keeps its own inner steps since the last send):
    // overlap is not the synchronous recursion.
    CHECK(std::abs(run.params[0][0] - run.params[2][0]) > 1e-6);
  }
}

}  // namespace methods_test
