"""Decentralized training of a Fashion-MNIST classifier with PyTorch and Starling.

An ordinary PyTorch training loop plus Starling's lines (marked "# starling"): every rank trains on
its own shard of the training set, and after each optimizer step it averages its model with its
neighbours in the scenario's graph. Launch one copy per node:

    node-launcher run scenarios/ring4-pytorch.json -- /usr/bin/python3 examples/pytorch/train.py

with `import starling` importable (`export PYTHONPATH=$PWD/build/python` after `tools/dev build`)
and `python3` the interpreter that has torch (Debian's /usr/bin/python3 with python3-torch).
Rank 0 prints the test accuracy of its model after each epoch; every rank logs `train_loss` and
`test_accuracy` through `peer.log`, into the run's metrics.

Data: Debian's `dataset-fashion-mnist` (/usr/share/datasets/fashion-mnist), read by
examples/data/idx.py. Each rank takes every n-th image of one shuffle that all ranks share.

What it reaches (4 ranks on a ring, scenarios/ring4-pytorch.json, the defaults: MLP 784-256-10,
SGD with momentum 0.9, lr 0.05, batch 64 per rank, 3 epochs of each rank's 15,000 images = 705
steps): 86.2-86.6% test accuracy at the 4 ranks' own models and 86.6% at their average, the
ranks agreeing to a relative consensus distance (1/n) sum_i |x_i - mean|^2 / |mean|^2 of 6e-6;
about 2 minutes on 2 cores. `--model cnn` trains a small CNN instead (slower on CPU).

A scenario with `"algorithm": {"kind": "diloco", "inner_steps": H, ...}` (e.g.
scenarios/ring4-pytorch-diloco.json) runs the same program as DiLoCo: your optimizer takes the
inner steps and every H-th step also mixes and takes the outer step (starling.torch.DiLoCo);
nothing else changes. With `"inner_steps": {"kind": "by_time", "seconds": s}` (and the
scenario's "rounds") each rank takes as many steps a round as fit in s seconds, so the ranks take
different numbers of steps: the loop is then `optimizer.batches(...)`, which ends every rank after
the last round. `--slow-rank R --slow-ms M` makes rank R sleep M ms after each step (a slower
device, for tools/bench/torch_by_time.py).

`--device cuda` puts the model and the data on the GPU: the optimizer keeps the flat parameters
there and Starling mixes them there, only the frames crossing to host memory (docs/cuda.md).

With `"faults": {"on_peer_loss": "continue", "restart": true}` in the scenario, a rank that dies
is started again by the launcher: its `optimizer.restore()` takes a neighbour's model and the
round the run is at (`peer.round`), and it trains on from there to the same last step as the
others.
"""

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import starling.torch  # starling

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
from idx import load_fashion_mnist  # noqa: E402


def make_model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: none)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--mode", choices=["mix", "step"], default="mix",
                    help="mix: SGD step then gossip; step: the scenario's algorithm does the update")
    ap.add_argument("--train-samples", type=int, default=60000, help="use the first N (shuffled)")
    ap.add_argument("--test-samples", type=int, default=10000)
    ap.add_argument("--log-every", type=int, default=50, help="steps between peer.log lines")
    ap.add_argument("--seed", type=int, default=1, help="the shuffle and the model's init")
    ap.add_argument("--init-seed-per-rank", action="store_true",
                    help="start each rank from a different model (shows gossip reaching consensus)")
    ap.add_argument("--save", metavar="DIR",
                    help="write the flat model to DIR/rank-R-step-S.npy at step 0 and at the end")
    ap.add_argument("--save-every", type=int, default=0, metavar="N",
                    help="with --save: also every N steps")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--slow-rank", type=int, default=-1,
                    help="this rank sleeps --slow-ms after each step (an emulated slow device)")
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--device", default="cpu",
                    help="where the model and the data live (cuda: Starling mixes there too)")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)

    train_x, train_y, test_x, test_y = load_fashion_mnist()
    order = np.random.default_rng(args.seed).permutation(len(train_x))[:args.train_samples]
    test_x = torch.from_numpy(test_x[:args.test_samples]).to(device)
    test_y = torch.from_numpy(test_y[:args.test_samples]).to(device)

    torch.manual_seed(args.seed)
    model = make_model(args.model).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    peer = starling.Peer.from_env()  # starling: this process's rank of the run
    rank, nodes = peer.rank, peer.nodes  # starling
    if args.init_seed_per_rank:
        torch.manual_seed(args.seed + 1000 * (rank + 1))
        model = make_model(args.model).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    diloco = peer.diloco is not None  # starling: a DiLoCo scenario (its keys)
    if diloco:
        optimizer = starling.torch.DiLoCo(optimizer, model, peer=peer)  # starling
    else:
        optimizer = starling.torch.DecentralizedOptimizer(  # starling
            optimizer, model, peer=peer, mode=args.mode)  # starling

    # Equal shards: every rank must take the same number of steps, since each step is a round
    # that its neighbours wait for.
    shard = order[rank::nodes][:len(order) // nodes]
    x = torch.from_numpy(train_x[shard]).to(device)
    y = torch.from_numpy(train_y[shard]).to(device)
    gen = torch.Generator().manual_seed(args.seed + rank)

    def save(step):
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            np.save(os.path.join(args.save, f"rank-{rank}-step-{step}.npy"),
                    optimizer.flat_params.cpu().numpy())

    # Every rank stops at the same step: each step is a round its neighbours wait for.
    batches = (len(x) + args.batch_size - 1) // args.batch_size
    total = args.epochs * batches
    if args.steps:
        total = min(total, args.steps)
    if peer.last_round:  # starling: a scenario with "rounds" says where the run ends
        per_round = optimizer.inner_steps // optimizer.fragments if diloco else 1
        total = min(total, peer.last_round * per_round)
    # starling: a restarted rank (faults.restart) takes its neighbours' model and learns where
    # the run stands; for every other rank this does nothing and peer.round is 0.
    optimizer.restore()
    step = optimizer.steps if diloco else peer.round  # starling
    if step:
        print(f"rank {rank}: rejoined the run at step {step} of {total}", flush=True)
    save(step)
    start, losses = time.time(), []
    slow = args.slow_ms / 1000.0 if rank == args.slow_rank else 0.0
    if diloco and optimizer.seconds is not None:
        # starling: by_time rounds end on each rank's clock, so the ranks take different numbers
        # of steps; batches() restarts the epochs and ends every rank after the last round.
        class Epochs:  # a new shuffle each time batches() starts the data again
            def __iter__(self):
                return iter(torch.randperm(len(x), generator=gen).split(args.batch_size))
        for batch in optimizer.batches(Epochs()):
            optimizer.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
            if slow:
                time.sleep(slow)
        step = optimizer.steps
        acc = accuracy(model, test_x, test_y)
        peer.log(test_accuracy=acc)  # starling
        print(f"rank {rank}: {step} steps, test accuracy {acc:.4f}, "
              f"{time.time() - start:.2f} s", flush=True)
        optimizer.close()  # starling: lands a round still in flight (overlap)
        peer.close()  # starling
        return
    for epoch in range(1 + step // batches, args.epochs + 1):
        skip = step % batches if epoch == 1 + step // batches else 0  # a rejoined rank's epoch
        for batch in torch.randperm(len(x), generator=gen).split(args.batch_size)[skip:]:
            if step >= total:
                break
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()  # the SGD step, then one gossip round with the neighbours
            if slow:
                time.sleep(slow)
            losses.append(loss.item())
            # starling: one round per step (DiLoCo: one every inner_steps steps)
            step = optimizer.steps if diloco else peer.round
            if args.save_every and step % args.save_every == 0:
                save(step)
            if step % args.log_every == 0:
                peer.log(train_loss=float(np.mean(losses)), epoch=epoch)  # starling
                losses = []
        acc = accuracy(model, test_x, test_y)
        peer.log(test_accuracy=acc, epoch=epoch)  # starling
        if rank == 0:
            print(f"epoch {epoch}: step {step}, test accuracy {acc:.4f} (rank 0's model), "
                  f"{time.time() - start:.1f} s", flush=True)
        if step >= total:
            break
    if not (args.save_every and step % args.save_every == 0):
        save(step)
    print(f"rank {rank}: {step} steps, test accuracy {accuracy(model, test_x, test_y):.4f}, "
          f"{time.time() - start:.2f} s", flush=True)
    peer.close()  # starling


if __name__ == "__main__":
    main()
