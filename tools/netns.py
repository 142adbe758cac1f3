#!/usr/bin/env python3
"""Hosts on one machine: Linux network namespaces joined by a switch, for multi-host tests and the
slow-link benchmark (docs/testing.md, "Across hosts").

Each host is a network namespace with its own loopback and one interface, eth0, holding an
address in 198.18.0.0/15 (RFC 2544's range for network benchmarking; nothing here ever sends to any
other non-loopback address). The hosts' eth0s are veth pairs whose other ends sit on a bridge in a
namespace of its own (the switch), so the machine's own network namespace is never touched. With a
`link`, every host's eth0 and every switch port gets a `tc netem` qdisc with that rate and half the
delay, so that a frame from one host to another crosses one rate limit per direction and the whole
one-way delay.

Standard library only; needs root (CAP_SYS_ADMIN) and iproute2. As a module:

    with Hosts(4, link=Link(rate="1gbit", delay_ms=1.0)) as hosts:
        subprocess.run(hosts.exec_args(0) + ["node-launcher", ...])

and from the command line (for trying things by hand):

    tools/netns.py up 4 [--rate 1gbit --delay-ms 1]    prints the namespaces, leaves them up
    tools/netns.py down                                removes every namespace this tool made

Every namespace is named starling-<pid>-..., <pid> being the process that made it; Hosts removes
its own on exit (normal, exception, SIGTERM or SIGINT), and removes those of dead processes when it
starts, so that a test killed by a timeout does not leave them behind for ever.
"""

import argparse
import atexit
import dataclasses
import os
import re
import signal
import subprocess
import sys

SUBNET = "198.18.0"  # hosts are 198.18.0.1 .. 198.18.0.N, /24
PREFIX = "starling-"


class Unavailable(Exception):
    """Namespaces cannot be made here (not root, no iproute2, a container without the right)."""


@dataclasses.dataclass
class Link:
    rate: str = ""        # tc rate, e.g. "1gbit"; "" for no limit
    delay_ms: float = 0.0  # one-way delay between two hosts

    def describe(self):
        parts = []
        if self.rate:
            parts.append(self.rate)
        if self.delay_ms:
            parts.append(f"{self.delay_ms:g} ms")
        return ", ".join(parts) or "no shaping"


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


def remove(names):
    for ns in names:
        _kill_inside(ns)
        _ip("netns", "del", ns, check=False)
        etc = os.path.join("/etc/netns", ns)
        if os.path.isdir(etc):
            for f in os.listdir(etc):
                os.unlink(os.path.join(etc, f))
            os.rmdir(etc)


def sweep_stale():
    """Removes namespaces made by processes that no longer exist."""
    stale = []
    for ns in _listed():
        m = re.match(re.escape(PREFIX) + r"(\d+)-", ns)
        if m and not _alive(int(m.group(1))):
            stale.append(ns)
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

    def __init__(self, count, link=None, hosts_file=True, tag=None):
        if not 1 <= count <= 200:
            raise ValueError("between 1 and 200 hosts")
        self.count = count
        self.link = link or Link()
        self.hosts_file = hosts_file
        self.tag = tag or f"{PREFIX}{os.getpid()}-{id(self) % 100000}"
        self.switch = f"{self.tag}-sw"
        self.names = [f"{self.tag}-h{i}" for i in range(count)]
        self._made = []
        self._previous = {}

    # ---- addresses and names ----
    def address(self, i):
        return f"{SUBNET}.{i + 1}"

    def hostname(self, i):
        """A name every host resolves (through its own /etc/hosts: see `ip netns exec`)."""
        return f"node{i}"

    def exec_args(self, i):
        return ["ip", "netns", "exec", self.names[i]]

    # ---- lifetime ----
    def __enter__(self):
        check_available()
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
        remove(reversed(self._made))
        self._made = []
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _add(self, ns):
        _ip("netns", "add", ns)
        self._made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _netem(self, ns, dev):
        if not self.link.rate and not self.link.delay_ms:
            return
        args = ["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "netem"]
        if self.link.delay_ms:
            args += ["delay", f"{self.link.delay_ms / 2:g}ms"]
        if self.link.rate:
            args += ["rate", self.link.rate]
        # netem's default queue (1000 packets) overflows at these rates with 64 KiB TSO bursts:
        # a queue of a few bandwidth-delay products keeps losses out of the measurement.
        args += ["limit", "100000"]
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")

    def _build(self):
        self._add(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        lines = ["127.0.0.1 localhost"]
        lines += [f"{self.address(i)} {self.hostname(i)}" for i in range(self.count)]
        for i, ns in enumerate(self.names):
            self._add(ns)
            port = f"p{i}"
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
                "netns", self.switch)
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            self._netem(ns, "eth0")
            self._netem(self.switch, port)
            if self.hosts_file:
                # `ip netns exec NS` mounts /etc/netns/NS/hosts over /etc/hosts for what it runs.
                etc = os.path.join("/etc/netns", ns)
                os.makedirs(etc, exist_ok=True)
                with open(os.path.join(etc, "hosts"), "w") as f:
                    f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    up = sub.add_parser("up", help="make N hosts and leave them up")
    up.add_argument("count", type=int)
    up.add_argument("--rate", default="")
    up.add_argument("--delay-ms", type=float, default=0.0)
    sub.add_parser("down", help="remove every namespace this tool made")
    a = ap.parse_args()
    if a.verb == "down":
        mine = [ns for ns in _listed() if ns.startswith(PREFIX)]
        remove(mine)
        print(f"removed {len(mine)} namespaces")
        return 0
    try:
        # Not named after this process, which is about to exit: no sweep removes them.
        hosts = Hosts(a.count, Link(a.rate, a.delay_ms), tag=f"{PREFIX}kept").__enter__()
    except Unavailable as e:
        print(f"netns.py: {e}", file=sys.stderr)
        return 77
    atexit.unregister(hosts.close)  # `up` leaves them for the user; `down` removes them
    for i, ns in enumerate(hosts.names):
        print(f"{ns} {hosts.address(i)} {hosts.hostname(i)}")
    print(f"(link: {hosts.link.describe()}; `tools/netns.py down` removes them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
