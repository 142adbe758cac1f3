#!/usr/bin/env python3
"""Fashion-MNIST table: algorithm x codec x partition -> final test accuracy, bytes, wall time.

Runs `node-launcher simulate` on variants of scenarios/ring8-mlp-fashion.json (MLP [784, 64, 10],
ring of 8, batch 64 per node, step 0.2, 1,500 rounds) and a centralized baseline (one node, batch
512, the same step), and prints the Markdown table of docs/benchmarks.md.

    tools/bench/fashion_mnist.py [--launcher build-release/tools/node-launcher] [--out DIR]
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
]


def simulate(launcher, scenario, out):
    path = os.path.join(out, scenario["name"] + ".json")
    with open(path, "w") as f:
        json.dump(scenario, f)
    start = time.time()
    r = subprocess.run([launcher, "simulate", path, "--out", os.path.join(out, scenario["name"])],
                       capture_output=True, text=True)
    wall = time.time() - start
    if r.returncode != 0:
        return None, None, wall, r.stderr.strip().splitlines()[-1]
    with open(os.path.join(out, scenario["name"], "summary.json")) as f:
        s = json.load(f)
    return s["test_accuracy"], s["bytes_sent"], wall, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", default=os.path.join(ROOT, "build-release/tools/node-launcher"))
    ap.add_argument("--out", default="/tmp/starling-fashion-bench")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(ROOT, "scenarios/ring8-mlp-fashion.json")) as f:
        base = json.load(f)
    base["log_every"] = base["rounds"]
    print("| algorithm | codec | partition | test accuracy | MB sent | wall s |")
    print("|---|---|---|---|---|---|")
    central = copy.deepcopy(base)
    central.update(name="central", nodes=1)
    central["problem"]["estimator"]["batch"] = 8 * base["problem"]["estimator"]["batch"]
    acc, sent, wall, err = simulate(args.launcher, central, args.out)
    print(f"| centralized (1 node, batch 512) | none | all data | {acc:.4f} | 0 | {wall:.0f} |")
    for label, algorithm, codec in RUNS:
        for pname, partition in PARTITIONS:
            s = copy.deepcopy(base)
            s["name"] = (label + "-" + pname).replace(" ", "_").replace("%", "")
            s["algorithm"] = algorithm
            s["problem"]["partition"] = partition
            if codec:
                s["compression"] = codec
            acc, sent, wall, err = simulate(args.launcher, s, args.out)
            name = label.split(" ", 1)
            cell = f"{acc:.4f} | {sent / 1e6:.0f}" if acc is not None else f"failed: {err} | "
            print(f"| {name[0]} | {name[1] if len(name) > 1 else 'none'} | {pname} | {cell} | "
                  f"{wall:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
