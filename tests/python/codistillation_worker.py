"""One rank of test_torch_codistillation.py: trains torch.nn.Linear(4, 3) on its own samples with
cross-entropy plus starling.torch.Codistillation's term, through DecentralizedOptimizer in mode
"step", and saves the flat parameters after every step and how many neighbour models each
step's loss saw to STARLING_OUT/codistil-rank-R.npz."""

import os

import numpy as np
import torch

import starling
import starling.torch
from codistillation_problem import ALPHA, BURN_IN, LR, PERIOD, STEPS, problem
from worker_checks import check, raises


def main():
    scenario = os.environ["STARLING_SCENARIO"]
    rank = int(os.environ["STARLING_RANK"])
    x, y, w0, b0 = problem(rank)
    model = torch.nn.Linear(4, 3).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w0))
        model.bias.copy_(torch.from_numpy(b0))
    peer = starling.Peer.from_env()
    check(peer.codistillation == {"alpha": ALPHA, "distance": "cross_entropy", "period": PERIOD,
                                  "burn_in": BURN_IN}, f"codistillation {peer.codistillation}")
    raises(ValueError, ['use mode="step"'],
           lambda: starling.torch.DecentralizedOptimizer(
               torch.optim.SGD(model.parameters(), lr=LR), model, peer, mode="mix"))
    opt = starling.torch.DecentralizedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model,
                                                peer, mode="step")
    codistil = starling.torch.Codistillation(peer, model)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    saved = [opt.flat_params.numpy().copy()]
    seen = []
    for _ in range(STEPS):
        seen.append(len(peer.neighbour_models()))
        opt.zero_grad()
        logits = model(xt)
        loss = torch.nn.functional.cross_entropy(logits, yt) + codistil.loss(logits, xt)
        loss.backward()
        opt.step()
        saved.append(opt.flat_params.numpy().copy())
    last = [np.frombuffer(m, dtype=np.float64) for m in peer.neighbour_models()]
    opt.close()
    np.savez(os.path.join(os.environ["STARLING_OUT"], f"codistil-rank-{rank}.npz"),
             params=np.array(saved), seen=np.array(seen), last=np.array(last))
    print(f"rank {rank}: {STEPS} steps, neighbour models seen {seen}", flush=True)


if __name__ == "__main__":
    main()
