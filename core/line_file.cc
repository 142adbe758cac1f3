#include "core/line_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

namespace starling::core {

core::Result<std::unique_ptr<LineFile>> LineFile::create(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return core::ioError("cannot write " + path.string() + ": " + std::strerror(errno));
  return std::unique_ptr<LineFile>(new LineFile(path, fd));
}

core::Result<std::unique_ptr<LineFile>> LineFile::openAt(const std::filesystem::path& path,
                                                         uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return core::ioError("cannot open " + path.string() + ": " + std::strerror(errno));
  std::unique_ptr<LineFile> file(new LineFile(path, fd));
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) return core::ioError("cannot read " + path.string() + ": " + std::strerror(errno));
  if (static_cast<uint64_t>(end) < size) {
    return core::corruption(path.string() + " has " + std::to_string(end) + " bytes, fewer than " +
                            "the " + std::to_string(size) + " it had");
  }
  if (size > 0) {
    char last = 0;
    if (::pread(fd, &last, 1, static_cast<off_t>(size - 1)) != 1 || last != '\n') {
      return core::corruption(path.string() + ": byte " + std::to_string(size) +
                              " does not end a line");
    }
  }
  if (static_cast<uint64_t>(end) > size && ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return core::ioError("cannot truncate " + path.string() + ": " + std::strerror(errno));
  }
  file->size_ = size;
  return file;
}

core::Status LineFile::sync() {
  if (::fdatasync(fd_) != 0) {
    return core::ioError("fdatasync " + path_.string() + ": " + std::strerror(errno));
  }
  return core::Status::ok();
}

LineFile::~LineFile() {
  if (fd_ >= 0) ::close(fd_);
}

core::Status LineFile::append(std::string_view line) {
  std::string buf;
  buf.reserve(line.size() + 1);
  buf.append(line);
  buf.push_back('\n');
  size_t done = 0;
  int err = 0;
  while (done < buf.size()) {
    const ssize_t n = ::pwrite(fd_, buf.data() + done, buf.size() - done,
                               static_cast<off_t>(size_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0) {
    size_ += buf.size();
    return core::Status::ok();
  }
  // Cut the partial line off again: the file ends with the last whole line.
  if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
    return core::ioError("write failed: " + path_.string() + ": " + std::strerror(err) +
                         ", and cutting its partial last line failed: " + std::strerror(errno));
  }
  return core::ioError("write failed: " + path_.string() + ": " + std::strerror(err) +
                       " (the file keeps its complete lines)");
}

core::Status writeFileAtomically(const std::filesystem::path& path, std::string_view text) {
  auto tmp = path;
  tmp += ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return core::ioError("cannot write " + tmp.string() + ": " + std::strerror(errno));
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return core::ioError("cannot write " + path.string() + ": " + std::strerror(err));
  }
  return core::Status::ok();
}

void ignoreFileSizeSignal() { std::signal(SIGXFSZ, SIG_IGN); }

}  // namespace starling::core
