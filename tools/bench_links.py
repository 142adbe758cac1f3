#!/usr/bin/python3
"""What a slow link costs: the gossip round and a whole training run across hosts (network
namespaces, tools/netns.py) joined by links of a set rate and one-way delay (tools/link_emulator.cc,
a userspace emulator: this kernel has no tc netem), for Starling and for Open MPI over the same
links. docs/benchmarks.md ("Slow links") has the results and how to read them.

    tools/bench_links.py [--build build-release] [--links 10gbit:0.05,1gbit:1,100mbit:10]
                         [--hosts 4] [--peers N] [--repeat 3] [--quick] [--out DIR]
                         [--dims 1e5,1e6] [--spec scenarios/compare/l1-logistic-ring8.json]
                         [--compressed LABEL] [--uncompressed LABEL] [--no-mpi]
                         [--skip-gossip] [--skip-train] [--no-reference] [--features D]
                         [--mpi-spin]
    tools/bench_links.py --tables OUT/results.json      the tables again, from the raw results

For every link (rate:delay_ms; the emulator gives each host-to-host path that rate and that
one-way delay) and, for reference, the hosts joined by a plain veth bridge (no shaping):

0. The link as measured: the round trip of one byte over TCP between hosts 0 and 1 (median of 20)
   and the throughput of one bulk TCP transfer (tests/integration/links_test.py's probes).
1. The gossip round on a ring of P ranks, one per host (or spread over the hosts in blocks):
   Starling's (`bench-gossip --worker` started in each host with every rank's host:port, UCX over
   TCP, as bench-gossip's driver starts its workers on one machine) and Open MPI's
   (`bench-gossip-mpi` launched by mpirun in host 0, reaching the other hosts through
   tests/integration/netns_rsh.sh; pml ob1, btl tcp,self, TCP on eth0 only, and
   mpi_yield_when_idle 1: the hosts share this machine's cores, and an Open MPI rank told it has a
   host's slot to itself polls without ever yielding its core, which starves the other ranks and
   the link emulator; --mpi-spin leaves it out), at each d (float32).
   A cell is bench-gossip's: the median over the timed rounds of the slowest rank's round; the
   table shows the median over --repeat runs (Starling and MPI interleaved). "exchange" is the
   share of a rank's round spent sending and waiting for its neighbours' messages (bench-gossip's
   phases; MPI_Neighbor_allgather for MPI).
2. Training to a target: `node-launcher peer` in each host on the spec's problem (by default the
   L1-logistic comparison problem, scenarios/compare/l1-logistic-ring8.json) with P nodes on a
   ring, UCX over TCP, log_every 10: Prox-LEAD uncompressed against Prox-LEAD with the spec's
   compressed run that needs the fewest bytes to the target in `node-launcher simulate` (checked
   first, with the rounds each needs; the training runs last a few logged rounds past the later).
   After `node-launcher merge`: the wall time (metrics.jsonl's wall_s, the slowest peer's) and the
   bytes all nodes sent at the first logged round at or below the target; the wall time per round
   (the peers' logs, from round log_every to the last, so that connecting is left out); and the
   time of a round spent waiting. Nothing in the peer logs or metrics records waiting, so it is
   derived: waiting = (wall time per round) - (compute per node per round), the latter measured
   by `node-launcher simulate` of the same scenario (every node in one process on one core, the
   in-process transport: a round's gradient, prox, codec, frames and combine, no network), as
   (wall_s of the last round - wall_s of round 0) / (rounds x nodes), median of --repeat runs.

Prints markdown tables and writes them to OUT/tables.md, and every raw measurement to
OUT/results.json (OUT: --out, default BUILD/bench-links). Needs root, iproute2, /dev/net/tun,
the build's node-launcher, bench-gossip, bench-gossip-mpi and link-emulator, and for the MPI
columns Open MPI's mpirun. Standard library only. Nothing is sent to any address outside
198.18.0.0/24 and loopback.
"""

import argparse
import copy
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import netns  # noqa: E402
import compare  # noqa: E402  (the spec format: load_spec, merge, prepare_data, first_at)
import links_test  # noqa: E402  (the link probes: start_server, client)

RSH_AGENT = os.path.join(ROOT, "tests", "integration", "netns_rsh.sh")
FLOAT32 = 4
FRAME_OVERHEAD = 36  # a dense frame: 32 bytes of header + 4 of CRC (docs/wire_format.md)
LOG_EVERY = 10
FULL_MODEL_LOG_MAX = 4096  # runtime/metrics.h's kFullModelLogMaxDim
MAX_ERR = 1e-3  # bench-gossip's check: a rank's final x within float32 rounding of the closed form

_port = [31000]


def next_ports(n):
    """Ports for one run; every run gets fresh ones (no TIME_WAIT from the run before)."""
    p = _port[0]
    _port[0] += n + 1
    if _port[0] > 60000:
        _port[0] = 31000
    return p


def say(*a):
    print(*a, file=sys.stderr, flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# ---- links ----

def parse_links(text):
    links = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        rate, _, delay = part.partition(":")
        try:
            netns.rate_bps(rate)
            d = float(delay or 0)
        except ValueError as e:
            raise SystemExit(f"bench_links: --links: {part!r}: {e} (rate:delay_ms, e.g. 1gbit:1)")
        links.append({"name": f"{rate}, {d:g} ms", "rate": rate, "delay_ms": d,
                      "rate_bps": netns.rate_bps(rate)})
    return links


def probe_link(hosts, link):
    """The round trip of one byte and one bulk transfer, host 0 to host 1."""
    out = {}
    server = links_test.start_server(hosts)
    try:
        rtts = links_test.client(hosts, "rtt", 20)["rtts"]
        out["rtt_ms_median"] = 1e3 * statistics.median(rtts)
        out["rtt_ms_min"] = 1e3 * min(rtts)
        # About 0.4 s at the link's rate, 4 MB to 50 MB.
        rate = link["rate_bps"] if link else 10e9
        n = int(min(50e6, max(4e6, rate * 0.4 / 8)))
        bulk = links_test.client(hosts, "sink", n)
        out["bulk_bytes"] = n
        out["bulk_s"] = bulk["seconds"]
        out["bulk_mbit_s"] = n * 8 / bulk["seconds"] / 1e6
        out["bulk_intact"] = bulk["sent"] == bulk["received"] and bulk["received_bytes"] == n
    finally:
        server.kill()
        server.wait()
    return out


# ---- processes ----

def wait_all(procs, timeout_s):
    """Exit codes of every process (killed at the deadline: None)."""
    end = time.monotonic() + timeout_s
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            codes.append(None)
    return codes


def log_tail(path, n=1500):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def placement(peers, hosts):
    """Rank r on host r * hosts // peers: blocks of consecutive ranks, one per host when equal."""
    return [r * hosts // peers for r in range(peers)]


# ---- part 1: the gossip round ----

def collect(directory, peers):
    """bench-gossip's collect(): per round the slowest rank's time; its median; per rank the mean
    round, its largest; the phases' means over ranks."""
    times, phases, rounds, maxerr = [], [], None, 0.0
    for r in range(peers):
        path = os.path.join(directory, f"rank-{r}.txt")
        try:
            with open(path) as f:
                lines = f.read().split("\n")
        except OSError:
            return {"error": f"rank {r} wrote no result"}
        try:
            assert lines[0].split()[0] == "rounds" and lines[1].split()[0] == "maxerr"
            n = int(lines[0].split()[1])
            maxerr = max(maxerr, float(lines[1].split()[1]))
            ph = [float(v) for v in lines[2].split()[1:]]
            t = [float(v) for v in lines[3:] if v.strip()]
        except (AssertionError, IndexError, ValueError):
            return {"error": f"rank {r}: unreadable result"}
        if len(t) != n or (rounds is not None and n != rounds):
            return {"error": f"rank {r} timed a different number of rounds"}
        rounds = n
        times.append(t)
        phases.append(ph)
    slowest = [max(t[i] for t in times) for i in range(rounds)]
    ph = [sum(p[i] for p in phases) / peers for i in range(len(phases[0]))]
    return {"ms": 1e3 * statistics.median(slowest),
            "mean_ms": 1e3 * max(sum(t) / len(t) for t in times),
            "rounds": rounds, "maxerr": maxerr, "checked": maxerr <= MAX_ERR,
            "phases_ms": [1e3 * p for p in ph], "slowest_ms": [1e3 * s for s in slowest]}


def exchange_share(cell, mpi):
    """The share of a rank's mean round in the exchange: bench-gossip's phase 1 (send and wait,
    CRC checks left out), bench-gossip-mpi's phase 0 (MPI_Neighbor_allgather)."""
    ph = cell.get("phases_ms")
    if not ph or sum(ph) <= 0:
        return None
    return ph[0 if mpi else 1] / sum(ph)


def gossip_args(a, dim):
    return ["--dim", str(dim), "--warmup", str(a.warmup), "--rounds-max", str(a.rounds_max),
            "--min-seconds", str(a.min_seconds)]


def gossip_timeout(link, dim, peers):
    # Warm-up and timed rounds at the link's rate (each host takes in 2 messages a round), 3x.
    per_round = 0.05
    if link:
        per_round += 2 * link["delay_ms"] / 1e3 + 2 * 2 * FLOAT32 * dim * 8 / link["rate_bps"]
    return 60 + 3 * (8 + 60) * per_round * max(1, peers // 4)


def run_gossip_starling(a, hosts, place, dim, work, link):
    os.makedirs(work, exist_ok=True)
    port = next_ports(len(place))
    addrs = ",".join(f"{hosts.address(h)}:{port + r}" for r, h in enumerate(place))
    procs, logs = [], []
    for r, h in enumerate(place):
        log = os.path.join(work, f"rank-{r}.log")
        logs.append(log)
        cmd = hosts.exec_args(h) + [a.bench_gossip, "--worker", "--rank", str(r), "--peers", addrs,
                                    "--tls", "tcp", "--out", os.path.join(work, f"rank-{r}.txt"),
                                    *gossip_args(a, dim)]
        with open(log, "w") as f:
            procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT))
    t0 = time.monotonic()
    codes = wait_all(procs, gossip_timeout(link, dim, len(place)))
    cell = collect(work, len(place))
    cell["process_s"] = time.monotonic() - t0
    if codes != [0] * len(codes):
        bad = next(i for i, c in enumerate(codes) if c != 0)
        cell = {"error": f"worker {bad} exited {codes[bad]}: {log_tail(logs[bad], 600).strip()}"}
    return cell


def run_gossip_mpi(a, hosts, place, dim, work, link):
    os.makedirs(work, exist_ok=True)
    hostfile = os.path.join(work, "hostfile")
    with open(hostfile, "w") as f:
        for h in range(hosts.count):
            slots = place.count(h)
            if slots:
                f.write(f"{hosts.hostname(h)} slots={slots}\n")
    env = dict(os.environ, STARLING_NETNS_MAP=",".join(
        f"{hosts.hostname(h)}={hosts.names[h]}" for h in range(hosts.count)))
    cmd = hosts.exec_args(0) + [
        "mpirun", "--allow-run-as-root", "--hostfile", hostfile, "-np", str(len(place)),
        "--map-by", "slot", "--bind-to", "none", "--mca", "plm_rsh_agent", RSH_AGENT,
        # No hwloc topology through shared memory: orted sometimes segfaults writing it.
        "--mca", "rtc_hwloc_vmhole", "none",
        "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
        "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
        *([] if a.mpi_spin else ["--mca", "mpi_yield_when_idle", "1"]),
        a.bench_gossip_mpi, *gossip_args(a, dim), "--out-dir", work]
    log = os.path.join(work, "mpirun.log")
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    code = wait_all([proc], gossip_timeout(link, dim, len(place)))[0]
    cell = collect(work, len(place))
    cell["process_s"] = time.monotonic() - t0
    if code != 0:
        cell = {"error": f"mpirun exited {code}: {log_tail(log, 600).strip()}"}
    return cell


def gossip_part(a, hosts, link, work):
    place = placement(a.peers, hosts.count)
    rows = []
    for dim in a.dims:
        runs = {"starling": [], "mpi": []}
        for rep in range(a.repeat):
            for impl in ("starling", "mpi") if a.mpi else ("starling",):
                d = os.path.join(work, f"gossip-d{dim}-{impl}-{rep}")
                fn = run_gossip_starling if impl == "starling" else run_gossip_mpi
                cell = fn(a, hosts, place, dim, d, link)
                failed = []
                while "error" in cell and len(failed) < 2:
                    # One more try (Open MPI's orted now and then segfaults at start in hwloc):
                    # counted and kept in the results.
                    say(f"  gossip d={dim_name(dim)} {impl} #{rep + 1} failed, again: {cell['error'][-300:]}")
                    failed.append(cell["error"])
                    shutil.rmtree(d, ignore_errors=True)
                    cell = fn(a, hosts, place, dim, d, link)
                if failed:
                    cell["failed_tries"] = failed
                runs[impl].append(cell)
                what = (f"{cell['ms']:.3f} ms (mean {cell['mean_ms']:.3f}, {cell['rounds']} rounds"
                        f"{'' if cell['checked'] else ', WRONG RESULT'})" if "ms" in cell
                        else "FAILED: " + cell["error"])
                say(f"  gossip d={dim_name(dim)} {impl} #{rep + 1}: {what}")
        rows.append({"dim": dim, "runs": runs})
    return rows


# ---- part 2: training to a target ----

def training_variants(a, spec):
    """The derived scenarios, checked with simulate: (uncompressed, compressed, the simulate
    table of every candidate)."""
    base = copy.deepcopy(spec["base"])
    base["nodes"] = a.peers
    base["log_every"] = LOG_EVERY
    runs = {r["label"]: r for r in spec["runs"]}
    candidates = []
    for r in spec["runs"]:
        s = compare.merge(base, {k: v for k, v in r.items() if k != "label"})
        s["name"] = r["label"]
        candidates.append((r["label"], s))
    # Uncompressed Prox-LEAD (or LEAD): the compressed runs' algorithm with the identity codec.
    lead = next((r for r in spec["runs"] if r.get("compression")
                 and r["algorithm"]["kind"] in ("lead", "prox_lead")), None)
    if lead and not a.uncompressed:
        s = compare.merge(base, {k: v for k, v in lead.items()
                                 if k not in ("label", "compression")})
        s["name"] = lead["algorithm"]["kind"].replace("_", "-") + "-uncompressed"
        candidates.append((s["name"], s))
    target = spec["targets"][-1] if a.target is None else a.target
    if a.compressed:  # only the runs asked for (and the uncompressed one made above)
        keep = {a.compressed, a.uncompressed, candidates[-1][0] if lead else None}
        candidates = [(l, s) for l, s in candidates if l in keep]
    sims = {}
    for label, s in candidates:
        sims[label] = simulate(a, s, label, target, timing=False)
        hit = sims[label]["hit"]
        say(f"  simulate {label}: " + (f"rel_error {target:g} at round {hit['round']}, "
                                       f"{hit['bytes_sent'] / 1e6:.3g} MB" if hit
                                       else f"never reaches {target:g} "
                                            f"({sims[label]['status']})"))
    unc_label = a.uncompressed or (candidates[-1][0] if lead else spec.get("reference"))
    if unc_label not in sims:
        raise SystemExit(f"bench_links: no run {unc_label!r} in the spec")
    if a.compressed:
        comp_label = a.compressed
        if comp_label not in sims:
            raise SystemExit(f"bench_links: no run {comp_label!r} in the spec")
    else:  # the compressed run with the fewest bytes to the target
        reached = [(sims[l]["hit"]["bytes_sent"], l) for l, s in candidates
                   if s.get("compression") and s["compression"].get("kind") != "identity"
                   and sims[l]["hit"]]
        if not reached:
            raise SystemExit("bench_links: no compressed run of the spec reaches the target")
        comp_label = min(reached)[1]
    scen = dict(candidates)
    for label in (unc_label, comp_label):
        if not sims[label]["hit"]:
            raise SystemExit(f"bench_links: {label} does not reach {target:g} in simulate")
    rounds = max(sims[unc_label]["hit"]["round"], sims[comp_label]["hit"]["round"]) + 3 * LOG_EVERY
    dim = base["problem"].get("data", {}).get("features", 0)
    variants = []
    for kind, label in (("uncompressed", unc_label), ("compressed", comp_label)):
        s = copy.deepcopy(scen[label])
        # A peer logs a model of more than 4,096 values only at round 0 and its last round (a
        # sketch in between, which the merge cannot evaluate): such a run stops at the round
        # where simulate reached the target (a peer run is simulate's, bit for bit).
        s["rounds"] = sims[label]["hit"]["round"] if dim > FULL_MODEL_LOG_MAX else rounds
        variants.append({"kind": kind, "label": label, "scenario": s})
    return variants, sims, target


def with_features(spec, features):
    """The spec with its generated data set widened (or narrowed) to `features` columns."""
    gen = spec.get("data")
    if not gen or "--features" not in gen.get("make_libsvm", []):
        raise SystemExit("bench_links: --features needs a spec whose data make_libsvm generates")
    args = list(gen["make_libsvm"])
    args[args.index("--features") + 1] = str(features)
    gen["make_libsvm"] = args
    stem, ext = os.path.splitext(gen["file"])
    gen["file"] = f"{stem}-d{features}{ext}"
    spec["base"]["problem"]["data"]["features"] = features
    spec["name"] = spec.get("name", "") + f" with d = {features}"


def simulate(a, s, label, target, timing):
    """`node-launcher simulate` of scenario `s`; with `timing`, logged only at round 0 and the
    last round, for the compute time per node and round."""
    s = copy.deepcopy(s)
    tag = label + ("-timing" if timing else "")
    if timing:
        s["log_every"] = s["rounds"]
    d = os.path.join(a.out, "simulate", tag)
    f = os.path.join(a.out, "simulate", tag + ".json")
    os.makedirs(d, exist_ok=True)
    with open(f, "w") as fh:
        json.dump(s, fh, indent=1)
    metrics = os.path.join(d, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    p = subprocess.run([a.launcher, "simulate", f, "--out", d], capture_output=True, text=True)
    rows = compare.load_metrics(metrics)
    status = "ok" if p.returncode == 0 else (p.stderr.strip().splitlines() or ["failed"])[-1]
    out = {"status": status, "hit": compare.first_at(rows, target) if rows else None,
           "final_rel_error": rows[-1].get("rel_error") if rows else None,
           "rounds": s["rounds"]}
    if out["hit"]:
        out["hit"] = {k: out["hit"][k] for k in ("round", "rel_error", "bytes_sent", "wall_s")}
    if timing and len(rows) >= 2:
        out["compute_ms_per_node_round"] = (1e3 * (rows[-1]["wall_s"] - rows[0]["wall_s"])
                                            / (rows[-1]["round"] * s["nodes"]))
    return out


def train_timeout(link, rounds):
    per_round = 0.004 + (2 * link["delay_ms"] / 1e3 if link else 0)
    return 120 + 4 * rounds * per_round


def run_training(a, hosts, place, variant, work, link, target):
    os.makedirs(work, exist_ok=True)
    s = copy.deepcopy(variant["scenario"])
    port = next_ports(len(place))
    s["peers"] = {"addresses": [f"{hosts.address(h)}:{port + r}" for r, h in enumerate(place)]}
    s["transport"] = {"kind": "ucx", "tls": "tcp", "connect_timeout_ms": 30000}
    scen = os.path.join(work, "scenario.json")
    with open(scen, "w") as f:
        json.dump(s, f, indent=1)
    out = os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)
    procs, logs = [], []
    t0 = time.monotonic()
    for r, h in enumerate(place):
        log = os.path.join(work, f"peer{r}.log")
        logs.append(log)
        with open(log, "w") as f:
            procs.append(subprocess.Popen(
                hosts.exec_args(h) + [a.launcher, "peer", scen, "--rank", str(r), "--out", out],
                stdout=f, stderr=subprocess.STDOUT))
    codes = wait_all(procs, train_timeout(link, s["rounds"]))
    process_s = time.monotonic() - t0
    if codes != [0] * len(codes):
        bad = next(i for i, c in enumerate(codes) if c != 0)
        return {"error": f"peer {bad} exited {codes[bad]}: {log_tail(logs[bad], 600).strip()}"}
    m = subprocess.run([a.launcher, "merge", scen, "--out", out], capture_output=True, text=True)
    if m.returncode != 0:
        return {"error": "merge failed: " + m.stderr.strip()[-600:]}
    rows = compare.load_metrics(os.path.join(out, "metrics.jsonl"))
    hit = compare.first_at(rows, target)
    res = {"process_s": process_s, "rounds": s["rounds"],
           "final_rel_error": rows[-1].get("rel_error") if rows else None}
    if hit:
        res.update({"round_to_target": hit["round"], "wall_s_to_target": hit["wall_s"],
                    "bytes_to_target": hit["bytes_sent"], "rel_error_at_target": hit["rel_error"]})
    # Per peer, its own clock: the mean round from round LOG_EVERY to the last (connecting and the
    # first rounds left out), then the mean over the peers.
    per_peer = []
    for r in range(len(place)):
        with open(os.path.join(out, "peers", f"rank-{r}.jsonl")) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        logged = [l for l in lines if "round" in l and "wall_s" in l]
        first = next(l for l in logged if l["round"] >= LOG_EVERY)
        last = logged[-1]
        per_peer.append(1e3 * (last["wall_s"] - first["wall_s"]) / (last["round"] - first["round"]))
    res["round_ms_per_peer"] = per_peer
    res["round_ms"] = sum(per_peer) / len(per_peer)
    res["wall_s_round0"] = rows[0]["wall_s"] if rows else None
    res["wall_s_last"] = rows[-1]["wall_s"] if rows else None
    return res


def train_part(a, hosts, link, work, variants, target):
    place = placement(a.peers, hosts.count)
    runs = {v["kind"]: [] for v in variants}
    for rep in range(a.repeat):
        for v in variants:
            d = os.path.join(work, f"train-{v['kind']}-{rep}")
            res = run_training(a, hosts, place, v, d, link, target)
            if "error" in res:  # one more try, counted and kept in the results
                say(f"  train {v['label']} #{rep + 1} failed, again: {res['error'][-300:]}")
                first = res["error"]
                res = run_training(a, hosts, place, v, d, link, target)
                res["failed_tries"] = [first]
            runs[v["kind"]].append(res)
            if "error" in res:
                say(f"  train {v['label']} #{rep + 1}: FAILED: {res['error']}")
            else:
                say(f"  train {v['label']} #{rep + 1}: " +
                    (f"{target:g} at round {res['round_to_target']}, "
                     f"{res['wall_s_to_target']:.2f} s" if "wall_s_to_target" in res
                     else f"never reached {target:g} (final {res['final_rel_error']})") +
                    f"; {res['round_ms']:.3f} ms per round")
    return runs


# ---- tables ----

def fmt_ms(v):
    if v is None:
        return "—"
    return f"{v:.3f}" if v < 1 else (f"{v:.2f}" if v < 100 else f"{v:.1f}")


def fmt_range(vals, f=fmt_ms):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "—"
    if len(vals) == 1:
        return f(vals[0])
    return f"{f(statistics.median(vals))} ({f(min(vals))}–{f(max(vals))})"


def dim_name(d):
    """1e6 rather than 1000000 for powers of ten (as bench-gossip writes them)."""
    d = int(d)
    e = 0
    while d >= 10 and d % 10 == 0:
        d //= 10
        e += 1
    return f"1e{e}" if d == 1 and e else str(int(d) * 10 ** e)


def fmt_mb(b):
    return f"{b / 1e6:,.0f}" if b >= 1e8 else f"{b / 1e6:.3g}"


def pct(v):
    return "—" if v is None else f"{100 * v:.0f}%"


def link_floor_ms(link, dim, place):
    """The link alone: the one-way delay plus the frames that cross into a host from other hosts
    in a round (the most into any host), through its one port at the link's rate."""
    if not link:
        return None
    p = len(place)
    into = max(sum(1 for r in range(p) if place[r] == h and place[(r - 1) % p] != h) +
               sum(1 for r in range(p) if place[r] == h and place[(r + 1) % p] != h)
               for h in set(place))
    return link["delay_ms"] + 1e3 * into * (FLOAT32 * dim + FRAME_OVERHEAD) * 8 / link["rate_bps"]


def cells_ok(cells):
    return [c for c in cells if "ms" in c and c.get("checked")]


def tables(results):
    out = []
    links = results["links"]
    out.append("Links as measured (host 0 to host 1; TCP round trip of 1 byte, median of 20; one "
               "bulk TCP transfer):\n")
    out.append("| link | RTT ms (median) | RTT ms (min) | bulk | Mbit/s | emulator drops |")
    out.append("|---|---:|---:|---:|---:|---|")
    for L in links:
        p = L.get("probe") or {}
        out.append(f"| {L['name']} | {fmt_ms(p.get('rtt_ms_median'))} | {fmt_ms(p.get('rtt_ms_min'))} "
                   f"| {p.get('bulk_bytes', 0) / 1e6:.0f} MB | "
                   f"{p.get('bulk_mbit_s', 0):.0f} | {L.get('emulator_drops', '—')} |")
    if any(L.get("gossip") for L in links):
        out.append("")
        out.append(f"Gossip round, ring of {results['peers']} ranks on {results['hosts']} hosts, "
                   "float32, ms. Median: bench-gossip's cell, the median over a run's timed "
                   "rounds of the slowest rank's round. Per round: the run's time per round, the "
                   "largest over ranks of its timed rounds' total over their number (what R "
                   "rounds cost, over R; one stalled round shows here, not in the median). Each "
                   "the median over the runs, the range over the runs in brackets. Link floor: "
                   "the one-way delay plus the frames that enter a host from other hosts in a "
                   "round, at the link's rate. Exchange: "
                   "the share of a rank's round spent sending and waiting for its neighbours "
                   "(mean over ranks and rounds):\n")
        out.append("| link | d | link floor | Starling median | Open MPI median | Starling / MPI | "
                   "Starling per round | Open MPI per round | Starling / MPI (per round) | "
                   "Starling exchange | MPI exchange |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for L in links:
            for row in L.get("gossip") or []:
                st, mp = cells_ok(row["runs"]["starling"]), cells_ok(row["runs"].get("mpi", []))
                sm, mm = median([c["ms"] for c in st]), median([c["ms"] for c in mp])
                s2, m2 = median([c["mean_ms"] for c in st]), median([c["mean_ms"] for c in mp])
                nfail = (len(row["runs"]["starling"]) + len(row["runs"].get("mpi", []))
                         - len(st) - len(mp))
                link = L if L.get("rate") else None
                out.append(
                    f"| {L['name']} | {dim_name(row['dim'])} | "
                    f"{fmt_ms(link_floor_ms(link, row['dim'], results['placement']))} | "
                    f"{fmt_range([c['ms'] for c in st])} | {fmt_range([c['ms'] for c in mp])} | "
                    f"{'—' if not sm or not mm else f'**{sm / mm:.2f}**'} | "
                    f"{fmt_range([c['mean_ms'] for c in st])} | "
                    f"{fmt_range([c['mean_ms'] for c in mp])} | "
                    f"{'—' if not s2 or not m2 else f'{s2 / m2:.2f}'} | "
                    f"{pct(median([exchange_share(c, False) for c in st]))} | "
                    f"{pct(median([exchange_share(c, True) for c in mp]))} |"
                    + (f" ({nfail} failed)" if nfail else ""))
    if any(L.get("train") for L in links):
        t = results["training"]
        out.append("")
        out.append(f"Training to rel_error {t['target']:g}: {t['problem']}, {results['peers']} "
                   f"nodes on a ring, {' and '.join(map(str, t['rounds']))} rounds, logged every "
                   f"{LOG_EVERY}; wall s and "
                   "MB (all nodes) at the first logged round at or below the target, median over "
                   "the runs (range in brackets); round = wall time per round (peer logs, round "
                   f"{LOG_EVERY} to the last, mean over peers); compute = the same scenario's "
                   "time per node and round in `node-launcher simulate` (no network); waiting = "
                   "round − compute" + (
                       ". The model has more than 4,096 values, so its peers log it only at "
                       "round 0 and their last round: each run stops at the round where simulate "
                       "first logged the target, and reads it there" if t.get("stops_at_target")
                       else "") + ":\n")
        out.append("| link | run | round reached | wall s to target | MB to target | round ms | "
                   "compute ms | waiting ms | waiting share | wall vs uncompressed |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for L in links:
            tr = L.get("train")
            if not tr:
                continue
            base = median([r.get("wall_s_to_target") for r in tr.get("uncompressed", [])])
            for v in t["variants"]:
                runs = [r for r in tr.get(v["kind"], []) if "error" not in r]
                wall = median([r.get("wall_s_to_target") for r in runs])
                rnd = median([r["round_ms"] for r in runs])
                comp = t["compute_ms"].get(v["kind"])
                wait = None if rnd is None or comp is None else rnd - comp
                rounds_hit = sorted({r.get("round_to_target") for r in runs} - {None})
                nfail = len(tr.get(v["kind"], [])) - len(runs)
                out.append(
                    f"| {L['name']} | {v['title']} | "
                    f"{', '.join(map(str, rounds_hit)) or 'never'} | "
                    f"{fmt_range([r.get('wall_s_to_target') for r in runs], lambda x: f'{x:.2f}')} | "
                    f"{fmt_range([r.get('bytes_to_target') for r in runs], fmt_mb)} | "
                    f"{fmt_range([r['round_ms'] for r in runs])} | {fmt_ms(comp)} | "
                    f"{fmt_ms(wait)} | {pct(None if wait is None else wait / rnd)} | "
                    f"{'—' if not wall or not base else f'{wall / base:.2f}'} |"
                    + (f" ({nfail} failed)" if nfail else ""))
    return "\n".join(out) + "\n"


def goals(results):
    """Issue 14's two checks at 1 Gbit/s, as measured."""
    lines = []
    one_g = [L for L in results["links"] if L.get("rate_bps") == 1e9]
    for L in one_g:
        tr = L.get("train")
        if tr:
            u = median([r.get("wall_s_to_target") for r in tr.get("uncompressed", [])
                        if "error" not in r])
            c = median([r.get("wall_s_to_target") for r in tr.get("compressed", [])
                        if "error" not in r])
            if u and c:
                lines.append(f"- {L['name']}: compressed reaches the target in {c / u:.2f} of the "
                             f"uncompressed run's wall time (goal ≤ 0.20): "
                             f"{'met' if c / u <= 0.2 else 'NOT met'}.")
        for row in L.get("gossip") or []:
            st, mp = cells_ok(row["runs"]["starling"]), cells_ok(row["runs"].get("mpi", []))
            sm, mm = median([c["ms"] for c in st]), median([c["ms"] for c in mp])
            s2, m2 = median([c["mean_ms"] for c in st]), median([c["mean_ms"] for c in mp])
            if sm and mm:
                lines.append(f"- {L['name']}, d = {dim_name(row['dim'])}: Starling's median round is "
                             f"{sm / mm:.2f}× Open MPI's (goal ≤ 1.10): "
                             f"{'met' if sm / mm <= 1.1 else 'NOT met'}; by time per round "
                             f"{s2 / m2:.2f}×.")
    return "\n".join(lines) + ("\n" if lines else "")


def report(results):
    text = tables(results)
    g = goals(results)
    if g:
        text += "\nIssue 14's goals at 1 Gbit/s:\n\n" + g
    m = results["machine"]
    text += (f"\n{results['peers']} peers on {results['hosts']} hosts, {m['cores']} cores, "
             f"{m['date_utc']} UTC, commit {m.get('commit')}, load average "
             f"{m['loadavg_start'][0]:.1f} at the start and {m['loadavg_end'][0]:.1f} at the end; "
             f"{results['elapsed_s'] / 60:.1f} min.\n")
    return text


# ---- main ----

def machine():
    info = {"cores": os.cpu_count(), "kernel": platform.release(),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "loadavg_start": os.getloadavg()}
    try:
        info["commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()
        v = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
        info["mpi"] = v.splitlines()[0] if v else None
    except OSError:
        pass
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-release", help="the build folder (default "
                    "build-release: relative to the current folder, else to the repository)")
    ap.add_argument("--links", default="10gbit:0.05,1gbit:1,100mbit:10",
                    help="rate:one-way delay in ms, comma-separated")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--peers", type=int, default=None, help="ranks (default: one per host), "
                    "spread over the hosts in blocks")
    ap.add_argument("--repeat", type=int, default=None, help="runs of everything (default 3, "
                    "1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: one repetition, d = 1e5 "
                    "only, shorter gossip runs")
    ap.add_argument("--out", default=None, help="default BUILD/bench-links")
    ap.add_argument("--dims", default=None, help="gossip vector lengths, float32 (default 1e5,1e6)")
    ap.add_argument("--spec", default=os.path.join(ROOT, "scenarios/compare/l1-logistic-ring8.json"))
    ap.add_argument("--compressed", default=None, help="the spec's compressed run to train "
                    "(default: the one with the fewest bytes to the target in simulate)")
    ap.add_argument("--uncompressed", default=None, help="the spec's uncompressed run (default: "
                    "the compressed runs' LEAD / Prox-LEAD with the identity codec)")
    ap.add_argument("--features", type=int, default=None, help="regenerate the spec's Zipf data "
                    "with this many features (d) instead of its own (500 for the L1 problem): a "
                    "different problem, with larger messages")
    ap.add_argument("--target", type=float, default=None, help="default: the spec's (finest)")
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--mpi-spin", action="store_true", help="leave out Open MPI's "
                    "mpi_yield_when_idle: its ranks then poll without yielding the core, as it "
                    "does when each has a core of its own (here the hosts share the machine's)")
    ap.add_argument("--skip-gossip", action="store_true")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--no-reference", action="store_true",
                    help="leave out the hosts joined without shaping (a veth bridge)")
    ap.add_argument("--tables", metavar="RESULTS_JSON", default=None,
                    help="print the tables of an earlier run's results.json; run nothing")
    a = ap.parse_args()
    if a.tables:
        with open(a.tables) as f:
            print(report(json.load(f)), end="")
        return 0

    t_start = time.monotonic()
    build = a.build if os.path.isdir(a.build) else os.path.join(ROOT, a.build)
    build = os.path.abspath(build)
    a.launcher = os.path.join(build, "tools", "node-launcher")
    a.bench_gossip = os.path.join(build, "tools", "bench-gossip")
    a.bench_gossip_mpi = os.path.join(build, "tools", "bench-gossip-mpi")
    a.emulator = os.path.join(build, "tools", "link-emulator")
    for p in (a.launcher, a.bench_gossip, a.emulator):
        if not os.access(p, os.X_OK):
            raise SystemExit(f"bench_links: no {p} (build it: ninja -C {build})")
    a.mpi = not a.no_mpi
    if a.mpi and (not os.access(a.bench_gossip_mpi, os.X_OK) or not shutil.which("mpirun")):
        say("bench_links: no bench-gossip-mpi or mpirun: no MPI columns")
        a.mpi = False
    a.peers = a.peers or a.hosts
    if a.hosts < 2 or a.peers < 3:
        raise SystemExit("bench_links: at least 2 hosts and 3 peers (a ring)")
    a.repeat = a.repeat or (1 if a.quick else 3)
    a.dims = [float(x) for x in (a.dims or ("1e5" if a.quick else "1e5,1e6")).split(",")]
    a.dims = [int(d) for d in a.dims]
    a.warmup, a.rounds_max, a.min_seconds = (2, 30, 0.3) if a.quick else (3, 100, 1.0)
    a.out = os.path.abspath(a.out or os.path.join(build, "bench-links"))
    os.makedirs(a.out, exist_ok=True)
    try:
        netns.check_available()
    except netns.Unavailable as e:
        say(f"bench_links: {e}")
        return 77

    links = parse_links(a.links)
    if not a.no_reference:
        links.insert(0, {"name": "no shaping (veth)", "rate": "", "delay_ms": 0.0,
                         "rate_bps": None})
    results = {"command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
               "machine": machine(), "hosts": a.hosts, "peers": a.peers, "repeat": a.repeat,
               "placement": placement(a.peers, a.hosts), "links": links,
               "gossip_options": {"dims": a.dims, "warmup": a.warmup,
                                  "rounds_max": a.rounds_max, "min_seconds": a.min_seconds,
                                  "starling": "bench-gossip --worker --tls tcp",
                                  "mpi": "mpirun, pml ob1, btl tcp,self, eth0 only"
                                         + ("" if a.mpi_spin else ", mpi_yield_when_idle 1")}}
    say(f"bench_links: {a.peers} peers on {a.hosts} hosts, links: "
        + "; ".join(L["name"] for L in links) + f"; out {a.out}")

    variants = None
    if not a.skip_train:
        spec = compare.load_spec(a.spec)
        spec_copy = copy.deepcopy(spec)
        if a.features:
            with_features(spec_copy, a.features)
        os.makedirs(os.path.join(a.out, "simulate"), exist_ok=True)
        compare.prepare_data(spec_copy, a.spec, a.out)
        say("checking the training runs with simulate:")
        variants, sims, target = training_variants(a, spec_copy)
        compute = {}
        for v in variants:
            # The compute time per node and round: simulate logged only at both ends.
            per = [simulate(a, v["scenario"], v["label"], target, timing=True)
                   .get("compute_ms_per_node_round") for _ in range(a.repeat)]
            compute[v["kind"]] = median(per)
            v["compute_runs_ms"] = per
            c = v["scenario"].get("compression")
            v["title"] = (f"{v['scenario']['algorithm']['kind'].replace('_', '-')}, "
                          + (" ".join([c["kind"]] + [f"{k} {w}" for k, w in c.items()
                                                     if k != "kind"]) if c else "uncompressed"))
            say(f"  compute {v['label']}: {fmt_ms(compute[v['kind']])} ms per node and round")
        results["training"] = {
            "spec": os.path.relpath(a.spec, ROOT), "target": target,
            "problem": spec_copy.get("name", ""),
            "rounds": sorted({v["scenario"]["rounds"] for v in variants}),
            "stops_at_target": all(v["scenario"]["rounds"] == sims[v["label"]]["hit"]["round"]
                                   for v in variants),
            "simulate": sims, "compute_ms": compute,
            "variants": [{k: v[k] for k in ("kind", "label", "title", "scenario",
                                            "compute_runs_ms")} for v in variants]}

    try:
        for L in links:
            shaped = bool(L["rate"])
            link = netns.Link(rate=L["rate"], delay_ms=L["delay_ms"]) if shaped else None
            say(f"{L['name']}:")
            tag = "link-" + (f"{L['rate']}-{L['delay_ms']:g}ms" if shaped else "veth")
            work = os.path.join(a.out, tag)
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            with netns.Hosts(a.hosts, link=link, emulator=a.emulator if shaped else None) as hosts:
                L["probe"] = probe_link(hosts, L if shaped else None)
                p = L["probe"]
                say(f"  probe: RTT {p['rtt_ms_median']:.3f} ms, {p['bulk_mbit_s']:.0f} Mbit/s "
                    f"({p['bulk_bytes'] / 1e6:.0f} MB)")
                if not a.skip_gossip:
                    L["gossip"] = gossip_part(a, hosts, L if shaped else None, work)
                if variants:
                    L["train"] = train_part(a, hosts, L if shaped else None, work, variants,
                                            results["training"]["target"])
            if shaped:
                L["emulator_stats"] = (hosts.emulator_stderr.strip().splitlines() or [""])[-1]
                m = L["emulator_stats"].split("queue-full drops ")
                L["emulator_drops"] = m[1].split(";")[0] if len(m) > 1 else "?"
    finally:
        results["machine"]["loadavg_end"] = os.getloadavg()
        results["elapsed_s"] = time.monotonic() - t_start
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)

    text = report(results)
    with open(os.path.join(a.out, "tables.md"), "w") as f:
        f.write(text)
    print(text)
    say(f"bench_links: raw results in {os.path.join(a.out, 'results.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
