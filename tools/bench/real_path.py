#!/usr/bin/env python3
"""bench-gossip's round next to the real paths that users run (issue 13, docs/bench_gossip.md):

1. bench-gossip's Starling shm round (transport and combine, no engine): median over rounds of
   the slowest rank's round, its best of --repeat.
2. `starling::Peer::mix` on a d-float32 buffer (tools/bench_frontdoor_mix.cc under
   `node-launcher run SCENARIO -- ...`, a ring, `log_every` beyond the run): the same statistic.
3. `node-launcher run` of an exact-diffusion least-squares scenario with d float32 unknowns (very
   sparse rows, so the gradient is cheap and the round is what the engine does with d-sized
   vectors): seconds per round = the difference of the `final.wall_s` of a long and a short run
   over the difference of their round counts (startup, data and the final metrics cancel); the
   median of the repetitions, where the other two columns take the best.

    tools/bench/real_path.py [--build build-release] [--before OTHER_BUILD] [--peers 4]
                             [--dims 1e6,1e7] [--repeat 3]

With --before, every column is measured for both builds in the same run, interleaved, so that
the effect of a change is read on one machine under one load. Prints a markdown table.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dim_name(dim):
    return f"{dim:.0e}".replace("+0", "").replace("+", "")


def run(args, timeout=900):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({p.returncode}):\n{p.stdout[-3000:]}")
    return p.stdout


def gossip_ms(build, peers, dim, tries=3):
    for attempt in range(tries):
        out = run([os.path.join(build, "tools", "bench-gossip"), "--peers", str(peers), "--dims",
                   dim_name(dim), "--tls", "shm", "--no-mpi", "--repeat", "1"])
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) > 3 and cells[0] == str(peers) and re.fullmatch(r"[0-9.e+]+", cells[1]):
                if float(cells[1]) == dim and re.fullmatch(r"[0-9.]+", cells[2]):
                    return float(cells[2])
        # A failed cell (builds before the UCX connect fix abort a worker about once in ten
        # starts under load): say so and run it again.
        print(f"{build}: bench-gossip P={peers} d={dim:g} failed (attempt {attempt + 1}):\n"
              + "\n".join(l for l in out.splitlines() if "fail" in l), file=sys.stderr)
    raise SystemExit(f"bench-gossip failed {tries} times for P={peers} d={dim:g}")


def mix_ms(build, folder, peers, dim, rounds, warmup):
    scen = os.path.join(folder, "mix.json")
    with open(scen, "w") as f:
        json.dump({"schema_version": 1, "name": "real-path-mix", "nodes": peers, "seed": 7,
                   "log_every": 1000000000, "topology": {"kind": "ring"},
                   "algorithm": {"kind": "dsgd", "step_size": 0.1},
                   "transport": {"kind": "ucx", "tls": "shm"}}, f)
    out = os.path.join(folder, "mix-out")
    run([os.path.join(build, "tools", "node-launcher"), "run", scen, "--out", out, "--",
         os.path.join(build, "tools", "bench-frontdoor-mix"), str(dim), str(rounds), str(warmup),
         out])
    ranks = []
    for r in range(peers):
        with open(os.path.join(out, f"bench-rank-{r}.json")) as f:
            ranks.append(json.load(f)["round_s"])
    return statistics.median(max(t) for t in zip(*ranks)) * 1e3


def run_wall_s(build, folder, peers, dim, rounds):
    scen = os.path.join(folder, f"ed-{rounds}.json")
    with open(scen, "w") as f:
        json.dump({"schema_version": 1, "name": "real-path-ed", "nodes": peers, "seed": 1,
                   "rounds": rounds, "log_every": 1000000000, "precision": "float32",
                   "topology": {"kind": "ring"},
                   "problem": {"kind": "least_squares", "l2": 0.1,
                               "data": {"synthetic": {"samples": 2 * peers, "features": dim,
                                                      "density": min(1.0, 10.0 / dim)}}},
                   "algorithm": {"kind": "exact_diffusion", "step_size": 0.1},
                   "transport": {"kind": "ucx", "tls": "shm"}}, f)
    out = os.path.join(folder, f"ed-{rounds}-out")
    run([os.path.join(build, "tools", "node-launcher"), "run", scen, "--out", out])
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)["final"]["wall_s"]


def run_ms(build, folder, peers, dim, short, long):
    return (run_wall_s(build, folder, peers, dim, long) -
            run_wall_s(build, folder, peers, dim, short)) / (long - short) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-release"))
    ap.add_argument("--before", help="another build to measure in the same run")
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--dims", default="1e6,1e7")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=8)
    args = ap.parse_args()
    builds = [("before", os.path.abspath(args.before))] if args.before else []
    builds.append(("after" if args.before else "this", os.path.abspath(args.build)))
    print(f"ring of {args.peers} peer processes, float32, tls shm, {os.cpu_count()} cores; "
          f"ms per round, best of {args.repeat} (run: median of {args.repeat})\n")
    print("| P | d | build | bench-gossip | Peer::mix | run (exact diffusion) | mix / gossip | "
          "run / gossip |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for dim in [int(float(d)) for d in args.dims.split(",") if d]:
        rounds = max(20, min(100, int(1e8 / dim)))
        # About 5 s of rounds at 1e6 and up: the two runs' start-up and logging differ by up to
        # a second on 2 cores, which shorter runs do not average out.
        short, long = 10, 10 + max(20, min(2000, int(1e9 / dim)))
        cells = {name: {"gossip": [], "mix": [], "run": []} for name, _ in builds}
        for rep in range(args.repeat):
            for name, build in builds:
                with tempfile.TemporaryDirectory(prefix="starling-real-path-") as tmp:
                    cells[name]["gossip"].append(gossip_ms(build, args.peers, dim))
                    cells[name]["mix"].append(mix_ms(build, tmp, args.peers, dim, rounds,
                                                     args.warmup))
                    cells[name]["run"].append(run_ms(build, tmp, args.peers, dim, short, long))
            print(f"d={dim_name(dim)} repetition {rep + 1}: " +
                  "; ".join(f"{n} " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in c.items())
                            for n, c in cells.items()), file=sys.stderr, flush=True)
        for name, _ in builds:
            g, m = (min(cells[name][k]) for k in ("gossip", "mix"))
            r = statistics.median(cells[name]["run"])  # a difference: its minimum is biased low
            print(f"| {args.peers} | {dim_name(dim)} | {name} | {g:.2f} | {m:.2f} | {r:.2f} | "
                  f"{m / g:.2f} | {r / g:.2f} |", flush=True)


if __name__ == "__main__":
    main()
