#!/usr/bin/python3
"""Compare decentralized algorithms and codecs: accuracy against rounds and against bits sent.

    tools/compare.py SPEC.json [--build DIR] [--out DIR] [--launcher PATH] [--only a,b] [--jobs N]
                     [--table-only]

A spec (docs/compare.md, examples in scenarios/compare/) holds a base scenario, one or more target
rel_errors, the label of a reference run, optionally a LIBSVM data set to generate with
tools/make_libsvm.py, and a list of runs, each overriding the base scenario's "algorithm" and
"compression" (and any other key). Every run is a real `node-launcher simulate`; this script reads
its metrics.jsonl and writes to DIR:

    curves.csv                    every logged round of every run: label, round, rel_error,
                                  bytes_sent, bits_sent (all nodes, cumulative), compression_error
    table.md                      per target: the first logged round at or below it, the MB all
                                  nodes had sent by then and that amount relative to the reference
    rel_error_vs_rounds.{png,svg} rel_error (log) against rounds
    rel_error_vs_bits.{png,svg}   rel_error (log) against bits sent by all nodes (log)
    LABEL.json, LABEL/            each run's scenario and its node-launcher output

The launcher is BUILD/tools/node-launcher and DIR is BUILD/compare/NAME, with BUILD the build
folder `build` (the one `tools/dev build` and `tools/dev run` make; `--build` picks another:
tools/compare.sh passes its release build, `build-release`).

The plots need matplotlib from Debian (`apt-get install python3-matplotlib`); without it the CSV
and the table are still written. The shebang is /usr/bin/python3 on purpose: a `python3` found
first on PATH (a pyenv shim, a virtualenv) does not see Debian's python3-matplotlib.
"""
import argparse
import concurrent.futures
import copy
import csv
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPLACED = ("algorithm", "compression")  # a run's value replaces the base's instead of merging


def merge(base, over):
    """Deep merge: objects merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in REPLACED:
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_spec(path):
    with open(path) as f:
        spec = json.load(f)
    for key in ("base", "runs"):
        if key not in spec:
            sys.exit(f"compare: {path}: missing \"{key}\"")
    if "targets" in spec:
        targets = [float(t) for t in spec["targets"]]
    elif "target" in spec:
        targets = [float(spec["target"])]
    else:
        sys.exit(f"compare: {path}: needs \"target\" or \"targets\"")
    spec["targets"] = sorted(set(targets), reverse=True)
    spec.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    labels = [r["label"] for r in spec["runs"]]
    if len(set(labels)) != len(labels):
        sys.exit(f"compare: {path}: run labels must be unique")
    bad = [l for l in labels if not l or "/" in l or l.startswith(".")]
    if bad:
        sys.exit(f"compare: {path}: bad run label(s) {bad}: used as file names")
    ref = spec.get("reference")
    if ref is None:  # the first uncompressed run, as bits_to_accuracy.py did
        ref = next((r["label"] for r in spec["runs"]
                    if r.get("compression", {"kind": "identity"}) == {"kind": "identity"}), None)
        spec["reference"] = ref
    elif ref not in labels:
        sys.exit(f"compare: {path}: reference \"{ref}\" is not a run label")
    return spec


def prepare_data(spec, spec_path, out):
    """Generates the spec's LIBSVM file (once) or resolves the base's data path against the spec."""
    base = spec["base"]
    data = base.get("problem", {}).get("data", {})
    gen = spec.get("data")
    if gen:
        path = os.path.join(out, gen["file"])
        if not os.path.exists(path):
            with open(path + ".tmp", "w") as f:
                subprocess.run([sys.executable, os.path.join(ROOT, "tools/make_libsvm.py")] +
                               gen["make_libsvm"], stdout=f, check=True)
            os.replace(path + ".tmp", path)
        data["path"] = os.path.abspath(path)
    elif "path" in data and not os.path.isabs(data["path"]):
        # The scenarios are written to DIR: keep a relative path relative to the spec file.
        data["path"] = os.path.abspath(os.path.join(os.path.dirname(spec_path), data["path"]))


def load_metrics(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    return rows


def first_at(rows, target):
    for m in rows:
        rel = m.get("rel_error")
        if rel is not None and rel <= target:
            return m
    return None


def run_one(launcher, out, base, run):
    label = run["label"]
    s = merge(base, {k: v for k, v in run.items() if k != "label"})
    s["name"] = label
    scenario = os.path.join(out, label + ".json")
    with open(scenario, "w") as f:
        json.dump(s, f, indent=1)
    run_dir = os.path.join(out, label)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)  # never report a previous run's curve for a failed one
    start = time.time()
    proc = subprocess.run([launcher, "simulate", scenario, "--out", run_dir],
                          capture_output=True, text=True)
    status = "ok"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        status = lines[-1]
    return {"label": label, "scenario": s, "rows": load_metrics(metrics), "status": status,
            "wall": time.time() - start}


def summarize(r, targets):
    rows, alg = r["rows"], r["scenario"]["algorithm"]
    errs = [m["compression_error"] for m in rows[1:] if m.get("compression_error") is not None]
    step = alg.get("step_size")
    r.update({
        "algorithm": alg["kind"],
        "step": step if not isinstance(step, dict) else json.dumps(step, separators=(",", ":")),
        "gamma": alg.get("gamma", ""),
        "alpha": alg.get("alpha", ""),
        "codec": json.dumps(r["scenario"].get("compression", {"kind": "identity"}),
                            separators=(",", ":")),
        "hits": {t: first_at(rows, t) for t in targets},
        "final": rows[-1].get("rel_error") if rows else None,
        "last_round": rows[-1]["round"] if rows else 0,
        "cerr": sum(errs) / len(errs) if errs else 0.0,
    })


def write_curves(results, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["label", "round", "rel_error", "bytes_sent", "bits_sent", "compression_error"])
        for r in results:
            for m in r["rows"]:
                rel, ce = m.get("rel_error"), m.get("compression_error")
                w.writerow([r["label"], m["round"], "" if rel is None else repr(rel),
                            m["bytes_sent"], 8 * m["bytes_sent"], "" if ce is None else repr(ce)])


def fmt_ratio(x):
    return f"{x:.2g}×" if x < 10 else f"{x:.0f}×"


def make_table(spec, results):
    targets, ref_label = spec["targets"], spec.get("reference")
    ref = next((r for r in results if r["label"] == ref_label), None)
    head = (f"**{spec['name']}**: {spec.get('description', '')}".rstrip(": ") + "\n\n"
            "Rounds and MB sent by all nodes until rel_error first reaches each target (the "
            "first logged round at or below it)")
    head += (f"; ×{ref_label}: those MB divided by {ref_label}'s" if ref else "")
    head += ("; compression_error: ‖C(v) − v‖²/‖v‖² of the messages sent, averaged over the run "
             "(with error feedback v is the new vector and C(v) the message, residual included).")
    cols = ["run", "algorithm", "η", "γ", "α", "codec"]
    for t in targets:
        cols += [f"rounds to {t:g}", f"MB to {t:g}"] + ([f"×{ref_label}"] if ref else [])
    cols += ["final rel_error", "compression_error", "note"]
    lines = [head, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in results:
        cells = [r["label"], r["algorithm"], str(r["step"]), str(r["gamma"]), str(r["alpha"]),
                 f"`{r['codec']}`"]
        for t in targets:
            hit = r["hits"][t]
            ref_hit = ref["hits"][t] if ref else None
            if hit:
                cells += [str(hit["round"]), f"{hit['bytes_sent'] / 1e6:.3g}"]
                if ref:
                    cells.append(fmt_ratio(hit["bytes_sent"] / ref_hit["bytes_sent"])
                                 if ref_hit and ref_hit["bytes_sent"] else "—")
            else:
                cells += ["—", "—"] + (["—"] if ref else [])
        final = r["final"]
        cells += ["—" if final is None else f"{final:.2e}", f"{r['cerr']:.3g}"]
        if r["status"] != "ok":
            note = r["status"].replace("|", "\\|")[:120]
        elif not r["rows"]:
            note = "no metrics"
        elif not any(r["hits"].values()):
            note = f"no target reached in {r['last_round']} rounds"
        elif not r["hits"][targets[-1]]:
            note = f"{targets[-1]:g} not reached in {r['last_round']} rounds"
        else:
            note = ""
        cells.append(note)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


STYLES = ["-", "--", "-.", ":"]


def make_plots(spec, results, out):
    try:
        import matplotlib
    except ImportError:
        print("compare: matplotlib is missing, so no plots (CSV and table written); install it "
              "with `apt-get install python3-matplotlib` and run this script with /usr/bin/python3",
              file=sys.stderr)
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams["svg.hashsalt"] = "starling"  # reproducible SVG ids
    written = []
    for name, xlabel, xkey in (("rel_error_vs_rounds", "round", "round"),
                               ("rel_error_vs_bits", "bits sent by all nodes", "bits")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, r in enumerate(results):
            pts = [(m["round"] if xkey == "round" else 8 * m["bytes_sent"], m.get("rel_error"))
                   for m in r["rows"]]
            pts = [(x, y) for x, y in pts
                   if y is not None and y > 0 and math.isfinite(y) and (xkey == "round" or x > 0)]
            if not pts:
                continue
            xs, ys = zip(*pts)
            # Line styles cycle too, so that runs that coincide (uncompressed NIDS and exact
            # diffusion) stay visible on top of each other.
            ax.plot(xs, ys, STYLES[i % len(STYLES)], color=f"C{i % 10}", lw=1.5,
                    label=r["label"])
        for t in spec["targets"]:
            ax.axhline(t, color="0.4", lw=0.8, ls=":")
            ax.annotate(f"{t:g}", (1.0, t), xycoords=("axes fraction", "data"), xytext=(2, 0),
                        textcoords="offset points", va="center", fontsize=8, color="0.3")
        ax.set_yscale("log")
        # A diverging run would stretch the axis over hundreds of decades: the table says it
        # diverged, the plot shows it leaving through the top.
        top = max((y for line in ax.get_lines() for y in line.get_ydata()), default=1.0)
        if top > 10:
            ax.set_ylim(top=10)
        if xkey == "bits":
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("rel_error")
        ax.set_title(spec["name"], fontsize=10)
        ax.grid(True, which="major", lw=0.4, alpha=0.5)
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        for ext in ("png", "svg"):
            path = os.path.join(out, f"{name}.{ext}")
            fig.savefig(path, dpi=100, metadata={"Date": None} if ext == "svg" else None)
            written.append(path)
        plt.close(fig)
    return written


def main(argv=None, table_only=False, default_out="compare"):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--build", default="build",
                   help="the build folder, relative to the repository: its tools/node-launcher "
                        f"runs, and output goes to BUILD/{default_out}/NAME (default: build, "
                        "which tools/dev builds)")
    p.add_argument("--out", default=None, help=f"default: BUILD/{default_out}/NAME")
    p.add_argument("--launcher", default=None, help="default: BUILD/tools/node-launcher")
    p.add_argument("--only", default=None, help="comma-separated labels to run")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    p.add_argument("--table-only", action="store_true", help="no plots")
    a = p.parse_args(argv)
    build = os.path.join(ROOT, a.build)
    a.launcher = a.launcher or os.path.join(build, "tools", "node-launcher")
    if not os.access(a.launcher, os.X_OK):
        how = "tools/dev build" if a.build == "build" else f"ninja -C {a.build} tools/node-launcher"
        sys.exit(f"compare: no launcher at {a.launcher}; build it ({how}), or pass --build or "
                 "--launcher")

    spec = load_spec(a.spec)
    out = a.out or os.path.join(build, default_out, spec["name"])
    os.makedirs(out, exist_ok=True)
    prepare_data(spec, a.spec, out)

    runs = spec["runs"]
    if a.only:
        only = a.only.split(",")
        unknown = set(only) - {r["label"] for r in runs}
        if unknown:
            sys.exit(f"compare: --only: no run labelled {', '.join(sorted(unknown))}")
        runs = [r for r in runs if r["label"] in only]

    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = {pool.submit(run_one, a.launcher, out, spec["base"], r): r["label"] for r in runs}
        for fut in concurrent.futures.as_completed(futures):
            r = fut.result()
            summarize(r, spec["targets"])
            results[r["label"]] = r
            reached = ", ".join(f"{t:g} at round {h['round']}" if h else f"{t:g} not reached"
                                for t, h in r["hits"].items())
            state = reached if r["status"] == "ok" else f"failed: {r['status']}"
            print(f"{r['label']}: {state} ({r['wall']:.0f} s)", file=sys.stderr, flush=True)
    ordered = [results[r["label"]] for r in runs]

    write_curves(ordered, os.path.join(out, "curves.csv"))
    table = make_table(spec, ordered)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    plots = [] if (a.table_only or table_only) else make_plots(spec, ordered, out)
    print(f"compare: wrote {out}/curves.csv, table.md" +
          (", " + ", ".join(os.path.basename(x) for x in plots) if plots else ""), file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in ordered) else 1


if __name__ == "__main__":
    sys.exit(main())
