#!/usr/bin/env python3
"""Hosts on one machine: Linux network namespaces joined by a switch, for multi-host tests and the
slow-link benchmark (docs/testing.md, "Across hosts").

Each host is a network namespace with its own loopback and one interface, eth0, holding an
address in 198.18.0.0/15 (RFC 2544's range for network benchmarking; nothing here ever sends to any
other non-loopback address). The machine's own network namespace is never given an address or a
route. Two kinds of switch:

- Without a `link` (or with one that sets neither rate nor delay): the hosts' eth0s are veth pairs
  whose other ends sit on a bridge in a namespace of its own (the switch). Full speed, no delay.
- With a `link` that sets a rate or a delay: tools/link_emulator.cc, `link-emulator`, a process in
  the machine's namespace, makes every host's eth0 a TAP device and is the switch: an Ethernet
  learning switch whose every port (the direction into each host) sends at most `rate` and adds
  the whole one-way `delay_ms` once, so that a frame from one host to another crosses one rate limit
  and the delay once, as a link of that rate and latency would (a round trip: twice the delay).
  Each port holds at most `queue_bytes` (by default max(2 x rate x delay, 4 MiB)); frames beyond
  that are dropped, as a router's full queue drops them. eth0's MTU is 65000 so that TCP sends few,
  large frames through the emulator. (This is not `tc netem`: the kernels this was written for have
  no netem, only tbf/htb. The emulator is userspace, so at 10 Gbit/s and above the machine's CPU,
  not the rate asked for, may be what limits a transfer: measure.)

Standard library only; needs root (CAP_SYS_ADMIN) and iproute2, and for a shaped link
/dev/net/tun and the built link-emulator (`ninja -C build tools/link-emulator`; found in
build-release/tools or build/tools, or given as `emulator=`). As a module:

    with Hosts(4, link=Link(rate="1gbit", delay_ms=1.0)) as hosts:
        subprocess.run(hosts.exec_args(0) + ["node-launcher", ...])

and from the command line (for trying things by hand):

    tools/netns.py up 4 [--rate 1gbit --delay-ms 1]    prints the namespaces, leaves them up
    tools/netns.py down                                removes what `up` made (and leftovers of
                                                       dead processes), never a live test's

Every namespace is named starling-<pid>-..., <pid> being the process that made it; Hosts removes
its own on exit (normal, exception, SIGTERM or SIGINT), and removes those of dead processes when it
starts, so that a test killed by a timeout does not leave them behind for ever. The emulator reads
its standard input, a pipe Hosts holds, and exits when that closes: it dies with the process that
started it. `up` with a link leaves its emulator running detached (it does not watch its input);
the pid of every emulator is in /run/starling-netns/<tag>.pid, its stderr in <tag>.log, and `down`
stops them all before it removes the namespaces.
"""

import argparse
import atexit
import dataclasses
import os
import re
import select
import signal
import subprocess
import sys
import time

SUBNET = "198.18.0"  # hosts are 198.18.0.1 .. 198.18.0.N, /24
PREFIX = "starling-"
STATE_DIR = "/run/starling-netns"  # <tag>.pid and <tag>.log of every link-emulator started here
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATOR_PATHS = ("build-release/tools/link-emulator", "build/tools/link-emulator")
TAP_MTU = 65000
READY_SECONDS = 10.0  # how long the emulator has to make its TAPs and say `ready`
STOP_SECONDS = 5.0    # how long it has to exit after SIGTERM before SIGKILL


class Unavailable(Exception):
    """Namespaces cannot be made here (not root, no iproute2, a container without the right)."""


_RATE_UNITS = {"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
               "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40,
               "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,
               "kibps": 8 * 2**10, "mibps": 8 * 2**20, "gibps": 8 * 2**30, "tibps": 8 * 2**40}


def rate_bps(text):
    """Bits per second of a rate written as tc writes it: "100mbit", "1gbit", "10gbit", "500kbit",
    "1.5gbit", "125mbps" (bytes), a bare number (bits)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _RATE_UNITS:
        raise ValueError(f"not a rate: {text!r} (e.g. 100mbit, 1gbit, 10gbit)")
    bps = round(float(m.group(1)) * _RATE_UNITS[m.group(2).lower()])
    if bps < 1:
        raise ValueError(f"rate {text!r} is below 1 bit/s")
    return bps


@dataclasses.dataclass
class Link:
    rate: str = ""        # tc rate, e.g. "1gbit"; "" for no limit
    delay_ms: float = 0.0  # one-way delay between two hosts
    queue_bytes: int = 0   # bytes a port of the emulator holds; 0: max(2 x rate x delay, 4 MiB)

    @property
    def shaped(self):
        return bool(self.rate) or self.delay_ms > 0

    def describe(self):
        parts = []
        if self.rate:
            parts.append(self.rate)
        if self.delay_ms:
            parts.append(f"{self.delay_ms:g} ms")
        if self.queue_bytes:
            parts.append(f"queue {self.queue_bytes} bytes")
        return ", ".join(parts) or "no shaping"

    def emulator_args(self):
        """link-emulator's shaping arguments. A delay with no rate: 1 Tbit/s, more than the
        emulator can move (no limit in effect), with a 64 MiB queue, not the default's 2 x rate x
        delay."""
        if self.delay_ms < 0:
            raise ValueError("a negative delay")
        args = ["--rate-bps", str(rate_bps(self.rate) if self.rate else 10**12),
                "--delay-us", f"{self.delay_ms * 1000:.3f}"]
        queue = self.queue_bytes or (0 if self.rate else 64 << 20)
        if queue:
            args += ["--queue-bytes", str(int(queue))]
        return args


def find_emulator(path=None):
    """The link-emulator to run: `path`, or the first built one under the repository root."""
    candidates = [path] if path else [os.path.join(ROOT, p) for p in EMULATOR_PATHS]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise RuntimeError("no link-emulator at " + " or ".join(candidates) +
                       " (build it: ninja -C build tools/link-emulator; or give its path:"
                       " emulator=, --emulator)")


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def _listed():
    r = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_inside(ns):
    """Kills every process still in namespace `ns` (a namespace lives while a process is in it)."""
    r = subprocess.run(["ip", "netns", "pids", ns], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _emulator_is(pid, tag):
    """Whether `pid` is still a link-emulator serving namespaces of `tag` (not a reused pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return (bool(argv) and os.path.basename(argv[0]) == b"link-emulator" and
            any(a.startswith(f"{tag}-h".encode()) for a in argv))


def _wait_gone(pid, tag, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _emulator_is(pid, tag):
            return True
        time.sleep(0.02)
    return not _emulator_is(pid, tag)


def stop_emulators(which=lambda tag: True):
    """Stops the link-emulators recorded in STATE_DIR whose tag `which` accepts (SIGTERM, then
    SIGKILL after STOP_SECONDS), and removes their records. Returns {tag: its stderr's last
    line}."""
    stopped = {}
    try:
        files = sorted(os.listdir(STATE_DIR))
    except FileNotFoundError:
        return stopped
    for name in files:
        if not name.endswith(".pid") or not which(name[:-4]):
            continue
        tag = name[:-4]
        pid_path = os.path.join(STATE_DIR, name)
        log_path = os.path.join(STATE_DIR, tag + ".log")
        try:
            with open(pid_path) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pid = None
        if pid is not None and _emulator_is(pid, tag):
            try:
                os.kill(pid, signal.SIGTERM)
                if not _wait_gone(pid, tag, STOP_SECONDS):
                    os.kill(pid, signal.SIGKILL)
                    _wait_gone(pid, tag, STOP_SECONDS)
            except ProcessLookupError:
                pass
        last = ""
        try:
            with open(log_path, errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
            last = lines[-1] if lines else ""
        except OSError:
            pass
        for p in (pid_path, log_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        stopped[tag] = last
    return stopped


def remove(names):
    for ns in names:
        _kill_inside(ns)
        _ip("netns", "del", ns, check=False)
        etc = os.path.join("/etc/netns", ns)
        if os.path.isdir(etc):
            for f in os.listdir(etc):
                os.unlink(os.path.join(etc, f))
            os.rmdir(etc)


def _dead_owner(name):
    m = re.match(re.escape(PREFIX) + r"(\d+)-", name)
    return bool(m) and not _alive(int(m.group(1)))


def sweep_stale():
    """Removes namespaces made by processes that no longer exist, and their emulators (which exit
    by themselves when their parent dies; this catches one that could not)."""
    stop_emulators(_dead_owner)
    stale = [ns for ns in _listed() if _dead_owner(ns)]
    remove(stale)
    return stale


def check_available():
    """Raises Unavailable with the reason when namespaces cannot be made here."""
    if os.geteuid() != 0:
        raise Unavailable("network namespaces need root (running as uid %d)" % os.geteuid())
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        r = subprocess.run(["ip", "netns", "add", probe], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise Unavailable("iproute2's `ip` is not installed")
    if r.returncode != 0:
        raise Unavailable("`ip netns add` failed: " + r.stderr.strip())
    _ip("netns", "del", probe, check=False)


class Hosts:
    """`count` hosts on one switch; see the module's comment."""

    def __init__(self, count, link=None, hosts_file=True, tag=None, emulator=None,
                 detach_emulator=False):
        """`emulator`: the link-emulator to run for a shaped link (default: find_emulator()).
        `detach_emulator`: the emulator outlives this process (for `up`; `down` stops it)."""
        if not 1 <= count <= 200:
            raise ValueError("between 1 and 200 hosts")
        self.count = count
        self.link = link or Link()
        self.hosts_file = hosts_file
        self.tag = tag or f"{PREFIX}{os.getpid()}-{id(self) % 100000}"
        self.switch = f"{self.tag}-sw"  # the bridge's namespace (unshaped links only)
        self.names = [f"{self.tag}-h{i}" for i in range(count)]
        self.emulator = emulator
        self.detach_emulator = detach_emulator
        self.emulator_stderr = ""  # what the emulator wrote on stderr, once it is stopped
        self._emulator = None      # its Popen while it runs
        self._made = []
        self._previous = {}
        if self.link.shaped:
            self.link.emulator_args()  # a bad rate fails here, before anything is made
            if count < 2:
                raise ValueError("a shaped link needs at least 2 hosts")

    # ---- addresses and names ----
    def address(self, i):
        return f"{SUBNET}.{i + 1}"

    def hostname(self, i):
        """A name every host resolves (through its own /etc/hosts: see `ip netns exec`)."""
        return f"node{i}"

    def exec_args(self, i):
        return ["ip", "netns", "exec", self.names[i]]

    # ---- lifetime ----
    @property
    def emulator_pid(self):
        return self._emulator.pid if self._emulator else None

    def __enter__(self):
        check_available()
        if self.link.shaped:
            if not os.path.exists("/dev/net/tun"):
                raise Unavailable("a shaped link needs TAP devices: no /dev/net/tun")
            self.emulator = find_emulator(self.emulator)
        sweep_stale()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._on_signal)
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _on_signal(self, signum, frame):
        self.close()
        raise SystemExit(128 + signum)

    def close(self):
        self._stop_emulator()
        remove(reversed(self._made))
        self._made = []
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _add(self, ns):
        _ip("netns", "add", ns)
        self._made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _state(self, ext):
        return os.path.join(STATE_DIR, self.tag + ext)

    def _start_emulator(self):
        os.makedirs(STATE_DIR, exist_ok=True)
        args = [self.emulator, *self.link.emulator_args()]
        for ns in self.names:
            args += ["--netns", ns]
        if self.detach_emulator:
            args.append("--ignore-stdin")
        with open(self._state(".log"), "wb") as log:
            # Its own session: a Ctrl-C at the terminal reaches the harness, which stops it in
            # order. Its stdin is a pipe only this process holds: when this process dies, it exits.
            self._emulator = subprocess.Popen(
                args, stdin=subprocess.DEVNULL if self.detach_emulator else subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        with open(self._state(".pid"), "w") as f:
            f.write(f"{self._emulator.pid}\n")
        said = b""
        deadline = time.monotonic() + READY_SECONDS
        out = self._emulator.stdout
        while b"\n" not in said:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                raise RuntimeError(f"link-emulator did not say `ready` in {READY_SECONDS:g} s: "
                                   + self._emulator_log())
            chunk = os.read(out.fileno(), 4096)
            if not chunk:
                break
            said += chunk
        if said.strip() != b"ready":
            try:
                rc = self._emulator.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                rc = None
            raise RuntimeError(f"link-emulator {' '.join(args)} failed (exit status {rc}, said "
                               f"{said.decode(errors='replace').strip()!r}): "
                               + self._emulator_log())
        out.close()

    def _emulator_log(self):
        try:
            with open(self._state(".log"), errors="replace") as f:
                return f.read().strip() or "(nothing on stderr)"
        except OSError as e:
            return f"(its stderr: {e})"

    def _stop_emulator(self):
        proc, self._emulator = self._emulator, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for f in (proc.stdin, proc.stdout):
            if f:
                f.close()
        self.emulator_stderr = self._emulator_log()
        for ext in (".pid", ".log"):
            try:
                os.unlink(self._state(ext))
            except FileNotFoundError:
                pass

    def _write_hosts_file(self, ns):
        # `ip netns exec NS` mounts /etc/netns/NS/hosts over /etc/hosts for what it runs.
        lines = ["127.0.0.1 localhost"]
        lines += [f"{self.address(i)} {self.hostname(i)}" for i in range(self.count)]
        etc = os.path.join("/etc/netns", ns)
        os.makedirs(etc, exist_ok=True)
        with open(os.path.join(etc, "hosts"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def _build(self):
        if self.link.shaped:
            self._build_emulated()
            return
        self._add(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, ns in enumerate(self.names):
            self._add(ns)
            port = f"p{i}"
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
                "netns", self.switch)
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            if self.hosts_file:
                self._write_hosts_file(ns)

    def _build_emulated(self):
        for ns in self.names:
            self._add(ns)
        self._start_emulator()  # makes every host's eth0
        for i, ns in enumerate(self.names):
            _ip("-n", ns, "link", "set", "eth0", "mtu", str(TAP_MTU), "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            if self.hosts_file:
                self._write_hosts_file(ns)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    up = sub.add_parser("up", help="make N hosts and leave them up")
    up.add_argument("count", type=int)
    up.add_argument("--rate", default="")
    up.add_argument("--delay-ms", type=float, default=0.0)
    up.add_argument("--queue-bytes", type=int, default=0)
    up.add_argument("--emulator", default=None, help="the link-emulator to run (a shaped link)")
    sub.add_parser("down", help="remove what `up` made, and what dead processes left behind")
    a = ap.parse_args()
    if a.verb == "down":
        # What `up` made, and what processes that have died left behind; never the namespaces
        # of a test that is still running.
        kept = f"{PREFIX}kept"
        for tag, last in stop_emulators(lambda tag: tag == kept).items():
            print(f"stopped the emulator of {tag}" + (f": {last}" if last else ""))
        mine = [ns for ns in _listed() if ns.startswith(kept + "-")]
        remove(mine)
        stale = sweep_stale()
        print(f"removed {len(mine) + len(stale)} namespaces")
        return 0
    try:
        # Not named after this process, which is about to exit: no sweep removes them; a shaped
        # link's emulator is detached and outlives this process.
        hosts = Hosts(a.count, Link(a.rate, a.delay_ms, a.queue_bytes), tag=f"{PREFIX}kept",
                      emulator=a.emulator, detach_emulator=True).__enter__()
    except Unavailable as e:
        print(f"netns.py: {e}", file=sys.stderr)
        return 77
    except (RuntimeError, ValueError) as e:
        print(f"netns.py: {e}", file=sys.stderr)
        return 1
    atexit.unregister(hosts.close)  # `up` leaves them for the user; `down` removes them
    for i, ns in enumerate(hosts.names):
        print(f"{ns} {hosts.address(i)} {hosts.hostname(i)}")
    emulated = f", emulator pid {hosts.emulator_pid}" if hosts.emulator_pid else ""
    print(f"(link: {hosts.link.describe()}{emulated}; `tools/netns.py down` removes them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
