"""One rank of test_torch_adascale.py: trains torch.nn.Linear(3, 2) through
starling.torch.DecentralizedOptimizer(mode="step") under a scenario with algorithm.adascale,
passing made-up AdaScale estimates per rank with each step, and saves the flat parameters after
every step to STARLING_OUT/adascale-rank-R.npy."""

import os

import numpy as np
import torch

import starling.torch
from local_optimizer_problem import STEPS, problem

VARIANCE = [3.0, 1.0]
SQUARED_MEAN = [0.5, 1.5]


def main():
    rank = int(os.environ["STARLING_RANK"])
    x, y, w0, b0 = problem(rank)
    model = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w0))
        model.bias.copy_(torch.from_numpy(b0))
    # The optimizer's lr is not used: the scenario's step_size at AdaScale's counter is.
    opt = starling.torch.DecentralizedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                                model, mode="step")
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    saved = [opt.flat_params.numpy().copy()]
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xt), yt).backward()
        opt.step(grad_variance=VARIANCE[rank], grad_squared_mean=SQUARED_MEAN[rank])
        saved.append(opt.flat_params.numpy().copy())
    opt.close()
    np.save(os.path.join(os.environ["STARLING_OUT"], f"adascale-rank-{rank}.npy"), np.array(saved))
    print(f"rank {rank}: {STEPS} steps", flush=True)


if __name__ == "__main__":
    main()
