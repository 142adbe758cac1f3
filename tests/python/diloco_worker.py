"""One rank of test_torch_diloco.py: trains torch.nn.Linear(3, 2) on its own data
(local_optimizer_problem.problem) through starling.torch.DiLoCo, with the scenario's keys
(inner_steps SGD steps at lr 0.05, then the outer step; with fragments, a fragment's outer step
every inner_steps / fragments steps), and saves the flat parameters after every round to
STARLING_OUT/params-rank-R.npy."""

import itertools
import os
import types

import numpy as np
import torch

import starling.torch
from local_optimizer_problem import problem
from worker_checks import check, raises

OUTER_ROUNDS = 5


def main():
    rank = int(os.environ["STARLING_RANK"])
    x, y, w0, b0 = problem(0)  # every rank starts from rank 0's weights
    x, y, _, _ = problem(rank)
    model = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w0))
        model.bias.copy_(torch.from_numpy(b0))
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    # Argument checks, with a stand-in for the peer (its scenario keys only).
    def fake(**keys):
        return types.SimpleNamespace(diloco=dict(keys), round=0, rejoining=False)
    raises(ValueError, ["multiple of fragments"],
           lambda: starling.torch.DiLoCo(inner, model, peer=fake(inner_steps=3, fragments=2)))
    raises(ValueError, ["fragments must be at least 1"],
           lambda: starling.torch.DiLoCo(inner, model, peer=fake(inner_steps=3), fragments=0))
    raises(NotImplementedError, ["by_time", "leave compression out"],
           lambda: starling.torch.DiLoCo(inner, model,
                                         peer=fake(inner_steps=16, seconds=2.0, compressed=True)))
    raises(ValueError, ["seconds must be positive"],
           lambda: starling.torch.DiLoCo(inner, model, peer=fake(inner_steps=4), seconds=0))
    raises(ValueError, ["the scenario's fragments"],
           lambda: starling.torch.DiLoCo(inner, model, peer=fake(inner_steps=4, compressed=True),
                                         fragments=2))
    raises(ValueError, ["the scenario's fragments"],
           lambda: starling.torch.DiLoCo(inner, model,
                                         peer=fake(inner_steps=4, compressed=True,
                                                   compressed_differences=True, fragments=1),
                                         fragments=2))
    # by_time: a clock of this rank's own, which each inner step moves by 1 / SPEEDS[rank].
    now = [0.0]
    clock = (lambda: now[0]) if os.environ.get("SPEEDS") else None
    if os.environ.get("EXPLICIT_PEER") == "1":
        # A peer made without a layout: the wrapper gives it the model's tensors (for the
        # scenario's per-tensor codec rules).
        peer = starling.Peer.from_env()
        check(list(peer.layout) == [], f"a new peer's layout {list(peer.layout)}")
        opt = starling.torch.DiLoCo(inner, model, peer=peer, clock=clock)
        # (Not in fragments: the exchange then carries a fragment, not the model's tensors.)
        want = [6, 2] if opt.fragments == 1 else []
        check(list(peer.layout) == want, f"the peer's layout {list(peer.layout)}, not {want}")
    else:
        opt = starling.torch.DiLoCo(inner, model, clock=clock)
    keys = opt.peer.diloco
    check(keys is not None and keys["inner_steps"] == opt.inner_steps,
          f"the scenario's keys {keys}, the wrapper's inner_steps {opt.inner_steps}")
    check(opt.fragments == keys["fragments"], f"fragments {opt.fragments}, the scenario's {keys}")
    check(keys["compressed"] == (os.environ["EXPECT_COMPRESSED"] == "1"),
          f"the scenario's keys {keys}: compressed should be {os.environ['EXPECT_COMPRESSED']}")
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    saved = [opt.flat_params.numpy().copy()]
    if os.environ.get("SPEEDS"):
        by_time(opt, model, xt, yt, rank, saved, now)
        return
    rounds = OUTER_ROUNDS * opt.fragments  # each fragment mixed OUTER_ROUNDS times
    for _ in range(OUTER_ROUNDS * opt.inner_steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xt), yt).backward()
        opt.step()
        if opt.steps % (opt.inner_steps // opt.fragments) == 0:
            saved.append(opt.flat_params.numpy().copy())
    if opt.overlap:
        # The last round is in flight until close() finishes it: its outer model is the end.
        check(opt.outer_rounds == rounds - 1, f"{opt.outer_rounds} outer rounds in flight")
        opt.close()
        saved.append(opt.flat_params.numpy().copy())
    else:
        opt.close()
    check(opt.outer_rounds == rounds, f"{opt.outer_rounds} outer rounds, not {rounds}")
    if not opt.peer.closed:
        opt.peer.close()  # the worker's own peer (EXPLICIT_PEER)
    np.save(os.path.join(os.environ["STARLING_OUT"], f"params-rank-{rank}.npy"), np.array(saved))
    print(f"rank {rank}: {opt!r}", flush=True)


def by_time(opt, model, xt, yt, rank, saved, now):
    """The scenario's by_time inner steps on a clock of this rank's own: each inner step takes
    1 / SPEEDS[rank] of its seconds, so the rank takes as many steps a round as its speed gives
    (the reference counts the same). The loop is opt.batches(): every rank ends after the run's
    last round, whatever its steps."""
    speed = float(os.environ["SPEEDS"].split(",")[rank])
    keys = opt.peer.diloco
    check(opt.seconds == keys["seconds"] > 0 and opt.inner_steps == keys["inner_steps"],
          f"by_time: the wrapper's seconds {opt.seconds} and cap {opt.inner_steps}, the "
          f"scenario's {keys}")
    # A generator cannot start over: batches() says so instead of looping forever.
    raises(ValueError, ["yielded nothing", "generator"], lambda: next(opt.batches(iter([]))))
    started = opt.rounds
    steps = []
    for _ in opt.batches(itertools.repeat(None)):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xt), yt).backward()
        now[0] += 1.0 / speed
        opt.step()
        if opt.rounds != started:
            started = opt.rounds
            saved.append(opt.flat_params.numpy().copy())
            steps.append(opt.steps)
    last = opt.peer.last_round
    check(opt.done and opt.rounds == last, f"batches() ended at round {opt.rounds} of {last}")
    opt.close()
    if opt.overlap:
        saved.append(opt.flat_params.numpy().copy())
    check(opt.outer_rounds == last, f"{opt.outer_rounds} outer rounds landed, not {last}")
    out = os.environ["STARLING_OUT"]
    np.save(os.path.join(out, f"params-rank-{rank}.npy"), np.array(saved))
    np.save(os.path.join(out, f"steps-rank-{rank}.npy"), np.array(steps))
    print(f"rank {rank}: {opt!r}", flush=True)


if __name__ == "__main__":
    main()
