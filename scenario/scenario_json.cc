// The JSON of a scenario as the user wrote it: duplicate keys, nesting depth, and names that
// become paths. See scenario_reader.h.
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "scenario/scenario_limits.h"
#include "scenario/scenario_reader.h"

namespace starling::scenario::scenario_detail {
namespace {

// Where the parser is: one frame per open object or array, holding the child being read.
struct Frame {
  bool array = false;
  size_t index = 0;            // array: the element being read
  std::string key;             // object: the member being read
  std::set<std::string> keys;  // object: the keys seen so far
};

std::string pointer(const std::vector<Frame>& stack) {
  std::string path;
  for (const Frame& f : stack) path += "/" + (f.array ? std::to_string(f.index) : f.key);
  return path;
}

// `s` for a message: control characters escaped, long strings cut.
std::string printable(const std::string& s) {
  constexpr size_t kShown = 64;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kShown) out += "...";
  return out;
}

}  // namespace

json parseJson(std::string_view text) {
  std::vector<Frame> stack;
  // The frame's element is done: an array moves to its next element.
  const auto advance = [&stack] {
    if (!stack.empty() && stack.back().array) ++stack.back().index;
  };
  const auto open = [&stack](bool array) {
    if (static_cast<int>(stack.size()) >= kMaxJsonDepth) {
      throw ScenarioError{
          pointer(stack).empty() ? "/" : pointer(stack),
          "nested more than " + std::to_string(kMaxJsonDepth) + " levels deep; a scenario needs 5"};
    }
    stack.push_back(Frame{array, 0, {}, {}});
  };
  json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open(false);
        break;
      case json::parse_event_t::array_start:
        open(true);
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        stack.pop_back();
        advance();
        break;
      case json::parse_event_t::key: {
        Frame& f = stack.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) {
          throw ScenarioError{pointer(stack), "duplicate key \"" + printable(f.key) +
                                                  "\"; each key may appear once in an object"};
        }
        break;
      }
      case json::parse_event_t::value:
        advance();
        break;
    }
    return true;
  };
  return json::parse(text, check);
}

void checkName(const std::string& name, bool given) {
  const std::string from = given ? "" : " (taken from the file name; give \"name\")";
  const auto bad = [&](const std::string& why) {
    throw ScenarioError{"/name", "must be usable as a folder name (runs/<name>/): " + why +
                                     ", got \"" + printable(name) + "\"" + from};
  };
  if (name.empty()) bad("it is empty");
  if (name == "." || name == "..") bad("\".\" and \"..\" are not folder names");
  if (name.size() > kMaxNameBytes) {
    bad("at most " + std::to_string(kMaxNameBytes) + " bytes, it has " +
        std::to_string(name.size()));
  }
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '/' || c == '\\') bad("no '/' or '\\'");
    if (c < 0x20 || c == 0x7f) bad("no NUL or other control characters");
  }
}

}  // namespace starling::scenario::scenario_detail
