#include "runtime/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <set>

#include "runtime/guardian.h"
#include "runtime/peer.h"
#include "runtime/progress.h"

namespace starling::runtime {

namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

constexpr size_t kKeptLines = 20;
constexpr auto kTick = std::chrono::milliseconds(200);

struct Child {
  int rank = 0;
  pid_t pid = -1;
  std::unique_ptr<asio::posix::stream_descriptor> output;
  std::array<char, 4096> buffer{};
  std::string partial;
  std::deque<std::string> lastLines;
  bool exited = false;
  bool outputClosed = false;
  bool rejoining = false;  // started again for a lost rank (faults.restart)
  int waitStatus = 0;
  int outFile = -1;  // OUT/peers/rank-R.out: everything it printed, kept

  ~Child() {
    if (outFile >= 0) close(outFile);
  }
  void keep(const std::string& text) {
    for (size_t done = 0; outFile >= 0 && done < text.size();) {
      const ssize_t n = write(outFile, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // a full disk: the output is still streamed and its last lines kept
        close(outFile);
        outFile = -1;
        break;
      }
      done += static_cast<size_t>(n);
    }
  }

  bool failed() const { return exited && !(WIFEXITED(waitStatus) && WEXITSTATUS(waitStatus) == 0); }
  std::string describeExit() const {
    if (WIFSIGNALED(waitStatus)) {
      return "was killed by signal " + std::to_string(WTERMSIG(waitStatus)) + " (" +
             strsignal(WTERMSIG(waitStatus)) + ")";
    }
    return "exited with status " + std::to_string(WEXITSTATUS(waitStatus));
  }
};

// 64 random bits in hex: tells this run's peer logs from another's in the same folder.
std::string newRunId() {
  std::random_device rd;
  char id[24];
  std::snprintf(id, sizeof id, "%08x%08x", rd(), rd());
  return id;
}

class Supervisor {
 public:
  Supervisor(const scenario::Scenario& s, const LaunchOptions& opt, Merging merging)
      : s_(s),
        opt_(opt),
        merging_(std::move(merging)),
        signals_(io_, SIGINT, SIGTERM, SIGCHLD),
        timer_(io_),
        progress_(s.name, s.rounds, opt.progress) {}

  core::Status spawn(const std::vector<std::string>& addresses);
  core::Status run();

 private:
  core::Result<std::unique_ptr<Child>> start(int rank, bool rejoin);
  // faults.restart: lost peers due to start again with --rejoin.
  void restartDue(Clock::time_point now);
  void readOutput(Child& c);
  void onSignal(int signo);
  void tick();
  void reap();
  void signalAll(int signo);
  void exited(Child& c, int status);  // reaped: its group's leftovers are killed
  bool allDone() const;
  std::string failureReport() const;

  const scenario::Scenario& s_;
  const LaunchOptions& opt_;
  Merging merging_;
  Guardian guardian_;  // before the children: started first
  asio::io_context io_;
  asio::signal_set signals_;
  asio::steady_timer timer_;
  ProgressLine progress_;
  std::vector<std::unique_ptr<Child>> children_;

  enum class Phase { kRunning, kDraining, kTerminating };
  Phase phase_ = Phase::kRunning;
  Clock::time_point phaseSince_{};
  int firstFailure_ = -1;
  std::set<int> lostChildren_;  // continue mode: peers that died or left, not failures
  std::string peers_;           // every rank's address, comma-separated
  std::string runId_ = newRunId();  // STARLING_RUN_ID: the same for every process of this run
  std::map<int, Clock::time_point> restartAt_;  // faults.restart: rank -> when
  std::map<int, int> restarts_;                 // rank -> restarts so far
  bool cancelled_ = false;
  bool killed_ = false;
  Clock::time_point killedAt_{};
  core::Status mergeError_;
};

core::Status Supervisor::spawn(const std::vector<std::string>& addresses) {
  for (const auto& a : addresses) peers_ += (peers_.empty() ? "" : ",") + a;
  const size_t processes = static_cast<size_t>(s_.nodes) *
                           (1 + (s_.faults.restart ? static_cast<size_t>(s_.faults.maxRestarts) : 0));
  STARLING_RETURN_IF_ERROR(guardian_.start(processes, opt_.terminateGrace));
  for (int r = 0; r < s_.nodes; ++r) {
    if (std::find(opt_.notStarted.begin(), opt_.notStarted.end(), r) != opt_.notStarted.end()) {
      // Lost before the round the run resumes at: it stays lost, as a peer that was killed.
      auto c = std::make_unique<Child>();
      c->rank = r;
      c->exited = true;
      c->outputClosed = true;
      c->waitStatus = SIGKILL;  // WIFSIGNALED, WTERMSIG 9
      lostChildren_.insert(r);
      children_.push_back(std::move(c));
      // With faults.restart it comes back as any lost peer does: it rejoins.
      if (s_.faults.restart && restarts_[r] < s_.faults.maxRestarts) {
        restartAt_[r] = Clock::now();
      }
      continue;
    }
    auto c = start(r, /*rejoin=*/false);
    if (!c) return c.status();
    children_.push_back(std::move(*c));
  }
  return core::Status::ok();
}

core::Result<std::unique_ptr<Child>> Supervisor::start(int r, bool rejoin) {
  const pid_t parent = getpid();
  const bool trainer = !opt_.command.empty();
  std::error_code ec;
  const std::string scenarioAbs = std::filesystem::absolute(opt_.scenarioPath, ec).string();
  const std::string outAbs = std::filesystem::absolute(opt_.outDir, ec).string();
  std::vector<std::string> args = {opt_.executable, "peer", opt_.scenarioPath, "--rank",
                                   std::to_string(r), "--out", opt_.outDir.string(), "--peers",
                                   peers_};
  args.insert(args.end(), opt_.peerArgs.begin(), opt_.peerArgs.end());
  if (opt_.resumeRound && !rejoin) {
    args.insert(args.end(), {"--resume-round", std::to_string(*opt_.resumeRound)});
  }
  if (rejoin) args.push_back("--rejoin");
  // run -- COMMAND: the user's trainer, told who it is through the environment
  // (starling::Peer::fromEnv reads it), like torchrun's RANK and WORLD_SIZE.
  if (trainer) args = opt_.command;
  const std::vector<std::pair<std::string, std::string>> env = {
      {"STARLING_RANK", std::to_string(r)},
      {"STARLING_NODES", std::to_string(s_.nodes)},
      {"STARLING_SCENARIO", scenarioAbs},
      {"STARLING_OUT", outAbs},
      {"STARLING_PEERS", peers_},
      {"STARLING_REJOIN", rejoin ? "1" : "0"},
      {"STARLING_RUN_ID", runId_}};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  auto forked = forkWithPipe(fds);
  if (!forked) return forked.status();
  const pid_t pid = *forked;
  if (pid == 0) {
    // Child: a process group of its own (signals reach whatever it starts); told to stop when
    // the launcher dies (the guardian then makes sure of it); talks through the pipe.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setenv("STARLING_RUN_ID", runId_.c_str(), 1);  // in every peer log's header
    if (trainer) {
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      execvp(argv[0], argv.data());
      std::fprintf(stderr, "cannot start %s: %s\n", argv[0], strerror(errno));
      _exit(127);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  setpgid(pid, pid);  // as the child does: whichever runs first, the group exists before a signal
  guardian_.send(pid);
  auto c = std::make_unique<Child>();
  c->rank = r;
  c->pid = pid;
  c->output = std::make_unique<asio::posix::stream_descriptor>(io_, fds[0]);
  c->rejoining = rejoin;
  // Its output, kept in the run folder (appended to by a restarted process).
  const auto outPath = outputPath(opt_.outDir, r);
  std::filesystem::create_directories(outPath.parent_path(), ec);
  c->outFile = ::open(outPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (rejoin) c->keep("[node-launcher] rank " + std::to_string(r) + " restarted\n");
  return c;
}

void Supervisor::readOutput(Child& c) {
  c.output->async_read_some(asio::buffer(c.buffer), [this, &c](const boost::system::error_code& ec,
                                                               size_t n) {
    if (ec) {
      if (!c.partial.empty()) {
        c.lastLines.push_back(c.partial);
        if (!opt_.command.empty()) {
          progress_.passThrough("[rank " + std::to_string(c.rank) + "] " + c.partial);
        }
      }
      c.outputClosed = true;
      // A lost peer waiting for its output to close restarts now (not inside this handler,
      // which belongs to the Child a restart replaces).
      if (restartAt_.count(c.rank)) asio::post(io_, [this] { restartDue(Clock::now()); });
      if (allDone()) io_.stop();
      return;
    }
    c.keep(std::string(c.buffer.data(), n));
    c.partial.append(c.buffer.data(), n);
    size_t start = 0;
    for (size_t nl; (nl = c.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      c.lastLines.push_back(c.partial.substr(start, nl - start));
      if (c.lastLines.size() > kKeptLines) c.lastLines.pop_front();
      // A trainer's output is the user's: streamed with its rank, as torchrun does.
      if (!opt_.command.empty()) progress_.passThrough("[rank " + std::to_string(c.rank) + "] " +
                                                       c.lastLines.back());
    }
    c.partial.erase(0, start);
    if (c.partial.size() > 65536) {  // a line without end: shown in pieces, never held whole
      c.lastLines.push_back(c.partial);
      if (c.lastLines.size() > kKeptLines) c.lastLines.pop_front();
      if (!opt_.command.empty()) {
        progress_.passThrough("[rank " + std::to_string(c.rank) + "] " + c.partial);
      }
      c.partial.clear();
    }
    readOutput(c);
  });
}

void Supervisor::signalAll(int signo) {
  for (auto& c : children_) {
    if (!c->exited) kill(-c->pid, signo);  // its whole group
  }
}

void Supervisor::exited(Child& c, int status) {
  c.exited = true;
  c.waitStatus = status;
  // What it started and left behind in its group goes with it.
  if (c.pid > 0) {
    kill(-c.pid, SIGKILL);
    guardian_.send(-c.pid);
  }
}

bool Supervisor::allDone() const {
  if (!restartAt_.empty()) return false;
  for (const auto& c : children_) {
    if (!c->exited || !c->outputClosed) return false;
  }
  return true;
}

void Supervisor::reap() {
  for (auto& c : children_) {
    if (c->exited) continue;
    int status = 0;
    if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
      exited(*c, status);
      // With on_peer_loss "continue", a peer that crashed or was killed (a signal), or that the
      // others declared lost and that left (kExitLeftRun), is a loss the survivors carry on
      // without; an error it reported itself still stops the run.
      // A restarted peer process that could not get back in (or failed later) is a loss too:
      // its rank was out already, and the run goes on without it.
      // A trainer (run -- COMMAND) that exits with a status of its own reported a failure,
      // whatever the loss policy, a restarted one too: only a killed trainer is a loss.
      const bool trainer = !opt_.command.empty();
      const bool loss = WIFSIGNALED(status) ||
                        (!trainer && WIFEXITED(status) && WEXITSTATUS(status) == kExitLeftRun) ||
                        (!trainer && c->rejoining);
      if (c->failed() && loss && !cancelled_ &&
          s_.faults.onPeerLoss == engine::OnPeerLoss::kContinue && phase_ == Phase::kRunning) {
        lostChildren_.insert(c->rank);
        // Restarted only while others still run: a run whose survivors are done has nothing
        // to rejoin (and its stuck peers are killed below, which must not start them again).
        bool othersRun = false;
        for (const auto& o : children_) {
          othersRun = othersRun || (o->rank != c->rank && !o->exited && !lostChildren_.count(o->rank));
        }
        const bool again = s_.faults.restart && othersRun &&
                           restarts_[c->rank] < s_.faults.maxRestarts;
        progress_.message("node-launcher: peer " + std::to_string(c->rank) + " " +
                          c->describeExit() + "; the others carry on without it" +
                          (again ? " (it restarts and rejoins)" : ""));
        // At once (once its output is closed too): its address is free again as it died, and
        // the survivors hold a request that comes before they applied its departure until they
        // have. (A delay measured in ticks would also wait behind the merge, whose first round
        // after a loss solves the survivors' problem: seconds, for a larger one.)
        if (again) restartAt_[c->rank] = Clock::now();
        continue;
      }
      if (c->failed() && firstFailure_ < 0 && !cancelled_) {
        firstFailure_ = c->rank;
        if (phase_ == Phase::kRunning) {
          phase_ = Phase::kDraining;
          phaseSince_ = Clock::now();
        }
      }
    }
  }
  restartDue(Clock::now());
  if (allDone()) io_.stop();
}

void Supervisor::onSignal(int signo) {
  if (signo == SIGCHLD) {
    reap();
  } else if (!cancelled_) {
    cancelled_ = true;
    phase_ = Phase::kTerminating;
    phaseSince_ = Clock::now();
    signalAll(SIGTERM);
  }
  signals_.async_wait([this](const boost::system::error_code& ec, int s) {
    if (!ec) onSignal(s);
  });
}

void Supervisor::restartDue(Clock::time_point now) {
  for (auto it = restartAt_.begin(); it != restartAt_.end();) {
    const int r = it->first;
    if (phase_ != Phase::kRunning || cancelled_) {
      it = restartAt_.erase(it);
      continue;
    }
    // Only once its old process is gone for good (its output closed too).
    if (now < it->second || !children_[r]->outputClosed) {
      ++it;
      continue;
    }
    it = restartAt_.erase(it);
    auto c = start(r, /*rejoin=*/true);
    if (!c) {
      progress_.message("node-launcher: cannot restart peer " + std::to_string(r) + ": " +
                        c.status().message());
      continue;
    }
    restarts_[r]++;
    lostChildren_.erase(r);
    children_[r] = std::move(*c);
    readOutput(*children_[r]);
    progress_.message("node-launcher: peer " + std::to_string(r) + " restarted (" +
                      std::to_string(restarts_[r]) + " of " +
                      std::to_string(s_.faults.maxRestarts) + "); it rejoins");
  }
}

void Supervisor::tick() {
  reap();
  restartDue(Clock::now());
  if (auto merged = merging_.poll(); !merged) {
    if (mergeError_.isOk()) mergeError_ = merged.status();
  } else if (auto round = merging_.lastRound()) {
    progress_.update(*round, merging_.detail());
  }
  const auto now = Clock::now();
  if (phase_ == Phase::kDraining && now - phaseSince_ >= opt_.failureGrace) {
    phase_ = Phase::kTerminating;
    phaseSince_ = now;
    signalAll(SIGTERM);
  } else if (phase_ == Phase::kTerminating && !killed_ && now - phaseSince_ >= opt_.terminateGrace) {
    killed_ = true;
    killedAt_ = now;
    signalAll(SIGKILL);
  }
  if (killed_ && now - killedAt_ >= opt_.terminateGrace) {
    // Every group was killed; output still open belongs to a process that left its group
    // (setsid): not worth waiting for.
    bool allExited = true;
    for (const auto& c : children_) allExited = allExited && c->exited;
    if (allExited) {
      io_.stop();
      return;
    }
  }
  // Continue mode: once every peer has exited or was declared lost by the others, a lost peer
  // that still runs (stopped, or stuck) has no run to return to: it is killed.
  if (s_.faults.onPeerLoss == engine::OnPeerLoss::kContinue && phase_ == Phase::kRunning &&
      !killed_) {
    const auto lost = merging_.lost();
    bool settled = true, anyStuck = false;
    for (const auto& c : children_) {
      if (c->exited) continue;
      if (lost.count(c->rank)) {
        anyStuck = true;
      } else {
        settled = false;
      }
    }
    if (settled && anyStuck) {
      for (const auto& c : children_) {
        if (!c->exited && lost.count(c->rank)) {
          progress_.message("node-launcher: peer " + std::to_string(c->rank) +
                            " was declared lost by the others and is still running: killed");
          lostChildren_.insert(c->rank);
          kill(-c->pid, SIGKILL);
        }
      }
    }
  }
  if (allDone()) {
    io_.stop();
    return;
  }
  timer_.expires_after(kTick);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) tick();
  });
}

std::string Supervisor::failureReport() const {
  // The headline names the root cause: the peer that failed on its own, or the one the others
  // lost first, from the failure lines in the peer logs. The first peer to exit is often only a
  // knock-on failure (it lost a neighbour that had lost another).
  auto root = merging_.rootCause();
  if (root && (root->rank < 0 || root->rank >= static_cast<int>(children_.size()))) root.reset();
  int culprit = firstFailure_;
  if (root) culprit = root->rank;
  const Child& first = *children_[culprit];
  std::string msg;
  if (root) {
    msg = root->describe();
    if (first.exited && first.failed()) msg += "; it " + first.describeExit();
  } else {
    msg = "peer " + std::to_string(first.rank) + " " + first.describeExit();
  }
  if (!first.lastLines.empty()) {
    msg += "; its last lines:";
    for (const auto& l : first.lastLines) msg += "\n    " + l;
  }
  for (const auto& c : children_) {
    if (c->rank == culprit || !c->failed() || c->lastLines.empty()) continue;
    msg += "\n  peer " + std::to_string(c->rank) + " " + c->describeExit() + ": " +
           c->lastLines.back();
  }
  return msg;
}

core::Status Supervisor::run() {
  for (auto& c : children_) {
    if (c->output) readOutput(*c);
  }
  signals_.async_wait([this](const boost::system::error_code& ec, int s) {
    if (!ec) onSignal(s);
  });
  tick();
  io_.run();
  // Children that closed their output may not have been reaped yet.
  for (auto& c : children_) {
    if (!c->exited) {
      int status = 0;
      waitpid(c->pid, &status, 0);
      exited(*c, status);
    }
  }
  guardian_.disarm();
  progress_.finish();
  if (auto merged = merging_.poll(); !merged && mergeError_.isOk()) mergeError_ = merged.status();
  if (cancelled_) return core::cancelled("stopped by a signal; every peer was stopped");
  if (firstFailure_ >= 0) return core::unavailable(failureReport());
  if (static_cast<int>(lostChildren_.size()) >= s_.nodes) {
    return core::unavailable("every peer was lost; nobody finished the run");
  }
  return mergeError_;
}

}  // namespace

core::Status supervise(const scenario::Scenario& s, const LaunchOptions& opt, Merging merging,
                       const std::vector<std::string>& addresses) {
  Supervisor sup(s, opt, std::move(merging));
  STARLING_RETURN_IF_ERROR(sup.spawn(addresses));
  return sup.run();
}

}  // namespace starling::runtime
