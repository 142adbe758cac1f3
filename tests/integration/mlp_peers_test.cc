// The mlp problem over real peer processes: `run` equals `simulate`. The data are small IDX files
// written here; the model (6,010 parameters) is above the size at which peers log consensus
// sketches instead of models, so the merge's sketch estimate is checked against the simulator's
// exact consensus distance too.
#include <catch2/catch.hpp>
#include <cmath>

#include "process_helpers.h"
#include "core/rng.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_mlp_peers_test {

using namespace starling::testing;

namespace {

const std::string kLauncher = NODE_LAUNCHER;

std::string idxBytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::string s = {'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  s.append(data.begin(), data.end());
  return s;
}

// m images of 8 x 8 pixels in 10 classes: class c lights up row c % 8 (plus noise).
void writeImages(const fs::path& images, const fs::path& labels, size_t m, uint64_t seed) {
  starling::core::Rng rng(seed);
  std::vector<uint8_t> px, y;
  for (size_t j = 0; j < m; ++j) {
    const auto c = static_cast<uint8_t>(rng.below(10));
    y.push_back(c);
    for (int k = 0; k < 64; ++k) {
      const bool lit = k / 8 == c % 8 || (c >= 8 && k % 8 == c - 8);
      px.push_back(static_cast<uint8_t>(lit ? 150 + rng.below(100) : rng.below(60)));
    }
  }
  writeFile(images, idxBytes({static_cast<uint32_t>(m), 8, 8}, px));
  writeFile(labels, idxBytes({static_cast<uint32_t>(m)}, y));
}

}  // namespace

TEST_CASE("mlp: node-launcher run equals simulate; merge estimates consensus from sketches",
          "[integration][mlp]") {
  const auto dir = tempDir("mlp-peers");
  writeImages(dir / "train-images", dir / "train-labels", 2000, 1);
  writeImages(dir / "test-images", dir / "test-labels", 500, 2);
  for (const std::string codec : {"", R"(, "compression": {"kind": "topk", "ratio": 0.1})"}) {
    DYNAMIC_SECTION((codec.empty() ? "dsgd" : "choco top-k")) {
      const std::string algorithm = codec.empty()
                                        ? R"({"kind": "dsgd", "step_size": 0.2})"
                                        : R"({"kind": "choco", "step_size": 0.2, "gamma": 0.1})";
      const auto file = dir / (codec.empty() ? "dsgd.json" : "choco.json");
      writeFile(file, R"({"schema_version": 1, "name": "mlp", "nodes": 4, "seed": 9,
        "rounds": 40, "log_every": 10, "precision": "float32", "topology": {"kind": "ring"},
        "problem": {"kind": "mlp", "layers": [64, 80, 10], "l2": 0.0001,
                    "partition": {"kind": "dirichlet", "alpha": 0.5},
                    "estimator": {"kind": "sgd", "batch": 16},
                    "data": {"format": "idx", "images": "train-images", "labels": "train-labels",
                             "test_images": "test-images", "test_labels": "test-labels"}},
        "algorithm": )" + algorithm + codec + "}");
      const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                                   dir / "run.log");
      INFO(run.output);
      REQUIRE(run.exit == 0);
      const auto sim = runLauncher(
          {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
      INFO(sim.output);
      REQUIRE(sim.exit == 0);
      // The final line gives the loss and test accuracy of a classification, not "rel_error nan".
      CHECK(sim.output.find("train_loss ") != std::string::npos);
      CHECK(sim.output.find("test_accuracy ") != std::string::npos);
      CHECK(sim.output.find("rel_error") == std::string::npos);
      CHECK(run.output.find("rel_error") == std::string::npos);
      const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
      const auto b = metricsWithoutWall(dir / "sim" / "metrics.jsonl");
      REQUIRE(a.size() == 5);
      REQUIRE(b.size() == 5);
      // Round 0 (every model equal) and the last round (peers log their models) are exact.
      CHECK(a.front() == b.front());
      CHECK(a.back() == b.back());
      CHECK(b.back()["test_accuracy"].get<double>() > 0.5);  // it learns (10 classes)
      for (size_t k = 1; k + 1 < a.size(); ++k) {
        INFO("logged round " << k);
        CHECK(a[k]["bytes_sent"] == b[k]["bytes_sent"]);
        CHECK(a[k]["test_accuracy"].is_null());  // no models in the logs: null, not a guess
        CHECK(b[k]["test_accuracy"].is_number());
        // Each peer evaluates its own model and logs that: the same numbers as simulate's.
        CHECK(a[k]["test_accuracy_peers_mean"].is_number());
        CHECK(a[k]["test_accuracy_peers_mean"] == b[k]["test_accuracy_peers_mean"]);
        CHECK(a[k]["test_accuracy_peers_min"] == b[k]["test_accuracy_peers_min"]);
        // Sketched consensus: unbiased with relative standard deviation <= sqrt(2/256) = 8.8%.
        const double exact = b[k]["consensus_distance"].get<double>();
        const double sketched = a[k]["consensus_distance"].get<double>();
        CHECK(exact > 0);
        CHECK(std::abs(sketched - exact) <= 0.4 * exact);
      }
      const auto rs = nlohmann::json::parse(readFile(dir / "run" / "summary.json"));
      const auto ss = nlohmann::json::parse(readFile(dir / "sim" / "summary.json"));
      CHECK(rs["x_mean"] == ss["x_mean"]);
      CHECK(rs["x_mean"].size() == 64u * 80 + 80 + 80 * 10 + 10);
      CHECK(rs["test_accuracy"] == ss["test_accuracy"]);
      CHECK(rs["rel_error"].is_null());
    }
  }
}

TEST_CASE("mlp codistillation: node-launcher run equals simulate, models sent every tau rounds "
          "only", "[integration][mlp][codistillation]") {
  const auto dir = tempDir("mlp-codistil");
  writeImages(dir / "train-images", dir / "train-labels", 2000, 1);
  writeImages(dir / "test-images", dir / "test-labels", 500, 2);
  const auto file = dir / "codistil.json";
  // Exchanges at rounds 4, 8, ..., 36 (burn-in 8: the one at 0 would be replaced unused).
  writeFile(file, R"({"schema_version": 1, "name": "codistil", "nodes": 4, "seed": 9,
    "rounds": 40, "log_every": 10, "precision": "float32", "topology": {"kind": "ring"},
    "problem": {"kind": "mlp", "layers": [64, 80, 10], "l2": 0.0001,
                "partition": {"kind": "dirichlet", "alpha": 0.5},
                "estimator": {"kind": "sgd", "batch": 16},
                "data": {"format": "idx", "images": "train-images", "labels": "train-labels",
                         "test_images": "test-images", "test_labels": "test-labels"}},
    "algorithm": {"kind": "dsgd", "step_size": 0.2,
                  "codistillation": {"alpha": 0.5, "period": 4, "burn_in": 8}}})");
  const auto run = runLauncher({kLauncher, "run", file.string(), "--out", (dir / "run").string()},
                               dir / "run.log");
  INFO(run.output);
  REQUIRE(run.exit == 0);
  const auto sim = runLauncher(
      {kLauncher, "simulate", file.string(), "--out", (dir / "sim").string()}, dir / "sim.log");
  INFO(sim.output);
  REQUIRE(sim.exit == 0);
  const auto a = metricsWithoutWall(dir / "run" / "metrics.jsonl");
  const auto b = metricsWithoutWall(dir / "sim" / "metrics.jsonl");
  REQUIRE(a.size() == 5);
  REQUIRE(b.size() == 5);
  CHECK(a.front() == b.front());
  CHECK(a.back() == b.back());
  for (size_t k = 1; k < a.size(); ++k) {
    INFO("logged round " << k);
    CHECK(a[k]["bytes_sent"] == b[k]["bytes_sent"]);
    CHECK(a[k]["test_accuracy_peers_mean"] == b[k]["test_accuracy_peers_mean"]);
    CHECK(a[k]["test_accuracy_peers_min"] == b[k]["test_accuracy_peers_min"]);
  }
  // 9 exchanges of 4 peers x 2 neighbours, one model frame each.
  const uint64_t bytes = b.back()["bytes_sent"].get<uint64_t>();
  CHECK(bytes % (9 * 8) == 0);
  CHECK(bytes / (9 * 8) >= 4u * (64 * 80 + 80 + 80 * 10 + 10));
  CHECK(bytes / (9 * 8) < 4u * (64 * 80 + 80 + 80 * 10 + 10) + 256);
  CHECK(b.back()["test_accuracy_peers_mean"].get<double>() > 0.5);
  const auto rs = nlohmann::json::parse(readFile(dir / "run" / "summary.json"));
  const auto ss = nlohmann::json::parse(readFile(dir / "sim" / "summary.json"));
  CHECK(rs["x_mean"] == ss["x_mean"]);
}

}  // namespace starling_mlp_peers_test
