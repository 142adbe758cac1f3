#!/usr/bin/python3
"""Peers of different speed (issue 35): DiLoCo with a fixed H against by_time inner steps, when
one rank is slower. examples/pytorch/train.py (Fashion-MNIST, the MLP, SGD with momentum 0.9,
batch 64 per rank) on N processes of this machine, the last rank sleeping --slow-ms after each
step (an emulated slower device), each run the same number of outer rounds (so the same bytes):

  fixed        "inner_steps": H: every rank takes H steps a round; the fast ranks wait for the
               slow one at every exchange.
  by-time-fast "inner_steps": {"kind": "by_time", "seconds": s} with s the time of H fast steps
               (measured here): every rank computes s a round; the slow rank takes fewer steps
               and the mix weights its model by them.
  by-time-same by_time with s the fixed run's time per round: the same wall time as `fixed`,
               in which the fast ranks take more steps.

It prints each run's wall time (rank 0's loop), the steps each rank took (fewest, most), the
mean test accuracy of the ranks' own models and MB sent per rank.

Usage: tools/bench/torch_by_time.py [--build DIR] [--nodes N] [--rounds R] [--inner H]
                                    [--slow-ms M]
Needs Debian's /usr/bin/python3 with python3-torch, and a build with the Python module.
"""

import argparse
import json
import os
import sys

from torch_diloco import ROOT, run_train


def run(args, out, name, inner_steps):
    """One node-launcher run of train.py with `inner_steps` (a number or by_time's object):
    (rank 0's seconds, [steps per rank], mean accuracy, MB sent per rank)."""
    with open(os.path.join(ROOT, "scenarios", "ring4-pytorch-diloco.json")) as f:
        s = json.load(f)
    s["nodes"] = args.nodes
    s["rounds"] = args.rounds
    s["algorithm"]["inner_steps"] = inner_steps
    seconds, steps, acc, sent = run_train(args, out, name, s, [
        "--epochs", "1000", "--slow-rank", str(args.nodes - 1), "--slow-ms", str(args.slow_ms)])
    return seconds, steps, acc, sent / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--inner", type=int, default=20, help="H of the fixed run")
    ap.add_argument("--slow-ms", type=float, default=10.0, help="the last rank's extra ms a step")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    out = args.out or os.path.join(ROOT, args.build, "bench-torch-by-time")
    os.makedirs(out, exist_ok=True)
    # The fast ranks' time for H steps, from a run without the slow rank.
    slow_ms, args.slow_ms = args.slow_ms, 0.0
    base = run(args, out, "unslowed", args.inner)
    args.slow_ms = slow_ms
    fast_round = base[0] / args.rounds
    fixed = run(args, out, "fixed", args.inner)
    fixed_round = fixed[0] / args.rounds
    cap = 50 * args.inner
    rows = [("unslowed", f"H = {args.inner}, no slow rank (the fast ranks' pace)", base),
            ("fixed", f"H = {args.inner}, the last rank {slow_ms:g} ms slower a step", fixed),
            ("by-time-fast", f"by_time, {fast_round:.3f} s a round (H fast steps)",
             run(args, out, "by-time-fast",
                 {"kind": "by_time", "seconds": round(fast_round, 4), "max_steps": cap})),
            ("by-time-same", f"by_time, {fixed_round:.3f} s a round (the fixed run's)",
             run(args, out, "by-time-same",
                 {"kind": "by_time", "seconds": round(fixed_round, 4), "max_steps": cap}))]
    print(f"\n{args.nodes} processes, MLP, {args.rounds} outer rounds (outer Nesterov 0.7 / 0.9), "
          f"batch 64 per rank, SGD lr 0.05 momentum 0.9, torch "
          f"{__import__('torch').__version__}, 1 thread each.\n")
    print("| run | what | wall s | steps per rank (fewest–most) | test accuracy (mean of ranks) "
          "| MB sent per rank |")
    print("|---|---|---:|---:|---:|---:|")
    for label, what, (seconds, steps, acc, mb) in rows:
        print(f"| {label} | {what} | {seconds:.2f} | {min(steps)}–{max(steps)} | {acc:.2%} | "
              f"{mb:,.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
