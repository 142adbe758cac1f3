#!/usr/bin/python3
"""A small language model (issue 35): examples/pytorch/train_lm.py, a character-level transformer
(2 layers of width 128, context 64, 0.42 M parameters) on the King James Bible of Debian's
bible-kjv, on N processes of this machine, as

  ddp                  torch DistributedDataParallel: gloo all-reduce of the gradients every
                       step (the every-step reference; the same model, windows, AdamW, schedule)
  gossip               starling.torch.DecentralizedOptimizer: AdamW's step, then a gossip round
                       with the ring's neighbours, every step
  diloco-h<H>[-codec]  starling.torch.DiLoCo over a ring: H inner AdamW steps, then one gossip
                       round and the outer Nesterov step (lr 0.7, momentum 0.9); with a codec,
                       the ranks exchange compressed changes against reference points
                       (node-launcher run, UCX shared memory)

Every run takes the same steps per rank on the same number of windows, so the same compute.
It prints, per run: the validation loss (nats per character) and perplexity of the ranks' own
models at the end (mean over ranks; perplexity = exp(mean loss)), their spread, the MB each rank
sent (Starling's from the run's metrics; DDP's a ring all-reduce's 2 (n - 1) / n times the
gradient's bytes per step, since gloo does not report its traffic), the ratio to DDP's bytes,
and the perplexity against DDP's and every-step gossip's (the `gossip` run, where it ran).
Writes OUT/results.json, OUT/table.md and, with matplotlib, OUT/charlm.png (perplexity against MB).

Usage: tools/bench/torch_lm.py [--build DIR] [--nodes 8] [--steps 1200] [--only ddp,diloco-h50]
                               [--shards iid|contiguous] [--out DIR] [--reuse] [--plot FILE]
Needs Debian's /usr/bin/python3 with python3-torch, bible-kjv, and a build with the Python module.
OPENBLAS_NUM_THREADS=1 is set for every process (one thread per rank).
"""

import argparse
import fcntl
import json
import math
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "pytorch", "train_lm.py")
TARGET = 1.02  # the plot's line: within 2% of DDP's final perplexity



def safe_exp(loss):
    """exp(loss), inf for a loss past float64's range (a diverged run)."""
    return math.exp(loss) if loss < 700 else float("inf")

def tensor_count():
    """The transformer's parameter tensors (the layout a trainer passes), whatever the
    vocabulary."""
    sys.path.insert(0, os.path.dirname(TRAIN))
    import train_lm as lm
    a = lm.make_parser().parse_args([])
    return len(list(lm.CharLM(2, a.width, a.layers, a.heads, a.context).parameters()))


def runs():
    def diloco(h, codec=None, lr=0.7, momentum=0.9):
        s = {"algorithm": {"kind": "diloco", "step_size": 0.003, "inner_steps": h,
                           "outer": {"kind": "nesterov", "lr": lr, "momentum": momentum}}}
        if codec:
            s["compression"] = codec
        return s
    top1 = {"kind": "topk", "ratio": 0.01}
    return {
        "ddp": ("torch DDP, gloo all-reduce of the gradients every step", None),
        "gossip": ("DecentralizedOptimizer: AdamW's step, then a gossip round on the ring, "
                   "every step", {"algorithm": {"kind": "dsgd", "step_size": 0.003}}),
        "average": ("DecentralizedOptimizer: AdamW's step, then exact averaging (the complete "
                    "graph), every step", {"algorithm": {"kind": "dsgd", "step_size": 0.003},
                                           "topology": {"kind": "complete"}}),
        "diloco-h10": ("DiLoCo, H = 10, outer Nesterov, ring", diloco(10)),
        "diloco-h20": ("DiLoCo, H = 20, outer Nesterov, ring", diloco(20)),
        "diloco-h50": ("DiLoCo, H = 50, outer Nesterov, ring", diloco(50)),
        "diloco-h200": ("DiLoCo, H = 200, outer Nesterov, ring", diloco(200)),
        "diloco-h10-int8": ("DiLoCo, H = 10, int8 differences", diloco(10, {"kind": "int8"})),
        "diloco-h50-int8": ("DiLoCo, H = 50, int8 differences", diloco(50, {"kind": "int8"})),
        "diloco-h10-sign": ("DiLoCo, H = 10, sign differences (1 bit a value, one scale)",
                            diloco(10, {"kind": "sign"})),
        "diloco-h16-sign": ("DiLoCo, H = 16, sign differences (as above)",
                            diloco(16, {"kind": "sign"})),
        "diloco-h20-sign": ("DiLoCo, H = 20, sign differences (as above)",
                            diloco(20, {"kind": "sign"})),
        "diloco-h16-sign-lr1": ("DiLoCo, H = 16, sign differences, outer lr 1.0",
                                diloco(16, {"kind": "sign"}, lr=1.0)),
        "diloco-h20-sign-lr1": ("DiLoCo, H = 20, sign differences, outer lr 1.0",
                                diloco(20, {"kind": "sign"}, lr=1.0)),
        "diloco-h40-sign-lr1": ("DiLoCo, H = 40, sign differences, outer lr 1.0",
                                diloco(40, {"kind": "sign"}, lr=1.0)),
        "diloco-h16-sign-m8": ("DiLoCo, H = 16, sign differences, outer momentum 0.8",
                               diloco(16, {"kind": "sign"}, momentum=0.8)),
        "diloco-h16-sign-tensors": (
            "DiLoCo, H = 16, sign differences with a scale per tensor",
            diloco(16, {"kind": "sign", "layers": [{"tensors": [i], "kind": "sign"}
                                                   for i in range(tensor_count())]})),
        "diloco-h10-topk1": ("DiLoCo, H = 10, top-1% differences", diloco(10, top1)),
        "diloco-h20-topk1": ("DiLoCo, H = 20, top-1% differences", diloco(20, top1)),
        "diloco-h50-topk1": ("DiLoCo, H = 50, top-1% differences", diloco(50, top1)),
        "diloco-h100-topk1": ("DiLoCo, H = 100, top-1% differences", diloco(100, top1)),
        "diloco-h50-topk2bit": ("DiLoCo, H = 50, topk_2bit differences (2 of every 64)",
                                diloco(50, {"kind": "topk_2bit", "chunk": 64, "per_chunk": 2})),
    }


# The rows docs/benchmarks.md shows, run when --only is not given (the others: --only NAME).
DEFAULT = ["gossip", "average", "diloco-h10", "diloco-h20", "diloco-h50", "diloco-h10-int8", "diloco-h10-sign",
           "diloco-h16-sign", "diloco-h16-sign-lr1", "diloco-h16-sign-m8",
           "diloco-h16-sign-tensors", "diloco-h20-sign", "diloco-h20-sign-lr1",
           "diloco-h40-sign-lr1", "diloco-h10-topk1", "diloco-h20-topk1", "diloco-h50-topk1"]


def trainer_args(args):
    return ["--steps", str(args.steps), "--eval-every", str(args.eval_every), "--shards",
            args.shards]


def ddp_worker(rank, nodes, port, args, out):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.dirname(TRAIN))
    sys.path.insert(0, os.path.join(ROOT, args.build, "python"))  # train_lm.py imports starling
    import train_lm as lm

    targs = lm.make_parser().parse_args(trainer_args(args))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=nodes)
    vocab, train, val = lm.split_corpus(lm.load_corpus())
    held_out = lm.validation_windows(val, targs.context)
    torch.manual_seed(targs.seed)
    model = lm.CharLM(len(vocab), targs.width, targs.layers, targs.heads, targs.context)
    inner, scheduler = lm.make_optimizer(model, targs)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    windows = lm.rank_windows(train, targs, rank, nodes)
    curve, start = [[0, lm.evaluate(model, held_out)]], time.time()
    for step in range(1, targs.steps + 1):
        inner.zero_grad()
        lm.lm_loss(ddp, windows.next()).backward()
        inner.step()
        scheduler.step()
        if step % targs.eval_every == 0 or step == targs.steps:
            curve.append([step, lm.evaluate(model, held_out)])
    seconds = time.time() - start
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump({"curve": curve, "seconds": seconds,
                   "params": sum(p.numel() for p in model.parameters())}, f)
    dist.destroy_process_group()


def read_ranks(folder, nodes):
    return [json.load(open(os.path.join(folder, f"rank-{r}.json"))) for r in range(nodes)]


def done(args, folder, *more):
    """--reuse: a run whose every rank's results (and `more` files) are in `folder` already."""
    files = [f"rank-{r}.json" for r in range(args.nodes)] + list(more)
    return args.reuse and all(os.path.exists(os.path.join(folder, f)) for f in files)


def run_ddp(args, out):
    import torch.multiprocessing as mp
    folder = os.path.join(out, "ddp")
    if not done(args, folder):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        port = 29500 + os.getpid() % 1000
        mp.spawn(ddp_worker, args=(args.nodes, port, args, folder), nprocs=args.nodes, join=True)
    ranks = read_ranks(folder, args.nodes)
    per_step = 2 * (args.nodes - 1) / args.nodes * ranks[0]["params"] * 4
    return ranks, lambda step: per_step * step


def run_starling(args, out, name, overrides):
    folder = os.path.join(out, name)
    scenario = {"schema_version": 1, "name": f"charlm-{name}", "nodes": args.nodes, "seed": 7,
                "log_every": 1, "topology": {"kind": args.topology},
                "transport": {"kind": "ucx", "tls": "shm"}}
    scenario.update(overrides)
    if not done(args, folder, os.path.join("run", "metrics.jsonl")):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        path = os.path.join(folder, "scenario.json")
        with open(path, "w") as f:
            json.dump(scenario, f, indent=1)
        launcher = os.path.join(ROOT, args.build, "tools", "node-launcher")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, args.build, "python"))
        r = subprocess.run([launcher, "run", path, "--out", os.path.join(folder, "run"), "--",
                            sys.executable, TRAIN, "--results", folder] + trainer_args(args),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"{name}: node-launcher exited {r.returncode}:\n{r.stdout[-3000:]}")
    rows = [json.loads(line) for line in open(os.path.join(folder, "run", "metrics.jsonl"))]
    h = overrides["algorithm"].get("inner_steps", 1)  # steps per round
    sent = {row["round"]: row.get("bytes_sent", 0) / args.nodes for row in rows}

    def bytes_at(step):  # all ranks' bytes when they had taken `step` steps, per rank
        return sent.get(step // h, sent[max(sent)])
    return read_ranks(folder, args.nodes), bytes_at


def summarize(ranks, bytes_at):
    steps = [s for s, _ in ranks[0]["curve"]]
    mean_curve = [sum(r["curve"][i][1] for r in ranks) / len(ranks) for i in range(len(steps))]
    final = [r["curve"][-1][1] for r in ranks]
    return {"steps": steps, "mean_loss": mean_curve,
            "bytes": [bytes_at(s) for s in steps],
            "final_loss": mean_curve[-1], "min_loss": min(final), "max_loss": max(final),
            "seconds": max(r["seconds"] for r in ranks), "mb": bytes_at(steps[-1]) / 1e6}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--topology", default="ring")
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--shards", choices=["iid", "contiguous"], default="iid")
    ap.add_argument("--only", default="", help="comma-separated runs (ddp always runs)")
    ap.add_argument("--out", default="")
    ap.add_argument("--reuse", action="store_true",
                    help="take the runs whose results OUT holds already (same arguments!)")
    ap.add_argument("--plot", default="", help="the plot's file (default OUT/charlm.png)")
    args = ap.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    sys.path.insert(0, os.path.join(ROOT, args.build, "python"))  # train_lm.py imports starling
    table = runs()
    chosen = ["ddp"] + [n for n in (args.only.split(",") if args.only else DEFAULT) if n != "ddp"]
    for n in chosen:
        if n not in table:
            sys.exit(f"unknown run {n}; known: {', '.join(table)}")
    out = args.out or os.path.join(ROOT, args.build, "bench-torch-lm")
    os.makedirs(out, exist_ok=True)
    # One bench a folder: a second one would clear the runs the first is writing.
    lock = open(os.path.join(out, ".lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"{out} is in use by another torch_lm.py; give another --out")
    results = {}
    for name in chosen:
        what, overrides = table[name]
        t0 = time.time()
        ranks, bytes_at = run_ddp(args, out) if overrides is None else \
            run_starling(args, out, name, overrides)
        results[name] = dict(summarize(ranks, bytes_at), what=what)
        print(f"{name}: validation loss {results[name]['final_loss']:.4f}, "
              f"{results[name]['mb']:,.1f} MB per rank ({time.time() - t0:.0f} s)", flush=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    ref = results["ddp"]
    target = safe_exp(ref["final_loss"]) * TARGET
    # The every-step baselines with the same local AdamW: gossip on the ring, exact averaging.
    baselines = [safe_exp(results[b]["final_loss"]) if b in results else None
                 for b in ("gossip", "average")]
    lines = [f"{args.nodes} processes, {args.topology}, {args.shards} windows, {args.steps} steps "
             f"of 16 windows of 64 characters per rank; torch {__import__('torch').__version__}, "
             "1 thread each.", "",
             "| run | what | validation loss: mean (min–max) | perplexity | vs DDP | "
             "vs every-step gossip | vs every-step averaging | MB sent per rank | "
             "fewer bytes than DDP |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        ppl = safe_exp(r["final_loss"])
        ratio = ref["mb"] / r["mb"] if r["mb"] else float("inf")
        versus = " | ".join(f"{ppl / b - 1:+.1%}" if b else "" for b in baselines)
        lines.append(f"| {name} | {r['what']} | {r['final_loss']:.4f} ({r['min_loss']:.4f}–"
                     f"{r['max_loss']:.4f}) | {ppl:.3f} | "
                     f"{ppl / safe_exp(ref['final_loss']) - 1:+.1%} | {versus} | "
                     f"{r['mb']:,.1f} | {ratio:,.{0 if ratio >= 1 else 2}f}x |")
    text = "\n".join(lines)
    print("\n" + text)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return 0
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = plt.cm.tab20.colors
    for i, (name, r) in enumerate(results.items()):
        xs = [max(b, 1e3) / 1e6 for b in r["bytes"]]
        style = {"color": "black", "lw": 2} if name == "ddp" else {"color": colors[(2 * i) % 20 + (i >= 10)]}
        ax.plot(xs[1:], [safe_exp(l) for l in r["mean_loss"][1:]], marker="o", ms=3, label=name,
                **style)
    ax.axhline(target, color="grey", ls=":", lw=1, label="DDP's final + 2%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("MB sent per rank")
    ax.set_ylabel("validation perplexity (mean of ranks)")
    ax.set_title(f"char-level transformer, {args.nodes} ranks ({args.shards})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plot = args.plot or os.path.join(out, "charlm.png")
    fig.savefig(plot, dpi=110)
    print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
