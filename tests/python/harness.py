"""Shared helpers of the Python tests (tests/python/): skipping, temporary folders, scenarios and
`node-launcher run SCENARIO -- python3 ...` with a deadline.

meson runs each test with the interpreter the extension was built for (the one that runs meson:
on Debian /usr/bin/python3) and sets NODE_LAUNCHER, STARLING_SOURCE_ROOT and PYTHONPATH (the
build's python/ folder). A test whose modules are missing exits 77, meson's "skipped".
"""

import importlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile

SKIP = 77


def require(*modules):
    """Exits 77 (skipped) unless every module imports."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            print(f"skipped: {name} is not importable by {sys.executable} ({e}); Debian: "
                  "apt-get install python3-numpy python3-torch", flush=True)
            sys.exit(SKIP)


def source_root():
    return os.environ.get("STARLING_SOURCE_ROOT",
                          os.path.dirname(os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))))


def node_launcher():
    path = os.environ.get("NODE_LAUNCHER")
    if not path or not os.path.exists(path):
        raise SystemExit(f"NODE_LAUNCHER={path!r} is not a node-launcher binary (meson sets it)")
    return path


class TempDir:
    """A fresh folder, removed on exit unless the test failed (kept for a look)."""

    def __init__(self, name):
        self.path = tempfile.mkdtemp(prefix=f"starling-{name}-")

    def __enter__(self):
        return self.path

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            print(f"kept {self.path} for inspection", flush=True)
        return False


def free_ports(count):
    """`count` distinct loopback ports that were free a moment ago, outside the kernel's
    ephemeral range, as the launcher picks them (runtime::freeLoopbackPorts): a port from
    bind(0) is an ephemeral one, which a UCX worker of a test running beside this one can take
    (for its own sockets) before the peer binds it."""
    lo, hi = 32768, 60999
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        pass
    first, last = 10000, lo - 1
    if last - first < 4 * count:
        first, last = hi + 1, 65535
    span = last - first + 1
    start = random.SystemRandom().randrange(span)
    ports = []
    for k in range(span):
        if len(ports) == count:
            break
        port = first + (start + k) % span
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    if len(ports) < count:
        raise RuntimeError(f"cannot find {count} free loopback ports")
    return ports


def embedded_scenario(folder, name, nodes, algorithm=None, extra=None):
    """Writes an embedded-run scenario (no problem, no rounds: the trainer owns both) and returns
    its path. `algorithm` defaults to DSGD, the plain gossip that `mix` runs."""
    scenario = {
        "schema_version": 1,
        "name": name,
        "nodes": nodes,
        "seed": 7,
        "topology": {"kind": "ring"},
        "algorithm": algorithm or {"kind": "dsgd", "step_size": 0.1},
    }
    scenario.update(extra or {})
    path = os.path.join(folder, f"{name}.json")
    with open(path, "w") as f:
        json.dump(scenario, f, indent=1)
    return path


def run_launcher(scenario, out, command, timeout=240, env=None):
    """Runs `node-launcher run SCENARIO --out OUT -- COMMAND...`; returns (exit code, output).
    Every rank's program gets this environment (PYTHONPATH included) plus `env`."""
    env = dict(os.environ, **(env or {}))
    args = [node_launcher(), "run", scenario, "--out", out, "--"] + command
    try:
        p = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        output = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode()
        raise AssertionError(f"node-launcher did not finish within {timeout} s:\n{output}")
    return p.returncode, p.stdout


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def read_peer_log(path):
    """A peer log (peers/rank-R.jsonl): {round: x} and the membership changes it applied."""
    rounds, changes = {}, []
    for line in open(path):
        j = json.loads(line)
        if "membership" in j:
            changes.append(j["membership"])
        elif "x" in j:
            rounds[j["round"]] = j["x"]
    return rounds, changes
