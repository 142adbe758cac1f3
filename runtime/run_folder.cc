#include "runtime/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/read_file.h"

namespace starling::runtime {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLockName = ".starling.lock";

bool nameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

// '*' matches one or more name characters; everything else matches itself.
bool matches(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern.front() == '*') {
    for (size_t n = 1; n <= text.size() && nameChar(text[n - 1]); ++n) {
      if (matches(pattern.substr(1), text.substr(n))) return true;
    }
    return false;
  }
  return !text.empty() && text.front() == pattern.front() &&
         matches(pattern.substr(1), text.substr(1));
}

// The patterns run.json lists that this build knows (all of them when it lists none: a run.json
// older than the list).
std::vector<std::string> listedPatterns(const fs::path& dir) {
  const auto& known = runFolderFiles();
  auto text = core::readRegularFile((dir / "run.json").string(), 1 << 20, "run.json");
  if (!text) return known;
  const auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array()) return known;
  std::vector<std::string> out;
  for (const auto& p : j["files"]) {
    if (p.is_string() &&
        std::find(known.begin(), known.end(), p.get<std::string>()) != known.end()) {
      out.push_back(p.get<std::string>());
    }
  }
  return out;
}

bool matchesAny(const std::vector<std::string>& patterns, const std::string& relative) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return matches(p, relative); });
}

}  // namespace

const std::vector<std::string>& runFolderFiles() {
  static const std::vector<std::string> files = {
      "run.json",
      "run.json.tmp",
      "scenario.resolved.json",
      "scenario.resolved.json.tmp",
      "metrics.jsonl",
      "summary.json",
      "summary.json.tmp",
      "membership.jsonl",
      "peers/rank-*.jsonl",
      "peers/rank-*.out",
      "checkpoints/rank-*/round-*.ckpt",
      "checkpoints/rank-*/round-*.ckpt.tmp",
  };
  return files;
}

bool isRunFolderFile(const std::string& relative) {
  return matchesAny(runFolderFiles(), relative);
}

RunFolderLock& RunFolderLock::operator=(RunFolderLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

core::Result<RunFolderLock> lockRunFolder(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return core::ioError("cannot create output folder " + dir.string() + ": " + ec.message());
  const fs::path path = dir / kLockName;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return core::ioError("cannot open " + path.string() + ": " + std::strerror(errno));
  RunFolderLock lock(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      return core::ioError("cannot lock " + path.string() + ": " + std::strerror(err));
    }
    char holder[200] = "";
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    for (char& c : who) {
      if (c < ' ' || c > '~') c = '?';
    }
    return core::invalidArgument(
        "--out " + dir.string() + ": the run folder is in use by " +
        (who.empty() ? std::string("another node-launcher") : who) + " (" + path.string() +
        "); wait for that run to end, or give this one another folder");
  }
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const std::string who = "node-launcher pid " + std::to_string(getpid()) + " on host " + host +
                          "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) < 0) {
    return core::ioError("cannot write " + path.string() + ": " + std::strerror(errno));
  }
  return lock;
}

core::Status clearRunFolder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return core::Status::ok();
  if (!fs::is_directory(dir, ec)) {
    return core::invalidArgument("--out " + dir.string() + ": not a folder");
  }
  // Every file below dir, relative to it, and the folders.
  std::vector<std::string> files;
  std::vector<fs::path> folders;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(dir).generic_string();
    if (rel == kLockName) continue;
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      folders.push_back(it->path());
    } else {
      files.push_back(rel);
    }
  }
  if (ec) return core::ioError("cannot list " + dir.string() + ": " + ec.message());
  const bool starlingFolder = fs::is_regular_file(dir / "run.json", ec);
  if (!starlingFolder) {
    for (const auto& f : files) {
      if (!isRunFolderFile(f)) {
        return core::invalidArgument(
            "--out " + dir.string() + ": the folder is not empty and is not a Starling run folder "
            "(it has " + f + " and no run.json); Starling deletes nothing it did not write: give "
            "the run an empty or new folder");
      }
    }
  }
  const auto patterns = starlingFolder ? listedPatterns(dir) : runFolderFiles();
  for (const auto& f : files) {
    if (!matchesAny(patterns, f)) continue;
    // Only regular files: a symlink named like one is removed as a link, never followed.
    fs::remove(dir / f, ec);
    if (ec) return core::ioError("cannot remove " + (dir / f).string() + ": " + ec.message());
  }
  // Folders that held only Starling's files, deepest first (a user's file keeps its folder).
  std::sort(folders.begin(), folders.end(),
            [](const fs::path& a, const fs::path& b) { return a.string() > b.string(); });
  for (const auto& folder : folders) {
    const std::string rel = folder.lexically_relative(dir).generic_string();
    if (rel != "peers" && rel != "checkpoints" && !matches("checkpoints/rank-*", rel)) continue;
    if (fs::is_empty(folder, ec)) fs::remove(folder, ec);
  }
  return core::Status::ok();
}

}  // namespace starling::runtime
