// The codec key table against the key reference users read (scenarios/README.md).
#include "compression/codec_keys.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

// The codec key table (compression/codec_keys.h) is what the reader and the writer go through;
// the reference users read is the `compression` table of scenarios/README.md. Each codec's row
// there must name exactly the table's keys: a key added to one and not the other fails here.
namespace starling::compression {
namespace {

std::set<std::string> tableKeys(CompressorSpec::Kind kind) {
  std::set<std::string> keys;
  for (const CodecKey& key : codecKeys(kind)) {
    switch (key.type) {
      case CodecKey::Type::kSketchKeep:
        keys.insert("threshold");
        [[fallthrough]];
      case CodecKey::Type::kKeep:
        keys.insert("k");
        keys.insert("ratio");
        break;
      default:
        keys.insert(key.name);
    }
  }
  return keys;
}

TEST_CASE("every codec's keys in scenarios/README.md are the codec key table's, and the reverse",
          "[scenario][unit]") {
  std::ifstream in(std::string(SCENARIO_DIR) + "/README.md");
  REQUIRE(in.good());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t begin = text.find("### `compression`");
  REQUIRE(begin != std::string::npos);
  const std::string section = text.substr(begin, text.find("\n### ", begin + 1) - begin);
  std::set<std::string> codecs;
  for (const auto& info : compressorKinds()) codecs.insert(info.name);
  const std::regex ticked("`([^`]+)`");
  const std::regex identifier("[a-z][a-z0-9_]*");
  for (const auto& info : compressorKinds()) {
    CAPTURE(info.name);
    // The codec's row: a table line whose first cell names it.
    std::vector<std::string> cells;
    std::istringstream lines(section);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("| `", 0) != 0) continue;
      std::vector<std::string> split;
      size_t from = 1;
      for (size_t k = 1; k < line.size(); ++k) {
        if (line[k] == '|' && line[k - 1] != '\\') {
          split.push_back(line.substr(from, k - from));
          from = k + 1;
        }
      }
      if (split.size() >= 2 &&
          split[0].find("`" + std::string(info.name) + "`") != std::string::npos) {
        cells = split;
        break;
      }
    }
    REQUIRE(cells.size() >= 2);
    std::set<std::string> choices;
    for (const CodecKey& key : codecKeys(info.kind)) {
      for (const char* c : key.choices) {
        if (c != nullptr) choices.insert(c);
      }
    }
    std::set<std::string> documented;
    for (std::sregex_iterator it(cells[1].begin(), cells[1].end(), ticked), end; it != end; ++it) {
      const std::string word = (*it)[1];
      if (!std::regex_match(word, identifier)) continue;  // a number, a range
      if (choices.count(word) || codecs.count(word) || word == "true" || word == "false") continue;
      documented.insert(word);
    }
    CHECK(documented == tableKeys(info.kind));
  }
  // The table is not empty where the codecs have keys (a table that lost its rows fails above
  // only if the reference did too).
  CHECK(tableKeys(CompressorSpec::Kind::kLgc).size() == 9);
  CHECK(tableKeys(CompressorSpec::Kind::kCountSketch).size() == 6);
}

}  // namespace
}  // namespace starling::compression
