#!/usr/bin/env python3
"""The front door's overhead (issue 11), on a ring of P peer processes on this machine:

1. One `mix` of a d-float32 buffer through Python (`starling.Peer.mix` on a numpy array), through
   the C++ API (`starling::Peer::mix`, tools/bench_frontdoor_mix.cc), and bench-gossip's own round
   (the transport and combine without the Peer), each the median over rounds of the slowest
   rank's round, after warm-up rounds. Goal: Python within 5% of C++ for d >= 1e6.
2. What `starling.torch.DecentralizedOptimizer.step()` adds to a training step of the example's
   MLP (examples/pytorch/train.py, batch 64): the training step without Starling, with the
   wrapper, the `mix` inside it, and the wrapper's own Python (its step with a do-nothing peer,
   minus the wrapped optimizer's step).

    tools/bench_frontdoor.py [--build build-release] [--peers 4] [--dims 1e6,1e7]

Runs every rank with the interpreter running this script (use the one the build's extension is
for: /usr/bin/python3 on Debian) and PYTHONPATH=BUILD/python. Prints markdown tables
(docs/benchmarks.md).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def scenario(folder, peers):
    path = os.path.join(folder, f"bench-frontdoor-ring{peers}.json")
    with open(path, "w") as f:
        # log_every: the peers' logs stay out of the timed rounds (a logged round of a large
        # model also computes its consensus sketch), as bench-gossip logs nothing either.
        json.dump({"schema_version": 1, "name": f"bench-frontdoor-ring{peers}", "nodes": peers,
                   "seed": 7, "log_every": 1000000000, "topology": {"kind": "ring"},
                   "algorithm": {"kind": "dsgd", "step_size": 0.1},
                   "transport": {"kind": "ucx", "tls": "shm"}}, f)
    return path


def launch(build, scen, out, command):
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"), OMP_NUM_THREADS="1")
    args = [os.path.join(build, "tools", "node-launcher"), "run", scen, "--out", out, "--"]
    p = subprocess.run(args + command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args + command)} failed ({p.returncode}):\n{p.stdout}")


def dim_name(dim):
    return f"{dim:.0e}".replace("+0", "").replace("+", "")


def slowest_rank_median(folder, peers, key="round_s"):
    ranks = []
    for r in range(peers):
        with open(os.path.join(folder, f"bench-rank-{r}.json")) as f:
            ranks.append(json.load(f)[key])
    return statistics.median(max(t) for t in zip(*ranks))


def gossip_ms(build, peers, dim, repeat):
    """bench-gossip's Starling shm column for (peers, dim), in ms (its best of `repeat`)."""
    p = subprocess.run([os.path.join(build, "tools", "bench-gossip"), "--peers", str(peers),
                        "--dims", dim_name(dim),
                        "--tls", "shm", "--repeat", str(repeat)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 3 and cells[0] == str(peers) and re.fullmatch(r"[0-9.e+]+", cells[1]):
            if float(cells[1]) == dim:
                return float(cells[2])
    raise SystemExit(f"bench-gossip printed no row for P={peers} d={dim:g}:\n{p.stdout}")


# ---------------------------------------------------------------------------------- the workers
def worker_mix(dim, rounds, warmup, out):
    import numpy as np
    import starling
    peer = starling.Peer.from_env()
    x = np.full(dim, float(peer.rank), np.float32)
    times = []
    for i in range(warmup + rounds):
        t = time.perf_counter()
        peer.mix(x)
        if i >= warmup:
            times.append(time.perf_counter() - t)
    with open(os.path.join(out, f"bench-rank-{peer.rank}.json"), "w") as f:
        json.dump({"round_s": times}, f)
    peer.close()


class _NoPeer:
    """A peer that does nothing: what is left of a wrapped step is the wrapper's own Python."""
    rank, nodes = 0, 1
    codistillation = None  # what DecentralizedOptimizer asks of a peer in mode "mix"

    def mix(self, params):
        pass


def worker_train(steps, out):
    import torch
    import torch.nn.functional as F
    import starling
    import starling.torch
    sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
    import train
    torch.set_num_threads(1)
    peer = starling.Peer.from_env()
    torch.manual_seed(1)
    model = train.make_model("mlp")
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))

    def run(optimizer, n, mix=None):
        total, stepping = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            t1 = time.perf_counter()
            optimizer.step()
            if mix is not None:
                mix()
            t2 = time.perf_counter()
            total.append(t2 - t0)
            stepping.append(t2 - t1)
        return total, stepping

    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run(sgd, 10)
    plain_total, plain_step = run(sgd, steps)
    wrapped = starling.torch.DecentralizedOptimizer(sgd, model, peer=peer)
    run(wrapped, 10)
    wrapped_total, wrapped_step = run(wrapped, steps)
    manual_total, manual_step = run(sgd, steps, mix=lambda: peer.mix(wrapped.flat_params))
    # overlap=True: zero_grad() starts the round, backward's gradient hooks poll it, step()
    # waits for it and then steps SGD.
    overlapped = starling.torch.DecentralizedOptimizer(sgd, model, peer=peer, overlap=True)
    run(overlapped, 10)
    overlap_total, overlap_step = run(overlapped, steps)
    overlapped.close()
    # The wrapper alone, in process: no communication.
    quiet = starling.torch.DecentralizedOptimizer(sgd, model, peer=_NoPeer())
    run(quiet, 10)
    _, quiet_step = run(quiet, steps)
    _, inner_step = run(sgd, steps)
    with open(os.path.join(out, f"bench-rank-{peer.rank}.json"), "w") as f:
        json.dump({"plain_total": plain_total, "plain_step": plain_step,
                   "wrapped_total": wrapped_total, "wrapped_step": wrapped_step,
                   "manual_total": manual_total, "manual_step": manual_step,
                   "overlap_total": overlap_total, "overlap_step": overlap_step,
                   "quiet_step": quiet_step, "inner_step": inner_step,
                   "params": wrapped.flat_params.numel()}, f)
    peer.close()


# ---------------------------------------------------------------------------------- the driver
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-release"))
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--dims", default="1e6,1e7")
    ap.add_argument("--rounds", type=int, default=0, help="timed rounds (default: by size)")
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each column, Python and C++ alternating; the best is shown")
    ap.add_argument("--train-steps", type=int, default=200)
    ap.add_argument("--worker", choices=["mix", "mix-cpp", "train"], help=argparse.SUPPRESS)
    ap.add_argument("--dim", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == "mix":
        return worker_mix(int(args.dim), args.rounds, args.warmup, args.out)
    if args.worker == "train":
        return worker_train(args.train_steps, args.out)

    build = os.path.abspath(args.build)
    with tempfile.TemporaryDirectory(prefix="starling-bench-frontdoor-") as tmp:
        scen = scenario(tmp, args.peers)
        print(f"front door, ring of {args.peers} peer processes, float32, tls shm, "
              f"{os.cpu_count()} cores; ms = median over rounds of the slowest rank's round, best of "
              f"{args.repeat} runs\n")
        print("| P | d | Python mix ms | C++ mix ms | bench-gossip ms | Python / C++ | C++ / gossip |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for dim in [int(float(d)) for d in args.dims.split(",") if d not in ("", "none")]:
            rounds = args.rounds or max(20, min(100, int(1e8 / dim)))
            common = ["--dim", str(dim), "--rounds", str(rounds), "--warmup", str(args.warmup)]
            py, cc = [], []
            for rep in range(args.repeat):
                py_out = os.path.join(tmp, f"py-{dim}-{rep}")
                os.makedirs(py_out)
                launch(build, scen, py_out, [sys.executable, os.path.abspath(__file__),
                                             "--worker", "mix", "--out", py_out] + common)
                py.append(slowest_rank_median(py_out, args.peers) * 1e3)
                cc_out = os.path.join(tmp, f"cc-{dim}-{rep}")
                os.makedirs(cc_out)
                launch(build, scen, cc_out, [os.path.join(build, "tools", "bench-frontdoor-mix"),
                                             str(dim), str(rounds), str(args.warmup), cc_out])
                cc.append(slowest_rank_median(cc_out, args.peers) * 1e3)
            print(f"P={args.peers} d={dim_name(dim)}: Python {[round(x, 3) for x in py]} ms, "
                  f"C++ {[round(x, 3) for x in cc]} ms", file=sys.stderr, flush=True)
            py, cc = min(py), min(cc)
            gossip = gossip_ms(build, args.peers, dim, args.repeat)
            print(f"| {args.peers} | {dim_name(dim)} | {py:.3f} | {cc:.3f} | {gossip:.3f} | "
                  f"{py / cc:.3f} | {cc / gossip:.3f} |", flush=True)

        out = os.path.join(tmp, "train")
        os.makedirs(out)
        launch(build, scen, out, [sys.executable, os.path.abspath(__file__), "--worker", "train",
                                  "--train-steps", str(args.train_steps), "--out", out])
        ranks = []
        for r in range(args.peers):
            with open(os.path.join(out, f"bench-rank-{r}.json")) as f:
                ranks.append(json.load(f))

        def ms(key):  # median over steps of the mean over ranks
            return statistics.median(statistics.mean(s) for s in zip(*(d[key] for d in ranks))) * 1e3

        print(f"\nDecentralizedOptimizer.step() in a training step of the example's MLP "
              f"({ranks[0]['params']} float32 parameters, batch 64, 1 thread per rank), ms, "
              "median over steps of the mean over ranks:\n")
        print("| | training step | optimizer step |")
        print("|---|---:|---:|")
        print(f"| SGD alone | {ms('plain_total'):.3f} | {ms('plain_step'):.3f} |")
        print(f"| SGD, then peer.mix(flat) by hand | {ms('manual_total'):.3f} | "
              f"{ms('manual_step'):.3f} |")
        print(f"| DecentralizedOptimizer(SGD) | {ms('wrapped_total'):.3f} | "
              f"{ms('wrapped_step'):.3f} |")
        print(f"| DecentralizedOptimizer(SGD, overlap=True) | {ms('overlap_total'):.3f} | "
              f"{ms('overlap_step'):.3f} |")
        print(f"\nThe wrapper's own Python (its step with a do-nothing peer minus SGD's step): "
              f"{(ms('quiet_step') - ms('inner_step')) * 1e3:.1f} us per step")


if __name__ == "__main__":
    main()
