#!/usr/bin/python3
"""Wall time of DiLoCo on slow links, with and without overlap (issue 35): real peer processes
under `node-launcher run`, Fashion-MNIST, an MLP, a ring, every message held back `--delay-ms`
(the fault script's delay_ms: the link's latency, emulated in each sender's transport queue).

Runs, all with the same inner steps per node:
  nodelay    DiLoCo, no delay: the compute and the local exchange alone
  diloco     DiLoCo with the delay: each round waits for its messages
  overlap    "overlap": true: the next round's inner steps run while the messages travel
  fragments  "fragments": F, "overlap": true: 1/F of the model a round, F times the rounds
  dsgd       DSGD every step, with the delay (the baseline a user runs today)

and prints the training's wall time (round 0 to the last, from metrics.jsonl), seconds per round, the share of the exchange overlap hides
((diloco - overlap) / (diloco - nodelay)), test accuracy and MB sent.

Usage: tools/bench/diloco_overlap.py [--build DIR] [--nodes N] [--delay-ms D] [--inner-steps H]
           [--rounds R] [--fragments F] [--layers JSON] [--out DIR]
Standard library only. Measure on an otherwise idle machine: the peers share its cores.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def scenario(name, a, algorithm, delay, rounds):
    s = {
        "schema_version": 1, "name": name, "nodes": a.nodes, "seed": 1, "rounds": rounds,
        "log_every": rounds, "precision": "float32", "topology": {"kind": "ring"},
        "transport": {"kind": "ucx"},
        "problem": {"kind": "mlp", "layers": json.loads(a.layers), "l2": 0.0001,
                    "partition": "iid", "estimator": {"kind": "sgd", "batch": a.batch},
                    "data": {"dataset": "fashion-mnist", "test_samples": 2000}},
        "algorithm": algorithm,
    }
    if delay > 0:
        s["faults"] = {"script": [{"delay_ms": delay, "from_round": 0, "to_round": rounds}]}
    return s


def run(launcher, out, s):
    path = os.path.join(out, s["name"] + ".json")
    with open(path, "w") as f:
        json.dump(s, f, indent=1)
    folder = os.path.join(out, s["name"])
    r = subprocess.run([launcher, "run", path, "--out", folder], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"{s['name']}: node-launcher exited {r.returncode}:\n{r.stdout[-2000:]}")
    lines = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
    # The training's own time: from the end of round 0 to the end of the last round (process
    # start, data loading and connection setup left out).
    return lines[-1]["wall_s"] - lines[0]["wall_s"], lines[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--delay-ms", type=int, default=50)
    ap.add_argument("--inner-steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=20, help="outer rounds")
    ap.add_argument("--fragments", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", default="[784, 256, 10]")
    ap.add_argument("--step", type=float, default=0.1)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    launcher = os.path.join(ROOT, a.build, "tools", "node-launcher")
    out = a.out or os.path.join(ROOT, a.build, "bench-diloco-overlap")
    os.makedirs(out, exist_ok=True)
    h, f = a.inner_steps, a.fragments

    def diloco(**extra):
        return dict({"kind": "diloco", "step_size": a.step, "inner_steps": h,
                     "outer": {"kind": "nesterov"}}, **extra)

    runs = [
        ("nodelay", "DiLoCo, no delay", diloco(), 0, a.rounds),
        ("diloco", "DiLoCo", diloco(), a.delay_ms, a.rounds),
        ("overlap", "DiLoCo, overlap", diloco(overlap=True), a.delay_ms, a.rounds),
        ("fragments", f"DiLoCo, {f} fragments, overlap", diloco(fragments=f, overlap=True),
         a.delay_ms, a.rounds * f),
        ("dsgd", "DSGD every step", {"kind": "dsgd", "step_size": a.step}, a.delay_ms,
         a.rounds * h),
    ]
    results = {}
    for label, what, alg, delay, rounds in runs:
        wall, last = run(launcher, out, scenario(f"overlap-{label}", a, alg, delay, rounds))
        results[label] = (what, wall, last, rounds)
        print(f"{label}: {wall:.1f} s, accuracy {last.get('test_accuracy')}", flush=True)
    t_free = results["nodelay"][1]
    t_wait = results["diloco"][1]
    print(f"\n{a.nodes} peers on a ring (UCX), MLP {a.layers}, batch {a.batch}, "
          f"{h * a.rounds} inner steps per node, every message held back {a.delay_ms} ms.\n")
    print("| run | training s | s per exchange | exchange hidden | test accuracy | MB sent |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, (what, wall, last, rounds) in results.items():
        hidden = ""
        if label in ("overlap", "fragments") and t_wait > t_free:
            hidden = f"{(t_wait - wall) / (t_wait - t_free):.0%}"
        print(f"| {what} | {wall:.1f} | {wall / rounds:.3f} | {hidden} | "
              f"{last.get('test_accuracy', 0):.2%} | {last.get('bytes_sent', 0) / 1e6:,.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
