// node-launcher as a user runs it: exit codes, messages, output files, determinism.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/wait.h>

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_cli_test {

namespace fs = std::filesystem;

namespace {

struct Output {
  int status;
  std::string text;  // stdout and stderr
};

Output launch(const std::string& args) {
  const std::string cmd = std::string(NODE_LAUNCHER) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int raw = pclose(p);
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, text};
}

fs::path tempDir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("starling-cli-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void writeFile(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kGood = R"({"schema_version": 1, "name": "good", "nodes": 4, "seed": 1, "rounds": 40,
  "log_every": 10, "topology": {"kind": "ring"},
  "problem": {"kind": "least_squares", "l2": 0.1,
              "data": {"synthetic": {"samples": 40, "features": 3}}},
  "algorithm": {"kind": "exact_diffusion", "step_size": 0.3}})";

}  // namespace

TEST_CASE("every scenario shipped in scenarios/ validates", "[integration][scenario]") {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(SCENARIO_DIR)) {
    if (entry.path().extension() != ".json") continue;
    ++count;
    const auto out = launch("validate " + entry.path().string());
    INFO(entry.path() << "\n" << out.text);
    CHECK(out.status == 0);
  }
  CHECK(count >= 9);
}

TEST_CASE("malformed scenarios exit 2 naming the file and the JSON path", "[integration][scenario]") {
  const auto dir = tempDir("bad");
  writeFile(dir / "bad.svm", "1 1:0.5 2:1\n-1 3:x\n");
  struct Case {
    std::string name, json, expect;
  };
  // Each case breaks one thing of kGood; `expect` is what the message must contain.
  const std::string base = kGood;
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    const auto pos = s.find(from);
    REQUIRE(pos != std::string::npos);
    return s.replace(pos, from.size(), to);
  };
  auto replace2 = [&](const std::string& f1, const std::string& t1, const std::string& f2,
                      const std::string& t2) {
    std::string s = replace(f1, t1);
    const auto pos = s.find(f2);
    REQUIRE(pos != std::string::npos);
    return s.replace(pos, f2.size(), t2);
  };
  const std::vector<Case> cases = {
      {"syntax", "{\"schema_version\": 1,\n \"nodes\": }", "syntax.json:2:"},
      // Layer-aware compression: a linear model is one tensor; exact diffusion takes identity.
      {"layers_tensor",
       replace("\"algorithm\"", "\"compression\": {\"kind\": \"identity\", \"layers\": "
                                "[{\"tensors\": [1], \"kind\": \"identity\"}]}, \"algorithm\""),
       "/compression/layers/0/tensors/0: compression layers rule 0: tensor 1 is outside"},
      {"layers_lossy",
       replace("\"algorithm\"", "\"compression\": {\"kind\": \"identity\", \"layers\": "
                                "[{\"tensors\": [0], \"kind\": \"fp16\"}]}, \"algorithm\""),
       "/compression/layers/0/kind: exact_diffusion sends raw vectors"},
      {"not_object", "[1, 2]", ": /: expected an object"},
      {"typo_topology", replace("\"ring\"", "\"rign\""),
       "/topology/kind: unknown topology \"rign\"; expected one of ring, line"},
      {"unknown_key", replace("\"seed\"", "\"sede\""), "/sede: unknown key"},
      {"unknown_nested", replace("\"l2\"", "\"l3\""), "/problem/l3: unknown key"},
      {"wrong_type", replace("\"nodes\": 4", "\"nodes\": \"4\""), "/nodes: expected an integer"},
      {"fractional", replace("\"nodes\": 4", "\"nodes\": 4.5"), "/nodes: expected an integer"},
      {"zero_nodes", replace("\"nodes\": 4", "\"nodes\": 0"), "/nodes: must be between"},
      {"negative_step", replace("\"step_size\": 0.3", "\"step_size\": -1"),
       "/algorithm/step_size: must be in"},
      // Without rounds only a trainer can run it (node-launcher run SCENARIO -- COMMAND).
      {"missing_rounds", replace("\"rounds\": 40,", ""), "no \"rounds\": this scenario is for a trainer"},
      {"schema", replace("\"schema_version\": 1", "\"schema_version\": 9"),
       "/schema_version: unsupported schema version 9"},
      {"grid_size", replace("{\"kind\": \"ring\"}", "{\"kind\": \"grid\", \"rows\": 3, \"cols\": 5}"),
       "/topology/rows: grid 3 x 5 does not have 4 nodes"},
      {"random_p", replace("{\"kind\": \"ring\"}", "{\"kind\": \"random\", \"p\": 1.5}"),
       "/topology/p: must be in (0, 1]"},
      {"p_on_ring", replace("{\"kind\": \"ring\"}", "{\"kind\": \"ring\", \"p\": 0.5}"),
       "/topology/p: unknown key"},
      {"dropout_p", replace("{\"kind\": \"ring\"}",
                            "{\"kind\": \"ring\", \"schedule\": {\"kind\": \"edge_dropout\", \"p\": 1}}"),
       "/topology/schedule/p: must be in [0, 1)"},
      {"uniform_star", replace("{\"kind\": \"ring\"}", "{\"kind\": \"star\", \"weights\": \"uniform\"}"),
       ": /topology: "},
      {"precision", replace("\"seed\": 1", "\"seed\": 1, \"precision\": \"float16\""),
       "/precision: unknown precision \"float16\""},
      {"samples", replace("\"samples\": 40", "\"samples\": 2"), "/problem/data/synthetic/samples"},
      {"density", replace("\"features\": 3", "\"features\": 3, \"density\": 0"),
       "/problem/data/synthetic/density: must be in (0, 1]"},
      {"missing_file", replace("{\"synthetic\": {\"samples\": 40, \"features\": 3}}",
                               "{\"format\": \"libsvm\", \"path\": \"nowhere.svm\"}"),
       "/problem/data/path: "},
      {"bad_libsvm", replace("{\"synthetic\": {\"samples\": 40, \"features\": 3}}",
                             "{\"format\": \"libsvm\", \"path\": \"bad.svm\"}"),
       "bad.svm:2:"},
      {"lossy_ed", replace("\"step_size\": 0.3}}", "\"step_size\": 0.3}, \"compression\": {\"kind\": \"topk\", \"k\": 2}}"),
       "/compression/kind: exact_diffusion sends raw vectors"},
      {"choco_error_feedback",
       replace2("\"exact_diffusion\"", "\"choco\"", "\"step_size\": 0.3}}",
                "\"step_size\": 0.3}, \"compression\": {\"kind\": \"topk\", \"k\": 2, "
                "\"error_feedback\": true}}"),
       "/compression/error_feedback: choco already sends compressed differences"},
      {"sketch_mean_with_k",
       replace2("\"exact_diffusion\"", "\"choco\"", "\"step_size\": 0.3}}",
                "\"step_size\": 0.3}, \"compression\": {\"kind\": \"countsketch\", "
                "\"cols\": 4, \"estimate\": \"mean\", \"k\": 2}}"),
       "/compression: \"estimate\": \"mean\" decodes every coordinate"},
      {"topk_both", replace2("\"exact_diffusion\"", "\"choco\"", "\"step_size\": 0.3}}",
                             "\"step_size\": 0.3}, \"compression\": {\"kind\": \"topk\", "
                             "\"k\": 2, \"ratio\": 0.5}}"),
       "/compression: give exactly one of"},
      {"drop_rate", replace("\"step_size\": 0.3}}",
                            "\"step_size\": 0.3}, \"faults\": {\"script\": [{\"duplicate\": 0.1}, "
                            "{\"drop\": 2, \"link\": [0, 1]}]}}"),
       "/faults/script/1/drop: must be in [0, 1], got 2"},
      {"two_faults", replace("\"step_size\": 0.3}}",
                             "\"step_size\": 0.3}, \"faults\": {\"script\": [{\"reorder\": 0.5, "
                             "\"duplicate\": 0.5}]}}"),
       "/faults/script/0: a fault event has exactly one of \"kill\", \"corrupt\", \"delay_ms\", "
       "\"drop\", \"duplicate\" or \"reorder\""},
      {"data_both", replace("{\"synthetic\": {\"samples\": 40, \"features\": 3}}",
                            "{\"format\": \"csv\", \"path\": \"x\"}"),
       "/problem/data/format: unknown data format \"csv\""},
  };
  for (const auto& c : cases) {
    const auto path = dir / (c.name + ".json");
    writeFile(path, c.json);
    for (const char* verb : {"validate", "simulate"}) {
      const std::string out_arg = std::string(verb) == "simulate" ? " --out " + (dir / "out").string() : "";
      const auto out = launch(std::string(verb) + " " + path.string() + out_arg);
      INFO(c.name << " (" << verb << "): " << out.text);
      CHECK(out.status == 2);
      CHECK(out.text.find(path.string()) != std::string::npos);
      CHECK(out.text.find(c.expect) != std::string::npos);
      // One clear message, not a cascade.
      CHECK(std::count(out.text.begin(), out.text.end(), '\n') == 1);
    }
  }
  // Nothing ran, so nothing was written.
  CHECK_FALSE(fs::exists(dir / "out" / "metrics.jsonl"));
  CHECK(launch("validate " + (dir / "absent.json").string()).status == 2);
}

TEST_CASE("simulate writes metrics.jsonl and summary.json, deterministically", "[integration][scenario]") {
  const auto dir = tempDir("det");
  writeFile(dir / "good.json", kGood);
  const auto a = launch("simulate " + (dir / "good.json").string() + " --out " + (dir / "a").string());
  const auto b = launch("simulate " + (dir / "good.json").string() + " --out " + (dir / "b").string());
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  auto lines = [](const fs::path& p) {
    std::vector<nlohmann::json> out;
    std::istringstream in(readFile(p));
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  };
  auto la = lines(dir / "a" / "metrics.jsonl");
  auto lb = lines(dir / "b" / "metrics.jsonl");
  REQUIRE(la.size() == 5);  // rounds 0, 10, 20, 30, 40
  REQUIRE(la.size() == lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    for (const char* key : {"round", "objective", "rel_error", "consensus_distance", "bytes_sent"}) {
      REQUIRE(la[i].contains(key));
    }
    CHECK(la[i]["round"] == 10 * i);
    la[i].erase("wall_s");
    lb[i].erase("wall_s");
    CHECK(la[i] == lb[i]);
  }
  // bytes_sent counts real frames: 4 nodes x 2 neighbours x (32 + 3*8 + 4) bytes per round.
  CHECK(la.back()["bytes_sent"] == 40 * 4 * 2 * (32 + 3 * 8 + 4));
  auto summary = nlohmann::json::parse(readFile(dir / "a" / "summary.json"));
  CHECK(summary["scenario"] == "good");
  CHECK(summary["nodes"] == 4);
  CHECK(summary["algorithm"] == "exact_diffusion");
  CHECK(summary["x_mean"].size() == 3);
  CHECK(summary["rel_error"] == la.back()["rel_error"]);
  // A different seed changes the data, hence the metrics.
  const auto c = launch("simulate " + (dir / "good.json").string() + " --seed 2 --out " +
                        (dir / "c").string());
  REQUIRE(c.status == 0);
  auto lc = lines(dir / "c" / "metrics.jsonl");
  CHECK(lc.back()["objective"] != lines(dir / "b" / "metrics.jsonl").back()["objective"]);
}

TEST_CASE("topology prints the round's graph as JSON", "[integration][topology]") {
  const auto dir = tempDir("topo");
  std::string s = kGood;
  s.replace(s.find("\"nodes\": 4"), 10, "\"nodes\": 8");
  s.replace(s.find("\"samples\": 40"), 13, "\"samples\": 80");
  writeFile(dir / "ring8.json", s);
  const auto out = launch("topology " + (dir / "ring8.json").string() + " --format json --round 3");
  INFO(out.text);
  REQUIRE(out.status == 0);
  const auto j = nlohmann::json::parse(out.text);
  CHECK(j["round"] == 3);
  CHECK(j["nodes"] == 8);
  CHECK(j["edges"].size() == 8);
  CHECK(j["edges"][0] == nlohmann::json::array({0, 1}));
  CHECK(j["degrees"] == nlohmann::json(std::vector<int>(8, 2)));
  CHECK(j["diameter"] == 4);
  CHECK(j["weights"][0][1].get<double>() == Approx(1.0 / 3));
  CHECK(j["spectral_gap"].get<double>() ==
        Approx(1 - (1.0 / 3 + 2.0 / 3 * std::cos(2 * M_PI / 8))).epsilon(1e-12));
  const auto dot = launch("topology " + (dir / "ring8.json").string() + " --format dot");
  CHECK(dot.status == 0);
  CHECK(dot.text.find("0 -- 1") != std::string::npos);
  CHECK(launch("topology " + (dir / "ring8.json").string() + " --format xml").status == 2);
}

namespace {

// kGood on `nodes` nodes with another topology.
std::string withTopology(int nodes, const std::string& topology) {
  std::string s = kGood;
  s.replace(s.find("\"nodes\": 4"), 10, "\"nodes\": " + std::to_string(nodes));
  s.replace(s.find("\"samples\": 40"), 13, "\"samples\": " + std::to_string(10 * nodes));
  s.replace(s.find("{\"kind\": \"ring\"}"), 16, topology);
  return s;
}

// The pinned positions of a DOT graph's nodes: `  i [... pos="x,y!"]`.
std::map<int, std::pair<double, double>> positions(const std::string& dot) {
  std::map<int, std::pair<double, double>> out;
  std::istringstream in(dot);
  std::string line;
  while (std::getline(in, line)) {
    const auto pos = line.find("pos=\"");
    if (pos == std::string::npos) continue;
    double x, y;
    if (std::sscanf(line.c_str() + pos, "pos=\"%lf,%lf!\"", &x, &y) == 2) {
      out[std::stoi(line)] = {x, y};
    }
  }
  return out;
}

}  // namespace

TEST_CASE("topology reports a disconnected round: diameter null, spectral gap exactly 0",
          "[integration][topology]") {
  const auto dir = tempDir("topo-disconnected");
  // A random matching pairs nodes off: every round of 8 nodes is disconnected. So is every
  // round of one-peer exponential.
  writeFile(dir / "matching.json",
            withTopology(8, R"({"kind": "ring", "schedule": {"kind": "random_matching"}})"));
  writeFile(dir / "onepeer.json",
            withTopology(8, R"({"kind": "ring", "schedule": {"kind": "one_peer_exponential"}})"));
  for (const std::string name : {"matching.json", "onepeer.json"}) {
    for (int round = 0; round < 6; ++round) {
      const auto out = launch("topology " + (dir / name).string() + " --format json --round " +
                              std::to_string(round));
      INFO(name << " round " << round << "\n" << out.text);
      REQUIRE(out.status == 0);
      const auto j = nlohmann::json::parse(out.text);
      CHECK(j["connected"] == false);
      CHECK(j["diameter"].is_null());
      REQUIRE(j["spectral_gap"].is_number());
      CHECK(j["spectral_gap"].get<double>() == 0.0);
      CHECK_FALSE(std::signbit(j["spectral_gap"].get<double>()));
      // The text keeps saying inf, and prints the gap as 0.
      const auto text = launch("topology " + (dir / name).string() + " --round " +
                               std::to_string(round));
      INFO(text.text);
      CHECK(text.text.find("diameter inf") != std::string::npos);
      CHECK(text.text.find("spectral gap 0\n") != std::string::npos);
    }
  }
  // A connected round still has a number for a diameter and a positive gap.
  writeFile(dir / "line.json", withTopology(8, R"({"kind": "line"})"));
  const auto line = nlohmann::json::parse(
      launch("topology " + (dir / "line.json").string() + " --format json").text);
  CHECK(line["diameter"] == 7);
  CHECK(line["connected"] == true);
  CHECK(line["spectral_gap"].get<double>() > 0.0);
}

TEST_CASE("topology --format dot pins rings on a circle and grids on a lattice",
          "[integration][topology]") {
  const auto dir = tempDir("topo-dot");
  writeFile(dir / "ring.json", withTopology(8, R"({"kind": "ring"})"));
  writeFile(dir / "torus.json", withTopology(12, R"({"kind": "grid", "rows": 3, "cols": 4, "torus": true})"));
  const auto ring = launch("topology " + (dir / "ring.json").string() + " --format dot");
  INFO(ring.text);
  REQUIRE(ring.status == 0);
  // neato honours pinned positions; `dot -T...` switches to it because of layout=neato.
  CHECK(ring.text.find("layout=neato;") != std::string::npos);
  CHECK(ring.text.find("0 -- 1") != std::string::npos);
  CHECK(ring.text.find("0 -- 7") != std::string::npos);
  const auto p = positions(ring.text);
  REQUIRE(p.size() == 8);
  // On a circle, in node order clockwise from the top: 0 at the top, 2 on the right.
  const double radius = std::hypot(p.at(0).first, p.at(0).second);
  CHECK(radius > 1.0);
  for (const auto& [i, xy] : p) CHECK(std::hypot(xy.first, xy.second) == Approx(radius).epsilon(1e-3));
  CHECK(p.at(0).first == Approx(0.0).margin(1e-3));
  CHECK(p.at(0).second == Approx(radius));
  CHECK(p.at(2).first == Approx(radius));
  CHECK(p.at(4).second == Approx(-radius));

  const auto torus = launch("topology " + (dir / "torus.json").string() + " --format dot");
  INFO(torus.text);
  REQUIRE(torus.status == 0);
  const auto q = positions(torus.text);
  REQUIRE(q.size() == 12);
  // Row-major on a lattice, row 0 at the top: node r * 4 + c in column c, row r.
  for (int i = 0; i < 12; ++i) {
    CHECK(q.at(i).first == Approx(q.at(i % 4).first));
    CHECK(q.at(i).second == Approx(q.at(4 * (i / 4)).second));
  }
  CHECK(q.at(1).first > q.at(0).first);
  CHECK(q.at(4).second < q.at(0).second);
  // The wrap-around edges are routed round the nodes rather than drawn under them.
  CHECK(torus.text.find("splines=true;") != std::string::npos);
  CHECK(torus.text.find("0 -- 3") != std::string::npos);
  CHECK(torus.text.find("0 -- 8") != std::string::npos);

  // With Graphviz installed: the output is valid DOT, and `dot` itself draws the ring as the
  // circle it was given (plain output: "node <name> <x> <y> ..." in inches), not as a column.
  if (std::system("command -v dot > /dev/null 2>&1") == 0) {
    writeFile(dir / "ring.dot", ring.text);
    const std::string cmd = "dot -Tplain " + (dir / "ring.dot").string() + " > " +
                            (dir / "ring.plain").string() + " 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::istringstream plain(readFile(dir / "ring.plain"));
    std::map<int, std::pair<double, double>> drawn;
    std::string word;
    while (plain >> word) {
      if (word != "node") continue;
      int id;
      double x, y;
      plain >> id >> x >> y;
      drawn[id] = {x, y};
    }
    REQUIRE(drawn.size() == 8);
    // Translated so that nothing is negative, otherwise as given.
    for (int i = 0; i < 8; ++i) {
      CHECK(drawn[i].first - drawn[4].first == Approx(p.at(i).first - p.at(4).first).margin(0.05));
      CHECK(drawn[i].second - drawn[4].second == Approx(p.at(i).second - p.at(4).second).margin(0.05));
    }
    writeFile(dir / "torus.dot", torus.text);
    CHECK(std::system(("dot -Tsvg " + (dir / "torus.dot").string() + " > /dev/null").c_str()) == 0);
  }
}

TEST_CASE("topology of a large graph leaves out what grows as n^2 and answers quickly",
          "[integration][topology]") {
  const auto dir = tempDir("topology-large");
  // 5,000 nodes: W alone would be 200 MB of doubles, the eigenvalues O(n^3).
  writeFile(dir / "big.json", R"({"schema_version": 1, "name": "big", "nodes": 5000, "seed": 1,
    "rounds": 10, "topology": {"kind": "ring"},
    "problem": {"kind": "least_squares", "data": {"synthetic": {"samples": 5000, "features": 2}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.3}})");
  const auto json = launch("topology " + (dir / "big.json").string() + " --format json");
  REQUIRE(json.status == 0);
  const auto j = nlohmann::json::parse(json.text);
  CHECK(j["nodes"] == 5000);
  CHECK(j["edges"].size() == 5000);
  CHECK(j["connected"] == true);
  CHECK_FALSE(j.contains("weights"));
  CHECK_FALSE(j.contains("spectral_gap"));
  CHECK(j["not_computed"] == nlohmann::json::array({"diameter", "weights", "spectral_gap"}));
  const auto text = launch("topology " + (dir / "big.json").string());
  REQUIRE(text.status == 0);
  CHECK(text.text.find("round 0: 5000 nodes, 5000 edges, connected; diameter and spectral gap not "
                       "computed for more than 4096 nodes") == 0);
  // At the limit everything is still there.
  writeFile(dir / "limit.json", R"({"schema_version": 1, "name": "limit", "nodes": 64, "seed": 1,
    "rounds": 10, "topology": {"kind": "ring"},
    "problem": {"kind": "least_squares", "data": {"synthetic": {"samples": 64, "features": 2}}},
    "algorithm": {"kind": "exact_diffusion", "step_size": 0.3}})");
  const auto small = nlohmann::json::parse(
      launch("topology " + (dir / "limit.json").string() + " --format json").text);
  CHECK(small["diameter"] == 32);
  CHECK(small["weights"].size() == 64);
  CHECK(small["spectral_gap"].get<double>() > 0);
}

}  // namespace starling_cli_test
