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
  // Into a file or a pipe, a line only for a round not printed yet (a run waiting on a slow or
  // lost peer would otherwise repeat the same line every few seconds).
  if (!tty_ && printedAny_ && done == lastDone_) return;
  lastDone_ = done;
  printedAny_ = true;
  last_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  // total 0: a trainer's run, whose step count only the trainer knows.
  char of[64] = "";
  if (total_ > 0) {
    std::snprintf(of, sizeof of, "/%llu (%.0f%%)", static_cast<unsigned long long>(total_),
                  100.0 * static_cast<double>(done) / static_cast<double>(total_));
  }
  std::fprintf(stderr, "%s[%s] round %llu%s  %.1f rounds/s  %s%s", tty_ ? "\r\033[K" : "",
               label_.c_str(), static_cast<unsigned long long>(done), of,
               static_cast<double>(done) / secs, detail.c_str(), tty_ ? "" : "\n");
  std::fflush(stderr);
  printed_ = true;
}

void ProgressLine::message(const std::string& line) {
  finish();
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void ProgressLine::passThrough(const std::string& line) {
  finish();
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void ProgressLine::finish() {
  if (printed_ && tty_) std::fputc('\n', stderr);
  printed_ = false;
}

}  // namespace starling::runtime
