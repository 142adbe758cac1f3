// The codistillation algorithm (optim/codistillation_gossip.h) driven by hand: which rounds
// exchange, that the model is never averaged, that the copies are the neighbours' messages of
// the last exchange, and that the oracle sees the term switched on only after burn-in.
#include "optim/codistillation_gossip.h"

#include <catch2/catch.hpp>
#include <vector>

namespace starling::optim {
namespace {

// g = x (the gradient of ||x||^2 / 2), recording whether the term was on at each call.
class RecordingOracle final : public GradientOracle<double> {
 public:
  explicit RecordingOracle(const NeighborModels<double>& n) : neighbors_(n) {}
  void gradient(std::span<const double> x, std::span<double> out) override {
    std::copy(x.begin(), x.end(), out.begin());
    active.push_back(neighbors_.active);
    copies.push_back(neighbors_.models.size());
  }
  std::vector<bool> active;
  std::vector<size_t> copies;

 private:
  const NeighborModels<double>& neighbors_;
};

TEST_CASE("codistillation exchanges every tau rounds, from tau rounds before burn-in",
          "[optim][codistillation]") {
  CodistillationConfig c;
  c.period = 4;
  c.burnIn = 10;
  std::vector<uint64_t> exchanging;
  for (uint64_t r = 0; r < 20; ++r) {
    if (c.exchangesIn(r)) exchanging.push_back(r);
  }
  // 8 is the last exchange before round 10 (its copies serve rounds 9-12): 0 and 4 are skipped.
  CHECK(exchanging == std::vector<uint64_t>{8, 12, 16});
  CHECK_FALSE(c.activeIn(9));
  CHECK(c.activeIn(10));
  c.burnIn = 0;
  c.period = 1;
  for (uint64_t r = 0; r < 5; ++r) CHECK(c.exchangesIn(r));
}

TEST_CASE("codistillation keeps its own model, refreshes the copies only when it exchanges",
          "[optim][codistillation]") {
  AlgorithmSpec spec;
  spec.kind = AlgorithmKind::kDsgd;
  spec.codistillation = CodistillationConfig{{1.0, CodistillationSpec::Distance::kCrossEntropy},
                                             /*period=*/3, /*burnIn=*/2};
  NeighborModels<double> store;
  RecordingOracle oracle(store);
  const std::vector<double> x0{1.0, -2.0};
  auto alg = createCodistillationGossip<double>(spec, x0, oracle, store);
  REQUIRE(alg->messageSize() == 2);
  const double eta = 0.5;
  std::vector<double> x = x0;
  for (uint64_t r = 0; r < 7; ++r) {
    INFO("round " << r);
    const RoundInfo info{r, eta, 0.5, 1};
    const bool exchange = alg->exchangesIn(r);
    CHECK(exchange == (r % 3 == 0));
    std::vector<double> out(exchange ? 2 : 0);
    alg->prepare(info, out);
    for (double& v : x) v -= eta * v;  // g = x
    if (exchange) CHECK(out == x);
    // Two neighbours whose messages identify the round.
    const std::vector<double> m0{double(r), 0.0}, m2{0.0, double(r)};
    const NeighborMessage<double> nbrs[2] = {{0, 0.25, m0}, {2, 0.25, m2}};
    if (exchange) {
      alg->absorb(info, out, nbrs);
    } else {
      alg->absorb(info, {}, {});
    }
    CHECK(std::vector<double>(alg->model().begin(), alg->model().end()) == x);  // never averaged
    const uint64_t last = r - r % 3;
    REQUIRE(store.models.size() == 2);
    CHECK(store.peers == std::vector<int>{0, 2});
    CHECK(store.models[0] == std::vector<double>{double(last), 0.0});
    CHECK(store.refreshed == last);
  }
  // The term is off in rounds 0-1 (burn-in) and in round 0 there were no copies yet.
  CHECK(oracle.active == std::vector<bool>{false, false, true, true, true, true, true});
  CHECK(oracle.copies.front() == 0);
}

}  // namespace
}  // namespace starling::optim
