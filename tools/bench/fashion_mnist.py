#!/usr/bin/env python3
"""Fashion-MNIST table: algorithm x codec x partition -> final test accuracy, bytes, wall time.

Runs `node-launcher simulate` on variants of scenarios/ring8-mlp-fashion.json (MLP [784, 64, 10],
ring of 8, batch 64 per node, step 0.2, 1,500 rounds) and a centralized baseline (one node, batch
512, the same step), and prints the Markdown table of docs/benchmarks.md. Every run logs every 50 rounds; with
matplotlib (Debian's python3-matplotlib: run it with /usr/bin/python3) it also draws test accuracy
against rounds and against MB sent, one row of plots per partition (--plot, default
docs/img/fashion_mnist.png).

    /usr/bin/python3 tools/bench/fashion_mnist.py [--launcher build-release/tools/node-launcher]
        [--out DIR] [--plot PNG] [--rounds N]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTITIONS = [("iid", "iid"), ("dirichlet 0.1", {"kind": "dirichlet", "alpha": 0.1})]
RUNS = [  # label, algorithm, compression
    ("DSGD", {"kind": "dsgd", "step_size": 0.2}, None),
    ("CHOCO top-5%", {"kind": "choco", "step_size": 0.2, "gamma": 0.05},
     {"kind": "topk", "ratio": 0.05}),
    ("CHOCO qsgd 4-bit", {"kind": "choco", "step_size": 0.2, "gamma": 0.05},
     {"kind": "qsgd", "bits": 4}),
    ("LEAD", {"kind": "lead", "step_size": 0.2, "gamma": 1.0, "alpha": 0.2}, None),
    ("LEAD qsgd 2-bit", {"kind": "lead", "step_size": 0.2, "gamma": 1.0, "alpha": 0.2},
     {"kind": "qsgd", "bits": 2, "norm": "linf", "bucket": 16}),
]
LOG_EVERY = 50


def simulate(launcher, scenario, out):
    path = os.path.join(out, scenario["name"] + ".json")
    with open(path, "w") as f:
        json.dump(scenario, f)
    start = time.time()
    r = subprocess.run([launcher, "simulate", path, "--out", os.path.join(out, scenario["name"])],
                       capture_output=True, text=True)
    wall = time.time() - start
    if r.returncode != 0:
        return None, None, wall, r.stderr.strip().splitlines()[-1], []
    with open(os.path.join(out, scenario["name"], "summary.json")) as f:
        s = json.load(f)
    curve = []
    with open(os.path.join(out, scenario["name"], "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m.get("test_accuracy") is not None:
                curve.append((m["round"], m["bytes_sent"] / 1e6, m["test_accuracy"]))
    return s["test_accuracy"], s["bytes_sent"], wall, "", curve


def plot(path, curves, central):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"fashion_mnist: no matplotlib in {sys.executable}, so no plot (run it with "
              "/usr/bin/python3 after `apt-get install python3-matplotlib`)", file=sys.stderr)
        return
    parts = [p for p, _ in PARTITIONS]
    fig, axes = plt.subplots(len(parts), 2, figsize=(11, 4.2 * len(parts)), squeeze=False)
    for row, pname in enumerate(parts):
        for label, curve in curves.get(pname, []):
            rounds = [c[0] for c in curve]
            mb = [max(c[1], 1e-3) for c in curve]
            acc = [c[2] for c in curve]
            axes[row][0].plot(rounds, acc, label=label)
            axes[row][1].plot(mb, acc, label=label)
        for col in (0, 1):
            ax = axes[row][col]
            ax.axhline(central, color="gray", linestyle=":", label="centralized (final)")
            ax.set_ylim(0.6, 0.9)
            ax.set_ylabel("test accuracy (average model)")
            ax.set_title(f"{pname}")
            ax.grid(alpha=0.3)
        axes[row][0].set_xlabel("round")
        axes[row][1].set_xlabel("MB sent (all nodes)")
        axes[row][1].set_xscale("log")
        axes[row][0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Fashion-MNIST, MLP [784, 64, 10], ring of 8, batch 64 per node")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=90)
    print(f"fashion_mnist: wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", default=os.path.join(ROOT, "build-release/tools/node-launcher"))
    ap.add_argument("--out", default="/tmp/starling-fashion-bench")
    ap.add_argument("--plot", default=os.path.join(ROOT, "docs/img/fashion_mnist.png"))
    ap.add_argument("--rounds", type=int, default=0, help="rounds (default: the scenario's)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(ROOT, "scenarios/ring8-mlp-fashion.json")) as f:
        base = json.load(f)
    if args.rounds:
        base["rounds"] = args.rounds
    base["log_every"] = LOG_EVERY
    curves = {}
    print("| algorithm | codec | partition | test accuracy | MB sent | wall s |")
    print("|---|---|---|---|---|---|")
    central = copy.deepcopy(base)
    central.update(name="central", nodes=1)
    central["problem"]["estimator"]["batch"] = 8 * base["problem"]["estimator"]["batch"]
    acc, sent, wall, err, _ = simulate(args.launcher, central, args.out)
    if acc is None:
        print(f"fashion_mnist: the centralized run failed: {err}", file=sys.stderr)
        return 1
    central_acc = acc
    print(f"| centralized (1 node, batch 512) | none | all data | {acc:.4f} | 0 | {wall:.0f} |")
    for label, algorithm, codec in RUNS:
        for pname, partition in PARTITIONS:
            s = copy.deepcopy(base)
            s["name"] = (label + "-" + pname).replace(" ", "_").replace("%", "")
            s["algorithm"] = algorithm
            s["problem"]["partition"] = partition
            if codec:
                s["compression"] = codec
            acc, sent, wall, err, curve = simulate(args.launcher, s, args.out)
            if curve:
                curves.setdefault(pname, []).append((label, curve))
            name = label.split(" ", 1)
            short = err.split(": ", 1)[-1].split(" (rank")[0]  # "diverged at round 270"
            cell = f"{acc:.4f} | {sent / 1e6:.0f}" if acc is not None else f"{short} | "
            print(f"| {name[0]} | {name[1] if len(name) > 1 else 'none'} | {pname} | {cell} | "
                  f"{wall:.0f} |", flush=True)
    if args.plot:
        plot(args.plot, curves, central_acc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
