#include "runtime/guardian.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace starling::runtime {

core::Result<pid_t> forkWithPipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) return core::ioError(std::string("pipe: ") + strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return core::ioError(std::string("fork: ") + strerror(errno));
  }
  return pid;
}

core::Status Guardian::start(size_t capacity, std::chrono::milliseconds grace) {
  groups_.assign(capacity + 1, 0);
  int fds[2];
  auto forked = forkWithPipe(fds);
  if (!forked) return forked.status();
  const pid_t pid = *forked;
  if (pid == 0) {
    close(fds[1]);
    watch(fds[0], grace);  // never returns
  }
  close(fds[0]);
  pid_ = pid;
  fd_ = fds[1];
  return core::Status::ok();
}

void Guardian::send(int32_t message) {
  if (fd_ < 0) return;
  const ssize_t n = write(fd_, &message, sizeof message);
  (void)n;  // a guardian that is gone cannot be told; the groups were signalled already
}

void Guardian::disarm() {
  if (fd_ < 0) return;
  send(0);
  close(fd_);
  fd_ = -1;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void Guardian::watch(int fd, std::chrono::milliseconds grace) {
  setpgid(0, 0);  // not in the launcher's group: a Ctrl-C meant for the launcher misses it
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  prctl(PR_SET_NAME, "starling-guard");
  // The pipe first out of the way of 0-2 (a launcher started without stdin has fd 0 free, and
  // the pipe may be it).
  if (const int high = fcntl(fd, F_DUPFD, 100); high >= 0) {
    close(fd);
    fd = high;
  }
  if (const int null = open("/dev/null", O_RDWR); null >= 0) {
    // The launcher's output may be a pipe someone reads to its end: do not hold it open.
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    if (null > STDERR_FILENO) close(null);
  }
  // Nothing else of the launcher's: above all not the run folder's lock, which must go with
  // the launcher (a --resume right after a killed launcher finds the folder free).
  if (fd != 3) {
    dup2(fd, 3);
    close(fd);
    fd = 3;
  }
  if (close_range(4, ~0U, 0) != 0) {
    for (int k = 4; k < 65536; ++k) close(k);
  }
  int32_t m = 0;
  for (;;) {
    const ssize_t n = read(fd, &m, sizeof m);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof m)) break;  // the launcher is gone
    if (m == 0) _exit(0);                            // done: nothing to clean up
    for (auto& g : groups_) {
      if (m > 0 && g == 0) {
        g = m;
        break;
      }
      if (m < 0 && g == -m) {
        g = 0;
        break;
      }
    }
  }
  bool any = false;
  for (pid_t g : groups_) {
    if (g > 0) any = (kill(-g, SIGTERM) == 0) || any;
  }
  const auto step = std::chrono::milliseconds(50);
  for (auto waited = std::chrono::milliseconds(0); any && waited < grace; waited += step) {
    const timespec ts{0, 50'000'000};
    nanosleep(&ts, nullptr);
    any = false;
    for (pid_t g : groups_) any = any || (g > 0 && kill(-g, 0) == 0);
  }
  for (pid_t g : groups_) {
    if (g > 0) kill(-g, SIGKILL);
  }
  _exit(0);
}

}  // namespace starling::runtime
