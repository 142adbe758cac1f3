// Internal to runtime/ (launcher.cc): the processes of a run, and what is left of them when the
// launcher dies.
//
// Every child of the launcher leads a process group of its own, so a signal reaches what it
// started too (a trainer's `bash -c "python3 w.py; ..."`, its data loaders). The Guardian is a
// small process forked from the launcher before any child, in a group of its own and named
// `starling-guard`, that learns each child's group through a pipe. When the pipe closes without
// the launcher saying it is done (the launcher was killed, even by SIGKILL), it sends SIGTERM to
// every group, waits the terminate grace and sends SIGKILL to what is left. After fork() it only
// reads, signals and sleeps: no allocation (its table is sized before), and nothing of the
// launcher's is kept open in it (not the run folder's lock, not the launcher's output).
// Thread-safety: none; the launcher's one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace starling::runtime {

// pipe2(O_CLOEXEC) into `fds`, then fork(): the child's pid in the parent, 0 in the child.
// kIoError (both ends closed) when either fails.
core::Result<pid_t> forkWithPipe(int fds[2]);

class Guardian {
 public:
  Guardian() = default;
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;
  ~Guardian() { disarm(); }

  // Forks the guardian, with room for `capacity` groups over the run; `grace` between its
  // SIGTERM and its SIGKILL.
  core::Status start(size_t capacity, std::chrono::milliseconds grace);
  // A child's group to watch (pgid > 0), or one that is gone (-pgid).
  void send(int32_t message);
  // The launcher ends normally, its children reaped: the guardian exits without signalling.
  void disarm();

 private:
  [[noreturn]] void watch(int fd, std::chrono::milliseconds grace);

  std::vector<pid_t> groups_;
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace starling::runtime
