// Rejoining (engine/rejoin.h, docs/algorithms.md §19), the parts that need no process: the join
// frames (and what a hostile one gets), the membership gossip's numbered changes, and the
// launcher's reading of a return in the peers' logs.
#include "engine/rejoin.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "compression/frame.h"
#include "engine/membership_gossip.h"
#include "runtime/merge.h"
#include "topology/graph.h"
#include "transport/inproc/inproc_transport.h"

namespace fs = std::filesystem;
using namespace starling;
using namespace starling::runtime;
using Entry = engine::MembershipGossip::Entry;

namespace {

engine::JoinState sample() {
  engine::JoinState s;
  s.round = 140;
  s.epoch = 2;
  s.alive = {true, true, false, true};
  s.entries = {Entry{2, 1, 70, true}, Entry{3, 1, 68, true}, Entry{3, 2, 140, true}};
  s.model = {0.5, -1.25, 3e-7};
  s.channel = 1;
  return s;
}

bool sameEntries(const std::vector<Entry>& a, const std::vector<Entry>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].rank != b[k].rank || a[k].change != b[k].change || a[k].at != b[k].at ||
        a[k].applied != b[k].applied) {
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("join frames: a state and a request come through whole", "[runtime][unit][rejoin]") {
  const engine::JoinState s = sample();
  const auto bytes = engine::encodeJoinState(s);
  auto got = engine::decodeJoinState(bytes, 4, 3);
  REQUIRE(got.isOk());
  CHECK(got->round == 140);
  CHECK(got->epoch == 2);
  CHECK(got->alive == s.alive);
  CHECK(sameEntries(got->entries, s.entries));
  CHECK(got->model == s.model);
  CHECK(got->carried.empty());
  CHECK(got->channel == 1);
  // With what the sponsor's algorithm carries across a restart (DiLoCo's outer momentum).
  engine::JoinState c = s;
  c.carried = {-0.25, 8, 1e-9};
  auto carried = engine::decodeJoinState(engine::encodeJoinState(c), 4, 3);
  REQUIRE(carried.isOk());
  CHECK(carried->model == s.model);
  CHECK(carried->carried == c.carried);
  // A refusal carries no model.
  engine::JoinState no;
  no.alive.assign(4, false);
  auto refusal = engine::decodeJoinState(engine::encodeJoinState(no), 4, 3);
  REQUIRE(refusal.isOk());
  CHECK(refusal->round == 0);
  CHECK(refusal->model.empty());
  const uint64_t attempt = 0xfedcba9876543210ULL;
  auto req = engine::decodeJoinRequest(engine::encodeJoinRequest(attempt));
  REQUIRE(req.isOk());
  CHECK(*req == attempt);
}

TEST_CASE("join frames: anything else is refused, never trusted", "[runtime][unit][rejoin]") {
  const auto good = engine::encodeJoinState(sample());
  CHECK(engine::decodeJoinState(good, 5, 3).status().code() ==
        core::StatusCode::kCorruption);  // nodes
  CHECK(engine::decodeJoinState(good, 4, 4).status().code() ==
        core::StatusCode::kCorruption);  // dim
  auto flipped = good;
  flipped[flipped.size() / 2] ^= std::byte{1};  // the frame's checksum
  CHECK_FALSE(engine::decodeJoinState(flipped, 4, 3).isOk());
  auto cut = good;
  cut.resize(cut.size() - 8);
  CHECK_FALSE(engine::decodeJoinState(cut, 4, 3).isOk());
  CHECK_FALSE(engine::decodeJoinState({}, 4, 3).isOk());
  // Well-framed but wrong inside: each field checked.
  const auto frameOf = [](std::vector<double> v) {
    transport::Bytes out;
    compression::encodeDense<double>(v, out);
    return out;
  };
  const double magic = 0x4a535441;
  const std::vector<double> ok = {magic, 140, 2, 2, 1, 1, 0, 1, 1, 1, 1, 68, 1, 0.5};
  CHECK(engine::decodeJoinState(frameOf(ok), 2, 1).isOk());
  // A carried state after the model: as many values as the model, finite.
  auto withCarried = ok;
  withCarried.push_back(-3.5);
  auto c = engine::decodeJoinState(frameOf(withCarried), 2, 1);
  REQUIRE(c.isOk());
  CHECK(c->carried == std::vector<double>{-3.5});
  withCarried.back() = NAN;
  CHECK(engine::decodeJoinState(frameOf(withCarried), 2, 1).status().code() ==
        core::StatusCode::kCorruption);
  auto tooLong = ok;
  tooLong.insert(tooLong.end(), {1.0, 2.0});  // neither none nor the model's length
  CHECK(engine::decodeJoinState(frameOf(tooLong), 2, 1).status().code() ==
        core::StatusCode::kCorruption);
  for (const auto& [k, v] : std::vector<std::pair<size_t, double>>{
           {0, 1.0},          // magic
           {1, -1},           // round
           {1, 0.5},          // round
           {3, 3},            // nodes
           {4, 2},            // entry count against the length
           {6, 99},           // channel
           {7, 2},            // alive flag
           {9, 7},            // entry rank
           {10, 0},           // change number
           {10, 1.5},         // change number
           {11, -3},          // its round
           {12, 3},           // applied flag
           {13, NAN},         // model value
       }) {
    auto bad = ok;
    bad[k] = v;
    INFO("field " << k << " = " << v);
    CHECK(engine::decodeJoinState(frameOf(bad), 2, 1).status().code() ==
          core::StatusCode::kCorruption);
  }
  CHECK_FALSE(engine::decodeJoinRequest(frameOf({1, 2, 3})).isOk());
  CHECK_FALSE(engine::decodeJoinRequest(frameOf({0x52454a4e, 1})).isOk());
  CHECK_FALSE(engine::decodeJoinRequest(frameOf({0x52454a4e, -1, 2})).isOk());
}

TEST_CASE("membership gossip: a rank's changes are numbered, leave and return in turn",
          "[runtime][unit][rejoin]") {
  auto hub = transport::inproc::createHub(3);
  auto net = transport::inproc::createTransport(*hub, 0);
  engine::MembershipGossip g(0, 3, *net);
  CHECK_FALSE(g.isKnownLost(2));
  CHECK_FALSE(g.proposeJoin(2, 5, 3));  // it never left
  g.propose(2, 10, 3);
  CHECK(g.isKnownLost(2));
  CHECK_FALSE(g.mayRejoin(2));  // not before its departure takes effect
  CHECK_FALSE(g.proposeJoin(2, 11, 3));
  CHECK(g.dueAt(12).empty());
  const auto out = g.dueAt(13);
  CHECK(out.left == std::vector<int>{2});
  CHECK(out.joined.empty());
  CHECK(g.mayRejoin(2));
  REQUIRE(g.proposeJoin(2, 20, 3));
  CHECK(g.joinRound(2) == std::optional<uint64_t>(23));
  CHECK(g.isKnownLost(2));  // out until the return takes effect
  CHECK_FALSE(g.proposeJoin(2, 21, 3));  // one return at a time
  g.propose(2, 21, 3);                   // nor a departure on top of it
  CHECK(g.dueAt(22).empty());
  const auto back = g.dueAt(23);
  CHECK(back.joined == std::vector<int>{2});
  CHECK_FALSE(g.isKnownLost(2));
  CHECK(g.knownLost().empty());
  g.propose(2, 40, 3);  // lost again: its third change
  CHECK(g.knownLost() == std::vector<int>{2});
  CHECK(sameEntries(g.entries(), {Entry{2, 1, 13, true}, Entry{2, 2, 23, true},
                                  Entry{2, 3, 43, false}}));
  // A returning peer takes them over as they are.
  auto net1 = transport::inproc::createTransport(*hub, 1);
  engine::MembershipGossip h(1, 3, *net1);
  REQUIRE(h.adopt(g.entries()).isOk());
  CHECK(sameEntries(h.entries(), g.entries()));
  CHECK(h.isKnownLost(2));
  CHECK_FALSE(h.adopt({Entry{3, 1, 5, false}}).isOk());  // no rank 3 in a run of 3
  CHECK_FALSE(h.adopt({Entry{1, 0, 5, false}}).isOk());  // changes count from 1
}

TEST_CASE("membership gossip: a returned peer is not excluded by news of its old departure, "
          "only by a new one", "[runtime][unit][rejoin]") {
  auto hub = transport::inproc::createHub(2);
  auto n0 = transport::inproc::createTransport(*hub, 0);
  auto n1 = transport::inproc::createTransport(*hub, 1);
  const auto g = topology::Graph::fromEdges(2, {{0, 1}});
  // Rank 1 left (change 1, at round 13) and came back (change 2, at 23); it knows.
  engine::MembershipGossip b(1, 2, *n1);
  REQUIRE(b.adopt({Entry{1, 1, 13, true}, Entry{1, 2, 23, true}}).isOk());
  // Rank 0's gossip of round r, as [rank, change, at] triples.
  const auto round = [&](uint64_t r, std::vector<double> triples) {
    auto frame = std::make_shared<transport::Bytes>();
    compression::encodeDense<double>(triples, *frame);
    n0->send(1, transport::Tag{r, engine::kMembershipChannel}, frame, [](const core::Status&) {});
    const auto deadline = transport::Clock::now() + std::chrono::seconds(5);
    b.start(r, g, deadline);
    while (!b.complete() && transport::Clock::now() < deadline) {
      (void)n0->progress(transport::Clock::now());
      (void)n1->progress(transport::Clock::now() + std::chrono::milliseconds(1));
    }
    REQUIRE(b.complete());
    CHECK(b.finish().empty());
  };
  round(30, {1, 1, 13, 1, 2, 23});
  CHECK_FALSE(b.excluded());
  CHECK(b.disagreement().isOk());
  CHECK_FALSE(b.isKnownLost(1));
  round(31, {1, 1, 13, 1, 2, 23, 1, 3, 34});  // a new departure of rank 1: change 3
  CHECK(b.excluded());
  // News that an applied change took effect earlier elsewhere is a disagreement, said plainly.
  round(32, {1, 2, 20});
  CHECK_FALSE(b.disagreement().isOk());
  CHECK_THAT(b.disagreement().message(), Catch::Matchers::Contains("rejoined at round 20"));
}

TEST_CASE("merging: a rank that rejoins counts again from its return", "[runtime][unit][rejoin]") {
  const fs::path dir = fs::temp_directory_path() / ("starling-rejoin-merge-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  MembershipReports m(dir, 8);
  const std::vector<std::pair<int, std::string>> lines = {
      {2, R"({"lost":{"round":60,"rank":3,"why":"gone"}})"},
      {4, R"({"lost":{"round":61,"rank":3,"why":"gone"}})"},
      {2, R"({"membership":{"round":68,"epoch":1,"left":[3],"why":"rank 3 lost"}})"},
      {4, R"({"membership":{"round":68,"epoch":1,"left":[3],"why":"rank 3 lost"}})"},
      // Rank 3's old process, stalled, reports a neighbour lost while it is out: not counted.
      {3, R"({"lost":{"round":100,"rank":2,"why":"no message"}})"},
      {2, R"({"membership":{"round":140,"epoch":2,"left":[],"joined":[3],"why":"rank 3 rejoined"}})"},
  };
  for (const auto& [reporter, line] : lines) {
    auto read = m.read(line, reporter, "rank-" + std::to_string(reporter) + ".jsonl");
    REQUIRE(read.isOk());
    CHECK(*read);
  }
  REQUIRE(m.settle().isOk());
  CHECK(m.running(3, 60));
  CHECK_FALSE(m.running(3, 61));
  CHECK_FALSE(m.running(3, 139));
  CHECK(m.running(3, 140));
  CHECK(m.running(3, 3000));
  CHECK(m.running(2, 100));
  CHECK(m.lost().empty());  // nobody is out now
  std::ifstream in(dir / "membership.jsonl");
  std::vector<std::string> got;
  for (std::string l; std::getline(in, l);) got.push_back(l);
  REQUIRE(got.size() == 3);  // the loss once, each change once
  CHECK(got[0].find(R"("rank":3)") != std::string::npos);
  CHECK(got[2].find(R"("joined":[3])") != std::string::npos);
  // A second loss after the return opens a new absence.
  REQUIRE(m.read(R"({"lost":{"round":500,"rank":3,"why":"gone again"}})", 2, "rank-2.jsonl").isOk());
  REQUIRE(m.settle().isOk());
  CHECK(m.running(3, 500));
  CHECK_FALSE(m.running(3, 501));
  CHECK(m.lost().count(3) == 1);
  auto bad = m.read(R"({"membership":{"round":1,"epoch":3,"left":[],"joined":[9]}})", 2, "rank-2.jsonl");
  CHECK(bad.status().code() == core::StatusCode::kCorruption);
  fs::remove_all(dir);
}
