"""One rank of test_torch_leader.py: trains torch.nn.Linear(3, 2) through
starling.torch.DecentralizedOptimizer(mode="step") under a scenario with algorithm.leader, the
loss handed over by the closure, and saves the flat parameters and the losses after every step to
STARLING_OUT/leader-rank-R.npz. Also checks the loss keywords' errors of Peer.step."""

import os

import numpy as np
import torch

import starling
import starling.torch
from local_optimizer_problem import STEPS, lr, problem
from worker_checks import raises


def main():
    rank = int(os.environ["STARLING_RANK"])
    x, y, w0, b0 = problem(rank)
    model = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w0))
        model.bias.copy_(torch.from_numpy(b0))
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    opt = starling.torch.DecentralizedOptimizer(inner, model, mode="step")
    # One estimate without the other is refused before any exchange.
    raises(ValueError, ["both grad_variance and grad_squared_mean"],
           lambda: opt.peer.step(opt.flat_params, opt.flat_grads, grad_variance=1.0))
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr(s) / 0.05)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xt), yt)
        loss.backward()
        return loss

    saved, losses = [opt.flat_params.numpy().copy()], []
    for _ in range(STEPS):
        losses.append(float(opt.step(closure)))
        schedule.step()
        saved.append(opt.flat_params.numpy().copy())
    opt.close()
    np.savez(os.path.join(os.environ["STARLING_OUT"], f"leader-rank-{rank}.npz"),
             params=np.array(saved), losses=np.array(losses))
    print(f"rank {rank}: {STEPS} steps", flush=True)


if __name__ == "__main__":
    main()
