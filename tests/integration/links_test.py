"""tools/netns.py's shaped link through tools/link_emulator.cc: two hosts (network namespaces) on a
100mbit link with 5 ms of one-way delay. Checks only what the emulator guarantees whatever the
machine's load, lower bounds (a loaded machine is slower, never faster):

  (a) a TCP round trip of one byte between the hosts takes at least 2 x 5 ms;
  (b) sending 4 MB from one host to the other takes at least 4e6 x 8 / 100e6 = 0.32 s;
  (c) the 4 MB arrive intact (SHA-256 on both sides).

It prints what it measured. Standard library only; needs root, iproute2 and /dev/net/tun, and
exits 77 (skipped) where namespaces or TAP devices cannot be made. Run by meson (suite integration)
with the emulator's path, or directly:

    python3 tests/integration/links_test.py [path/to/link-emulator]
"""
import hashlib
import json
import os
import select
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no tools/__pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import netns  # noqa: E402

RATE, RATE_BPS, DELAY_MS = "100mbit", 100e6, 5.0
BULK_BYTES = 4_000_000
ROUNDS = 20
PORT = 5201
START_SECONDS = 20   # for a Python to start inside a namespace on a loaded machine
RUN_SECONDS = 40     # for each client run (under a second idle); meson gives 120 s in all

# The server, in host 1: one connection at a time; its first line says what to do.
#   echo N    echo every N-byte message back until the client closes
#   sink N    read N bytes, answer "<bytes read> <sha256 hex>\n"
SERVER = r"""
import hashlib, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(4)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    with c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = c.makefile("rb")
        what = f.readline().split()
        if len(what) != 2:
            continue
        n = int(what[1])
        if what[0] == b"echo":
            while True:
                m = f.read(n)
                if len(m) < n:
                    break
                c.sendall(m)
        elif what[0] == b"sink":
            h, got = hashlib.sha256(), 0
            while got < n:
                chunk = f.read1(min(1 << 20, n - got))
                if not chunk:
                    break
                h.update(chunk)
                got += len(chunk)
            c.sendall(f"{got} {h.hexdigest()}\n".encode())
"""

# The client, in host 0: prints one JSON line.
CLIENT = r"""
import hashlib, json, os, socket, sys, time
addr, port, verb, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
c = socket.create_connection((addr, port), timeout=60)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def line():
    b = b""
    while not b.endswith(b"\n"):
        m = c.recv(4096)
        if not m:
            raise SystemExit("connection closed early")
        b += m
    return b.decode()
if verb == "rtt":
    c.sendall(b"echo 1\n")
    rtts = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.sendall(b"x")
        if c.recv(1) != b"x":
            raise SystemExit("bad echo")
        rtts.append(time.perf_counter() - t0)
    print(json.dumps({"rtts": rtts}))
else:
    data = os.urandom(n)
    c.sendall(f"sink {n}\n".encode())
    t0 = time.perf_counter()
    c.sendall(data)
    got, digest = line().split()
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "sent": hashlib.sha256(data).hexdigest(),
                      "received": digest, "received_bytes": int(got)}))
"""


def start_server(hosts):
    server = subprocess.Popen(hosts.exec_args(1) + [sys.executable, "-c", SERVER,
                                                    hosts.address(1), str(PORT)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([server.stdout], [], [], START_SECONDS)
    said = server.stdout.readline() if ready else ""
    if said.strip() != "listening":
        server.kill()
        _, err = server.communicate()
        raise RuntimeError(f"the echo server in {hosts.names[1]} did not start: {err.strip()}")
    return server


def client(hosts, verb, n):
    r = subprocess.run(hosts.exec_args(0) + [sys.executable, "-c", CLIENT, hosts.address(1),
                                             str(PORT), verb, str(n)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=RUN_SECONDS)
    if r.returncode != 0:
        raise RuntimeError(f"client {verb} in {hosts.names[0]} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main():
    emulator = sys.argv[1] if len(sys.argv) > 1 else None
    failures = []
    link = netns.Link(rate=RATE, delay_ms=DELAY_MS)
    try:
        hosts = netns.Hosts(2, link, hosts_file=False, emulator=emulator).__enter__()
    except netns.Unavailable as e:
        print(f"skipped: {e}")
        return 77
    except (RuntimeError, ValueError) as e:  # no emulator, or it could not start
        print(f"FAIL: {e}")
        return 1
    try:
        print(f"link: {link.describe()}; emulator {hosts.emulator}")
        server = start_server(hosts)
        try:
            rtts = client(hosts, "rtt", ROUNDS)["rtts"]
            floor = 2 * DELAY_MS / 1000
            print(f"(a) round trip of 1 byte, {ROUNDS} rounds: min {min(rtts) * 1e3:.3f} ms, "
                  f"median {statistics.median(rtts) * 1e3:.3f} ms, max {max(rtts) * 1e3:.3f} ms "
                  f"(at least {floor * 1e3:g} ms)")
            if min(rtts) < floor:
                failures.append(f"a round trip took {min(rtts) * 1e3:.3f} ms < {floor * 1e3:g} ms")

            bulk = client(hosts, "sink", BULK_BYTES)
            floor = BULK_BYTES * 8 / RATE_BPS
            print(f"(b) {BULK_BYTES} bytes in {bulk['seconds']:.3f} s, "
                  f"{BULK_BYTES * 8 / bulk['seconds'] / 1e6:.1f} Mbit/s of payload "
                  f"(at least {floor:g} s)")
            if bulk["seconds"] < floor:
                failures.append(f"{BULK_BYTES} bytes took {bulk['seconds']:.3f} s < {floor:g} s")
            print(f"(c) sha256 sent {bulk['sent'][:16]}..., received {bulk['received'][:16]}... "
                  f"({bulk['received_bytes']} bytes)")
            if bulk["received_bytes"] != BULK_BYTES or bulk["received"] != bulk["sent"]:
                failures.append(f"received {bulk['received_bytes']} bytes, sha256 "
                                f"{bulk['received']}; sent {BULK_BYTES}, {bulk['sent']}")
        finally:
            server.kill()
            server.wait()
    except Exception as e:  # a harness failure, reported as a failure with its reason
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        hosts.close()
    print("emulator:", hosts.emulator_stderr.splitlines()[-1] if hosts.emulator_stderr else "-")
    for f in failures:
        print("FAIL:", f)
    print("FAILED" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
