// Internal to scenario/: the JSON reader behind parseScenario (scenario.cc) and the parsers of
// the scenario's sections that live in their own files (scenario_problem.cc). Errors are thrown
// as ScenarioError {JSON path, message}; parseScenario turns them into a Status.
#pragma once

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "scenario/scenario.h"

namespace starling::scenario::scenario_detail {

using nlohmann::json;

// Thrown inside this file only; parseScenario converts it to a Status.
struct ScenarioError {
  std::string path;
  std::string message;
};

inline std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

inline std::string typeName(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "something else";
  }
}

inline std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A JSON object being read: every key it hands out is marked used, and finish() rejects the rest.
class Obj {
 public:
  Obj(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j.is_object()) throw ScenarioError{pathOr(), "expected an object, got " + typeName(j)};
  }

  const std::string& path() const { return path_; }
  std::string at(const std::string& key) const { return path_ + "/" + key; }
  bool has(const std::string& key) const { return j_.contains(key); }

  const json* get(const std::string& key) {
    allowed_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  const json& require(const std::string& key) {
    const json* v = get(key);
    if (!v) throw ScenarioError{path_.empty() ? "/" : path_, "missing required key \"" + key + "\""};
    return *v;
  }

  template <typename Int>
  Int integer(const std::string& key, Int lo, Int hi, std::optional<Int> def = std::nullopt) {
    const json* v = def ? get(key) : &require(key);
    if (!v) return *def;
    if (!v->is_number_integer()) {
      throw ScenarioError{at(key), "expected an integer, got " + typeName(*v)};
    }
    bool inRange;
    Int value{};
    if (v->is_number_unsigned()) {
      const auto u = v->get<uint64_t>();
      inRange = u <= static_cast<uint64_t>(hi) && (lo <= 0 || u >= static_cast<uint64_t>(lo));
      value = static_cast<Int>(u);
    } else {
      const auto s = v->get<int64_t>();
      inRange = s >= static_cast<int64_t>(lo) &&
                (hi > static_cast<Int>(std::numeric_limits<int64_t>::max()) ||
                 s <= static_cast<int64_t>(hi));
      value = static_cast<Int>(s);
    }
    if (!inRange) {
      throw ScenarioError{at(key), "must be between " + std::to_string(lo) + " and " +
                                       std::to_string(hi) + ", got " + v->dump()};
    }
    return value;
  }

  // A finite number in [lo, hi] (or (lo, hi] when openLo).
  double number(const std::string& key, double lo, double hi, std::optional<double> def,
                bool openLo = false, bool openHi = false) {
    const json* v = def ? get(key) : &require(key);
    if (!v) return *def;
    if (!v->is_number()) throw ScenarioError{at(key), "expected a number, got " + typeName(*v)};
    const double x = v->get<double>();
    const bool ok = std::isfinite(x) && (openLo ? x > lo : x >= lo) && (openHi ? x < hi : x <= hi);
    if (!ok) {
      throw ScenarioError{at(key), std::string("must be in ") + (openLo ? "(" : "[") + fmt(lo) +
                                       ", " + fmt(hi) + (openHi ? ")" : "]") + ", got " +
                                       v->dump()};
    }
    return x;
  }

  std::string string(const std::string& key, std::optional<std::string> def = std::nullopt) {
    const json* v = def ? get(key) : &require(key);
    if (!v) return *def;
    if (!v->is_string()) throw ScenarioError{at(key), "expected a string, got " + typeName(*v)};
    std::string value = v->get<std::string>();
    // JSON allows \u0000 in strings; C paths and names end at it, so a path would silently
    // name another file.
    if (value.find('\0') != std::string::npos) {
      throw ScenarioError{at(key), "must not contain a NUL character (\\u0000)"};
    }
    return value;
  }

  bool boolean(const std::string& key, bool def) {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) throw ScenarioError{at(key), "expected true or false, got " + typeName(*v)};
    return v->get<bool>();
  }

  // One of `names`; returns its index.
  size_t choice(const std::string& key, const std::string& what,
                const std::vector<std::string>& names, std::optional<size_t> def = std::nullopt) {
    const json* v = def ? get(key) : &require(key);
    if (!v) return *def;
    if (!v->is_string()) {
      throw ScenarioError{at(key), "expected a string (one of " + joinNames(names) + "), got " +
                                       typeName(*v)};
    }
    const auto s = v->get<std::string>();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == s) return i;
    }
    throw ScenarioError{at(key), "unknown " + what + " \"" + s + "\"; expected one of " +
                                     joinNames(names)};
  }

  Obj object(const std::string& key) { return Obj(require(key), at(key)); }

  // Rejects every key that was not asked for.
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!allowed_.count(it.key())) {
        std::vector<std::string> names(allowed_.begin(), allowed_.end());
        throw ScenarioError{at(it.key()),
                            "unknown key; expected one of " + joinNames(names)};
      }
    }
  }

 private:
  std::string pathOr() const { return path_.empty() ? "/" : path_; }

  const json& j_;
  std::string path_;
  std::set<std::string> allowed_;
};

const std::vector<std::string> kGraphKinds = {"ring",        "line",     "grid", "random",
                                              "exponential", "complete", "star"};
const std::vector<std::string> kWeightRules = {"metropolis", "max_degree", "uniform"};
const std::vector<std::string> kScheduleKinds = {"static", "cycle", "one_peer_exponential",
                                                 "random_matching", "edge_dropout"};

// The JSON of a scenario (scenario_json.cc): nlohmann's parser, refusing what it lets through.
// A key given twice in one object (nlohmann keeps the last one silently) throws ScenarioError at
// the second one's JSON path; nesting deeper than kMaxJsonDepth throws ScenarioError. Syntax
// errors throw json::parse_error.
json parseJson(std::string_view text);

// The scenario's `name` becomes a folder, runs/<name>/, so it must be one path component:
// non-empty, at most kMaxNameBytes, not "." or "..", no '/' or '\\', no NUL or other control
// character. Throws ScenarioError at /name; `given` false says the name came from the file name.
void checkName(const std::string& name, bool given);

// /problem (scenario_problem.cc), and the /algorithm step size it shares with it.
void parseProblem(Obj& o, Scenario& s, const std::filesystem::path& baseDir);
optim::StepSizeSchedule parseStepSize(Obj& o);
// /algorithm/local_optimizer into s.algorithm (after its kind is known).
void parseLocalOptimizerOf(Obj& alg, Scenario& s);
// /algorithm/inner_steps, inner, outer (kind diloco; docs/algorithms.md §29).
void parseDilocoOf(Obj& alg, Scenario& s);
// /algorithm/adascale and /algorithm/leader (scenario_methods.cc): after the kind, step size,
// local optimizer, combine and the problem are known; the compression check once it is parsed.
void parseTrainingMethodsOf(Obj& alg, Scenario& s);
void checkTrainingMethodsCompression(const Scenario& s);
// /algorithm/sketch (scenario_sketch.cc), called from the two above: the key once the others are
// read, and what it cannot go with once compression and asynchronous are.
// /compression (scenario_compression.cc), once the algorithm is parsed; checkLgc once faults and
// checkpoints are (LGC's receivers keep state that neither carries yet).
void parseCompression(Obj& o, Scenario& s);
void checkLgc(const Scenario& s);
void parseSketchOf(Obj& alg, Scenario& s);
void checkSketch(const Scenario& s);
// /algorithm/codistillation into s.algorithm (after its kind and the problem are known).
void parseCodistillationOf(Obj& alg, Scenario& s);
// /faults (scenario_faults.cc); after nodes and rounds are known.
void parseFaults(Obj& o, Scenario& s);
void parseSecurity(Obj& o, Scenario& s, const std::filesystem::path& baseDir);
// /algorithm/asynchronous (scenario_async.cc) into s.asynchronous, and once the whole scenario is
// read, the refusal of everything asynchronous gossip does not support.
void parseAsynchronous(Obj& alg, Scenario& s);
void checkAsynchronous(const Scenario& s);

}  // namespace starling::scenario::scenario_detail
