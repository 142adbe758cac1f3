#!/usr/bin/python3
"""Wall time of DiLoCo on bandwidth-limited links (issue 35): N peers, each in its own network
namespace (tools/netns.py), joined by the link emulator (tools/link_emulator.cc: every
host-to-host path gets the rate and the one-way delay), `node-launcher peer` in each namespace
over UCX/TCP, then `node-launcher merge`. Fashion-MNIST, an MLP, a ring, the same inner steps per
node in every run.

Runs, on every link (--links RATE:DELAY_MS,...):
  dsgd       DSGD, a gossip round after every step (what a user runs today)
  diloco     DiLoCo, H inner steps, then the exchange and the outer Nesterov step
  overlap    DiLoCo with "overlap": true (the next round's inner steps run while the messages travel)
  streaming  DiLoCo with "fragments": F and "overlap": true (H/F inner steps a round, 1/F of the
             model in each exchange, overlapped)
and once, over a plain veth bridge (no shaping): `diloco` ("free": compute and a local exchange).

It prints, per link and run: the training's wall time (metrics.jsonl's wall_s from round 0 to the
last; the median of --repeat runs), the time to the accuracy target (the first logged round at or above it; the target is
DSGD's final accuracy on that link minus one point), seconds per outer round, the share of the
exchange the run hides ((diloco - run) / (diloco - free), training wall times), the average
model's test accuracy and the MB each peer sent. Writes OUT/results.json and OUT/table.md.

Usage: tools/bench/diloco_links.py [--build DIR] [--nodes 8] [--links 100mbit:1,1gbit:1]
           [--inner-steps H] [--rounds R] [--fragments F] [--layers JSON] [--only RUNS]
           [--repeat N] [--out DIR]
Needs root, iproute2, /dev/net/tun and the build's node-launcher and link-emulator. Standard
library only. Nothing is sent outside 198.18.0.0/24 and loopback. Measure on an otherwise idle
machine: the peers and the emulator share its cores.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import netns  # noqa: E402
from bench_links import log_tail, next_ports, wait_all  # noqa: E402


def scenario(name, a, algorithm, rounds, log_every):
    return {
        "schema_version": 1, "name": name, "nodes": a.nodes, "seed": 1, "rounds": rounds,
        "log_every": log_every, "precision": "float32", "topology": {"kind": "ring"},
        "problem": {"kind": "mlp", "layers": json.loads(a.layers), "l2": 0.0001,
                    "partition": "iid", "estimator": {"kind": "sgd", "batch": a.batch},
                    "data": {"dataset": "fashion-mnist", "test_samples": a.test_samples}},
        "algorithm": algorithm,
    }


def run_peers(a, hosts, s, work):
    """Every rank in its own host; the merged metrics' rows."""
    os.makedirs(work, exist_ok=True)
    port = next_ports(a.nodes)
    s = dict(s, peers={"addresses": [f"{hosts.address(r)}:{port + r}" for r in range(a.nodes)]},
             transport={"kind": "ucx", "tls": "tcp", "connect_timeout_ms": 30000})
    path = os.path.join(work, "scenario.json")
    with open(path, "w") as f:
        json.dump(s, f, indent=1)
    out = os.path.join(work, "out")
    procs, logs = [], []
    for r in range(a.nodes):
        logs.append(os.path.join(work, f"peer{r}.log"))
        with open(logs[-1], "w") as f:
            procs.append(subprocess.Popen(
                hosts.exec_args(r) + [a.launcher, "peer", path, "--rank", str(r), "--out", out],
                stdout=f, stderr=subprocess.STDOUT))
    codes = wait_all(procs, a.timeout)
    if codes != [0] * len(codes):
        bad = next(i for i, c in enumerate(codes) if c != 0)
        sys.exit(f"{s['name']}: peer {bad} exited {codes[bad]}:\n{log_tail(logs[bad])}")
    m = subprocess.run([a.launcher, "merge", path, "--out", out], capture_output=True, text=True)
    if m.returncode != 0:
        sys.exit(f"{s['name']}: merge failed: {m.stderr[-1500:]}")
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]


def repeated(a, hosts, s, work):
    """--repeat runs of `s`: the summary of the first, with the median training wall time."""
    runs = [summary(run_peers(a, hosts, s, os.path.join(work, f"rep{i}")), s["rounds"], a.nodes)
            for i in range(a.repeat)]
    first = runs[0]
    first["wall_s_all"] = [r["wall_s"] for r in runs]
    first["wall_s"] = statistics.median(first["wall_s_all"])
    return first


def summary(rows, rounds, nodes):
    logged = [r for r in rows if r.get("test_accuracy") is not None]
    return {"wall_s": rows[-1]["wall_s"] - rows[0]["wall_s"], "rounds": rounds,
            "accuracy": logged[-1]["test_accuracy"],
            "curve": [(r["wall_s"] - rows[0]["wall_s"], r["test_accuracy"]) for r in logged],
            "mb_per_peer": rows[-1].get("bytes_sent", 0) / nodes / 1e6}


def tables(a, results, out):
    h, rounds = a.inner_steps, a.rounds
    names = {"dsgd": "DSGD every step", "diloco": f"DiLoCo, H = {h}",
             "overlap": f"DiLoCo, H = {h}, overlap",
             "streaming": f"DiLoCo, H = {h}, {a.fragments} fragments, overlap"}
    free = results["free"]["diloco"]["wall_s"]
    lines = [f"{a.nodes} peers on a ring, each in its own network namespace, UCX over TCP; MLP "
             f"{a.layers}, batch {a.batch}, {rounds * h} inner steps per node; DiLoCo over the "
             f"unshaped bridge: {free:.1f} s.", "",
             "| link | run | training s | s to target | s per H inner steps | exchange hidden | "
             "test accuracy | MB sent per peer |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for key, by_run in results.items():
        if key == "free":
            continue
        target = by_run["dsgd"]["accuracy"] - 0.01 if "dsgd" in by_run else None
        base = by_run.get("diloco", {}).get("wall_s")
        for name, res in by_run.items():
            reach = [t for t, acc in res["curve"]
                     if target is not None and acc is not None and acc >= target]
            hidden = ""
            if name in ("overlap", "streaming") and base and base > free:
                hidden = f"{(base - res['wall_s']) / (base - free):.0%}"
            outer = res["wall_s"] / rounds
            lines.append(f"| {key} | {names[name]} | {res['wall_s']:.1f} | "
                         f"{f'{reach[0]:.1f}' if reach else '-'} | {outer:.3f} | {hidden} | "
                         f"{res['accuracy']:.2%} | {res['mb_per_peer']:,.1f} |")
    text = "\n".join(lines)
    print("\n" + text)
    with open(os.path.join(out, "table.md"), "w") as fh:
        fh.write(text + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--links", default="100mbit:1,1gbit:1")
    ap.add_argument("--inner-steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=16, help="DiLoCo's outer rounds")
    ap.add_argument("--fragments", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--layers", default="[784, 256, 10]")
    ap.add_argument("--test-samples", type=int, default=2000)
    ap.add_argument("--step", type=float, default=0.1)
    ap.add_argument("--only", default="", help="runs to take (default: all)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each (the median wall time)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds a run may take")
    ap.add_argument("--out", default="")
    ap.add_argument("--tables", metavar="RESULTS", help="only print the tables of a results.json")
    a = ap.parse_args()
    if a.tables:
        with open(a.tables) as fh:
            return tables(a, json.load(fh), os.path.dirname(os.path.abspath(a.tables)))
    a.launcher = os.path.join(ROOT, a.build, "tools", "node-launcher")
    emulator = os.path.join(ROOT, a.build, "tools", "link-emulator")
    out = a.out or os.path.join(ROOT, a.build, "bench-diloco-links")
    os.makedirs(out, exist_ok=True)
    h, f, rounds = a.inner_steps, a.fragments, a.rounds

    def diloco(**extra):
        return dict({"kind": "diloco", "step_size": a.step, "inner_steps": h,
                     "outer": {"kind": "nesterov"}}, **extra)

    runs = {  # name: (what, algorithm, rounds, log_every)
        "dsgd": ("DSGD every step", {"kind": "dsgd", "step_size": a.step}, rounds * h, h),
        "diloco": (f"DiLoCo, H = {h}", diloco(), rounds, 1),
        "overlap": (f"DiLoCo, H = {h}, overlap", diloco(overlap=True), rounds, 1),
        "streaming": (f"DiLoCo, H = {h}, {f} fragments, overlap",
                      diloco(fragments=f, overlap=True), rounds * f, f),
    }
    chosen = a.only.split(",") if a.only else list(runs)
    links = []
    for text in a.links.split(","):
        rate, _, delay = text.partition(":")
        links.append(netns.Link(rate=rate, delay_ms=float(delay or 0)))

    results = {}
    what, alg, r, every = runs["diloco"]
    with netns.Hosts(a.nodes, netns.Link(), hosts_file=False) as hosts:
        t0 = time.time()
        results["free"] = {"diloco": repeated(a, hosts, scenario("links-free", a, alg, r, every),
                                              os.path.join(out, "free"))}
        print(f"free/diloco: {results['free']['diloco']['wall_s']:.1f} s "
              f"({time.time() - t0:.0f} s in all)", flush=True)
    for link in links:
        key = link.describe()
        results[key] = {}
        with netns.Hosts(a.nodes, link, hosts_file=False, emulator=emulator) as hosts:
            for name in chosen:
                what, alg, r, every = runs[name]
                t0 = time.time()
                results[key][name] = repeated(
                    a, hosts, scenario(f"links-{name}", a, alg, r, every),
                    os.path.join(out, key.replace(", ", "-").replace(" ", ""), name))
                print(f"{key}/{name}: {results[key][name]['wall_s']:.1f} s, accuracy "
                      f"{results[key][name]['accuracy']:.4f} ({time.time() - t0:.0f} s in all)",
                      flush=True)
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump(results, fh, indent=1)

    tables(a, results, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
