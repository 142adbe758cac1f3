// link-emulator: a switch whose ports are TAP devices in network namespaces, each port shaped to a
// rate and a one-way delay, as `tc netem rate R delay D` would (this machine's kernels may lack
// netem: tools/netns.py starts this in its place).
//
//   link-emulator --rate-bps R --delay-us D [--queue-bytes Q] [--ignore-stdin]
//                 --netns NAME0 --netns NAME1 ...
//
// For each namespace NAME (/var/run/netns/NAME), in order, the calling thread enters it, creates a
// TAP device `eth0` there (no packet information header) and returns to its own namespace. The
// devices live as long as this process: they vanish when it exits. It then prints one line,
// `ready`, and forwards frames until SIGTERM, SIGINT or SIGHUP (exit 0), or until its standard
// input reaches end of file (so that a parent that dies takes it down; --ignore-stdin turns that
// off for a detached emulator).
//
// Switching: an Ethernet learning switch over the ports (source MAC -> port; known unicast to its
// port only, broadcast, multicast and unknown unicast to every other port).
//
// Shaping, per egress port (the direction into each namespace): a frame of B bytes read at time t
// is fully transmitted at tx = max(t, busyUntil) + B*8/R, busyUntil = tx, and written into the
// destination TAP at tx + D. D is the whole one-way delay from one host to another: it is applied
// once, on egress. A port holds at most Q bytes (waiting or in flight; by default
// max(2*R*D/8, 4 MiB)); a frame that would take it past Q is dropped and counted. Frames leave a
// port in the order they came.
//
// On exit: one line on stderr with the frames and bytes forwarded and every kind of loss.
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

namespace {

// The largest frame a TAP can hand us is its MTU (at most 65535) plus the Ethernet header and a
// VLAN tag or two; a read that fills this buffer is taken as a frame too large and dropped.
constexpr size_t kLargeBuffer = 65536 + 4096;
// Frames up to this size are copied into a small buffer so that a queue of acknowledgements does
// not hold 68 KiB apiece.
constexpr size_t kSmallBuffer = 2048;
constexpr size_t kPoolKeep = 1024;  // free buffers kept per size
constexpr int kReadBurst = 64;      // frames read from one port before looking at the others
constexpr int kErrorReports = 10;   // messages per kind of error before they are only counted

int64_t nowNs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

struct Frame {
  std::vector<uint8_t> data;  // capacity kSmallBuffer or kLargeBuffer; size() is the frame
  int64_t due = 0;            // when it is written into the destination TAP
};

class Pool {
 public:
  std::vector<uint8_t> take(size_t size) {
    auto& free = size <= kSmallBuffer ? small_ : large_;
    std::vector<uint8_t> v;
    if (!free.empty()) {
      v = std::move(free.back());
      free.pop_back();
    } else {
      v.reserve(size <= kSmallBuffer ? kSmallBuffer : kLargeBuffer);
    }
    v.resize(size);
    return v;
  }
  void give(std::vector<uint8_t>&& v) {
    auto& free = v.capacity() >= kLargeBuffer ? large_ : small_;
    if (free.size() < kPoolKeep) free.push_back(std::move(v));
  }

 private:
  std::vector<std::vector<uint8_t>> small_, large_;
};

struct Port {
  std::string ns;
  int fd = -1;
  std::deque<Frame> queue;  // FIFO; `due` never decreases along it
  uint64_t queuedBytes = 0;
  int64_t busyUntil = 0;    // ns, CLOCK_MONOTONIC
  uint64_t busyCarry = 0;   // the part of a nanosecond, in units of 1/rate ns, not yet counted
  bool waitingWritable = false;  // a write returned EAGAIN: EPOLLOUT is on
  // counters
  uint64_t framesOut = 0, bytesOut = 0, drops = 0, dropBytes = 0;
};

struct Counters {
  uint64_t framesIn = 0, bytesIn = 0;
  uint64_t runts = 0, oversize = 0, hairpin = 0;
  uint64_t writeAgain = 0, writeErrors = 0;
};

struct Options {
  uint64_t rateBps = 0;
  int64_t delayNs = 0;
  uint64_t queueBytes = 0;  // 0: the default
  bool ignoreStdin = false;
  std::vector<std::string> namespaces;
};

[[noreturn]] void usage(const char* why) {
  if (why) std::fprintf(stderr, "link-emulator: %s\n", why);
  std::fprintf(stderr,
               "usage: link-emulator --rate-bps R --delay-us D [--queue-bytes Q] [--ignore-stdin]\n"
               "                     --netns NAME0 --netns NAME1 [--netns ...]\n"
               "  R: bits per second (> 0); D: one-way delay in microseconds (>= 0, fractions\n"
               "  allowed); Q: bytes a port may hold (default max(2*R*D/8, 4 MiB)).\n");
  std::exit(2);
}

double number(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v >= 0) || v > 1e18) {
    std::fprintf(stderr, "link-emulator: %s: not a number >= 0: '%s'\n", flag, text);
    std::exit(2);
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  bool haveRate = false, haveDelay = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--rate-bps") {
      double v = number("--rate-bps", value());
      if (v < 1) usage("--rate-bps must be at least 1");
      o.rateBps = static_cast<uint64_t>(v);
      haveRate = true;
    } else if (a == "--delay-us") {
      o.delayNs = static_cast<int64_t>(number("--delay-us", value()) * 1000.0 + 0.5);
      haveDelay = true;
    } else if (a == "--queue-bytes") {
      double v = number("--queue-bytes", value());
      if (v < 1) usage("--queue-bytes must be at least 1");
      o.queueBytes = static_cast<uint64_t>(v);
    } else if (a == "--netns") {
      o.namespaces.emplace_back(value());
    } else if (a == "--ignore-stdin") {
      o.ignoreStdin = true;
    } else if (a == "--help" || a == "-h") {
      usage(nullptr);
    } else {
      usage(("unknown argument '" + a + "'").c_str());
    }
  }
  if (!haveRate) usage("--rate-bps is required");
  if (!haveDelay) usage("--delay-us is required");
  if (o.namespaces.size() < 2) usage("at least two --netns");
  if (o.queueBytes == 0) {
    long double bdp = static_cast<long double>(o.rateBps) / 8.0L *
                      static_cast<long double>(o.delayNs) / 1e9L;
    long double q = 2.0L * bdp;
    o.queueBytes = q > 4.0L * 1024 * 1024 ? static_cast<uint64_t>(q) : 4u * 1024 * 1024;
  }
  return o;
}

// Reports what failed with errno's text, and exits 1. errno is read before `what` is built.
struct Fail {
  int err = errno;
  [[noreturn]] void operator()(const std::string& what) const {
    std::fprintf(stderr, "link-emulator: %s: %s\n", what.c_str(), std::strerror(err));
    std::exit(1);
  }
};
#define die(what) Fail{}(what)

// Enters namespace `ns`, makes a TAP `eth0` there, and comes back to `home`.
int makeTap(const std::string& ns, int home) {
  std::string path = "/var/run/netns/" + ns;
  int nsfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) die("open " + path);
  if (setns(nsfd, CLONE_NEWNET) != 0) die("setns into " + path);
  close(nsfd);
  // The TAP belongs to the namespace of whoever opens /dev/net/tun: open it inside.
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die("open /dev/net/tun in namespace " + ns);
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) die("TUNSETIFF eth0 (IFF_TAP) in namespace " + ns);
  if (setns(home, CLONE_NEWNET) != 0) die("setns back to the original namespace");
  return fd;
}

class Emulator {
 public:
  Emulator(Options o, std::vector<Port> ports) : o_(std::move(o)), ports_(std::move(ports)) {
    macs_.reserve(64);
  }

  int run();

 private:
  void epollAdd(int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl add");
  }
  void epollMod(size_t p, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = p;
    if (epoll_ctl(ep_, EPOLL_CTL_MOD, ports_[p].fd, &ev) != 0) die("epoll_ctl mod");
  }
  bool readPort(size_t p);
  void route(size_t from, std::vector<uint8_t>&& frame, int64_t t);
  void enqueue(size_t to, std::vector<uint8_t>&& frame, int64_t t);
  void flush(size_t p, int64_t now);
  int64_t nextDue() const;
  void report(int& budget, const char* fmt, const std::string& ns, int err);
  void summary() const;

  Options o_;
  std::vector<Port> ports_;
  std::unordered_map<uint64_t, size_t> macs_;
  Pool pool_;
  Counters c_;
  std::vector<uint8_t> scratch_;  // the buffer the next read goes into (large)
  int ep_ = -1;
  int writeErrorsBudget_ = kErrorReports;
};

constexpr uint64_t kTagStdin = 1ull << 32;
constexpr uint64_t kTagSignal = (1ull << 32) + 1;

uint64_t mac(const uint8_t* p) {
  uint64_t m = 0;
  for (int i = 0; i < 6; ++i) m = (m << 8) | p[i];
  return m;
}

void Emulator::report(int& budget, const char* what, const std::string& ns, int err) {
  if (budget <= 0) return;
  std::fprintf(stderr, "link-emulator: %s (namespace %s): %s%s\n", what, ns.c_str(),
               std::strerror(err), --budget == 0 ? " (further such errors only counted)" : "");
}

// Reads up to kReadBurst frames from port p; false when it has nothing more to read now.
bool Emulator::readPort(size_t p) {
  for (int n = 0; n < kReadBurst; ++n) {
    if (scratch_.capacity() < kLargeBuffer) scratch_ = pool_.take(kLargeBuffer);
    scratch_.resize(kLargeBuffer);
    ssize_t r = read(ports_[p].fd, scratch_.data(), scratch_.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      // A TAP read fails only when something is badly wrong (the device gone): say so and stop.
      die("read from the TAP in namespace " + ports_[p].ns);
    }
    int64_t t = nowNs();
    size_t len = static_cast<size_t>(r);
    if (len >= kLargeBuffer) {  // the kernel may report the whole length of what it cut short
      ++c_.oversize;
      continue;
    }
    if (len < 14) {
      ++c_.runts;
      continue;
    }
    ++c_.framesIn;
    c_.bytesIn += len;
    std::vector<uint8_t> frame;
    if (len <= kSmallBuffer) {
      frame = pool_.take(len);
      std::memcpy(frame.data(), scratch_.data(), len);
    } else {
      scratch_.resize(len);
      frame = std::move(scratch_);
      scratch_ = {};
    }
    route(p, std::move(frame), t);
  }
  return true;
}

void Emulator::route(size_t from, std::vector<uint8_t>&& frame, int64_t t) {
  const uint8_t* dst = frame.data();
  const uint8_t* src = frame.data() + 6;
  if ((src[0] & 1) == 0) macs_[mac(src)] = from;  // learn (multicast sources are bogus)
  if ((dst[0] & 1) == 0) {
    auto it = macs_.find(mac(dst));
    if (it != macs_.end()) {
      if (it->second == from) {  // back where it came from: a bridge filters it
        ++c_.hairpin;
        pool_.give(std::move(frame));
      } else {
        enqueue(it->second, std::move(frame), t);
      }
      return;
    }
  }
  // Broadcast, multicast or unknown unicast: a copy to every other port, the frame itself last.
  size_t last = from == ports_.size() - 1 ? ports_.size() - 2 : ports_.size() - 1;
  for (size_t p = 0; p < ports_.size(); ++p) {
    if (p == from || p == last) continue;
    std::vector<uint8_t> copy = pool_.take(frame.size());
    std::memcpy(copy.data(), frame.data(), frame.size());
    enqueue(p, std::move(copy), t);
  }
  enqueue(last, std::move(frame), t);
}

void Emulator::enqueue(size_t to, std::vector<uint8_t>&& frame, int64_t t) {
  Port& port = ports_[to];
  uint64_t bytes = frame.size();
  if (port.queuedBytes + bytes > o_.queueBytes) {
    ++port.drops;
    port.dropBytes += bytes;
    pool_.give(std::move(frame));
    return;
  }
  // tx = max(t, busyUntil) + bytes*8/rate, in whole nanoseconds with the remainder carried so that
  // a long train of frames is timed exactly.
  if (t >= port.busyUntil) {
    port.busyUntil = t;
    port.busyCarry = 0;
  }
  unsigned __int128 num = static_cast<unsigned __int128>(bytes) * 8u * 1'000'000'000u +
                          port.busyCarry;
  port.busyUntil += static_cast<int64_t>(num / o_.rateBps);
  port.busyCarry = static_cast<uint64_t>(num % o_.rateBps);
  port.queuedBytes += bytes;
  port.queue.push_back(Frame{std::move(frame), port.busyUntil + o_.delayNs});
}

// Writes port p's frames that are due by `now`.
void Emulator::flush(size_t p, int64_t now) {
  Port& port = ports_[p];
  while (!port.queue.empty() && port.queue.front().due <= now) {
    Frame& f = port.queue.front();
    ssize_t w = write(port.fd, f.data.data(), f.data.size());
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Kept at the head of the queue and tried again when the TAP is writable.
      ++c_.writeAgain;
      if (!port.waitingWritable) {
        port.waitingWritable = true;
        epollMod(p, EPOLLIN | EPOLLOUT);
      }
      return;
    }
    if (w < 0) {
      // e.g. EIO while the namespace's eth0 is still down: the frame is lost, as on a real link.
      ++c_.writeErrors;
      report(writeErrorsBudget_, "write to the TAP", port.ns, errno);
    } else if (static_cast<size_t>(w) != f.data.size()) {
      ++c_.writeErrors;
      if (writeErrorsBudget_ > 0) {
        --writeErrorsBudget_;
        std::fprintf(stderr, "link-emulator: short write to the TAP in namespace %s: %zd of %zu\n",
                     port.ns.c_str(), w, f.data.size());
      }
    } else {
      ++port.framesOut;
      port.bytesOut += f.data.size();
    }
    port.queuedBytes -= f.data.size();
    pool_.give(std::move(f.data));
    port.queue.pop_front();
  }
  if (port.waitingWritable) {
    port.waitingWritable = false;
    epollMod(p, EPOLLIN);
  }
}

int64_t Emulator::nextDue() const {
  int64_t next = INT64_MAX;
  for (const Port& port : ports_)
    if (!port.waitingWritable && !port.queue.empty() && port.queue.front().due < next)
      next = port.queue.front().due;
  return next;
}

void Emulator::summary() const {
  uint64_t frames = 0, bytes = 0, drops = 0, dropBytes = 0, queued = 0;
  for (const Port& p : ports_) {
    frames += p.framesOut;
    bytes += p.bytesOut;
    drops += p.drops;
    dropBytes += p.dropBytes;
    queued += p.queue.size();
  }
  std::fprintf(stderr,
               "link-emulator: forwarded %llu frames, %llu bytes; read %llu frames, %llu bytes; "
               "queue-full drops %llu frames, %llu bytes; write errors %llu; write retries "
               "(EAGAIN) %llu; runts %llu; oversize %llu; hairpin %llu; left queued at exit %llu\n",
               (unsigned long long)frames, (unsigned long long)bytes,
               (unsigned long long)c_.framesIn, (unsigned long long)c_.bytesIn,
               (unsigned long long)drops, (unsigned long long)dropBytes,
               (unsigned long long)c_.writeErrors, (unsigned long long)c_.writeAgain,
               (unsigned long long)c_.runts, (unsigned long long)c_.oversize,
               (unsigned long long)c_.hairpin, (unsigned long long)queued);
}

int Emulator::run() {
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  if (ep_ < 0) die("epoll_create1");
  for (size_t p = 0; p < ports_.size(); ++p) epollAdd(ports_[p].fd, EPOLLIN, p);

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) die("signalfd");
  epollAdd(sfd, EPOLLIN, kTagSignal);

  bool watchStdin = !o_.ignoreStdin;
  if (watchStdin) {
    epoll_event ev{};
    ev.events = EPOLLIN;  // EPOLLHUP and EPOLLERR come anyway
    ev.data.u64 = kTagStdin;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, STDIN_FILENO, &ev) != 0) {
      // A regular file or /dev/null cannot be watched, and is at its end at once.
      std::fprintf(stderr,
                   "link-emulator: standard input cannot be watched for its end (%s): make it a "
                   "pipe, or pass --ignore-stdin\n",
                   std::strerror(errno));
      return 2;
    }
  }

  std::printf("ready\n");
  if (std::fflush(stdout) != 0) die("stdout: writing `ready`");

  std::vector<epoll_event> events(ports_.size() + 2);
  bool running = true;
  while (running) {
    int64_t next = nextDue();
    timespec timeout{};
    timespec* tp = nullptr;
    if (next != INT64_MAX) {
      int64_t wait = next - nowNs();
      if (wait < 0) wait = 0;
      timeout.tv_sec = wait / 1'000'000'000;
      timeout.tv_nsec = wait % 1'000'000'000;
      tp = &timeout;
    }
    int n = epoll_pwait2(ep_, events.data(), static_cast<int>(events.size()), tp, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_pwait2");
    }
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kTagSignal) {
        signalfd_siginfo si{};
        while (read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
          std::fprintf(stderr, "link-emulator: %s: exiting\n",
                       strsignal(static_cast<int>(si.ssi_signo)));
          running = false;
        }
      } else if (tag == kTagStdin) {
        // One read per readiness report: stdin stays blocking (it may be a terminal shared with a
        // shell), and a pipe or terminal reported readable does not block a single read.
        char buf[512];
        ssize_t r = read(STDIN_FILENO, buf, sizeof buf);  // what the parent writes is ignored
        if (r == 0) {
          std::fprintf(stderr, "link-emulator: standard input closed: exiting\n");
          running = false;
        } else if (r < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
          std::fprintf(stderr, "link-emulator: read from standard input: %s: exiting\n",
                       std::strerror(errno));
          running = false;
        }
      } else {
        size_t p = static_cast<size_t>(tag);
        if (events[i].events & EPOLLOUT) flush(p, nowNs());  // clears EPOLLOUT when it can
        if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) readPort(p);
      }
    }
    int64_t now = nowNs();
    for (size_t p = 0; p < ports_.size(); ++p)
      if (!ports_[p].waitingWritable) flush(p, now);
  }
  summary();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  std::signal(SIGPIPE, SIG_IGN);
  // Signals are read from a signalfd; block them before anything else can be interrupted.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  if (sigprocmask(SIG_BLOCK, &sigs, nullptr) != 0) die("sigprocmask");
  // A sleeping thread's timers may fire up to its timer slack late (50 us by default): as precise
  // as the kernel allows, for delays of tens of microseconds.
  if (prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) != 0) die("prctl(PR_SET_TIMERSLACK)");

  int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) die("open /proc/self/ns/net");
  std::vector<Port> ports;
  for (const std::string& ns : o.namespaces) {
    Port p;
    p.ns = ns;
    p.fd = makeTap(ns, home);
    ports.push_back(std::move(p));
  }
  close(home);
  return Emulator(std::move(o), std::move(ports)).run();
}
