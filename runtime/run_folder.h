// The run folder (`--out DIR`): who holds it, and which of its files are Starling's.
//
// One launcher at a time: `run`, `run --resume`, `simulate` and `merge` take an exclusive
// flock(2) on DIR/.starling.lock for as long as they live, and write their pid and host into it,
// so a second one on the same folder stops at once and names the holder (the lock goes with the
// process, however it ends: no stale lock to clean up).
//
// Nothing Starling did not write is ever deleted. A fresh run refuses a non-empty folder unless
// it is a Starling run folder (it has run.json, or holds nothing but Starling's files), and then
// removes only Starling's own files: those matching the patterns below, which run.json also lists
// under "files" (patterns a run.json names that this build does not know are ignored, so a
// doctored run.json cannot make it delete anything else). A user's notes, plots or scripts in the
// folder, and every folder that still holds one, stay. Thread-safety: free functions; the lock
// object is not shared between threads.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"

namespace starling::runtime {

// The files of a run folder that Starling writes, as patterns relative to it ('*' matches one or
// more of [A-Za-z0-9_.-], never '/'). The order is the order of run.json's "files".
const std::vector<std::string>& runFolderFiles();

// Whether `relative` (a path inside the run folder, '/'-separated) matches one of the patterns.
bool isRunFolderFile(const std::string& relative);

class RunFolderLock {
 public:
  RunFolderLock() = default;
  RunFolderLock(RunFolderLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RunFolderLock& operator=(RunFolderLock&& o) noexcept;
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;
  ~RunFolderLock();
  bool held() const { return fd_ >= 0; }

 private:
  friend core::Result<RunFolderLock> lockRunFolder(const std::filesystem::path& dir);
  explicit RunFolderLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Creates `dir` if needed and locks it. kInvalidArgument (an exit 2) when another process holds
// it, naming that process ("pid 123 on host h", from the lock file); kIoError when the folder or
// the lock file cannot be made. The descriptor is close-on-exec: the peers and trainers a launcher
// starts do not hold the lock.
core::Result<RunFolderLock> lockRunFolder(const std::filesystem::path& dir);

// Makes `dir` ready for a fresh run: refuses (kInvalidArgument, naming the folder and a file that
// is not Starling's) a non-empty folder that is not a Starling run folder, and otherwise removes
// Starling's own files from an earlier run, and the folders (peers/, checkpoints/rank-R/) that
// only held them. A missing folder is fine.
core::Status clearRunFolder(const std::filesystem::path& dir);

}  // namespace starling::runtime
