"""starling.torch.DecentralizedOptimizer with a scenario's algorithm.local_optimizer (issue 15):
two real trainer processes under `node-launcher run SCENARIO -- python3
local_optimizer_worker.py` train torch.nn.Linear(3, 2) (tensors of 6 and 2 elements) in mode
"step" on a complete graph of 2 with DSGD, gamma 1. The wrapper passes the model's layout to the
peer; every step's parameters must equal a reference written here in numpy: each rank's gradient
of its mean-square loss by hand, Adam (or LAMB with its per-tensor trust ratio) per rank,
psi_i = x_i - lr u_i, then x_i = (psi_0 + psi_1) / 2."""

import os
import sys

import harness

harness.require("numpy", "torch", "starling")

import numpy as np  # noqa: E402

from local_optimizer_problem import LAYOUT, STEPS, gradient, lr, problem  # noqa: E402

NODES = 2


class Adam:
    """Adam / LAMB by hand (docs/algorithms.md §20): decoupled decay; LAMB scales each tensor of
    LAYOUT by ||x_l|| / ||r_l + decay x_l|| (1 when either norm is 0)."""

    def __init__(self, lamb, decay, beta1=0.9, beta2=0.999, eps=1e-8):
        self.lamb, self.decay, self.b1, self.b2, self.eps = lamb, decay, beta1, beta2, eps
        self.m = self.v = 0.0
        self.t = 0

    def direction(self, x, g):
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        mh, vh = self.m / (1 - self.b1 ** self.t), self.v / (1 - self.b2 ** self.t)
        u = mh / (np.sqrt(vh) + self.eps) + self.decay * x
        if self.lamb:
            begin = 0
            for n in LAYOUT:
                xl, ul = x[begin:begin + n], u[begin:begin + n]
                xn, un = np.linalg.norm(xl), np.linalg.norm(ul)
                u[begin:begin + n] = ul * (xn / un if xn > 0 and un > 0 else 1.0)
                begin += n
        return u


def reference(lamb, decay, eps):
    xs = []
    for r in range(NODES):
        _, _, w0, b0 = problem(r)
        xs.append(np.concatenate([w0.ravel(), b0]))
    opts = [Adam(lamb, decay, eps=eps) for _ in range(NODES)]
    history = [[x.copy() for x in xs]]
    for s in range(STEPS):
        psi = [xs[r] - lr(s) * opts[r].direction(xs[r], gradient(r, xs[r])) for r in range(NODES)]
        xs = [sum(psi) / NODES for _ in range(NODES)]
        history.append([x.copy() for x in xs])
    return history


def run(tmp, kind, local_optimizer):
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "local_optimizer_worker.py")
    scenario = harness.embedded_scenario(
        tmp, f"torch-{kind}", NODES,
        algorithm={"kind": "dsgd", "step_size": 0.05, "gamma": 1,
                   "local_optimizer": local_optimizer},
        extra={"topology": {"kind": "complete"}})
    out = os.path.join(tmp, f"run-{kind}")
    rc, output = harness.run_launcher(scenario, out, [sys.executable, worker], timeout=120)
    print(output)
    harness.check(rc == 0, f"{kind}: node-launcher exited {rc}")
    got = [np.load(os.path.join(out, f"params-rank-{r}.npy")) for r in range(NODES)]
    want = reference(kind == "lamb", local_optimizer.get("weight_decay", 0.0),
                     local_optimizer.get("eps", 1e-6 if kind == "lamb" else 1e-8))
    worst = 0.0
    for s in range(STEPS + 1):
        for r in range(NODES):
            harness.check(np.allclose(got[r][s], want[s][r], rtol=1e-9, atol=1e-12),
                          f"{kind}: rank {r} after step {s}: {got[r][s]}, the reference "
                          f"{want[s][r]}")
            worst = max(worst, float(np.max(np.abs(got[r][s] - want[s][r]))))
    # The run moved the model (the comparison is not of two starts).
    harness.check(np.max(np.abs(want[STEPS][0] - want[0][0])) > 1e-2, f"{kind}: nothing moved")
    print(f"{kind}: {STEPS} steps on 2 ranks match the numpy reference (max |diff| {worst:.2e})")


def main():
    with harness.TempDir("python-torch-local-optimizer") as tmp:
        run(tmp, "adam", {"kind": "adam", "weight_decay": 0.01})
        # LAMB's trust ratio is per tensor: a wrong layout (one tensor) gives other numbers.
        run(tmp, "lamb", {"kind": "lamb", "weight_decay": 0.01})
    print("python torch local optimizer: adam and lamb match the reference")


if __name__ == "__main__":
    main()
