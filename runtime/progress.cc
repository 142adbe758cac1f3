#include "runtime/progress.h"

#include <unistd.h>

#include <cstdio>

namespace starling::runtime {

ProgressLine::ProgressLine(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::update(uint64_t done, const std::string& detail) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (now - start_ < std::chrono::seconds(1)) return;
  if (printed_ && now - last_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::seconds(5))) {
    return;
  }
  last_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  std::fprintf(stderr, "%s[%s] round %llu/%llu (%.0f%%)  %.1f rounds/s  %s%s", tty_ ? "\r\033[K" : "",
               label_.c_str(), static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total_), 100.0 * static_cast<double>(done) / total_,
               static_cast<double>(done) / secs, detail.c_str(), tty_ ? "" : "\n");
  std::fflush(stderr);
  printed_ = true;
}

void ProgressLine::finish() {
  if (printed_ && tty_) std::fputc('\n', stderr);
  printed_ = false;
}

}  // namespace starling::runtime
