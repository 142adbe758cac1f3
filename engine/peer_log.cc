#include "engine/peer_log.h"

#include <nlohmann/json.hpp>

namespace starling::engine {

std::filesystem::path peerLogPath(const std::filesystem::path& outDir, int rank) {
  return outDir / "peers" / ("rank-" + std::to_string(rank) + ".jsonl");
}

std::string peerFailureLine(const PeerFailure& f) {
  nlohmann::ordered_json j;
  j["round"] = f.round;
  j["code"] = f.code;
  if (f.lostRank) j["lost_rank"] = *f.lostRank;
  j["message"] = f.message;
  return nlohmann::ordered_json{{"failed", j}}.dump(-1, ' ', false,
                                                    nlohmann::json::error_handler_t::replace);
}

}  // namespace starling::engine
