// Which source decides the peers' addresses (runtime/peer_placement.h), with a fake environment;
// the sources themselves are tested in placement_test.cc and, with real launchers, in
// tests/integration/hosts_test.py and slurm_test.py.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include "runtime/peer_placement.h"

using namespace starling;
using namespace starling::runtime;

namespace {

EnvLookup fakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

PeerPlacementRequest request(std::string peers, std::string hostfile, std::optional<int> rank) {
  PeerPlacementRequest r;
  r.peersFlag = std::move(peers);
  r.hostfile = std::move(hostfile);
  r.rank = rank;
  return r;
}

scenario::Scenario fourNodes() {
  scenario::Scenario s;
  s.nodes = 4;
  return s;
}

// A two-node Slurm step of four tasks, block layout, seen from task 2 (on node 1 by the layout).
std::map<std::string, std::string> slurmEnv(const char* nodeId) {
  return {{"SLURM_PROCID", "2"},
          {"SLURM_STEP_NODELIST", "n[1-2]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_NODEID", nodeId},
          {"SLURM_LOCALID", "0"}};
}
const std::map<std::string, std::string> kSlurm = slurmEnv("1");

std::filesystem::path writeHostfile() {
  const auto path = std::filesystem::temp_directory_path() / "starling-placement-hostfile";
  std::ofstream(path) << "h0 slots=3\nh1 slots=1\n";
  return path;
}

}  // namespace

TEST_CASE("without a launcher every rank is on loopback at base_port + rank", "[peer_placement]") {
  scenario::Scenario s = fourNodes();
  s.peers.basePort = 31000;
  auto p = placePeer(s, request("", "", 1), fakeEnv({}));
  REQUIRE(p);
  CHECK(p->rank == 1);
  CHECK(p->addresses ==
        std::vector<std::string>{"127.0.0.1:31000", "127.0.0.1:31001", "127.0.0.1:31002",
                                 "127.0.0.1:31003"});
}

TEST_CASE("a Slurm step places the ranks on its nodes", "[peer_placement]") {
  auto p = placePeer(fourNodes(), request("", "", 2), fakeEnv(kSlurm));
  REQUIRE(p);
  CHECK(p->source == "the Slurm step");
  CHECK(p->addresses ==
        std::vector<std::string>{"n1:29500", "n1:29501", "n2:29502", "n2:29503"});
}

TEST_CASE("the sources take precedence in the documented order", "[peer_placement]") {
  const auto hostfile = writeHostfile().string();
  scenario::Scenario s = fourNodes();
  SECTION("--peers over everything") {
    s.peers.explicitAddresses = true;
    s.peers.addresses = {"a:1", "a:2", "a:3", "a:4"};
    auto p = placePeer(s, request("b:1,b:2,b:3,b:4", hostfile, 0),
                       fakeEnv(kSlurm));
    REQUIRE(p);
    CHECK(p->addresses == std::vector<std::string>{"b:1", "b:2", "b:3", "b:4"});
  }
  SECTION("the scenario's addresses over a hostfile and Slurm") {
    s.peers.explicitAddresses = true;
    s.peers.addresses = {"a:1", "a:2", "a:3", "a:4"};
    auto p = placePeer(s, request("", hostfile, 0), fakeEnv(kSlurm));
    REQUIRE(p);
    CHECK(p->addresses == std::vector<std::string>{"a:1", "a:2", "a:3", "a:4"});
  }
  SECTION("a hostfile over Slurm: ranks fill h0's three slots, then h1") {
    auto p = placePeer(s, request("", hostfile, 3), fakeEnv(kSlurm));
    REQUIRE(p);
    CHECK(p->source.find(hostfile) != std::string::npos);
    CHECK(p->addresses ==
          std::vector<std::string>{"h0:29500", "h0:29501", "h0:29502", "h1:29503"});
  }
}

TEST_CASE("placement errors say what is wrong", "[peer_placement]") {
  SECTION("a --peers list of the wrong length") {
    auto p = placePeer(fourNodes(), request("x:1,x:2", "", 0), fakeEnv({}));
    REQUIRE_FALSE(p);
    CHECK(p.status().message().find("2 addresses for a scenario of 4 nodes") != std::string::npos);
  }
  SECTION("no rank anywhere") {
    auto p = placePeer(fourNodes(), request("", "", std::nullopt), fakeEnv({}));
    REQUIRE_FALSE(p);
    CHECK(p.status().message().find("SLURM_PROCID") != std::string::npos);
  }
  SECTION("a rank beyond the scenario") {
    auto p = placePeer(fourNodes(), request("", "", 4), fakeEnv({}));
    REQUIRE_FALSE(p);
    CHECK(p.status().message().find("not in 0..3") != std::string::npos);
  }
  SECTION("a Slurm step whose layout puts this task elsewhere than SLURM_NODEID") {
    auto p = placePeer(fourNodes(), request("", "", 2), fakeEnv(slurmEnv("0")));
    REQUIRE_FALSE(p);
    CHECK(p.status().message().find("SLURM_NODEID") != std::string::npos);
  }
}

TEST_CASE("interfaceAddress finds loopback by name and names what exists otherwise",
          "[peer_placement]") {
  auto lo = interfaceAddress("lo");
  REQUIRE(lo);
  CHECK(*lo == "127.0.0.1");
  auto none = interfaceAddress("starling-no-such-if");
  REQUIRE_FALSE(none);
  CHECK(none.status().code() == StatusCode::kNotFound);
  CHECK(none.status().message().find("lo 127.0.0.1") != std::string::npos);
}
