#include "core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace starling::core {
namespace {

const char* fileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes the descriptor on every path out of readRegularFile.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// `size` is empty when only "more than maxBytes" is known (the file grew while being read).
std::string tooLarge(const std::string& path, std::string_view what, const std::string& size,
                     uint64_t maxBytes) {
  return path + ": the " + std::string(what) + " is " + (size.empty() ? "" : size + ", ") +
         "larger than the limit of " + formatBytes(static_cast<double>(maxBytes));
}

}  // namespace

std::string formatBytes(double bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  char buf[64];
  if (!(bytes >= 1024.0)) {
    std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
    return buf;
  }
  int unit = 0;
  double value = bytes / 1024.0;
  while (value >= 1024.0 && unit + 1 < 6) {
    value /= 1024.0;
    ++unit;
  }
  std::snprintf(buf, sizeof buf, value == std::floor(value) ? "%.0f %s" : "%.1f %s", value,
                kUnits[unit]);
  return buf;
}

core::Result<int> openRegularFile(const std::string& path, std::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. O_NOCTTY: a
  // terminal named as input must not become our controlling terminal.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return core::notFound(path + ": no such " + std::string(what));
    return core::ioError(path + ": cannot open the " + std::string(what) + ": " +
                         std::strerror(err));
  }
  Fd f{fd};
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    return core::ioError(path + ": cannot stat the " + std::string(what) + ": " +
                         std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return core::invalidArgument(path + ": " + fileKind(st.st_mode) + ", not a regular file; the " +
                                 std::string(what) + " must be a regular file");
  }
  f.fd = -1;
  return fd;
}

core::Result<std::string> readRegularFile(const std::string& path, uint64_t maxBytes,
                                          std::string_view what) {
  auto opened = openRegularFile(path, what);
  if (!opened) return opened.status();
  Fd f{*opened};
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    return core::ioError(path + ": cannot stat the " + std::string(what) + ": " +
                         std::strerror(errno));
  }
  if (static_cast<uint64_t>(st.st_size) > maxBytes) {
    return core::invalidArgument(
        tooLarge(path, what, formatBytes(static_cast<double>(st.st_size)), maxBytes));
  }
  // Read until end of file, not st_size bytes: the size can change, and /proc files report 0.
  std::string text;
  text.resize(static_cast<size_t>(st.st_size) + 1);
  size_t used = 0;
  for (;;) {
    if (used == text.size()) {
      if (used > maxBytes) {
        return core::invalidArgument(tooLarge(path, what, "", maxBytes));
      }
      text.resize(std::min<uint64_t>(std::max<uint64_t>(2 * used, 4096), maxBytes + 1));
    }
    const ssize_t n = ::read(f.fd, text.data() + used, text.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return core::ioError(path + ": cannot read the " + std::string(what) + ": " +
                           std::strerror(errno));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  if (used > maxBytes) return core::invalidArgument(tooLarge(path, what, "", maxBytes));
  text.resize(used);
  return text;
}

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

core::Result<uint64_t> memoryLimitBytes() {
  const char* env = std::getenv(kMemoryLimitEnv);
  if (!env || !*env) return static_cast<uint64_t>(kDefaultMemoryLimitGiB * kBytesPerGiB);
  char* end = nullptr;
  errno = 0;
  const double gib = std::strtod(env, &end);
  if (errno != 0 || end == env || *end != '\0' || !(gib >= 0.001 && gib <= 1073741824.0)) {
    return core::invalidArgument(std::string(kMemoryLimitEnv) + "=" + env +
                                 ": expected the memory limit in GiB, a number in [0.001, 2^30]");
  }
  return static_cast<uint64_t>(gib * kBytesPerGiB);
}

}  // namespace starling::core
