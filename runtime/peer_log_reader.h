// Internal to runtime/ (merge.cc, trainer_merge.cc): reading peer logs while peers still append
// to them. Not included by any header users see (it brings in nlohmann/json).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/peer.h"

namespace starling::runtime {

// The complete lines appended to `path` since `offset` (updated). An incomplete last line waits
// in `partial` for the next call. No file yet: no lines. kCorruption when the file shrank.
inline core::Result<std::vector<std::string>> readNewLines(const std::filesystem::path& path,
                                                           uint64_t& offset, std::string& partial) {
  std::vector<std::string> lines;
  std::ifstream in(path, std::ios::binary);
  if (!in) return lines;
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size < offset) return core::corruption(path.string() + " shrank while being read");
  if (size == offset) return lines;
  std::string chunk(size - offset, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  offset = size;
  partial += chunk;
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(partial.substr(start, nl - start));
  }
  partial.erase(0, start);
  return lines;
}

// A peer log's failure line ({"failed": {"round", "code", "lost_rank", "message"}}) of `rank`,
// or nullopt when `j` is not one.
template <typename Json>
std::optional<PeerFailure> parseFailureLine(const Json& j, int rank) {
  if (!j.is_object() || !j.contains("failed") || !j["failed"].is_object()) return std::nullopt;
  const auto& f = j["failed"];
  PeerFailure failure;
  failure.rank = rank;
  failure.round = f.value("round", uint64_t{0});
  failure.code = f.value("code", "");
  failure.message = f.value("message", "");
  if (f.contains("lost_rank") && f["lost_rank"].is_number_integer()) {
    failure.lostRank = f["lost_rank"].template get<int>();
  }
  return failure;
}

}  // namespace starling::runtime
