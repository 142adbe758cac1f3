#!/usr/bin/python3
"""The large-batch table (issue 15): Fashion-MNIST, the MLP [784, 64, 10], 8 peers on a ring, with
per-peer batches that make the network's batch 1x, 8x and 32x a base batch, trained for a fixed
number of epochs by each method that is wired into scenarios. Every run is a real
`node-launcher simulate`; the table gives the test accuracy of the average model at the end and
the first logged round at which it reached the target accuracy, with each peer's own accuracy (mean
and min; the number to read for `codistil`, whose models are never averaged) and the bytes sent.

Usage: tools/bench_large_batch.py [--build DIR] [--epochs E] [--target A] [--out DIR]
           [--scales 1,8,32] [--only label,...]
Standard library only (any python3); the plot needs matplotlib (/usr/bin/python3 with Debian's
python3-matplotlib) and is skipped without it.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = 60000          # Fashion-MNIST's training set
NODES = 8
BASE_PER_PEER = 8      # the base batch: 8 per peer, 64 for the network
BASE_LR = 0.05         # tuned at the base batch for plain SGD
CODISTIL_ALPHA = 1.0
CODISTIL_PERIOD = 10

# label -> (description, algorithm section for scale k)
def methods(k):
    total = NODES * BASE_PER_PEER * k
    legw = {"kind": "legw", "base_lr": BASE_LR, "base_batch": NODES * BASE_PER_PEER,
            "warmup_epochs": 0.05}
    return {
        "sgd-linear": ("momentum SGD (0.9), step scaled linearly with the batch",
                       {"kind": "dsgd", "step_size": BASE_LR * 0.1 * k,
                        "local_optimizer": {"kind": "momentum", "momentum": 0.9}}),
        "legw": ("SGD under LEGW (sqrt scaling, warm-up k x 0.05 epochs)",
                 {"kind": "dsgd", "step_size": legw}),
        "lamb-legw": ("LAMB under LEGW (base rate 0.01)",
                      {"kind": "dsgd",
                       "step_size": dict(legw, base_lr=0.01),
                       "local_optimizer": {"kind": "lamb", "weight_decay": 0.0001}}),
        "adasum": ("Adasum of the updates, the base step (no scaling)",
                   {"kind": "dsgd", "step_size": BASE_LR, "combine": "adasum"}),
        "adascale": ("AdaScale: the base step times the gain r in [1, k] (2 micro-batches)",
                     {"kind": "dsgd", "step_size": BASE_LR,
                      "adascale": {"micro_batches": 2, "base_batch": NODES * BASE_PER_PEER}}),
        "leader": ("Leader SGD on momentum SGD with linear scaling (tau_L 4, tau_G 16)",
                   {"kind": "dsgd", "step_size": BASE_LR * 0.1 * k,
                    "local_optimizer": {"kind": "momentum", "momentum": 0.9},
                    "leader": {"local_period": 4, "global_period": 16}}),
        "async": ("momentum SGD with linear scaling, asynchronous gossip (max_staleness 4) with "
                  "rank 3 four times slower",
                  {"kind": "dsgd", "step_size": BASE_LR * 0.1 * k,
                   "local_optimizer": {"kind": "momentum", "momentum": 0.9},
                   "asynchronous": {"max_staleness": 4,
                                    "speeds": [0.25 if r == 3 else 1.0 for r in range(NODES)]}}),
        "dsgd": ("plain DSGD, the base step (no scaling): the reference for codistil",
                 {"kind": "dsgd", "step_size": BASE_LR}),
        "codistil": (f"codistillation (docs/algorithms.md §25): alpha {CODISTIL_ALPHA}, models "
                     f"exchanged every {CODISTIL_PERIOD} rounds, term on after 0.1 epoch, the "
                     f"base step; never averaged (read the per-peer accuracy)",
                     {"kind": "dsgd", "step_size": BASE_LR,
                      "codistillation": {"alpha": CODISTIL_ALPHA, "period": CODISTIL_PERIOD,
                                         "burn_in": round(0.1 * TRAIN / total)}}),
    }, total


def scenario(label, k, epochs, algorithm):
    per_peer = BASE_PER_PEER * k
    rounds = max(1, round(epochs * TRAIN / (NODES * per_peer)))
    return {
        "schema_version": 1, "name": f"lb-{label}-{k}x", "nodes": NODES, "seed": 1,
        "rounds": rounds, "log_every": max(1, rounds // 20), "precision": "float32",
        "topology": {"kind": "ring"},
        "problem": {"kind": "mlp", "layers": [784, 64, 10], "l2": 0.0001, "partition": "iid",
                    "estimator": {"kind": "sgd", "batch": per_peer},
                    "data": {"dataset": "fashion-mnist"}},
        "algorithm": algorithm,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--target", type=float, default=0.80)
    ap.add_argument("--scales", default="1,8,32")
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    launcher = os.path.join(ROOT, a.build, "tools", "node-launcher")
    if not os.path.exists(launcher):
        launcher = os.path.join(ROOT, "build", "tools", "node-launcher")
    out = a.out or os.path.join(ROOT, a.build, "bench-large-batch")
    os.makedirs(out, exist_ok=True)
    only = set(a.only.split(",")) if a.only else None
    rows = []
    for k in [int(x) for x in a.scales.split(",")]:
        table, total = methods(k)
        for label, (what, alg) in table.items():
            if only and label not in only:
                continue
            s = scenario(label, k, a.epochs, alg)
            file = os.path.join(out, s["name"] + ".json")
            with open(file, "w") as f:
                json.dump(s, f, indent=1)
            run_dir = os.path.join(out, s["name"])
            t0 = time.monotonic()
            r = subprocess.run([launcher, "simulate", file, "--out", run_dir],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            wall = time.monotonic() - t0
            acc, reached, peers, mb = None, None, None, None
            if r.returncode == 0:
                for line in open(os.path.join(run_dir, "metrics.jsonl")):
                    j = json.loads(line)
                    if "test_accuracy" in j:
                        acc = j["test_accuracy"]
                        if reached is None and acc >= a.target:
                            reached = j["round"]
                        peers = (j.get("test_accuracy_peers_mean"),
                                 j.get("test_accuracy_peers_min"))
                        mb = j.get("bytes_sent", 0) / 1e6
            note = "" if r.returncode == 0 else r.stdout.strip().splitlines()[-1][:120]
            if r.returncode == 0 and "asynchronous" in alg:
                # Virtual time (a speed-1 round is 1 unit): when the fast peers and the straggler
                # finished; synchronous rounds would all end at rounds / 0.25.
                with open(os.path.join(run_dir, "summary.json")) as f:
                    fin = json.load(f)["asynchronous"]["finish"]
                fast = [t for i, t in enumerate(fin) if i != 3]
                note = (f"virtual finish: fast peers {sum(fast) / len(fast):.0f}, straggler "
                        f"{fin[3]:.0f} (synchronous: {4 * s['rounds']})")
            rows.append((k, total, label, what, s["rounds"], acc, reached, wall, note, peers, mb))
            print(f"{k}x {label}: {s['rounds']} rounds, accuracy "
                  f"{'-' if acc is None else f'{acc:.4f}'}, target at round {reached}, "
                  f"per-peer mean/min {peers}, {mb} MB, {wall:.1f} s {note}", flush=True)
    print(f"\n{a.epochs:g} epochs of Fashion-MNIST, MLP [784, 64, 10], {NODES} peers on a ring, "
          f"float32; test accuracy of the average model; rounds to {a.target:.0%} (first logged "
          f"round at or above it)\n")
    print("| batch (network) | method | rounds | test accuracy | rounds to target | "
          "per-peer accuracy mean / min | MB sent | simulate s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for k, total, label, what, rounds, acc, reached, wall, note, peers, mb in rows:
        per_peer = "-" if not peers or peers[0] is None else f"{peers[0]:.1%} / {peers[1]:.1%}"
        print(f"| {k}x ({total}) | {label} | {rounds} | "
              f"{'failed: ' + note if acc is None else f'{acc:.1%}'} | "
              f"{'-' if reached is None else reached} | {per_peer} | "
              f"{'-' if mb is None else f'{mb:.1f}'} | {wall:.1f} |")
    for row in rows:
        if row[8] and row[5] is not None:
            print(f"{row[0]}x {row[2]}: {row[8]}")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    plot(out, rows, a.epochs)
    return 0 if all(r[5] is not None for r in rows) else 1


def plot(out, rows, epochs):
    """large_batch.png in `out`: test accuracy of the average model against epochs, one panel
    per scale, one line per method (skipped, with a line saying so, without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing (apt-get install python3-matplotlib; run with "
              "/usr/bin/python3): no plot")
        return
    scales = sorted({r[0] for r in rows})
    fig, axes = plt.subplots(1, len(scales), figsize=(5 * len(scales), 4), squeeze=False)
    for ax, k in zip(axes[0], scales):
        for row in rows:
            if row[0] != k or row[5] is None:
                continue
            name = f"lb-{row[2]}-{k}x"
            xs, ys = [], []
            for line in open(os.path.join(out, name, "metrics.jsonl")):
                j = json.loads(line)
                if j.get("test_accuracy") is not None:
                    xs.append(epochs * j["round"] / row[4])
                    ys.append(j["test_accuracy"])
            ax.plot(xs, ys, label=row[2])
        ax.set_title(f"{k}x the base batch ({NODES * BASE_PER_PEER * k})")
        ax.set_xlabel("epochs")
        ax.set_ylabel("test accuracy (average model)")
        ax.set_ylim(0.5, 0.9)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = os.path.join(out, "large_batch.png")
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
