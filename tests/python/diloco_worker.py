"""One rank of test_torch_diloco.py: trains torch.nn.Linear(3, 2) on its own data
(local_optimizer_problem.problem) through starling.torch.DiLoCo, with the scenario's keys
(STEPS_ARG inner SGD steps at lr 0.05, then the outer step), and saves the flat parameters after
every outer round to STARLING_OUT/params-rank-R.npy."""

import os

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
    raises(NotImplementedError, ["fragments"],
           lambda: starling.torch.DiLoCo(inner, model, peer=object(), fragments=2))
    opt = starling.torch.DiLoCo(inner, model)
    keys = opt.peer.diloco
    check(keys is not None and keys["inner_steps"] == opt.inner_steps,
          f"the scenario's keys {keys}, the wrapper's inner_steps {opt.inner_steps}")
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    saved = [opt.flat_params.numpy().copy()]
    for _ in range(OUTER_ROUNDS * opt.inner_steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xt), yt).backward()
        opt.step()
        if opt.steps % opt.inner_steps == 0:
            saved.append(opt.flat_params.numpy().copy())
    if opt.overlap:
        # The last round is in flight until close() finishes it: its outer model is the end.
        check(opt.outer_rounds == OUTER_ROUNDS - 1, f"{opt.outer_rounds} outer rounds in flight")
        opt.close()
        saved.append(opt.flat_params.numpy().copy())
    else:
        opt.close()
    check(opt.outer_rounds == OUTER_ROUNDS, f"{opt.outer_rounds} outer rounds")
    np.save(os.path.join(os.environ["STARLING_OUT"], f"params-rank-{rank}.npy"), np.array(saved))
    print(f"rank {rank}: {opt!r}", flush=True)


if __name__ == "__main__":
    main()
