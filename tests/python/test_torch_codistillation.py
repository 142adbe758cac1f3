"""starling.torch.Codistillation with a scenario's algorithm.codistillation (issue 15): two real
trainer processes under `node-launcher run SCENARIO -- python3 codistillation_worker.py` train
torch.nn.Linear(4, 3) on their own samples; every step's parameters must equal a reference
written here in numpy: each rank's gradient of mean cross-entropy + alpha CE(p, q) with q the
softmax of the other rank's model as of the last exchange (rounds r with r % period == 0 and
r + period >= burn_in), the term off before burn_in, x <- x - lr g, and no averaging."""

import os
import sys

import harness

harness.require("numpy", "torch", "starling")

import numpy as np  # noqa: E402

from codistillation_problem import ALPHA, BURN_IN, LR, PERIOD, STEPS, problem  # noqa: E402

NODES = 2


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def logits(flat, x):
    return x @ flat[:12].reshape(3, 4).T + flat[12:]


def gradient(rank, flat, teacher):
    x, y, _, _ = problem(rank)
    p = softmax(logits(flat, x))
    dz = p.copy()
    dz[np.arange(len(y)), y] -= 1.0
    if teacher is not None:
        dz += ALPHA * (p - softmax(logits(teacher, x)))
    dz /= len(y)
    return np.concatenate([(dz.T @ x).ravel(), dz.sum(axis=0)])


def reference():
    xs = []
    for r in range(NODES):
        _, _, w0, b0 = problem(r)
        xs.append(np.concatenate([w0.ravel(), b0]))
    copies = [None] * NODES
    history, seen = [[x.copy() for x in xs]], []
    for s in range(STEPS):
        active = s >= BURN_IN and copies[0] is not None
        seen.append(1 if active else 0)
        xs = [xs[r] - LR * gradient(r, xs[r], copies[r] if active else None)
              for r in range(NODES)]
        if s % PERIOD == 0 and s + PERIOD >= BURN_IN:
            copies = [xs[1 - r].copy() for r in range(NODES)]
        history.append([x.copy() for x in xs])
    return history, seen, copies


def main():
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "codistillation_worker.py")
    with harness.TempDir("python-torch-codistillation") as tmp:
        scenario = harness.embedded_scenario(
            tmp, "torch-codistillation", NODES,
            algorithm={"kind": "dsgd", "step_size": LR,
                       "codistillation": {"alpha": ALPHA, "period": PERIOD, "burn_in": BURN_IN}},
            extra={"topology": {"kind": "complete"}})
        out = os.path.join(tmp, "run")
        rc, output = harness.run_launcher(scenario, out, [sys.executable, worker], timeout=120)
        print(output)
        harness.check(rc == 0, f"node-launcher exited {rc}")
        want, seen, copies = reference()
        worst = 0.0
        for r in range(NODES):
            got = np.load(os.path.join(out, f"codistil-rank-{r}.npz"))
            harness.check(list(got["seen"]) == seen,
                          f"rank {r} saw {list(got['seen'])} neighbour models, expected {seen}")
            harness.check(np.allclose(got["last"][0], copies[r], rtol=1e-12, atol=1e-14),
                          f"rank {r}: its copy of the neighbour's model differs")
            for s in range(STEPS + 1):
                harness.check(np.allclose(got["params"][s], want[s][r], rtol=1e-9, atol=1e-12),
                              f"rank {r} after step {s}: {got['params'][s]}, the reference "
                              f"{want[s][r]}")
                worst = max(worst, float(np.max(np.abs(got["params"][s] - want[s][r]))))
        # Not averaged: the two ranks' models differ; and the term changed them.
        harness.check(np.max(np.abs(want[STEPS][0] - want[STEPS][1])) > 1e-2, "models averaged?")
    print(f"python torch codistillation: {STEPS} steps on 2 ranks match the numpy reference "
          f"(max |diff| {worst:.2e})")


if __name__ == "__main__":
    main()
