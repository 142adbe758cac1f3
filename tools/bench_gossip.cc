// bench-gossip: how long one gossip round takes on a ring of P peer processes, over Starling's UCX
// transport and, in the same run, over OpenMPI (bench-gossip-mpi), next to the memory-bandwidth
// floor of the round and, with the tcp column, the same round over plain TCP sockets (the floor
// under any TCP transport, bench_gossip_sockets.cc). docs/bench_gossip.md has the results and the
// method.
//
// One round, on every rank r of the ring (neighbours r-1 and r+1): seal the frame whose payload
// holds x (CRC32C), send it to both neighbours, receive theirs, decode them (CRC-checked, in
// place, each as soon as it arrives) and combine (x + left + right) / 3 in one pass, reading the
// receive buffers where they are and writing straight into the payload of a fresh frame for the
// next round: what engine/node.cc does in training (the algorithm writes its message into the
// frame), without the algorithm.
//
//   bench-gossip [--peers 4,8] [--dims 1e3,1e5,1e6,1e7] [--tls shm,tcp] [--rounds-max 200]
//                [--min-seconds 1] [--repeat 3] [--no-mpi] [--keep] [--spin] [--spin-us 50]
//                [--busy-poll auto|on|off] [--warmup 8] [--settle 16]
//                [--no-shm-frames] [--ucx-tls TLS]
//   bench-gossip --worker --rank R --peers host:port,... --dim D --tls shm|tcp|sockets --out FILE
//
// The driver forks P workers of itself (/proc/self/exe) per configuration, and runs
// `mpirun -np P bench-gossip-mpi` (found next to this executable) for the MPI columns. Each rank
// writes its per-round times to a file; a round's time is the slowest rank's, and a cell is the
// median over the timed rounds (the best of --repeat runs).
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/launcher.h"
#include "tools/bench_gossip_report.h"
#include "tools/bench_gossip_round.h"
#include "tools/bench_gossip_worker.h"

namespace {

using namespace starling;
using namespace starling::bench;
using namespace starling::bench::gossip;
namespace fs = std::filesystem;

// ---- driver: processes (the workers are in bench_gossip_worker.cc) ----

pid_t spawn(const std::vector<std::string>& argv, const fs::path& log, bool searchPath) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    if (searchPath) {
      execvp(args[0], args.data());
    } else {
      execv(args[0], args.data());
    }
    _exit(127);
  }
  return pid;
}

// Waits for every child; kills the ones still running at the deadline. True when all exited 0.
bool waitAll(std::vector<pid_t> pids, double timeoutS) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeoutS);
  bool ok = true;
  while (!pids.empty()) {
    for (auto it = pids.begin(); it != pids.end();) {
      int status = 0;
      const pid_t r = waitpid(*it, &status, WNOHANG);
      if (r == *it) {
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        it = pids.erase(it);
      } else {
        ++it;
      }
    }
    if (pids.empty()) break;
    if (Clock::now() > deadline) {
      // SIGTERM first: mpirun passes it on to its ranks.
      for (pid_t p : pids) kill(p, SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(2));
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ok;
}

std::string tail(const fs::path& log, size_t maxChars = 600) {
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return s.size() > maxChars ? "..." + s.substr(s.size() - maxChars) : s;
}

// ---- driver: runs (their cells and tables are in bench_gossip_report.cc) ----

struct DriverOptions {
  std::vector<int> peers;
  std::vector<size_t> dims;
  std::vector<std::string> tls;
  std::vector<std::string> security;  // beyond "none": more Starling columns (auth, encrypt)
  int warmup = 8;
  // Untimed rounds after the ranks agree on the round count, and again after the timed rounds.
  // Rank 0 tells every rank the count, and on the way it connects to ranks that are not its ring
  // neighbours, which takes up to a few ms at P = 16: the ranks leave the agreement that far
  // apart, and a ring takes about 10 rounds to fall back into step. At the end, the first rank
  // to finish tears its transport down while its neighbours still run (ms of CPU on 2 cores).
  // Both are costs of starting and ending a run, not of a round; MPI's ranks do the same.
  int settle = 16;
  int roundsMax = 200;
  double minSeconds = 1.0;
  int repeat = 3;
  double timeoutS = 300;
  bool mpi = true;
  std::string mpiBin;
  std::string ucxTls;
  bool spin = false;
  int spinUs = 50;            // the transport's polling before it sleeps (NetworkOptions::spin)
  std::string busyPoll = "auto";  // NetworkOptions::busyPoll, as the scenario's busy_poll
  bool noShmFrames = false;   // large frames by UCX active messages even on this host
  bool keep = false;  // leave every run's rank files in the temporary directory
};

std::vector<std::string> commonArgs(const DriverOptions& o, size_t dim) {
  return {
      "--dim",        std::to_string(dim),         "--warmup",      std::to_string(o.warmup),
      "--settle",     std::to_string(o.settle),
      "--rounds-max", std::to_string(o.roundsMax), "--min-seconds", std::to_string(o.minSeconds)};
}

Cell runStarling(const DriverOptions& o, const fs::path& dir, int peers, size_t dim,
                 const std::string& tls, const std::string& security = "none") {
  const std::string self = fs::read_symlink("/proc/self/exe");
  auto ports = runtime::freeLoopbackPorts(peers);
  if (!ports) throw std::runtime_error(ports.status().message());
  std::string addresses;
  for (int port : *ports) {
    addresses += (addresses.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(port);
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<pid_t> pids;
  for (int r = 0; r < peers; ++r) {
    std::vector<std::string> argv = {self,      "--worker",
                                     "--rank",  std::to_string(r),
                                     "--peers", addresses,
                                     "--tls",   tls,
                                     "--out",   dir / ("rank-" + std::to_string(r) + ".txt")};
    for (auto& a : commonArgs(o, dim)) argv.push_back(a);
    if (o.spin) argv.push_back("--spin");
    if (o.noShmFrames) argv.push_back("--no-shm-frames");
    argv.push_back("--security");
    argv.push_back(security);
    argv.push_back("--spin-us");
    argv.push_back(std::to_string(o.spinUs));
    argv.push_back("--busy-poll");
    argv.push_back(o.busyPoll);
    if (!o.ucxTls.empty()) {
      argv.push_back("--ucx-tls");
      argv.push_back(o.ucxTls);
    }
    pids.push_back(spawn(argv, dir / ("rank-" + std::to_string(r) + ".log"), false));
  }
  const bool ok = waitAll(pids, o.timeoutS);
  Cell c = collect(dir, peers);
  if (!ok) c.error = "a worker failed: " + tail(dir / "rank-0.log");
  if (!ok) c.ran = false;
  return c;
}

// The MPI columns: Debian's default (pml ob1, shared memory through vader), pml ucx, and ob1 kept
// to TCP (`--mca btl tcp,self`), which is what Starling's tcp column is measured against.
enum class MpiMode { kOb1, kUcx, kTcp };

Cell runMpi(const DriverOptions& o, const fs::path& dir, int peers, size_t dim, MpiMode mode) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::string> argv = {
      "mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
      "-np",    std::to_string(peers)};
  if (mode == MpiMode::kUcx) {
    for (const char* a : {"--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca",
                          "pml_ucx_devices", "any"}) {
      argv.push_back(a);
    }
  } else if (mode == MpiMode::kTcp) {
    for (const char* a : {"--mca", "pml", "ob1", "--mca", "btl", "tcp,self"}) argv.push_back(a);
  }
  argv.push_back(o.mpiBin);
  for (auto& a : commonArgs(o, dim)) argv.push_back(a);
  argv.push_back("--out-dir");
  argv.push_back(dir);
  const bool ok = waitAll({spawn(argv, dir / "mpirun.log", true)}, o.timeoutS);
  Cell c = collect(dir, peers);
  if (!ok) c.error = "mpirun failed: " + tail(dir / "mpirun.log");
  if (!ok) c.ran = false;
  return c;
}

// Bytes read plus bytes written per second by one thread's memcpy, best of several.
double memcpyBandwidth() {
  const size_t n = size_t{256} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), n);
    best = std::min(best, seconds(t0, Clock::now()));
  }
  return 2.0 * static_cast<double>(n) / best;
}

std::vector<size_t> parseDims(const std::vector<std::string>& text) {
  std::vector<size_t> dims;
  for (const auto& t : text) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size() || !(v >= 1) || v > 4e9) {
      throw CLI::ValidationError("--dims", "bad dimension \"" + t + "\"");
    }
    dims.push_back(static_cast<size_t>(std::llround(v)));
  }
  return dims;
}

int runDriver(DriverOptions o) {
  const std::string self = fs::read_symlink("/proc/self/exe");
  if (o.mpiBin.empty()) o.mpiBin = (fs::path(self).parent_path() / "bench-gossip-mpi").string();
  const bool haveMpi =
      o.mpi && fs::exists(o.mpiBin) && std::system("command -v mpirun >/dev/null") == 0;
  // The MPI TCP column goes with a Starling tcp column, against which it is read.
  const bool hasTcp = std::find(o.tls.begin(), o.tls.end(), "tcp") != o.tls.end();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double bw = memcpyBandwidth();
  char tmpl[] = "/tmp/bench-gossip-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::fprintf(stderr, "bench-gossip: mkdtemp: %s\n", std::strerror(errno));
    return 1;
  }
  const fs::path tmp = tmpl;

  std::printf("bench-gossip: ring, float32, %u cores, memcpy %.1f GB/s (read+write, 1 thread)%s\n",
              cores, bw / 1e9, haveMpi ? "" : "; no MPI (bench-gossip-mpi or mpirun missing)");
  std::fflush(stdout);
  std::vector<Row> rows;
  for (int p : o.peers) {
    for (size_t d : o.dims) {
      Row row{p, d, {}, {}, {}, {}, {}, {}, {}};
      const std::string name = "P" + std::to_string(p) + "-d" + std::to_string(d) + "-";
      // Repetitions interleave the columns, so that a burst of load from elsewhere on the
      // machine hits them alike; each column keeps its best repetition.
      for (int rep = 0; rep < o.repeat; ++rep) {
        const std::string tag = name + std::to_string(rep) + "-";
        for (const auto& t : o.tls) {
          keepBest(t == "shm" ? row.shm : row.tcp, runStarling(o, tmp / (tag + t), p, d, t));
          if (t == "tcp") {  // the floor under it: the same round over plain sockets
            keepBest(row.sockets, runStarling(o, tmp / (tag + "sockets"), p, d, "sockets"));
          }
          for (const auto& sec : o.security) {
            keepBest(row.secured[t + "+" + sec],
                     runStarling(o, tmp / (tag + t + "-" + sec), p, d, t, sec));
          }
        }
        if (haveMpi) {
          keepBest(row.ob1, runMpi(o, tmp / (tag + "mpi-ob1"), p, d, MpiMode::kOb1));
          keepBest(row.ucx, runMpi(o, tmp / (tag + "mpi-ucx"), p, d, MpiMode::kUcx));
          if (hasTcp) {
            keepBest(row.mpiTcp, runMpi(o, tmp / (tag + "mpi-tcp"), p, d, MpiMode::kTcp));
          }
        }
      }
      for (const Cell* c : {&row.shm, &row.tcp, &row.sockets, &row.ob1, &row.ucx, &row.mpiTcp}) {
        if (!c->error.empty())
          std::fprintf(stderr, "P=%d d=%s: %s\n", p, dimName(d).c_str(), c->error.c_str());
      }
      std::fprintf(stderr,
                   "P=%d d=%s: shm %s, tcp %s, sockets %s, mpi ob1 %s, mpi ucx %s, mpi tcp %s ms\n",
                   p, dimName(d).c_str(), fmtMs(row.shm).c_str(), fmtMs(row.tcp).c_str(),
                   fmtMs(row.sockets).c_str(), fmtMs(row.ob1).c_str(), fmtMs(row.ucx).c_str(),
                   fmtMs(row.mpiTcp).c_str());
      rows.push_back(std::move(row));
    }
  }
  if (o.keep) {
    std::fprintf(stderr, "bench-gossip: rank files kept in %s\n", tmp.c_str());
  } else {
    fs::remove_all(tmp);
  }
  printTables(rows, bw, cores, !o.security.empty());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-gossip: one gossip round on a ring of peer processes, Starling vs MPI"};
  bool worker = false, noMpi = false;
  WorkerOptions w;
  DriverOptions d;
  std::vector<std::string> peers = {"4", "8"}, dims = {"1e3", "1e5", "1e6", "1e7"};
  std::vector<std::string> tls = {"shm", "tcp"};
  std::string dim;
  app.add_flag("--worker", worker, "run as one rank (started by the driver)");
  app.add_option("--peers", peers, "peer counts (driver) or host:port of every rank (worker)")
      ->delimiter(',');
  app.add_option("--dims", dims, "vector lengths in floats")->delimiter(',');
  app.add_option("--tls", tls,
                 "Starling transports: shm and/or tcp (tcp brings the plain-sockets column; a "
                 "worker also takes sockets)")
      ->delimiter(',');
  app.add_option("--rounds-max", d.roundsMax, "at most this many timed rounds")
      ->check(CLI::PositiveNumber);
  app.add_option("--min-seconds", d.minSeconds, "time at least this long (5 rounds at least)");
  app.add_option("--warmup", d.warmup, "untimed rounds first")->check(CLI::NonNegativeNumber);
  app.add_option("--settle", d.settle,
                 "untimed rounds after the ranks agree on the round count and after the timed "
                 "rounds (MPI too)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--repeat", d.repeat, "runs of every configuration; the best median is kept")
      ->check(CLI::PositiveNumber);
  app.add_option("--timeout", d.timeoutS, "seconds one configuration may take");
  app.add_flag("--no-mpi", noMpi, "skip the MPI columns");
  app.add_option("--mpi-bin", d.mpiBin, "bench-gossip-mpi (default: next to this executable)");
  app.add_option("--ucx-tls", d.ucxTls, "UCX_TLS for every Starling run, verbatim (experiments)");
  std::vector<std::string> security;
  app.add_option("--security", security,
                 "also time Starling with the cluster key: auth and/or encrypt (driver); "
                 "none, auth or encrypt (worker)")
      ->delimiter(',');
  app.add_flag("--keep", d.keep, "keep the rank files (per-round times) and logs");
  app.add_flag("--spin", d.spin, "workers poll the transport instead of sleeping in it");
  app.add_option("--spin-us", d.spinUs, "the transport polls this long before sleeping")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--busy-poll", d.busyPoll,
                 "the transport polls until a message comes, never sleeping: auto (on with a core "
                 "per rank and at least 4 cores), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_flag("--no-shm-frames", d.noShmFrames,
               "large frames by UCX active messages, not shared-memory segments");
  app.add_option("--rank", w.rank, "worker: this rank");
  app.add_option("--dim", dim, "worker: vector length");
  app.add_option("--out", w.out, "worker: result file");
  CLI11_PARSE(app, argc, argv);

  try {
    if (worker) {
      w.addresses = peers;
      w.dim = parseDims({dim}).at(0);
      w.tls = tls.at(0);
      w.security = security.empty() ? "none" : security.at(0);
      w.ucxTls = d.ucxTls;
      w.spin = d.spin;
      w.spinUs = d.spinUs;
      w.busyPoll = d.busyPoll;
      w.noShmFrames = d.noShmFrames;
      w.warmup = d.warmup;
      w.settle = d.settle;
      w.roundsMax = d.roundsMax;
      w.minSeconds = d.minSeconds;
      if (w.addresses.size() < 3) throw CLI::ValidationError("--peers", "a ring needs 3 ranks");
      const core::Status st = w.tls == "sockets" ? runSocketWorker(w) : runWorker(w);
      if (!st.isOk()) {
        std::fprintf(stderr, "bench-gossip worker %d: %s\n", w.rank, st.toString().c_str());
        return 1;
      }
      return 0;
    }
    for (const auto& p : peers) {
      d.peers.push_back(std::stoi(p));
      if (d.peers.back() < 3) throw CLI::ValidationError("--peers", "a ring needs 3 ranks");
    }
    d.dims = parseDims(dims);
    for (const auto& t : tls) {
      if (t != "shm" && t != "tcp") throw CLI::ValidationError("--tls", "shm or tcp, not " + t);
    }
    d.tls = tls;
    for (const auto& sec : security) {
      if (sec != "auth" && sec != "encrypt") {
        throw CLI::ValidationError("--security", "auth or encrypt, not " + sec);
      }
    }
    d.security = security;
    d.mpi = !noMpi;
    return runDriver(d);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-gossip: %s\n", e.what());
    return 2;
  }
}
