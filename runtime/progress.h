// A one-line progress report on stderr for runs that take longer than a second: rewritten in
// place on a terminal, otherwise one line every few seconds, and only for a round not printed
// yet (logs and CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace starling::runtime {

class ProgressLine {
 public:
  ProgressLine(std::string label, uint64_t total, bool enabled);
  ~ProgressLine();
  // Reports that `done` of `total` steps are complete; prints at most a few times a second.
  void update(uint64_t done, const std::string& detail);
  // Prints `line` on a line of its own (always, even when progress is off), and the progress
  // line again at its next update.
  void message(const std::string& line);
  // Prints `line` on stdout on a line of its own (a trainer's output), and the progress line
  // again at its next update.
  void passThrough(const std::string& line);
  // Ends the line (if anything was printed).
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool tty_;
  bool printed_ = false;     // a line is open (a terminal's, to end with a newline)
  bool printedAny_ = false;  // a line was ever printed
  uint64_t lastDone_ = 0;    // the round of the last line
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_{};
};

}  // namespace starling::runtime
