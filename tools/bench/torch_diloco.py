#!/usr/bin/python3
"""PyTorch side by side (issue 35): the same program, examples/pytorch/train.py (Fashion-MNIST,
`--model mlp` or `cnn`, SGD with momentum 0.9, batch 64 per rank), on N processes of this
machine:

  starling-mix     DecentralizedOptimizer: a gossip round on the ring after every step
                   (node-launcher run scenarios/ring4-pytorch.json -- train.py)
  starling-diloco  starling.torch.DiLoCo: 20 inner steps, then a gossip round and the outer
                   Nesterov step (scenarios/ring4-pytorch-diloco.json; train.py unchanged)
  ddp              torch DistributedDataParallel, gloo all-reduce of the gradients every step
                   (what users run today; the same model, data shards, optimizer and steps)

It prints seconds per step (rank 0's training loop), the test accuracy of each rank's model
(mean), and MB each rank sent: Starling's from the run's metrics, DDP's computed as a ring
all-reduce's 2 (n - 1) / n times the gradient's bytes per step (gloo's exact traffic is not
reported).

Usage: tools/bench/torch_diloco.py [--build DIR] [--steps S] [--model mlp|cnn] [--nodes N]
Needs Debian's /usr/bin/python3 with python3-torch, and a build with the Python module.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "pytorch", "train.py")


def ddp_worker(rank, nodes, port, args, out):
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(TRAIN))
    sys.path.insert(0, os.path.join(ROOT, "examples", "data"))
    sys.path.insert(0, os.path.join(ROOT, args.build, "python"))  # train.py imports starling
    from idx import load_fashion_mnist
    from train import accuracy, make_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=nodes)
    train_x, train_y, test_x, test_y = load_fashion_mnist()
    order = np.random.default_rng(1).permutation(len(train_x))
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(make_model(args.model))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    shard = order[rank::nodes][:len(order) // nodes]
    x, y = torch.from_numpy(train_x[shard]), torch.from_numpy(train_y[shard])
    gen = torch.Generator().manual_seed(1 + rank)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)
    # train.py's loop: the loss read every step, the test set at the end of each epoch.
    step, start, losses = 0, time.time(), []
    while step < args.steps:
        for batch in torch.randperm(len(x), generator=gen).split(64):
            if step >= args.steps:
                break
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
        acc = accuracy(model.module, test_x, test_y)
    elapsed = time.time() - start
    params = sum(p.numel() for p in model.parameters())
    with open(os.path.join(out, f"ddp-rank-{rank}.json"), "w") as f:
        json.dump({"seconds": elapsed, "accuracy": acc, "params": params}, f)
    dist.destroy_process_group()


def run_ddp(args, out):
    import torch.multiprocessing as mp
    port = 29500 + os.getpid() % 1000
    mp.spawn(ddp_worker, args=(args.nodes, port, args, out), nprocs=args.nodes, join=True)
    ranks = [json.load(open(os.path.join(out, f"ddp-rank-{r}.json"))) for r in range(args.nodes)]
    params = ranks[0]["params"]
    sent = 2 * (args.nodes - 1) / args.nodes * params * 4 * args.steps
    return ranks[0]["seconds"], sum(r["accuracy"] for r in ranks) / len(ranks), sent


def run_train(args, out, name, scenario, extra):
    """node-launcher run of train.py on `scenario` (a dict, written to OUT/NAME.json) with the
    extra arguments: (rank 0's seconds, each rank's steps, the ranks' mean test accuracy, bytes
    sent per rank)."""
    launcher = os.path.join(ROOT, args.build, "tools", "node-launcher")
    folder = os.path.join(out, name)
    path = os.path.join(out, f"{name}-scenario.json")
    with open(path, "w") as f:
        json.dump(scenario, f, indent=1)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, args.build, "python"))
    r = subprocess.run([launcher, "run", path, "--out", folder, "--", sys.executable, TRAIN] +
                       extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env)
    if r.returncode != 0:
        sys.exit(f"{name}: node-launcher exited {r.returncode}:\n{r.stdout[-3000:]}")
    finals = re.findall(r"rank (\d+): (\d+) steps, test accuracy ([0-9.]+), ([0-9.]+) s",
                        r.stdout)
    seconds = [float(t) for rank, _, _, t in finals if rank == "0"][0]
    steps = [int(n) for _, n, _, _ in sorted(finals, key=lambda f: int(f[0]))]
    acc = sum(float(a) for _, _, a, _ in finals) / len(finals)
    last = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))][-1]
    return seconds, steps, acc, last.get("bytes_sent", 0) / args.nodes


def run_starling(args, out, scenario, name):
    with open(os.path.join(ROOT, "scenarios", scenario)) as f:
        s = json.load(f)
    s["nodes"] = args.nodes  # the scenario's ring, with --nodes ranks
    seconds, _, acc, sent = run_train(args, out, name, s, ["--steps", str(args.steps),
                                                           "--epochs", "1000",
                                                           "--model", args.model])
    return seconds, acc, sent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--nodes", type=int, default=4, help="processes (the scenarios' ring, resized)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    out = args.out or os.path.join(ROOT, args.build, "bench-torch-diloco")
    os.makedirs(out, exist_ok=True)
    rows = [("starling-mix", "DecentralizedOptimizer, a gossip round every step",
             run_starling(args, out, "ring4-pytorch.json", "mix")),
            ("starling-diloco", "starling.torch.DiLoCo, H = 20, outer Nesterov",
             run_starling(args, out, "ring4-pytorch-diloco.json", "diloco")),
            ("ddp", "torch DDP, gloo all-reduce every step", run_ddp(args, out))]
    print(f"\n{args.nodes} processes, {args.model}, {args.steps} steps of batch 64 per rank, "
          f"SGD lr 0.05 momentum 0.9, torch {__import__('torch').__version__}, 1 thread each.\n")
    print("| run | what | s per step | test accuracy (mean of ranks) | MB sent per rank |")
    print("|---|---|---:|---:|---:|")
    for label, what, (seconds, acc, sent) in rows:
        print(f"| {label} | {what} | {seconds / args.steps * 1000:.2f} ms | {acc:.2%} | "
              f"{sent / 1e6:,.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
