#!/usr/bin/python3
"""Bytes to accuracy on a neural network (issue 16): Fashion-MNIST, an MLP of at least 500,000
parameters ([784, 640, 10] by default: 508,810), 8 peers on a ring, iid and Dirichlet(0.1) label
skew, each algorithm x codec trained for a fixed number of epochs. Every run is a real
`node-launcher simulate`; nothing is modelled.

The table gives, per run: the test accuracy of the average model at the end, the total bytes all
peers sent to reach the target accuracy (the uncompressed reference run's final accuracy minus
`--slack` points; first logged round at or above it) and in the whole run, both as a factor of
fewer bytes than the reference, and the codec's mean compression error. A second table gives
each codec's compute per message, measured in the same program (one encode and one decode of a
real message of the model's size), next to the bytes it sends.

Usage: tools/bench_compression.py [--build DIR] [--epochs E] [--layers JSON] [--slack P]
           [--partitions iid,dirichlet] [--only label,...] [--out DIR] [--jobs N]
           [--nodes N] [--topology KIND]
Standard library only (any python3); the plot needs matplotlib (/usr/bin/python3 with Debian's
python3-matplotlib) and is skipped without it.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUFFIX = ""
TRAIN = 60000
NODES = 8           # --nodes
TOPOLOGY = "ring"   # --topology
BATCH = 32          # per peer
STEP = 0.1


def runs(d):
    """label -> (description, algorithm, compression or None), for a model of d parameters."""
    dsgd = {"kind": "dsgd", "step_size": STEP}
    choco = {"kind": "choco", "step_size": STEP, "gamma": 0.05}
    lead = {"kind": "lead", "step_size": STEP, "gamma": 1.0, "alpha": 0.2}

    def diloco(h, outer, lr=None):
        o = {"kind": outer}
        if lr is not None:
            o["lr"] = lr
        return {"kind": "diloco", "step_size": STEP, "inner_steps": h, "outer": o}
    return {
        "dsgd": ("DSGD, uncompressed (the reference)", dsgd, None),
        "dsgd-topk1-ef": ("DSGD, top-1% with error feedback (gamma 0.2)",
                          dict(dsgd, gamma=0.2),
                          {"kind": "topk", "ratio": 0.01, "error_feedback": True}),
        "choco-topk1": ("CHOCO, top-1%", choco, {"kind": "topk", "ratio": 0.01}),
        "choco-topk0.1": ("CHOCO, top-0.1%", dict(choco, gamma=0.02),
                          {"kind": "topk", "ratio": 0.001}),
        "lead-qsgd2": ("LEAD, QSGD 2-bit (linf, bucket 16)", lead,
                       {"kind": "qsgd", "bits": 2, "norm": "linf", "bucket": 16}),
        "lead-natural-dithering": ("LEAD, natural dithering (s = 2, linf)", lead,
                                   {"kind": "natural_dithering", "levels": 2, "norm": "linf"}),
        "choco-countsketch": ("CHOCO, Count-Sketch 5 x d/100, top-1% of the median estimate",
                              choco, {"kind": "countsketch", "rows": 5, "cols": d // 100,
                                      "ratio": 0.01}),
        "dsgd-sketch": ("DSGD with sketched momentum and error (5 x d/20, top d/200, gamma 0.1)",
                        dict(dsgd, gamma=0.1,
                             sketch={"rows": 5, "cols": d // 20, "k": d // 200, "momentum": 0.0}),
                        None),
        "choco-lgc1": ("CHOCO, LGC on top-1% (chunk 32, latent 4: 0.375 B per value; warm-up 100 "
                       "rounds, a new decoder every 50)", choco,
                       {"kind": "lgc", "ratio": 0.01, "warmup": 100, "refresh": 50,
                        "learning_rate": 0.003}),
        "choco-lgc1-l8": ("CHOCO, LGC on top-1% (chunk 16, latent 8: 1.25 B per value; as above)",
                          choco, {"kind": "lgc", "ratio": 0.01, "warmup": 100, "refresh": 50,
                                  "learning_rate": 0.003, "chunk": 16, "latent": 8}),
        "choco-lgc0.1": ("CHOCO, LGC on top-0.1% (chunk 32, latent 4; as above)",
                         dict(choco, gamma=0.02),
                         {"kind": "lgc", "ratio": 0.001, "warmup": 100, "refresh": 50,
                          "learning_rate": 0.003}),
        "lead-lgc1": ("LEAD, LGC on top-1% (chunk 32, latent 4; as above)", lead,
                      {"kind": "lgc", "ratio": 0.01, "warmup": 100, "refresh": 50,
                       "learning_rate": 0.003}),
        # DiLoCo over gossip (docs/algorithms.md §29): the same gradient steps, one exchange
        # every H of them (the run has rounds / H outer rounds).
        "diloco-h10": ("DiLoCo, H = 10, outer Nesterov (lr 0.7, momentum 0.9)",
                       diloco(10, "nesterov"), None),
        "diloco-h50": ("DiLoCo, H = 50, outer Nesterov (as above)", diloco(50, "nesterov"), None),
        "diloco-h10-sgd": ("Local SGD: H = 10, outer sgd lr 1 (plain averaging)",
                           diloco(10, "sgd"), None),
        "diloco-h10-noloco": ("DiLoCo, H = 10, outer noloco (lr 0.7, momentum 0.5, pull 0.7)",
                              diloco(10, "noloco"), None),
        "diloco-h10-ed": ("DiLoCo, H = 10, outer exact_diffusion (lr 1)",
                          diloco(10, "exact_diffusion"), None),
        "diloco-h50-topk1-ef": ("DiLoCo, H = 50, outer Nesterov, top-1% of the model with "
                                "error feedback", diloco(50, "nesterov"),
                                {"kind": "topk", "ratio": 0.01, "error_feedback": True}),
        "diloco-h50-topk1": ("DiLoCo, H = 50, outer Nesterov, top-1% of the difference "
                             "against the reference point", diloco(50, "nesterov"),
                             {"kind": "topk", "ratio": 0.01}),
        "diloco-h50-int8": ("DiLoCo, H = 50, outer Nesterov, int8 differences",
                            diloco(50, "nesterov"), {"kind": "int8"}),
        "diloco-h10-topk1": ("DiLoCo, H = 10, outer Nesterov, top-1% differences",
                             diloco(10, "nesterov"), {"kind": "topk", "ratio": 0.01}),
        "diloco-h50-topk2bit": ("DiLoCo, H = 50, outer Nesterov, topk_2bit differences (1 of "
                                "every 64, 2-bit values)", diloco(50, "nesterov"),
                                {"kind": "topk_2bit", "chunk": 64, "per_chunk": 1}),
        "diloco-h50-dctsign": ("DiLoCo, H = 50, outer Nesterov, dct_sign differences (2 of "
                               "every 64 DCT coefficients, signs)", diloco(50, "nesterov"),
                               {"kind": "dct_sign", "chunk": 64, "per_chunk": 2}),
        "diloco-h50-topk0.5": ("DiLoCo, H = 50, outer Nesterov, top-0.5% differences",
                               diloco(50, "nesterov"), {"kind": "topk", "ratio": 0.005}),
        "diloco-h75-topk1": ("DiLoCo, H = 75, outer Nesterov, top-1% differences",
                             diloco(75, "nesterov"), {"kind": "topk", "ratio": 0.01}),
        "diloco-h50-topk0.7": ("DiLoCo, H = 50, outer Nesterov, top-0.7% differences",
                               diloco(50, "nesterov"), {"kind": "topk", "ratio": 0.007}),
        "diloco-h100-topk1": ("DiLoCo, H = 100, outer Nesterov, top-1% differences",
                              diloco(100, "nesterov"), {"kind": "topk", "ratio": 0.01}),
        "diloco-h75-topk0.7": ("DiLoCo, H = 75, outer Nesterov, top-0.7% differences",
                               diloco(75, "nesterov"), {"kind": "topk", "ratio": 0.007}),
        "diloco-h50-topk0.5-lr1": ("DiLoCo, H = 50, outer Nesterov lr 1.0, top-0.5% differences",
                                   diloco(50, "nesterov", 1.0), {"kind": "topk", "ratio": 0.005}),
        "diloco-h50-topk0.7-lr1": ("DiLoCo, H = 50, outer Nesterov lr 1.0, top-0.7% differences",
                                   diloco(50, "nesterov", 1.0), {"kind": "topk", "ratio": 0.007}),
        "diloco-h40-topk0.5-lr1": ("DiLoCo, H = 40, outer Nesterov lr 1.0, top-0.5% differences",
                                   diloco(40, "nesterov", 1.0), {"kind": "topk", "ratio": 0.005}),
        "diloco-h75-topk0.5-lr1": ("DiLoCo, H = 75, outer Nesterov lr 1.0, top-0.5% differences",
                                   diloco(75, "nesterov", 1.0), {"kind": "topk", "ratio": 0.005}),
        "diloco-h100-topk0.5-lr1": ("DiLoCo, H = 100, outer Nesterov lr 1.0, top-0.5% "
                                    "differences", diloco(100, "nesterov", 1.0),
                                    {"kind": "topk", "ratio": 0.005}),
        "diloco-h50-topk2bit-1024": ("DiLoCo, H = 50, outer Nesterov, topk_2bit differences (16 "
                                     "of every 1,024)", diloco(50, "nesterov"),
                                     {"kind": "topk_2bit", "chunk": 1024, "per_chunk": 16}),
        "diloco-h10-ed-topk1": ("DiLoCo, H = 10, outer exact_diffusion, top-1% differences",
                                diloco(10, "exact_diffusion"), {"kind": "topk", "ratio": 0.01}),
        "diloco-h10-lgc1": ("DiLoCo, H = 10, outer Nesterov, LGC on top-1% differences (chunk "
                            "32, latent 4; warm-up 10 rounds, a new decoder every 10)",
                            diloco(10, "nesterov"),
                            {"kind": "lgc", "ratio": 0.01, "warmup": 10, "refresh": 10,
                             "share_every": 2, "learning_rate": 0.003}),
        "diloco-h200": ("DiLoCo, H = 200, outer Nesterov", diloco(200, "nesterov"), None),
        "diloco-h200-int8": ("DiLoCo, H = 200, outer Nesterov, int8 differences",
                             diloco(200, "nesterov"), {"kind": "int8"}),
        "diloco-h50-sign": ("DiLoCo, H = 50, outer Nesterov, sign differences (1 bit a value, "
                            "one scale)", diloco(50, "nesterov"), {"kind": "sign"}),
        "diloco-h100-topk2bit": ("DiLoCo, H = 100, outer Nesterov, topk_2bit differences (as "
                                 "above)", diloco(100, "nesterov"),
                                 {"kind": "topk_2bit", "chunk": 64, "per_chunk": 1}),
    }


def scenario(label, partition, epochs, layers, algorithm, compression, test_samples):
    rounds = max(1, round(epochs * TRAIN / (NODES * BATCH) / algorithm.get("inner_steps", 1)))
    s = {
        "schema_version": 1, "name": f"bc-{label}-{partition}" + SUFFIX, "nodes": NODES,
        "seed": 1,
        "rounds": rounds, "log_every": max(1, rounds // 12), "precision": "float32",
        "topology": {"kind": TOPOLOGY},
        "problem": {"kind": "mlp", "layers": layers, "l2": 0.0001,
                    "partition": "iid" if partition == "iid"
                    else {"kind": "dirichlet", "alpha": 0.1},
                    "estimator": {"kind": "sgd", "batch": BATCH},
                    "data": {"dataset": "fashion-mnist", "test_samples": test_samples}},
        "algorithm": algorithm,
    }
    if compression is not None:
        s["compression"] = compression
    return s


def simulate(launcher, out, s):
    file = os.path.join(out, s["name"] + ".json")
    with open(file, "w") as f:
        json.dump(s, f, indent=1)
    run_dir = os.path.join(out, s["name"])
    text = json.dumps(s, indent=1)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    cached = os.path.join(run_dir, "scenario.bench.json")
    if os.path.exists(metrics) and os.path.exists(cached) and open(cached).read() == text:
        wall = json.load(open(os.path.join(run_dir, "bench_wall.json")))
        return read_curve(metrics), wall, ""  # the same scenario ran before: reuse it
    t0 = time.monotonic()
    r = subprocess.run([launcher, "simulate", file, "--out", run_dir],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    curve = []
    if r.returncode == 0:
        curve = read_curve(metrics)
        with open(cached, "w") as f:
            f.write(text)
        with open(os.path.join(run_dir, "bench_wall.json"), "w") as f:
            json.dump(wall, f)
    note = "" if r.returncode == 0 else (r.stdout.strip().splitlines() or ["failed"])[-1][:160]
    return curve, wall, note


def read_curve(metrics):
    """(round, test accuracy, bytes sent, compression error, consensus distance, each node's own
    accuracy: mean, min) of every logged round."""
    curve = []
    for line in open(metrics):
        j = json.loads(line)
        if j.get("test_accuracy") is not None:
            curve.append((j["round"], j["test_accuracy"], j.get("bytes_sent", 0),
                          j.get("compression_error"), j.get("consensus_distance"),
                          j.get("test_accuracy_peers_mean"), j.get("test_accuracy_peers_min")))
    return curve


def main():
    global NODES, TOPOLOGY, SUFFIX
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--layers", default="[784, 640, 10]")
    ap.add_argument("--slack", type=float, default=1.0, help="points below the reference")
    ap.add_argument("--partitions", default="iid,dirichlet")
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--launcher", default="", help="default: BUILD/tools/node-launcher")
    ap.add_argument("--test-samples", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--topology", default="ring", help="ring, exponential, complete, ...")
    a = ap.parse_args()
    NODES, TOPOLOGY = a.nodes, a.topology
    # Runs of another size or graph than the default get names (and folders) of their own.
    SUFFIX = "" if (NODES, TOPOLOGY) == (8, "ring") else f"-{TOPOLOGY}{NODES}"
    layers = json.loads(a.layers)
    params = sum(layers[i + 1] * (layers[i] + 1) for i in range(len(layers) - 1))
    launcher = a.launcher or os.path.join(ROOT, a.build, "tools", "node-launcher")
    out = a.out or os.path.join(ROOT, a.build, "bench-compression")
    os.makedirs(out, exist_ok=True)
    only = set(a.only.split(",")) if a.only else None
    table = runs(params)
    jobs = []
    for partition in a.partitions.split(","):
        for label, (what, alg, comp) in table.items():
            if only and label not in only and label != "dsgd":
                continue
            jobs.append((partition, label, scenario(label, partition, a.epochs, layers, alg,
                                                    comp, a.test_samples)))
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = {pool.submit(simulate, launcher, out, s): (p, l) for p, l, s in jobs}
        for fut in concurrent.futures.as_completed(futures):
            p, l = futures[fut]
            results[(p, l)] = fut.result()
            curve, wall, note = results[(p, l)]
            last = curve[-1] if curve else None
            print(f"{p} {l}: accuracy {last[1] if last else '-'}, "
                  f"{(last[2] / 1e6) if last else '-'} MB, {wall:.0f} s {note}", flush=True)

    print(f"\n{a.epochs:g} epochs of Fashion-MNIST, MLP {layers} ({params:,} parameters), "
          f"{NODES} peers ({TOPOLOGY}), batch {BATCH} per peer, step {STEP}, float32. Target: the "
          f"reference's final accuracy minus {a.slack:g} point(s).\n")
    rows = []
    for partition in a.partitions.split(","):
        ref = results.get((partition, "dsgd"))
        if not ref or not ref[0]:
            print(f"{partition}: the reference run failed: {ref[2] if ref else 'not run'}")
            continue
        ref_acc = ref[0][-1][1]
        target = ref_acc - a.slack / 100
        ref_bytes_to_target = next((b for r, acc, b, e, *_ in ref[0] if acc >= target), None)
        ref_total = ref[0][-1][2]
        print(f"### {partition} (reference accuracy {ref_acc:.2%}, target {target:.2%})\n")
        print("| run | what | accuracy | nodes' own: mean / min | consensus distance | "
              "MB to target | fewer bytes to target | MB in all | fewer bytes in all | "
              "compression error | simulate s |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for label, (what, alg, comp) in table.items():
            if (partition, label) not in results:
                continue
            curve, wall, note = results[(partition, label)]
            if not curve:
                print(f"| {label} | {what} | failed: {note} | | | | | | | | {wall:.0f} |")
                continue
            acc = curve[-1][1]
            total = curve[-1][2]
            reach = next((b for r, ac, b, e, *_ in curve if ac >= target), None)
            errs = [e for r, ac, b, e, *_ in curve if e is not None]
            err = sum(errs) / len(errs) if errs else 0.0
            rows.append((partition, label, acc, reach, total, err, wall))
            to_target = "-" if reach is None else f"{reach / 1e6:,.1f}"
            fewer = "-" if reach is None or ref_bytes_to_target is None else \
                (f"{ref_bytes_to_target / reach:,.1f}x" if ref_bytes_to_target < 10 * reach
                 else f"{ref_bytes_to_target / reach:,.0f}x")
            last = curve[-1]
            own = ("-" if last[5] is None or last[6] is None
                   else f"{last[5]:.2%} / {last[6]:.2%}")
            consensus = "-" if last[4] is None else f"{last[4]:.3g}"
            print(f"| {label} | {what} | {acc:.2%} | {own} | {consensus} | {to_target} | "
                  f"{fewer} | {total / 1e6:,.1f} | {ref_total / total:,.0f}x | {err:.3f} | "
                  f"{wall:.0f} |")
        print()
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({f"{p}/{l}": v for (p, l), v in results.items()}, f, indent=1)
    plot(out, results, a.partitions.split(","))
    return 0 if all(v[0] for v in results.values()) else 1


def plot(out, results, partitions):
    """compression.png in `out`: test accuracy against MB sent (log scale), one panel per
    partition (skipped, with a line saying so, without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing (apt-get install python3-matplotlib; run with "
              "/usr/bin/python3): no plot")
        return
    fig, axes = plt.subplots(1, len(partitions), figsize=(6.5 * len(partitions), 4.5),
                             squeeze=False)
    for ax, p in zip(axes[0], partitions):
        for n, ((part, label), (curve, wall, note)) in enumerate(
                sorted(kv for kv in results.items() if kv[0][0] == p)):
            if not curve:
                continue
            pts = [(b / 1e6, acc) for r, acc, b, e, *_ in curve if b > 0]  # round 0: no bytes yet
            style = "-" if n < 10 else "--"
            ax.plot([x for x, y in pts], [y for x, y in pts], label=label, marker=".",
                    linestyle=style)
        ax.set_xscale("log")
        ax.set_title(f"{p}")
        ax.set_xlabel("MB sent by all peers")
        ax.set_ylabel("test accuracy (average model)")
        ax.set_ylim(0.3, 0.9)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = os.path.join(out, "compression.png")
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
