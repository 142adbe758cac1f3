#!/usr/bin/python3
"""Asynchronous gossip with one straggler (docs/algorithms.md §26): finish times and accuracy
against the staleness bound s, s = 0 being synchronous gossip in the same speed model.

    tools/bench_async.py [--build DIR] [--mode simulate|run] [--problem least_squares|fashion]
                         [--nodes N] [--rounds R] [--slow V] [--staleness 0,2,4,8]
                         [--compute-ms MS] [--out DIR]

Rank 3 of a ring of N runs at relative speed V (0.25: four times slower), the others at 1. For
every s, one `node-launcher simulate` (virtual time: a speed-1 round is one unit) or `run` (real
UCX peers over tcp; a speed-v peer sleeps MS / v ms per round) of the same scenario; prints one
markdown row per s: the fast peers' mean and latest finish time, the straggler's, the largest
staleness mixed, and the average model's rel_error (least squares) or test accuracy (Fashion-MNIST,
Debian's dataset-fashion-mnist). The scenarios and outputs go to DIR (default BUILD/bench-async).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def scenario(args, staleness):
    speeds = [1.0] * args.nodes
    speeds[3 % args.nodes] = args.slow
    if args.problem == "fashion":
        problem = {"kind": "mlp", "layers": [784, 16, 10], "l2": 0.0001, "partition": "iid",
                   "estimator": {"kind": "sgd", "batch": 16},
                   "data": {"dataset": "fashion-mnist", "train_samples": 8000,
                            "test_samples": 1000}}
        step, precision = 0.2, "float32"
    else:
        problem = {"kind": "least_squares", "l2": 0.05,
                   "data": {"synthetic": {"samples": 800, "features": 10, "heterogeneity": 1.0}}}
        step, precision = 0.1, "float64"
    return {"schema_version": 1, "name": "async-s%d" % staleness, "nodes": args.nodes, "seed": 1,
            "rounds": args.rounds, "log_every": args.rounds, "precision": precision,
            "topology": {"kind": "ring"}, "transport": {"kind": "ucx", "tls": "tcp"},
            "problem": problem,
            "algorithm": {"kind": "dsgd", "step_size": step,
                          "asynchronous": {"max_staleness": staleness, "speeds": speeds,
                                           "compute_ms": args.compute_ms}}}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--mode", choices=["simulate", "run"], default="simulate")
    p.add_argument("--problem", choices=["least_squares", "fashion"], default="least_squares")
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--slow", type=float, default=0.25)
    p.add_argument("--staleness", default="0,2,4,8,16")
    p.add_argument("--compute-ms", type=float, default=20.0)
    p.add_argument("--out")
    args = p.parse_args()
    launcher = os.path.join(args.build, "tools", "node-launcher")
    out = args.out or os.path.join(args.build, "bench-async")
    os.makedirs(out, exist_ok=True)
    slow = 3 % args.nodes
    unit = "virtual units" if args.mode == "simulate" else "s"
    metric = "test_accuracy" if args.problem == "fashion" else "rel_error"
    print("| s | fast peers: mean finish (%s) | fast peers: last finish | straggler | max "
          "staleness | %s |" % (unit, metric))
    print("|---|---|---|---|---|---|")
    for s in [int(x) for x in args.staleness.split(",")]:
        path = os.path.join(out, "s%d.json" % s)
        with open(path, "w") as f:
            json.dump(scenario(args, s), f, indent=1)
        run_out = os.path.join(out, "s%d" % s)
        done = subprocess.run([launcher, args.mode, path, "--out", run_out],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            sys.exit("node-launcher %s failed for s = %d:\n%s" % (args.mode, s, done.stdout))
        with open(os.path.join(run_out, "summary.json")) as f:
            summary = json.load(f)
        a = summary["asynchronous"]
        fast = [t for i, t in enumerate(a["finish"]) if i != slow]
        print("| %d | %.4g | %.4g | %.4g | %d | %.4g |" % (
            s, sum(fast) / len(fast), max(fast), a["finish"][slow], a["max_staleness_seen"],
            summary[metric]))


if __name__ == "__main__":
    main()
