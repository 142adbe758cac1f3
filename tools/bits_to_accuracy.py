#!/usr/bin/env python3
"""Bits to accuracy: how many bytes each algorithm/codec pair puts on the wire to reach a target.

    tools/bits_to_accuracy.py tools/bench/choco_codecs.json [--launcher PATH] [--out DIR]

The spec file holds a base scenario, a target rel_error, optionally a data set to generate with
tools/make_libsvm.py, and a list of runs, each overriding the base scenario's "algorithm" and
"compression". Every run is a real `node-launcher simulate`; the script reads its metrics.jsonl
(logged every few rounds) and reports the first logged round at or below the target, the bytes all
nodes had sent by then, and the mean compression_error (1 - delta measured on the vectors the
algorithm sent). It prints a Markdown table and writes it, with a CSV of every run's curve, to the
output directory. Standard library only.
"""
import argparse
import copy
import csv
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_metrics(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def first_at(rows, target):
    for m in rows:
        rel = m.get("rel_error")
        if rel is not None and rel <= target:
            return m
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--launcher", default=os.path.join(ROOT, "build-release/tools/node-launcher"))
    p.add_argument("--out", default=None, help="default: build-release/bits-to-accuracy/NAME")
    p.add_argument("--only", default=None, help="comma-separated labels to run")
    a = p.parse_args()

    with open(a.spec) as f:
        spec = json.load(f)
    out = a.out or os.path.join(ROOT, "build-release", "bits-to-accuracy", spec["name"])
    os.makedirs(out, exist_ok=True)
    base = spec["base"]
    target = float(spec["target"])

    data = spec.get("data")
    if data:
        path = os.path.join(out, data["file"])
        if not os.path.exists(path):
            with open(path + ".tmp", "w") as f:
                subprocess.run([sys.executable, os.path.join(ROOT, "tools/make_libsvm.py")] +
                               data["make_libsvm"], stdout=f, check=True)
            os.replace(path + ".tmp", path)
        base["problem"]["data"]["path"] = os.path.abspath(path)

    only = set(a.only.split(",")) if a.only else None
    results = []
    for run in spec["runs"]:
        label = run["label"]
        if only and label not in only:
            continue
        s = copy.deepcopy(base)
        s["name"] = label
        s["algorithm"] = run["algorithm"]
        if "compression" in run:
            s["compression"] = run["compression"]
        if "rounds" in run:
            s["rounds"] = run["rounds"]
        scenario = os.path.join(out, label + ".json")
        with open(scenario, "w") as f:
            json.dump(s, f, indent=1)
        run_dir = os.path.join(out, label)
        start = time.time()
        proc = subprocess.run([a.launcher, "simulate", scenario, "--out", run_dir],
                              capture_output=True, text=True)
        wall = time.time() - start
        rows = load_metrics(os.path.join(run_dir, "metrics.jsonl")) if os.path.exists(
            os.path.join(run_dir, "metrics.jsonl")) else []
        hit = first_at(rows, target)
        errs = [m["compression_error"] for m in rows[1:] if m.get("compression_error") is not None]
        r = {
            "label": label,
            "algorithm": run["algorithm"]["kind"],
            "gamma": run["algorithm"].get("gamma", ""),
            "step": run["algorithm"]["step_size"],
            "codec": json.dumps(run.get("compression", {"kind": "identity"}), separators=(",", ":")),
            "rounds": hit["round"] if hit else None,
            "bytes": hit["bytes_sent"] if hit else None,
            "final": rows[-1]["rel_error"] if rows else None,
            "last_round": rows[-1]["round"] if rows else 0,
            "delta": 1 - sum(errs) / len(errs) if errs else 1.0,
            "status": "ok" if proc.returncode == 0 else proc.stderr.strip().splitlines()[-1][:80],
            "wall": wall,
        }
        results.append(r)
        print(f"{label}: {'reached at round ' + str(r['rounds']) if hit else 'not reached'}"
              f" ({wall:.0f} s)", file=sys.stderr, flush=True)
        with open(os.path.join(out, label + ".csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["round", "rel_error", "bytes_sent", "compression_error"])
            for m in rows:
                w.writerow([m["round"], m.get("rel_error"), m["bytes_sent"],
                            m.get("compression_error")])

    ref = next((r for r in results if r["bytes"] and r["codec"] == '{"kind":"identity"}'), None)
    lines = [f"Target rel_error {target:g}; {spec.get('description', '')}".rstrip(), "",
             "| run | algorithm | η | γ | codec | rounds | MB sent (all nodes) | vs uncompressed | "
             "measured δ | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r["bytes"]:
            mb = f"{r['bytes'] / 1e6:.1f}"
            ratio = f"{ref['bytes'] / r['bytes']:.1f}× fewer" if ref and r is not ref else (
                "1×" if r is ref else "")
            note = ""
        else:
            mb, ratio = "—", "—"
            final = r["final"]
            note = (f"not reached in {r['last_round']} rounds (rel_error {final:.2e})"
                    if final is not None else "no metrics")
            if r["status"] != "ok":
                note = r["status"]
        lines.append(f"| {r['label']} | {r['algorithm']} | {r['step']} | {r['gamma']} | "
                     f"`{r['codec']}` | {r['rounds'] or '—'} | {mb} | {ratio} | "
                     f"{r['delta']:.3f} | {note} |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
