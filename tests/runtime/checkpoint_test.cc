// Checkpoint files (runtime/checkpoint.h): the format round-trips every field type bit for bit,
// every truncation and every flipped bit is rejected, a load checks names, types and sizes, and
// writing keeps the newest `keep` files. core::Rng's state continues its stream exactly.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "optim/codistillation_gossip.h"
#include "runtime/checkpoint.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace starling;
using namespace starling::runtime;

namespace {

// Every kind of field, with values whose bits matter (a NaN payload, -0, denormals, ranks).
struct Sample {
  std::vector<double> fixedD = {1.0, -0.0, std::numeric_limits<double>::denorm_min(), 1e308,
                                std::nan("0x5")};
  std::vector<float> fixedF = {0.1f, -3.5f, std::numeric_limits<float>::infinity()};
  std::vector<double> sizedD = {2.5, 3.5};
  std::vector<float> sizedF;  // empty
  std::vector<uint64_t> sizedU = {0, 7, ~uint64_t{0}};
  uint64_t u = 0x0123456789abcdefULL;
  double d = -1.0 / 3.0;
  bool b = true;
  std::string t = std::string("text\0with nul", 13);
  std::map<int, std::vector<double>> peers = {{1, {1.0, 2.0}}, {5, {}}, {7, {3.0}}};
  core::Rng rng{42};

  void visit(core::StateVisitor& v) {
    core::StateVisitor::Scope top(v, "sample");
    v.fixed("fixed_d", fixedD);
    v.fixed("fixed_f", fixedF);
    v.sized("sized_d", sizedD);
    v.sized("sized_f", sizedF);
    v.sized("sized_u", sizedU);
    v.scalar("u", u);
    v.scalar("d", d);
    v.flag("b", b);
    v.text("t", t);
    v.perPeer("peers", peers);
    core::StateVisitor::Scope scope(v, "rng");
    rng.visitState(v);
  }
};

template <typename T>
bool sameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

std::string savedSample(Sample& s) {
  CheckpointWriter w;
  s.visit(w);
  REQUIRE(w.status().isOk());
  return w.payload();
}

CheckpointHeader header() {
  CheckpointHeader h;
  h.scenarioHash = 0xfeedbeefcafe1234ULL;
  h.rank = 3;
  h.round = 120;
  h.peerLogBytes = 4567;
  return h;
}

fs::path tempDir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("starling-ckpt-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("a checkpoint round-trips every field bit for bit", "[runtime][unit][checkpoint]") {
  Sample a;
  a.rng.normal();  // leaves a spare normal value in the state
  for (int k = 0; k < 5; ++k) a.rng.nextU64();
  const std::string file = encodeCheckpoint(header(), savedSample(a));
  auto decoded = decodeCheckpoint(file, "x.ckpt");
  INFO(decoded.status().toString());
  REQUIRE(decoded);
  CHECK(decoded->header.scenarioHash == header().scenarioHash);
  CHECK(decoded->header.rank == 3);
  CHECK(decoded->header.round == 120);
  CHECK(decoded->header.peerLogBytes == 4567);

  Sample b;  // different values everywhere
  b.fixedD.assign(5, 9.0);
  b.fixedF.assign(3, 9.0f);
  b.sizedD = {1, 2, 3, 4};
  b.sizedF = {5};
  b.sizedU.clear();
  b.u = 0;
  b.d = 0;
  b.b = false;
  b.t.clear();
  b.peers = {{2, {9.0}}};
  CheckpointReader r(decoded->payload, "x.ckpt");
  b.visit(r);
  INFO(r.status().toString());
  REQUIRE(r.finish().isOk());
  CHECK(sameBits(a.fixedD, b.fixedD));
  CHECK(sameBits(a.fixedF, b.fixedF));
  CHECK(sameBits(a.sizedD, b.sizedD));
  CHECK(b.sizedF.empty());
  CHECK(a.sizedU == b.sizedU);
  CHECK(a.u == b.u);
  CHECK(std::memcmp(&a.d, &b.d, sizeof a.d) == 0);
  CHECK(b.b);
  CHECK(a.t == b.t);
  REQUIRE(b.peers.size() == 3);
  for (const auto& [peer, v] : a.peers) CHECK(sameBits(v, b.peers.at(peer)));
  // The loaded stream continues the saved one: uniform, normal (its spare first), below.
  for (int k = 0; k < 50; ++k) {
    CHECK(a.rng.normal() == b.rng.normal());
    CHECK(a.rng.nextU64() == b.rng.nextU64());
    CHECK(a.rng.below(1000) == b.rng.below(1000));
  }
}

TEST_CASE("every truncation and every flipped bit of a checkpoint is rejected",
          "[runtime][unit][checkpoint]") {
  Sample a;
  const std::string file = encodeCheckpoint(header(), savedSample(a));
  REQUIRE(decodeCheckpoint(file, "x"));
  for (size_t len = 0; len < file.size(); ++len) {
    auto d = decodeCheckpoint(std::string_view(file).substr(0, len), "x");
    INFO("length " << len);
    REQUIRE_FALSE(d);
    CHECK(d.status().code() == core::StatusCode::kCorruption);
  }
  CHECK_FALSE(decodeCheckpoint(file + std::string(1, '\0'), "x"));  // and a byte appended
  size_t rejected = 0;
  for (size_t byte = 0; byte < file.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = file;
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      rejected += !decodeCheckpoint(bad, "x");
    }
  }
  CHECK(rejected == 8 * file.size());
  // The reasons are named.
  CHECK_THAT(decodeCheckpoint(file.substr(0, 100), "f.ckpt").status().message(),
             Contains("f.ckpt: truncated"));
  std::string flipped = file;
  flipped[kCheckpointHeaderBytes + 3] ^= 0x10;
  CHECK_THAT(decodeCheckpoint(flipped, "f.ckpt").status().message(), Contains("checksum"));
  std::string magic = file;
  magic[0] = 'X';
  CHECK_THAT(decodeCheckpoint(magic, "f.ckpt").status().message(), Contains("bad magic"));
}

TEST_CASE("a load names the field that differs from what the object holds",
          "[runtime][unit][checkpoint]") {
  Sample a;
  const std::string payload = savedSample(a);
  SECTION("another size of a fixed vector") {
    Sample b;
    b.fixedD.resize(4);
    CheckpointReader r(payload, "f.ckpt");
    b.visit(r);
    CHECK_THAT(r.finish().message(),
               Contains("f.ckpt: field sample/fixed_d has 5 values, this run's has 4"));
  }
  SECTION("another field") {
    CheckpointReader r(payload, "f.ckpt");
    std::vector<double> x(5);
    r.fixed("other", x);
    CHECK_THAT(r.finish().message(), Contains("expected field other, found sample/fixed_d"));
  }
  SECTION("another type") {
    CheckpointReader r(payload, "f.ckpt");
    core::StateVisitor::Scope scope(r, "sample");
    std::vector<float> x(5);
    r.fixed("fixed_d", x);
    CHECK_THAT(r.finish().message(), Contains("holds float64 values, expected float32"));
  }
  SECTION("fields left over") {
    CheckpointReader r(payload, "f.ckpt");
    core::StateVisitor::Scope scope(r, "sample");
    r.fixed("fixed_d", a.fixedD);
    CHECK_THAT(r.finish().message(), Contains("first unread field: sample/fixed_f"));
  }
  SECTION("a payload that ends early") {
    Sample b;
    CheckpointReader r(std::string_view(payload).substr(0, 40), "f.ckpt");
    b.visit(r);
    CHECK_FALSE(r.finish().isOk());
  }
  SECTION("the launcher's view of the fields") {
    auto fields = checkpointFields(payload);
    REQUIRE(fields);
    CHECK(fields->front().name == "sample/fixed_d");
    auto u = checkpointU64s(*fields, "sample/sized_u");
    REQUIRE(u);
    CHECK(*u == a.sizedU);
    CHECK_FALSE(checkpointU64s(*fields, "sample/none"));
  }
}

TEST_CASE("writeCheckpoint keeps the newest files and leaves no temporary file",
          "[runtime][unit][checkpoint]") {
  const auto out = tempDir("write");
  Sample a;
  const std::string payload = savedSample(a);
  CheckpointHeader h = header();
  // A temporary file a killed writer left behind.
  fs::create_directories(checkpointDir(out, h.rank));
  std::ofstream(checkpointDir(out, h.rank) / "round-000000005.ckpt.tmp") << "half";
  for (uint64_t round : {10, 20, 30, 40}) {
    h.round = round;
    REQUIRE(writeCheckpoint(out, h, payload, 3).isOk());
  }
  CHECK(checkpointRounds(checkpointDir(out, h.rank)) == std::vector<uint64_t>{40, 30, 20});
  CHECK(checkpointPath(out, 3, 40).filename() == "round-000000040.ckpt");
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(checkpointDir(out, h.rank))) {
    ++files;
    CHECK(entry.path().extension() == ".ckpt");
  }
  CHECK(files == 3);
  auto back = readCheckpoint(checkpointPath(out, 3, 30));
  REQUIRE(back);
  CHECK(back->header.round == 30);
  CHECK(back->payload == payload);
  REQUIRE(removeCheckpointsAfter(checkpointDir(out, h.rank), 25).isOk());
  CHECK(checkpointRounds(checkpointDir(out, h.rank)) == std::vector<uint64_t>{20});
  fs::remove_all(out);
}

namespace {

// g = x: a deterministic stand-in for a node's gradient.
class IdentityOracle final : public optim::GradientOracle<double> {
 public:
  void gradient(std::span<const double> x, std::span<double> out) override {
    std::copy(x.begin(), x.end(), out.begin());
  }
};

// One round of the codistillation algorithm with two neighbours whose messages depend on r.
void codistilRound(optim::Algorithm<double>& alg, uint64_t r) {
  const optim::RoundInfo info{r, 0.1, 0.5, 1};
  std::vector<double> out(alg.exchangesIn(r) ? 3 : 0);
  alg.prepare(info, out);
  const std::vector<double> a{double(r), 1.0, 2.0}, b{3.0, double(r) * 2, 4.0};
  const optim::NeighborMessage<double> nbrs[2] = {{0, 0.25, a}, {2, 0.25, b}};
  if (alg.exchangesIn(r)) {
    alg.absorb(info, out, nbrs);
  } else {
    alg.absorb(info, {}, {});
  }
}

}  // namespace

TEST_CASE("codistillation's checkpoint holds the model and the neighbours' copies",
          "[runtime][unit][checkpoint]") {
  optim::AlgorithmSpec spec;
  spec.kind = optim::AlgorithmKind::kDsgd;
  spec.codistillation = optim::CodistillationConfig{{}, 3, 0};
  IdentityOracle oracle;
  const std::vector<double> x0{1.0, -2.0, 0.5};
  optim::NeighborModels<double> store;
  auto alg = optim::createCodistillationGossip<double>(spec, x0, oracle, store);
  for (uint64_t r = 0; r < 5; ++r) codistilRound(*alg, r);
  CheckpointWriter w;
  alg->visitState(w);
  REQUIRE(w.status().isOk());

  optim::NeighborModels<double> loaded;
  auto again = optim::createCodistillationGossip<double>(spec, x0, oracle, loaded);
  CheckpointReader r(w.payload(), "c.ckpt");
  again->visitState(r);
  INFO(r.status().toString());
  REQUIRE(r.finish().isOk());
  CHECK(std::vector<double>(again->model().begin(), again->model().end()) ==
        std::vector<double>(alg->model().begin(), alg->model().end()));
  CHECK(loaded.peers == store.peers);
  CHECK(loaded.models == store.models);
  CHECK(loaded.refreshed == 3);
  // Both continue the same way.
  for (uint64_t k = 5; k < 8; ++k) {
    codistilRound(*alg, k);
    codistilRound(*again, k);
  }
  CHECK(std::vector<double>(again->model().begin(), again->model().end()) ==
        std::vector<double>(alg->model().begin(), alg->model().end()));
  CHECK(loaded.models == store.models);

  // A copy of another size is refused.
  optim::NeighborModels<double> small;
  const std::vector<double> x1{1.0, 2.0};
  auto other = optim::createCodistillationGossip<double>(spec, x1, oracle, small);
  // (a checkpoint of the 3-element run into a 2-element model fails at its model first)
  CheckpointReader r1(w.payload(), "c.ckpt");
  other->visitState(r1);
  CHECK_FALSE(r1.finish().isOk());
}
