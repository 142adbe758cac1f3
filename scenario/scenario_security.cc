// /security: the cluster's key (scenarios/README.md, docs/security.md).
#include "scenario/scenario_reader.h"
#include "transport/auth.h"

namespace starling::scenario::scenario_detail {

void parseSecurity(Obj& o, Scenario& s, const std::filesystem::path& baseDir) {
  SecurityConfig& sec = s.security;
  if (o.has("key")) {
    throw ScenarioError{o.at("key"), "a scenario never holds the key itself: put it in a file "
                                     "readable only by you and name it in \"key_file\" (or in "
                                     "the environment variable STARLING_KEY_FILE)"};
  }
  if (o.has("key_file")) {
    const std::filesystem::path path(o.string("key_file"));
    if (path.empty()) throw ScenarioError{o.at("key_file"), "expected a file name"};
    sec.keyFile = (path.is_absolute() ? path : baseDir / path).lexically_normal().string();
    // Refused now, with the JSON path, rather than when the peers start.
    if (auto key = transport::auth::loadKeyFile(sec.keyFile); !key) {
      throw ScenarioError{o.at("key_file"), key.status().message()};
    }
  } else {
    o.get("key_file");
  }
  sec.encrypt = o.boolean("encrypt", false);
  o.finish();
}

}  // namespace starling::scenario::scenario_detail
