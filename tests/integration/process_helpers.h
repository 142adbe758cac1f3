// Helpers for tests that start real node-launcher processes: spawn with captured output, wait
// with a deadline (never unbounded), free loopback ports, temporary folders, file reading.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "runtime/launcher.h"
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace starling::testing {

namespace fs = std::filesystem;

inline fs::path tempDir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("starling-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline void writeFile(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

inline std::string readFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A child process whose stdout and stderr go to a file.
struct Process {
  pid_t pid = -1;
  fs::path logPath;
  std::optional<int> waitStatus;

  // Waits until the process exits or `timeout` passes. Returns whether it exited.
  bool waitFor(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!waitStatus) {
      int status = 0;
      const pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        waitStatus = status;
        break;
      }
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  int exitCode() const {
    return waitStatus && WIFEXITED(*waitStatus) ? WEXITSTATUS(*waitStatus) : -1;
  }
  std::string output() const { return readFile(logPath); }
  void kill(int signo) const { ::kill(pid, signo); }
  ~Process() {
    if (pid > 0 && !waitStatus) {
      ::kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

inline std::unique_ptr<Process> spawn(const std::vector<std::string>& args, const fs::path& log,
                                      const std::map<std::string, std::string>& env = {}) {
  auto p = std::make_unique<Process>();
  p->logPath = log;
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  p->pid = pid;
  return p;
}

// Runs a command to the end (at most `timeout`), its output in `log`.
struct Outcome {
  int exit;
  std::string output;
};

inline Outcome runLauncher(const std::vector<std::string>& args, const fs::path& log,
                           std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  auto p = spawn(args, log);
  const bool exited = p->waitFor(timeout);
  INFO(p->output());
  REQUIRE(exited);
  return {p->exitCode(), p->output()};
}

// n free loopback ports, outside the kernel's ephemeral range as the launcher picks them
// (runtime::freeLoopbackPorts): a port from bind(0) can be taken by a UCX worker of a test
// running beside this one before the peer binds it. Tests that call it link the runtime.
inline std::vector<uint16_t> freePorts(int n) {
  auto ports = starling::runtime::freeLoopbackPorts(n);
  INFO(ports.status().toString());
  REQUIRE(ports.isOk());
  return *ports;
}

inline std::string peerList(const std::vector<uint16_t>& ports) {
  std::string s;
  for (auto p : ports) s += (s.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(p);
  return s;
}

// metrics.jsonl as JSON objects, without the wall-clock field.
inline std::vector<nlohmann::json> metricsWithoutWall(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::istringstream in(readFile(file));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    j.erase("wall_s");
    out.push_back(std::move(j));
  }
  return out;
}

// Children of `parent` that are still alive (from /proc). A launcher's guardian (the process
// that cleans up after a killed launcher, named "starling-guard") is not one of its peers and is
// left out unless `guardian`.
inline std::vector<pid_t> childrenOf(pid_t parent, bool guardian = false) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may contain spaces, so parse after the last ')'.
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid != parent || state == 'Z') continue;
    // The guardian is a fork of the launcher: named starling-guard, or (for the moment before it
    // renames itself) with the launcher's own command line.
    const bool guard = line.find("(starling-guard)") != std::string::npos ||
                       readFile(entry.path() / "cmdline") ==
                           readFile("/proc/" + std::to_string(parent) + "/cmdline");
    if (guardian || !guard) {
      out.push_back(static_cast<pid_t>(std::stoi(name)));
    }
  }
  return out;
}

inline bool processAlive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && line[close + 2] != 'Z';
}

}  // namespace starling::testing
