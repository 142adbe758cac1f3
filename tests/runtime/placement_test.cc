// Placement: Slurm host lists, task layouts and distributions, OpenMPI hostfiles, and the whole
// decision from a (fake) environment. Every expectation is written out by hand from Slurm's and
// OpenMPI's documented behaviour, not taken from the code's own output.
#include "runtime/placement.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace starling::runtime {
namespace {

namespace fs = std::filesystem;
using Names = std::vector<std::string>;
using Ints = std::vector<int>;

Names hostnames(std::string_view list) {
  auto r = expandHostlist(list);
  INFO(r.status().toString());
  REQUIRE(r);
  return *r;
}

// An invalid-argument error whose message contains `needle` (the offending text).
template <typename T>
void requireInvalid(const core::Result<T>& r, const std::string& needle) {
  REQUIRE_FALSE(r);
  CHECK(r.status().code() == core::StatusCode::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains(needle));
}

Ints nodeOf(const Ints& perNode, SlurmDistribution d, int plane = 0) {
  auto r = slurmNodeOfTask(perNode, d, plane);
  INFO(r.status().toString());
  REQUIRE(r);
  return *r;
}

EnvLookup fakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// What srun exports to task 3 of `srun -N2 -n4` on gpu01 and gpu02 (block, the default).
std::map<std::string, std::string> blockStep() {
  return {{"SLURM_PROCID", "3"},
          {"SLURM_NODEID", "1"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_STEP_NODELIST", "gpu[01-02]"},
          {"SLURM_JOB_NODELIST", "gpu[01-04]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_TASKS_PER_NODE", "4(x4)"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_NTASKS", "16"}};
}

fs::path tempDir() {
  const auto dir = fs::temp_directory_path() / ("starling-placement-" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("expandHostlist expands ranges as scontrol show hostnames does", "[placement]") {
  CHECK(hostnames("n[1-3,7],login") == Names{"n1", "n2", "n3", "n7", "login"});
  CHECK(hostnames("node1") == Names{"node1"});
  CHECK(hostnames("a,b") == Names{"a", "b"});
  // Padding is the width of the low bound's text.
  CHECK(hostnames("n[08-10]") == Names{"n08", "n09", "n10"});
  CHECK(hostnames("n[8-10]") == Names{"n8", "n9", "n10"});
  CHECK(hostnames("n[098-100]") == Names{"n098", "n099", "n100"});
  CHECK(hostnames("n[007]") == Names{"n007"});
  CHECK(hostnames("n[1,03-04]") == Names{"n1", "n03", "n04"});
  // Several groups multiply out, leftmost slowest; text after a bracket is kept.
  CHECK(hostnames("r[1-2]n[1-2]") == Names{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(hostnames("n[1-2]-ib") == Names{"n1-ib", "n2-ib"});
  CHECK(hostnames("rack[1-2]-n[0-1].ib") ==
        Names{"rack1-n0.ib", "rack1-n1.ib", "rack2-n0.ib", "rack2-n1.ib"});
  CHECK(hostnames("[1-2]") == Names{"1", "2"});
  // Order is kept and duplicates stay.
  CHECK(hostnames("b,a,b") == Names{"b", "a", "b"});
  CHECK(hostnames("n[2,1-2]") == Names{"n2", "n1", "n2"});
}

TEST_CASE("expandHostlist trims whitespace around entries", "[placement]") {
  CHECK(hostnames(" n1 , n[2-3]\n") == Names{"n1", "n2", "n3"});
  CHECK(hostnames("\tlogin") == Names{"login"});
  // Inside a name it is an error, not a separator.
  requireInvalid(expandHostlist("n1 n2"), "\"n1 n2\"");
}

TEST_CASE("expandHostlist refuses malformed lists, naming the text", "[placement]") {
  requireInvalid(expandHostlist("n[1-3"), "\"n[1-3\"");
  requireInvalid(expandHostlist("n1-3]"), "\"n1-3]\"");
  requireInvalid(expandHostlist("n[[1]]"), "\"n[[1]]\"");
  requireInvalid(expandHostlist("n[1-2],m[3"), "\"n[1-2],m[3\"");
  requireInvalid(expandHostlist(""), "empty name");
  requireInvalid(expandHostlist("n1,,n2"), "\"n1,,n2\"");
  requireInvalid(expandHostlist(",n1"), "\",n1\"");
  requireInvalid(expandHostlist("n1,"), "\"n1,\"");
  requireInvalid(expandHostlist(" , "), "empty name");
  requireInvalid(expandHostlist("n[3-1]"), "\"3-1\"");
  requireInvalid(expandHostlist("n[3-1]"), "below its start");
  requireInvalid(expandHostlist("n[]"), "\"n[]\"");
  requireInvalid(expandHostlist("n[a-b]"), "\"a-b\"");
  requireInvalid(expandHostlist("n[1-]"), "\"1-\"");
  requireInvalid(expandHostlist("n[-1]"), "\"-1\"");
  requireInvalid(expandHostlist("n[1,,2]"), "\"n[1,,2]\"");
  requireInvalid(expandHostlist("n[1-2-3]"), "\"1-2-3\"");
}

TEST_CASE("expandHostlist caps a list at 1,048,576 names", "[placement]") {
  CHECK(hostnames("n[0-1048575]").size() == 1048576);
  requireInvalid(expandHostlist("n[0-1048576]"), "\"0-1048576\"");
  requireInvalid(expandHostlist("n[1-99999999999999]"), "1048576");
  // Groups that are small apart but large together.
  requireInvalid(expandHostlist("r[1-2048]n[1-1024]"), "\"r[1-2048]n[1-1024]\"");
}

TEST_CASE("expandTasksPerNode repeats counts", "[placement]") {
  CHECK(*expandTasksPerNode("2(x3),1") == Ints{2, 2, 2, 1});
  CHECK(*expandTasksPerNode("4") == Ints{4});
  CHECK(*expandTasksPerNode("1,3(x2)") == Ints{1, 3, 3});
  CHECK(*expandTasksPerNode("1(x1)") == Ints{1});
}

TEST_CASE("expandTasksPerNode refuses bad counts, naming the text", "[placement]") {
  requireInvalid(expandTasksPerNode(""), "\"\"");
  requireInvalid(expandTasksPerNode("0"), "\"0\"");
  requireInvalid(expandTasksPerNode("2(x0)"), "\"2(x0)\"");
  requireInvalid(expandTasksPerNode("x"), "\"x\"");
  requireInvalid(expandTasksPerNode("2(x3"), "\"2(x3\"");
  requireInvalid(expandTasksPerNode("2(x3),"), "\"2(x3),\"");
  requireInvalid(expandTasksPerNode("-1"), "\"-1\"");
  requireInvalid(expandTasksPerNode("2x3"), "\"2x3\"");
  requireInvalid(expandTasksPerNode("(x3)"), "\"(x3)\"");
  requireInvalid(expandTasksPerNode("1(x99999999999)"), "\"1(x99999999999)\"");
}

TEST_CASE("parseSlurmDistribution reads the node-level part", "[placement]") {
  int plane = -1;
  const auto dist = [&](std::string_view text, std::string_view planeText = "") {
    auto r = parseSlurmDistribution(text, planeText, &plane);
    INFO(r.status().toString());
    REQUIRE(r);
    return *r;
  };
  using D = SlurmDistribution;
  CHECK(dist("") == D::kBlock);
  CHECK(dist("block") == D::kBlock);
  CHECK(dist("*") == D::kBlock);
  CHECK(dist("*:cyclic") == D::kBlock);
  CHECK(dist("cyclic") == D::kCyclic);
  CHECK(dist("block:block") == D::kBlock);
  CHECK(dist("block:cyclic") == D::kBlock);
  CHECK(dist("cyclic:block") == D::kCyclic);
  CHECK(dist("cyclic:cyclic") == D::kCyclic);
  CHECK(dist("block:cyclic:fcyclic") == D::kBlock);
  CHECK(dist("cyclic,Pack") == D::kCyclic);
  CHECK(dist("block:cyclic,nopack") == D::kBlock);
  CHECK(dist("Cyclic") == D::kCyclic);

  CHECK(dist("plane=4") == D::kPlane);
  CHECK(plane == 4);
  CHECK(dist("plane", "3") == D::kPlane);
  CHECK(plane == 3);
  // The size in the distribution itself wins over SLURM_DIST_PLANESIZE.
  CHECK(dist("plane=2:block", "8") == D::kPlane);
  CHECK(plane == 2);
}

TEST_CASE("parseSlurmDistribution refuses what it cannot lay out", "[placement]") {
  int plane = 0;
  requireInvalid(parseSlurmDistribution("arbitrary", "", &plane), "arbitrary");
  requireInvalid(parseSlurmDistribution("arbitrary", "", &plane), "SLURM_HOSTFILE");
  requireInvalid(parseSlurmDistribution("spread", "", &plane), "\"spread\"");
  requireInvalid(parseSlurmDistribution("plane", "", &plane), "SLURM_DIST_PLANESIZE");
  requireInvalid(parseSlurmDistribution("plane", "zero", &plane), "\"zero\"");
  requireInvalid(parseSlurmDistribution("plane=0", "", &plane), "\"plane=0\"");
  requireInvalid(parseSlurmDistribution("plane=", "", &plane), "\"plane=\"");
  requireInvalid(parseSlurmDistribution("block=2", "", &plane), "\"block=2\"");
}

TEST_CASE("slurmNodeOfTask lays out block, cyclic and plane", "[placement]") {
  using D = SlurmDistribution;
  CHECK(nodeOf({2, 2}, D::kBlock) == Ints{0, 0, 1, 1});
  CHECK(nodeOf({1, 3}, D::kBlock) == Ints{0, 1, 1, 1});
  CHECK(nodeOf({2, 2}, D::kCyclic) == Ints{0, 1, 0, 1});
  // A node that is full drops out of the rotation.
  CHECK(nodeOf({3, 1}, D::kCyclic) == Ints{0, 1, 0, 0});
  CHECK(nodeOf({2, 1, 3}, D::kCyclic) == Ints{0, 1, 2, 0, 2, 2});
  CHECK(nodeOf({4, 4}, D::kPlane, 2) == Ints{0, 0, 1, 1, 0, 0, 1, 1});
  // Node 0 has room for one more in the second round: it takes t4 only.
  CHECK(nodeOf({3, 2}, D::kPlane, 2) == Ints{0, 0, 1, 1, 0});
  // A block that only partly fits: node 0 takes t6, and node 1's turn is a full block (t7, t8).
  CHECK(nodeOf({3, 4, 4}, D::kPlane, 2) == Ints{0, 0, 1, 1, 2, 2, 0, 1, 1, 2, 2});
  // Plane larger than any node's count is block.
  CHECK(nodeOf({2, 3}, D::kPlane, 8) == Ints{0, 0, 1, 1, 1});
  // Plane of one is cyclic.
  CHECK(nodeOf({3, 1}, D::kPlane, 1) == Ints{0, 1, 0, 0});
}

TEST_CASE("slurmNodeOfTask refuses empty counts and bad plane sizes", "[placement]") {
  CHECK_FALSE(slurmNodeOfTask({}, SlurmDistribution::kBlock, 0));
  CHECK_FALSE(slurmNodeOfTask({2, 0}, SlurmDistribution::kCyclic, 0));
  requireInvalid(slurmNodeOfTask({2, 2}, SlurmDistribution::kPlane, 0), "plane size 0");
  requireInvalid(slurmNodeOfTask({2, 2}, SlurmDistribution::kPlane, -2), "plane size -2");
}

TEST_CASE("parseHostfile reads OpenMPI hostfiles", "[placement]") {
  auto r = parseHostfile(
      "# the cluster\n"
      "\n"
      "alpha\n"
      "beta slots=4\n"
      "  gamma slots=2 max_slots=8   # two GPUs\n"
      "\t\n"
      "beta slots=2\n"
      "alpha\n",
      "hosts.txt");
  INFO(r.status().toString());
  REQUIRE(r);
  REQUIRE(r->size() == 3);
  CHECK((*r)[0].host == "alpha");
  CHECK((*r)[0].slots == 2);  // listed twice, one slot each time
  CHECK((*r)[1].host == "beta");
  CHECK((*r)[1].slots == 6);
  CHECK((*r)[2].host == "gamma");
  CHECK((*r)[2].slots == 2);

  auto empty = parseHostfile("# nothing\n\n", "empty.txt");
  REQUIRE(empty);
  CHECK(empty->empty());
}

TEST_CASE("parseHostfile names the file, the line and the key", "[placement]") {
  requireInvalid(parseHostfile("a\nb cpus=2\n", "h.txt"), "h.txt:2");
  requireInvalid(parseHostfile("a\nb cpus=2\n", "h.txt"), "\"cpus\"");
  requireInvalid(parseHostfile("a slots\n", "h.txt"), "h.txt:1");
  requireInvalid(parseHostfile("# c\na slots=0\n", "h.txt"), "h.txt:2");
  requireInvalid(parseHostfile("a slots=0\n", "h.txt"), "\"slots=0\"");
  requireInvalid(parseHostfile("a slots=-1\n", "h.txt"), "\"slots=-1\"");
  requireInvalid(parseHostfile("a slots=two\n", "h.txt"), "\"slots=two\"");
  requireInvalid(parseHostfile("a max_slots=x\n", "h.txt"), "\"max_slots=x\"");
  requireInvalid(parseHostfile("a slots=1 slots=2\n", "h.txt"), "h.txt:1");
  requireInvalid(parseHostfile("slots=2\n", "h.txt"), "\"slots=2\"");
}

TEST_CASE("mapBySlot fills each host's slots in order", "[placement]") {
  const std::vector<HostfileEntry> hosts = {{"a", 2}, {"b", 3}};
  CHECK(*mapBySlot(hosts, 4, "h") == Ints{0, 0, 1, 1});
  CHECK(*mapBySlot(hosts, 5, "h") == Ints{0, 0, 1, 1, 1});
  CHECK(*mapBySlot(hosts, 1, "h") == Ints{0});
  requireInvalid(mapBySlot(hosts, 6, "h.txt"), "h.txt has 5 slots for 6 ranks");
  requireInvalid(mapBySlot({{"a", 2}, {"b", 4}}, 8, "h.txt"), "has 6 slots for 8 ranks");
  requireInvalid(mapBySlot({}, 1, "h.txt"), "has 0 slots for 1 ranks");
}

TEST_CASE("processEnvironment reads the process's environment", "[placement]") {
  const std::string name = "STARLING_PLACEMENT_TEST_" + std::to_string(getpid());
  const EnvLookup env = processEnvironment();
  CHECK_FALSE(env(name).has_value());
  REQUIRE(::setenv(name.c_str(), "value", 1) == 0);
  CHECK(env(name) == std::optional<std::string>("value"));
  REQUIRE(::setenv(name.c_str(), "", 1) == 0);
  CHECK(env(name) == std::optional<std::string>(""));
  ::unsetenv(name.c_str());
}

TEST_CASE("fromSlurm lays out a two-node block step", "[placement]") {
  auto r = fromSlurm(fakeEnv(blockStep()), 4, 29500);
  REQUIRE(r.has_value());
  INFO(r->status().toString());
  REQUIRE(*r);
  CHECK(**r == Names{"gpu01:29500", "gpu01:29501", "gpu02:29502", "gpu02:29503"});
}

TEST_CASE("fromSlurm lays out a two-node cyclic step", "[placement]") {
  auto vars = blockStep();
  vars["SLURM_DISTRIBUTION"] = "cyclic";
  vars["SLURM_PROCID"] = "2";  // cyclic: t2 is node 0's second task
  vars["SLURM_NODEID"] = "0";
  vars["SLURM_LOCALID"] = "1";
  auto r = fromSlurm(fakeEnv(vars), 4, 29500);
  REQUIRE(r.has_value());
  INFO(r->status().toString());
  REQUIRE(*r);
  CHECK(**r == Names{"gpu01:29500", "gpu02:29501", "gpu01:29502", "gpu02:29503"});
}

TEST_CASE("fromSlurm lays out a plane step from SLURM_DIST_PLANESIZE", "[placement]") {
  std::map<std::string, std::string> vars = {{"SLURM_PROCID", "4"},
                                             {"SLURM_NODEID", "0"},
                                             {"SLURM_LOCALID", "2"},
                                             {"SLURM_STEP_NODELIST", "a,b"},
                                             {"SLURM_STEP_TASKS_PER_NODE", "3,2"},
                                             {"SLURM_STEP_NUM_TASKS", "5"},
                                             {"SLURM_DISTRIBUTION", "plane"},
                                             {"SLURM_DIST_PLANESIZE", "2"}};
  auto r = fromSlurm(fakeEnv(vars), 5, 7000);
  REQUIRE(r.has_value());
  INFO(r->status().toString());
  REQUIRE(*r);
  CHECK(**r == Names{"a:7000", "a:7001", "b:7002", "b:7003", "a:7004"});
}

TEST_CASE("fromSlurm falls back to the job's variables", "[placement]") {
  // No SLURM_STEP_*: the job's node list, tasks per node and task count; no NODEID or LOCALID.
  std::map<std::string, std::string> vars = {{"SLURM_PROCID", "0"},
                                             {"SLURM_JOB_NODELIST", "n[7-8]"},
                                             {"SLURM_TASKS_PER_NODE", "1(x2)"},
                                             {"SLURM_NTASKS", "2"}};
  auto r = fromSlurm(fakeEnv(vars), 2, 100);
  REQUIRE(r.has_value());
  INFO(r->status().toString());
  REQUIRE(*r);
  CHECK(**r == Names{"n7:100", "n8:101"});
}

TEST_CASE("fromSlurm is nullopt outside srun", "[placement]") {
  auto noProc = blockStep();
  noProc.erase("SLURM_PROCID");
  CHECK_FALSE(fromSlurm(fakeEnv(noProc), 4, 29500).has_value());

  auto noList = blockStep();
  noList.erase("SLURM_STEP_NODELIST");
  noList.erase("SLURM_JOB_NODELIST");
  CHECK_FALSE(fromSlurm(fakeEnv(noList), 4, 29500).has_value());

  CHECK_FALSE(fromSlurm(fakeEnv({}), 4, 29500).has_value());
}

TEST_CASE("fromSlurm refuses a layout that disagrees, naming the variables", "[placement]") {
  const auto error = [](const std::map<std::string, std::string>& vars, int nodes = 4,
                        int basePort = 29500) {
    auto r = fromSlurm(fakeEnv(vars), nodes, basePort);
    REQUIRE(r.has_value());
    REQUIRE_FALSE(*r);
    CHECK(r->status().code() == core::StatusCode::kInvalidArgument);
    return r->status().message();
  };

  SECTION("SLURM_NODEID disagrees with the layout") {
    auto vars = blockStep();
    vars["SLURM_NODEID"] = "0";  // block puts task 3 on node 1
    const std::string m = error(vars);
    CHECK_THAT(m, Catch::Contains("SLURM_NODEID=\"0\""));
    CHECK_THAT(m, Catch::Contains("SLURM_PROCID"));
    CHECK_THAT(m, Catch::Contains("gpu02"));
  }
  SECTION("SLURM_LOCALID disagrees with the layout") {
    auto vars = blockStep();
    vars["SLURM_LOCALID"] = "0";  // task 3 is node 1's second task
    CHECK_THAT(error(vars), Catch::Contains("SLURM_LOCALID=\"0\""));
  }
  SECTION("the step's task count is not the run's node count") {
    const std::string m = error(blockStep(), 8);
    CHECK_THAT(m, Catch::Contains("SLURM_STEP_NUM_TASKS=\"4\""));
    CHECK_THAT(m, Catch::Contains("8 nodes"));
  }
  SECTION("SLURM_NTASKS when the step's count is unset") {
    auto vars = blockStep();
    vars.erase("SLURM_STEP_NUM_TASKS");  // SLURM_NTASKS is 16
    CHECK_THAT(error(vars), Catch::Contains("SLURM_NTASKS=\"16\""));
  }
  SECTION("tasks per node for a different number of nodes") {
    auto vars = blockStep();
    vars["SLURM_STEP_TASKS_PER_NODE"] = "2,1,1";
    const std::string m = error(vars);
    CHECK_THAT(m, Catch::Contains("SLURM_STEP_TASKS_PER_NODE=\"2,1,1\""));
    CHECK_THAT(m, Catch::Contains("SLURM_STEP_NODELIST=\"gpu[01-02]\""));
  }
  SECTION("tasks per node adding up to another count") {
    auto vars = blockStep();
    vars["SLURM_STEP_TASKS_PER_NODE"] = "2,1";
    const std::string m = error(vars);
    CHECK_THAT(m, Catch::Contains("SLURM_STEP_TASKS_PER_NODE=\"2,1\""));
    CHECK_THAT(m, Catch::Contains("SLURM_STEP_NUM_TASKS=\"4\""));
  }
  SECTION("no tasks per node at all") {
    auto vars = blockStep();
    vars.erase("SLURM_STEP_TASKS_PER_NODE");
    vars.erase("SLURM_TASKS_PER_NODE");
    CHECK_THAT(error(vars), Catch::Contains("SLURM_TASKS_PER_NODE"));
  }
  SECTION("a malformed node list") {
    auto vars = blockStep();
    vars["SLURM_STEP_NODELIST"] = "gpu[01-02";
    const std::string m = error(vars);
    CHECK_THAT(m, Catch::Contains("SLURM_STEP_NODELIST"));
    CHECK_THAT(m, Catch::Contains("\"gpu[01-02\""));
  }
  SECTION("an arbitrary distribution") {
    auto vars = blockStep();
    vars["SLURM_DISTRIBUTION"] = "arbitrary";
    CHECK_THAT(error(vars), Catch::Contains("arbitrary"));
  }
  SECTION("SLURM_PROCID outside the step") {
    auto vars = blockStep();
    vars["SLURM_PROCID"] = "4";
    CHECK_THAT(error(vars), Catch::Contains("SLURM_PROCID=\"4\""));
  }
  SECTION("SLURM_PROCID that is not a number") {
    auto vars = blockStep();
    vars["SLURM_PROCID"] = "three";
    CHECK_THAT(error(vars), Catch::Contains("SLURM_PROCID=\"three\""));
  }
  SECTION("ports past 65535") {
    CHECK_THAT(error(blockStep(), 4, 65533), Catch::Contains("65536"));
  }
}

TEST_CASE("fromSlurm accepts the last port", "[placement]") {
  auto r = fromSlurm(fakeEnv(blockStep()), 4, 65532);
  REQUIRE(r.has_value());
  REQUIRE(*r);
  CHECK((*r)->back() == "gpu02:65535");
}

TEST_CASE("fromHostfile maps ranks by slot", "[placement]") {
  const fs::path path = tempDir() / "hostfile";
  {
    std::ofstream out(path);
    out << "# two machines\nnodeA slots=2\nnodeB slots=2 max_slots=4\n";
  }
  auto r = fromHostfile(path.string(), 3, 4000);
  INFO(r.status().toString());
  REQUIRE(r);
  CHECK(*r == Names{"nodeA:4000", "nodeA:4001", "nodeB:4002"});

  auto tooMany = fromHostfile(path.string(), 5, 4000);
  requireInvalid(tooMany, path.string() + " has 4 slots for 5 ranks");

  const std::string missing = (tempDir() / "no-such-hostfile").string();
  auto gone = fromHostfile(missing, 2, 4000);
  REQUIRE_FALSE(gone);
  CHECK(gone.status().code() == core::StatusCode::kNotFound);
  CHECK_THAT(gone.status().message(), Catch::Contains(missing));

  {
    std::ofstream out(path);
    out << "nodeA\nnodeB colour=blue\n";
  }
  requireInvalid(fromHostfile(path.string(), 1, 4000), path.string() + ":2");
  fs::remove_all(tempDir());
}

}  // namespace starling::runtime
