// LineFile: whole lines or none, even when the disk fills up in the middle of a line.
#include "core/line_file.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using starling::core::LineFile;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path tempFile(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("starling-linefile-" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

TEST_CASE("LineFile appends whole lines", "[runtime][unit]") {
  const auto path = tempFile("plain.jsonl");
  auto f = LineFile::create(path);
  REQUIRE(f);
  REQUIRE((*f)->append("{\"a\":1}").isOk());
  REQUIRE((*f)->append("{\"b\":2}").isOk());
  // On disk at once, without closing.
  CHECK(slurp(path) == "{\"a\":1}\n{\"b\":2}\n");
  CHECK((*f)->size() == 16);
}

TEST_CASE("LineFile cuts a line that did not fit back off", "[runtime][unit]") {
  // In a child: RLIMIT_FSIZE makes the write that crosses it stop part-way (EFBIG), as a full disk
  // does (ENOSPC). The child reports through its exit status how many lines it wrote.
  const auto path = tempFile("full.jsonl");
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    starling::core::ignoreFileSizeSignal();
    rlimit lim{100, 100};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(200);
    auto f = LineFile::create(path);
    if (!f) _exit(201);
    int written = 0;
    const std::string line(30, 'x');  // 31 bytes with its newline: the 4th crosses 100
    for (int i = 0; i < 10; ++i) {
      const auto st = (*f)->append(line);
      if (!st.isOk()) {
        const bool named = st.message().find("full.jsonl") != std::string::npos &&
                           st.message().find("File too large") != std::string::npos;
        _exit(named ? written : 100 + written);
      }
      ++written;
    }
    _exit(150);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  // The fourth line got 7 of its 31 bytes out before the limit; they are gone again.
  CHECK(slurp(path) == std::string(30, 'x') + "\n" + std::string(30, 'x') + "\n" +
                           std::string(30, 'x') + "\n");
}

TEST_CASE("writeFileAtomically leaves the old file when the new one does not fit",
          "[runtime][unit]") {
  const auto path = tempFile("summary.json");
  REQUIRE(starling::core::writeFileAtomically(path, "old\n").isOk());
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    starling::core::ignoreFileSizeSignal();
    rlimit lim{50, 50};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(200);
    const auto st = starling::core::writeFileAtomically(path, std::string(80, 'n'));
    _exit(st.isOk() ? 1 : 0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(slurp(path) == "old\n");
  auto tmp = path;
  tmp += ".tmp";
  CHECK_FALSE(fs::exists(tmp));
}
