"""One rank of test_torch_local_optimizer.py: trains torch.nn.Linear(3, 2) (two parameter
tensors) through starling.torch.DecentralizedOptimizer(mode="step") under a scenario with
algorithm.local_optimizer, with a LambdaLR schedule, and saves the flat parameters after every
step to STARLING_OUT/params-rank-R.npy. Also checks the layout the wrapper gave the peer and the
layout keyword's errors."""

import os

import numpy as np
import torch

import starling
import starling.torch
from local_optimizer_problem import LAYOUT, STEPS, lr, problem
from worker_checks import check, raises


def main():
    scenario = os.environ["STARLING_SCENARIO"]
    rank = int(os.environ["STARLING_RANK"])
    # The keyword's own errors come before any connection.
    raises(starling.Error, ["layout: tensor 1 of 2 has size 0"],
           lambda: starling.Peer(scenario, rank, layout=[6, 0]))
    raises(TypeError, [], lambda: starling.Peer(scenario, rank, layout=[-1]))

    x, y, w0, b0 = problem(rank)
    model = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w0))
        model.bias.copy_(torch.from_numpy(b0))
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    opt = starling.torch.DecentralizedOptimizer(inner, model, mode="step")
    check(opt.layout == LAYOUT, f"the wrapper's layout {opt.layout}, expected {LAYOUT}")
    check(list(opt.peer.layout) == LAYOUT, f"the peer's layout {opt.peer.layout}")
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr(s) / 0.05)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    saved = [opt.flat_params.numpy().copy()]
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xt), yt).backward()
        opt.step()
        schedule.step()
        saved.append(opt.flat_params.numpy().copy())
    raises(starling.Error, ["step() has run"], lambda: opt.peer.set_layout([8]))
    opt.close()
    np.save(os.path.join(os.environ["STARLING_OUT"], f"params-rank-{rank}.npy"), np.array(saved))
    print(f"rank {rank}: {STEPS} steps, layout {opt.layout}", flush=True)


if __name__ == "__main__":
    main()
