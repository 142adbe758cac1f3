"""Decentralized training of a character-level transformer language model with PyTorch and Starling.

A small GPT-style model (pre-norm transformer, causal attention; by default 2 layers of width 128,
4 heads, a context of 64 characters: 0.43 M parameters) learns to predict the next character of
the King James Bible, the text Debian's `bible-kjv` package ships (4.4 MB; the program reads it
with that package's `bible` command). Launch one copy per node:

    node-launcher run scenarios/ring8-charlm-diloco.json -- /usr/bin/python3 examples/pytorch/train_lm.py

with `import starling` importable (`export PYTHONPATH=$PWD/build/python` after `tools/dev build`).
With a DiLoCo scenario (`"algorithm": {"kind": "diloco", ...}`) the program's AdamW takes the inner
steps and every `inner_steps`-th step the ranks mix their models over the scenario's graph and take
the outer step (starling.torch.DiLoCo); with any other scenario it averages after every step
(starling.torch.DecentralizedOptimizer). Every rank samples windows of the training text with its
own generator (`--shards iid`) or only from its own contiguous n-th of the text (`--shards
contiguous`: different books on different ranks). One block of text in ten is held out; every
`--eval-every` steps each rank logs the validation loss of its own model (nats per character,
`val_loss`; perplexity is its exponential) on the same 1,024 held-out windows, through `peer.log`.

tools/bench/torch_lm.py runs this program under several scenarios and as torch DDP, and
docs/benchmarks.md has what it reaches.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import starling.torch  # starling

BIBLE = "gen1:1-rev22:21"


def load_corpus(path=None):
    """The text as one string: a file, or the King James Bible from Debian's bible-kjv."""
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read()
    bible = shutil.which("bible") or "/usr/bin/bible"
    if not os.path.exists(bible):
        sys.exit("train_lm.py: the corpus is Debian's King James Bible: apt-get install bible-kjv "
                 "(or pass --corpus FILE)")
    out = subprocess.run([bible, "-f", "-m", "8000", BIBLE], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    # One verse a line, after its reference ("Ge1:1 In the beginning ..."): the text alone.
    return "\n".join(line.split(" ", 1)[1] for line in out.splitlines() if " " in line) + "\n"


def split_corpus(text, block=4096, every=10):
    """(vocabulary, training ids, validation ids): every `every`-th block of text is held out."""
    vocab = sorted(set(text))
    ids = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    lookup = {ord(c): i for i, c in enumerate(vocab)}
    ids = np.array([lookup[int(c)] for c in ids], dtype=np.int64)
    blocks = np.arange(len(ids)) // block
    held = blocks % every == every - 1
    return vocab, ids[~held], ids[held]


class CharLM(nn.Module):
    """Token and position embeddings, pre-norm transformer blocks with a causal mask, a linear head."""

    def __init__(self, vocab, width=128, layers=2, heads=4, context=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(context, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1),
                             persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        h = self.blocks(self.tok(idx) + self.pos[:t], mask=self.mask[:t, :t])
        return self.head(self.norm(h))


def lm_loss(model, windows):
    logits = model(windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))


class Windows:
    """Random windows of context + 1 characters from ids[lo:hi], from this rank's generator."""

    def __init__(self, ids, context, batch, seed, lo=0, hi=None):
        self.ids = torch.from_numpy(ids)
        self.lo, self.hi = lo, len(ids) if hi is None else hi
        self.context, self.batch = context, batch
        self.gen = torch.Generator().manual_seed(seed)
        self.offsets = torch.arange(context + 1)

    def next(self):
        starts = torch.randint(self.lo, self.hi - self.context - 1, (self.batch,),
                               generator=self.gen)
        return self.ids[starts[:, None] + self.offsets]


def rank_windows(train, args, rank, nodes):
    lo, hi = 0, len(train)
    if args.shards == "contiguous":
        lo, hi = rank * len(train) // nodes, (rank + 1) * len(train) // nodes
    return Windows(train, args.context, args.batch_size, args.seed * 1000 + rank, lo, hi)


def validation_windows(val, context, count=1024):
    starts = np.linspace(0, len(val) - context - 2, count).astype(np.int64)
    return torch.from_numpy(np.stack([val[s:s + context + 1] for s in starts]))


def evaluate(model, windows):
    with torch.no_grad():
        return float(np.mean([lm_loss(model, w).item() for w in windows.split(256)]))


def schedule(args):
    """Linear warm-up, then cosine decay to a tenth of the rate at the last step."""
    def factor(step):
        if step < args.warmup:
            return (step + 1) / args.warmup
        done = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))
    return factor


def make_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1200, help="optimizer steps per rank")
    ap.add_argument("--batch-size", type=int, default=16, help="windows per step per rank")
    ap.add_argument("--context", type=int, default=64, help="characters per window")
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW's peak learning rate")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100, help="steps of linear warm-up")
    ap.add_argument("--shards", choices=["iid", "contiguous"], default="iid")
    ap.add_argument("--eval-every", type=int, default=200, help="steps between validations")
    ap.add_argument("--corpus", metavar="FILE", help="a UTF-8 text instead of the Bible")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--results", metavar="DIR", help="write DIR/rank-R.json: the validation curve")
    return ap


def make_optimizer(model, args):
    inner = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                              weight_decay=args.weight_decay)
    return inner, torch.optim.lr_scheduler.LambdaLR(inner, schedule(args))



def perplexity(loss):
    """exp(loss), inf for a loss past float64's range (a diverged run)."""
    return math.exp(loss) if loss < 700 else float("inf")

def main():
    args = make_parser().parse_args()
    torch.set_num_threads(args.threads)
    vocab, train, val = split_corpus(load_corpus(args.corpus))
    held_out = validation_windows(val, args.context)

    torch.manual_seed(args.seed)  # every rank starts from the same model
    model = CharLM(len(vocab), args.width, args.layers, args.heads, args.context)
    inner, scheduler = make_optimizer(model, args)
    peer = starling.Peer.from_env()  # starling: this process's rank of the run
    rank, nodes = peer.rank, peer.nodes  # starling
    diloco = peer.diloco is not None  # starling: a DiLoCo scenario
    if diloco:
        optimizer = starling.torch.DiLoCo(inner, model, peer=peer)  # starling
    else:
        optimizer = starling.torch.DecentralizedOptimizer(inner, model, peer=peer)  # starling
    windows = rank_windows(train, args, rank, nodes)

    curve, start = [[0, evaluate(model, held_out)]], time.time()
    losses = []
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        loss = lm_loss(model, windows.next())
        loss.backward()
        optimizer.step()  # starling: AdamW's step, then a gossip round (DiLoCo: every H-th step)
        scheduler.step()
        losses.append(loss.item())
        if step % args.eval_every == 0 or step == args.steps:
            val_loss = evaluate(model, held_out)
            curve.append([step, val_loss])
            peer.log(train_loss=float(np.mean(losses)), val_loss=val_loss, step=step)  # starling
            losses = []
            if rank == 0:
                print(f"step {step}: validation loss {val_loss:.4f} (perplexity "
                      f"{perplexity(val_loss):.3f}, rank 0's model), {time.time() - start:.1f} s",
                      flush=True)
    seconds = time.time() - start
    print(f"rank {rank}: {args.steps} steps, validation loss {curve[-1][1]:.4f}, perplexity "
          f"{perplexity(curve[-1][1]):.4f}, {seconds:.2f} s", flush=True)
    if args.results:
        os.makedirs(args.results, exist_ok=True)
        with open(os.path.join(args.results, f"rank-{rank}.json"), "w") as f:
            json.dump({"curve": curve, "seconds": seconds,
                       "params": sum(p.numel() for p in model.parameters())}, f)
    peer.close()  # starling


if __name__ == "__main__":
    main()
