// Internal to runtime/ (merge.cc, trainer_merge.cc): reading peer logs while peers still append
// to them. Not included by any header users see (it brings in nlohmann/json).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/read_file.h"
#include "core/status.h"
#include "runtime/peer.h"

namespace starling::runtime {

// The longest line a peer log may hold: a model of kFullModelLogMaxDim values, with room to
// spare. A longer one is not a peer's.
inline constexpr size_t kMaxPeerLogLine = size_t{256} << 20;

// The complete lines appended to `path` since `offset` (updated). An incomplete last line waits
// in `partial` for the next call. No file yet: no lines. The file is untrusted: one that is not a
// regular file (a FIFO would block the reader, /dev/zero never end) is kInvalidArgument, a line
// longer than kMaxPeerLogLine and a file that shrank are kCorruption, each naming the file.
inline core::Result<std::vector<std::string>> readNewLines(const std::filesystem::path& path,
                                                           uint64_t& offset, std::string& partial) {
  std::vector<std::string> lines;
  auto opened = core::openRegularFile(path.string(), "peer log");
  if (!opened) {
    if (opened.status().code() == core::StatusCode::kNotFound) return lines;
    return opened.status();
  }
  const int fd = *opened;
  struct stat st {};
  const bool statted = ::fstat(fd, &st) == 0;
  const auto size = statted ? static_cast<uint64_t>(st.st_size) : 0;
  if (statted && size < offset) {
    ::close(fd);
    return core::corruption(path.string() + " shrank while being read");
  }
  std::string chunk(statted ? size - offset : 0, '\0');
  size_t got = 0;
  while (got < chunk.size()) {
    const ssize_t n = ::pread(fd, chunk.data() + got, chunk.size() - got,
                              static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (!statted) return core::ioError("cannot stat " + path.string());
  chunk.resize(got);
  offset += got;
  partial += chunk;
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(partial.substr(start, nl - start));
  }
  partial.erase(0, start);
  if (partial.size() > kMaxPeerLogLine) {
    return core::corruption(path.string() + ": a line longer than " +
                            core::formatBytes(static_cast<double>(kMaxPeerLogLine)) +
                            ": not a peer log");
  }
  return lines;
}

// The first line of `path` (at most 64 KiB), or "" when it has no complete first line yet.
// Errors as readNewLines; kNotFound when there is no file.
inline core::Result<std::string> readFirstLine(const std::filesystem::path& path) {
  auto opened = core::openRegularFile(path.string(), "peer log");
  if (!opened) return opened.status();
  std::string text(65536, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(*opened, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
    if (text.find('\n') < got) break;
  }
  ::close(*opened);
  const size_t nl = text.find('\n');
  return nl < got ? text.substr(0, nl) : std::string();
}

// What a reader of an untrusted log says of a line that parsed but has a field of the wrong
// type ({"round": "7"}): kCorruption naming the file and the line.
inline core::Status wrongTypeInLine(const std::filesystem::path& path, uint64_t lineNo,
                                    const std::exception& ex) {
  return core::corruption(path.string() + ":" + std::to_string(lineNo) +
                          ": a field of the wrong type (" + ex.what() + ")");
}

// A peer log's failure line ({"failed": {"round", "code", "lost_rank", "message"}}) of `rank`,
// or nullopt when `j` is not one.
template <typename Json>
std::optional<engine::PeerFailure> parseFailureLine(const Json& j, int rank) {
  if (!j.is_object() || !j.contains("failed") || !j["failed"].is_object()) return std::nullopt;
  const auto& f = j["failed"];
  engine::PeerFailure failure;
  failure.rank = rank;
  // Typed: a field of the wrong type throws (readLogLine names the file and line).
  failure.round = f.value("round", uint64_t{0});
  failure.code = f.value("code", std::string());
  failure.message = f.value("message", std::string());
  if (f.contains("lost_rank") && f["lost_rank"].is_number_integer()) {
    failure.lostRank = f["lost_rank"].template get<int>();
  }
  return failure;
}

}  // namespace starling::runtime
