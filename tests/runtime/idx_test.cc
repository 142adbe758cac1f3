#include "scenario/idx.h"

#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "scenario/partition.h"
#include "scenario/scenario.h"
#include "scenario/scenario_limits.h"
#include "tests/runtime/temp_dir.h"

namespace starling::runtime {
namespace {

namespace fs = std::filesystem;

std::string idxBytes(std::vector<uint32_t> dims, const std::vector<uint8_t>& data,
                     uint8_t type = 0x08) {
  std::string s = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  s.append(data.begin(), data.end());
  return s;
}

// gzip of `raw`, written by zlib here (the reader's inflate is the code under test).
std::string gzip(const std::string& raw) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, raw.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

using testing::TempDir;

constexpr uint64_t kLimit = uint64_t{1} << 30;

TEST_CASE("IDX: gzip and plain files read back exactly", "[runtime][idx]") {
  TempDir dir;
  std::vector<uint8_t> pixels(5 * 3 * 2);
  for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<uint8_t>(k * 37 % 256);
  const std::vector<uint8_t> labels{2, 0, 1, 2, 1};
  const auto raw = idxBytes({5, 3, 2}, pixels);
  for (const bool compressed : {true, false}) {
    const auto img = dir.write("img", compressed ? gzip(raw) : raw);
    const auto lab = dir.write("lab", compressed ? gzip(idxBytes({5}, labels)) : idxBytes({5}, labels));
    auto a = scenario::readIdx(img, kLimit);
    REQUIRE(a);
    CHECK(a->dims == std::vector<uint32_t>{5, 3, 2});
    CHECK(a->data == pixels);
    auto d = scenario::readIdxImages(img, lab, kLimit);
    REQUIRE(d);
    CHECK(d->features == 6);
    CHECK(d->classes == 3);
    CHECK(d->pixels == pixels);
    CHECK(d->labels == labels);
    CHECK(d->sample(1)[0] == pixels[6]);
    auto firstTwo = scenario::readIdxImages(img, lab, kLimit, 10, 2);
    REQUIRE(firstTwo);
    CHECK(firstTwo->samples() == 2);
    CHECK(firstTwo->classes == 10);
    CHECK(firstTwo->pixels == std::vector<uint8_t>(pixels.begin(), pixels.begin() + 12));
  }
}

void expectError(const core::Result<scenario::IdxArray>& r, const std::string& path,
                 const std::string& what) {
  REQUIRE_FALSE(r);
  INFO(r.status().toString());
  CHECK(r.status().message().rfind(path, 0) == 0);  // starts with the file
  CHECK(r.status().message().find(what) != std::string::npos);
}

TEST_CASE("IDX: malformed files give errors naming the file and the fault", "[runtime][idx]") {
  TempDir dir;
  const std::vector<uint8_t> six{1, 2, 3, 4, 5, 6};
  SECTION("bad magic") {
    const auto p = dir.write("a", gzip("\x01\x02\x08\x01" + std::string(10, 'x')));
    expectError(scenario::readIdx(p, kLimit), p, "bad magic 0x01020801");
  }
  SECTION("a gzip file that is not IDX inside, and zero dimensions") {
    const auto p = dir.write("a", gzip(std::string("\0\0\x08\0", 4)));
    expectError(scenario::readIdx(p, kLimit), p, "bad magic");
  }
  SECTION("unsupported element type") {
    const auto p = dir.write("a", idxBytes({6}, six, 0x0D));
    expectError(scenario::readIdx(p, kLimit), p, "element type 0x0d (float) is not supported");
  }
  SECTION("truncated data") {
    auto raw = idxBytes({2, 3}, six);
    raw.pop_back();
    const auto p = dir.write("a", gzip(raw));
    expectError(scenario::readIdx(p, kLimit), p,
                "truncated: the header says 2 x 3 = 6 bytes of data, the file has 5");
  }
  SECTION("truncated header") {
    const auto p = dir.write("a", idxBytes({2, 3}, {}).substr(0, 9));
    expectError(scenario::readIdx(p, kLimit), p, "truncated: the header needs 12 bytes");
  }
  SECTION("trailing bytes") {
    const auto p = dir.write("a", idxBytes({5}, six));
    expectError(scenario::readIdx(p, kLimit), p, "trailing bytes");
  }
  SECTION("truncated gzip stream") {
    auto z = gzip(idxBytes({6}, six));
    z.resize(z.size() / 2);
    const auto p = dir.write("a", z);
    expectError(scenario::readIdx(p, kLimit), p, "truncated gzip stream");
  }
  SECTION("corrupt gzip stream") {
    auto z = gzip(idxBytes({6}, six));
    z[10] = static_cast<char>(0xff);
    z[11] = static_cast<char>(0xff);
    const auto p = dir.write("a", z);
    expectError(scenario::readIdx(p, kLimit), p, "gzip");
  }
  SECTION("dimensions whose product overflows 64 bits are refused before allocating") {
    const auto p = dir.write("a", idxBytes({0xffffffffu, 0xffffffffu, 0xffffffffu}, six));
    expectError(scenario::readIdx(p, kLimit), p,
                "dimensions 4294967295 x 4294967295 x 4294967295 hold more than the limit");
  }
  SECTION("a stream inflating beyond the limit (a gzip bomb) stops at the limit") {
    const auto p = dir.write("a", gzip(idxBytes({1 << 20}, std::vector<uint8_t>(1 << 20, 0))));
    expectError(scenario::readIdx(p, 4096), p, "inflates to more than the limit of 4");
  }
  SECTION("images and labels that do not match") {
    const auto img = dir.write("i", idxBytes({3, 2}, six));
    const auto lab = dir.write("l", idxBytes({2}, {0, 1}));
    auto d = scenario::readIdxImages(img, lab, kLimit);
    REQUIRE_FALSE(d);
    CHECK(d.status().message() == lab + ": 2 labels for 3 images in " + img);
    const auto lab3 = dir.write("l3", idxBytes({3}, {0, 9, 1}));
    auto e = scenario::readIdxImages(img, lab3, kLimit, 5);
    REQUIRE_FALSE(e);
    CHECK(e.status().message().find("label 9 is not below the 5 classes") != std::string::npos);
  }
  SECTION("a missing file") {
    auto r = scenario::readIdx((dir.path / "none").string(), kLimit);
    REQUIRE_FALSE(r);
    CHECK(r.status().message().find("none") != std::string::npos);
  }
}

std::vector<uint8_t> balancedLabels(size_t m, int classes) {
  std::vector<uint8_t> y(m);
  for (size_t j = 0; j < m; ++j) y[j] = static_cast<uint8_t>((j * 7 + j / 3) % classes);
  return y;
}

void checkCovers(const std::vector<std::vector<size_t>>& parts, size_t m) {
  std::vector<int> seen(m, 0);
  for (const auto& p : parts) {
    CHECK_FALSE(p.empty());
    for (size_t j : p) ++seen[j];
  }
  for (size_t j = 0; j < m; ++j) REQUIRE(seen[j] == 1);
}

// Mean over nodes of the total variation distance between the node's label histogram and the
// global one: 0 for identical mixes, near 1 when nodes hold disjoint classes.
double labelSkew(const std::vector<std::vector<size_t>>& parts, const std::vector<uint8_t>& y,
                 int classes) {
  std::vector<double> global(classes, 0.0);
  for (uint8_t v : y) global[v] += 1.0 / static_cast<double>(y.size());
  double skew = 0;
  for (const auto& p : parts) {
    std::vector<double> h(classes, 0.0);
    for (size_t j : p) h[y[j]] += 1.0 / static_cast<double>(p.size());
    double tv = 0;
    for (int c = 0; c < classes; ++c) tv += 0.5 * std::abs(h[c] - global[c]);
    skew += tv / static_cast<double>(parts.size());
  }
  return skew;
}

TEST_CASE("Label partitions: dirichlet skew grows as alpha shrinks, shards give about two labels",
          "[runtime][partition]") {
  const size_t m = 20000;
  const auto y = balancedLabels(m, 10);
  auto small = scenario::partitionDirichlet(y, 8, 0.1, 1);
  auto large = scenario::partitionDirichlet(y, 8, 1000.0, 1);
  REQUIRE(small);
  REQUIRE(large);
  checkCovers(*small, m);
  checkCovers(*large, m);
  const double skewSmall = labelSkew(*small, y, 10), skewLarge = labelSkew(*large, y, 10);
  INFO("skew alpha 0.1: " << skewSmall << ", alpha 1000: " << skewLarge);
  CHECK(skewSmall > 0.5);
  CHECK(skewLarge < 0.05);
  // Deterministic in the seed, different for another.
  CHECK(*scenario::partitionDirichlet(y, 8, 0.1, 1) == *small);
  CHECK(*scenario::partitionDirichlet(y, 8, 0.1, 2) != *small);

  auto shards = scenario::partitionShards(y, 8, 2, 3);
  REQUIRE(shards);
  checkCovers(*shards, m);
  for (const auto& p : *shards) {
    CHECK(p.size() == m / 16 * 2);
    std::set<uint8_t> labels;
    for (size_t j : p) labels.insert(y[j]);
    CHECK(labels.size() >= 1);
    CHECK(labels.size() <= 4);  // two shards of one label each, plus a boundary each at most
  }
  CHECK(labelSkew(*shards, y, 10) > 0.6);

  // Tiny data: every node still gets a sample, however the Dirichlet draw falls.
  const auto few = balancedLabels(10, 10);
  auto tiny = scenario::partitionDirichlet(few, 10, 0.01, 5);
  REQUIRE(tiny);
  checkCovers(*tiny, 10);
  CHECK_FALSE(scenario::partitionDirichlet(few, 11, 0.1, 5));
  CHECK_FALSE(scenario::partitionDirichlet(few, 2, 0.0, 5));
  CHECK_FALSE(scenario::partitionShards(few, 6, 2, 5));
}

TEST_CASE("Gamma draws have the right mean and variance", "[runtime][partition]") {
  for (double shape : {0.1, 0.5, 1.0, 3.0}) {
    core::Rng rng(17);
    double sum = 0, sq = 0;
    const int n = 200000;
    for (int k = 0; k < n; ++k) {
      const double g = scenario::gammaDraw(shape, rng);
      REQUIRE(g >= 0.0);
      sum += g;
      sq += g * g;
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    INFO("shape " << shape);
    CHECK(mean == Approx(shape).epsilon(0.02));
    CHECK(var == Approx(shape).epsilon(0.05));
  }
}

}  // namespace
}  // namespace starling::runtime

namespace starling::runtime {
namespace {

TEST_CASE("Memory estimate: the mlp problem's vectors hold its parameters", "[runtime][mlp]") {
  const std::string json = R"({"schema_version": 1, "name": "huge", "nodes": 1000, "seed": 1,
    "rounds": 10, "precision": "float32", "topology": {"kind": "ring"},
    "problem": {"kind": "mlp", "layers": [784, 4096, 4096, 10],
                "estimator": {"kind": "sgd", "batch": 8}, "data": {"dataset": "fashion-mnist"}},
    "algorithm": {"kind": "dsgd", "step_size": 0.1}})";
  auto s = scenario::parseScenario(json, "huge.json", ".");
  // 20,037,642 parameters on 1,000 nodes: refused (at parse time, or by checkMemory).
  const core::Status st = s ? scenario::checkMemory(*s, scenario::scenarioShape(*s)) : s.status();
  REQUIRE_FALSE(st.isOk());
  CHECK(st.message().find("/problem/layers") != std::string::npos);
  CHECK(st.message().find("20037642 parameters") != std::string::npos);
}

}  // namespace
}  // namespace starling::runtime
