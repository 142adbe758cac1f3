// LineFile: an append-only file of text lines that never ends in half a line.
//
// Each line goes to the operating system in one write() and is flushed before append() returns,
// so a run that dies keeps every line it logged. When the disk is full (ENOSPC), the file reaches
// its size limit (EFBIG) or any other write fails part-way, the file is cut back to where the line
// began and the error returned: readers see whole lines or none. Thread-safety: none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>

#include "core/status.h"

namespace starling::core {

class LineFile {
 public:
  // Creates (or truncates) `path`. Its folder must exist.
  static core::Result<std::unique_ptr<LineFile>> create(const std::filesystem::path& path);
  // Opens an existing `path` to append after its first `size` bytes, cutting off anything after
  // them (a resumed peer's log, runtime/checkpoint.h). kCorruption when the file is shorter or
  // byte size - 1 does not end a line.
  static core::Result<std::unique_ptr<LineFile>> openAt(const std::filesystem::path& path,
                                                       uint64_t size);
  ~LineFile();
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;

  // Appends `line` and a newline (`line` must not contain one). kIoError names the file and the
  // reason; the file is then as it was before the call.
  core::Status append(std::string_view line);

  // Flushes the file's data to the disk (fdatasync).
  core::Status sync();

  const std::filesystem::path& path() const { return path_; }
  uint64_t size() const { return size_; }

 private:
  LineFile(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes `text` to `path` through a temporary file and a rename: readers see the old file or the
// whole new one, never half of it (a full disk leaves the old one and returns kIoError).
core::Status writeFileAtomically(const std::filesystem::path& path, std::string_view text);

// Ignores SIGXFSZ, so that writing past RLIMIT_FSIZE fails with EFBIG (reported like a full disk)
// instead of killing the process. Called once by the tools' main().
void ignoreFileSizeSignal();

}  // namespace starling::core
