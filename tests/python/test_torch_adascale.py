"""starling.torch.DecentralizedOptimizer with a scenario's algorithm.adascale (issue 15): two
real trainer processes under `node-launcher run SCENARIO -- python3 adascale_worker.py` train
torch.nn.Linear(3, 2) in mode "step" on a complete graph of 2 with DSGD and hand each step the
AdaScale estimates of their gradient (made up per rank). Every step's parameters must equal a
numpy reference written here: the estimates' consensus (round 0 each rank's own, then their
mean), the gain r = (v + m)/(v/S + m) (smoothing 0), the scenario's step schedule evaluated at
floor(tau), psi_i = x_i - r eta(floor tau) g_i, x_i = (psi_0 + psi_1)/2."""

import math
import os
import sys

import harness

harness.require("numpy", "torch", "starling")

import numpy as np  # noqa: E402

from adascale_worker import SQUARED_MEAN, VARIANCE  # noqa: E402
from local_optimizer_problem import STEPS, gradient, problem  # noqa: E402

NODES = 2
SCALE = 4.0


def reference():
    xs = []
    for r in range(NODES):
        _, _, w0, b0 = problem(r)
        xs.append(np.concatenate([w0.ravel(), b0]))
    tau = [0.0] * NODES
    history = [[x.copy() for x in xs]]
    for s in range(STEPS):
        psi = []
        for r in range(NODES):
            v = VARIANCE[r] if s == 0 else sum(VARIANCE) / NODES
            m = SQUARED_MEAN[r] if s == 0 else sum(SQUARED_MEAN) / NODES
            gain = min(max((v + m) / (v / SCALE + m), 1.0), SCALE)
            eta = gain * 0.1 * 0.5 ** math.floor(math.floor(tau[r]) / 3)  # "step": every 3, 0.5
            tau[r] += gain
            psi.append(xs[r] - eta * gradient(r, xs[r]))
        xs = [sum(psi) / NODES for _ in range(NODES)]
        history.append([x.copy() for x in xs])
    return history


def main():
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adascale_worker.py")
    with harness.TempDir("python-torch-adascale") as tmp:
        scenario = harness.embedded_scenario(
            tmp, "torch-adascale", NODES,
            algorithm={"kind": "dsgd", "gamma": 1,
                       "step_size": {"kind": "step", "value": 0.1, "every": 3, "factor": 0.5},
                       "adascale": {"scale": SCALE, "smoothing": 0}},
            extra={"topology": {"kind": "complete"}})
        out = os.path.join(tmp, "run")
        rc, output = harness.run_launcher(scenario, out, [sys.executable, worker], timeout=120)
        print(output)
        harness.check(rc == 0, f"node-launcher exited {rc}")
        got = [np.load(os.path.join(out, f"adascale-rank-{r}.npy")) for r in range(NODES)]
        want = reference()
        for s in range(STEPS + 1):
            for r in range(NODES):
                harness.check(np.allclose(got[r][s], want[s][r], rtol=1e-9, atol=1e-12),
                              f"rank {r} after step {s}: {got[r][s]}, the reference {want[s][r]}")
        print(f"python torch adascale: {STEPS} steps match the reference")


if __name__ == "__main__":
    main()
