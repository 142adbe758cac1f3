"""starling.torch.DecentralizedOptimizer with a scenario's algorithm.leader (issue 15): two real
trainer processes under `node-launcher run SCENARIO -- python3 leader_worker.py` train
torch.nn.Linear(3, 2) in mode "step" on a complete graph of 2 with DSGD; the closure's loss goes
to the peer, which elects the leader by it. Every step's parameters must equal a numpy reference
written here: each rank's gradient and loss by hand, psi_i = x_i - lr g_i, x_i = (psi_0 + psi_1)/2,
then the rank with the higher loss pulls toward the other's psi with c_L = 0.5 (local leaders
every round, a window of one loss; the global pull and the proximal terms are off)."""

import os
import sys

import harness

harness.require("numpy", "torch", "starling")

import numpy as np  # noqa: E402

from local_optimizer_problem import STEPS, lr, problem  # noqa: E402

NODES = 2
PULL = 0.5


def loss_and_gradient(rank, flat):
    """mean((X W^T + b - Y)^2) and its gradient at flat = [W.ravel(), b]."""
    x, y, _, _ = problem(rank)
    w, b = flat[:6].reshape(2, 3), flat[6:]
    err = x @ w.T + b - y
    dpred = 2.0 * err / y.size
    return float(np.mean(err ** 2)), np.concatenate([(dpred.T @ x).ravel(), dpred.sum(axis=0)])


def reference():
    xs = []
    for r in range(NODES):
        _, _, w0, b0 = problem(r)
        xs.append(np.concatenate([w0.ravel(), b0]))
    history, losses, leaders = [[x.copy() for x in xs]], [], []
    for s in range(STEPS):
        lg = [loss_and_gradient(r, xs[r]) for r in range(NODES)]
        psi = [xs[r] - lr(s) * lg[r][1] for r in range(NODES)]
        mean = sum(psi) / NODES
        lead = 0 if lg[0][0] <= lg[1][0] else 1  # the lower loss; ties to the lower rank
        xs = [mean.copy() for _ in range(NODES)]
        other = 1 - lead
        xs[other] = xs[other] + PULL * (psi[lead] - xs[other])
        history.append([x.copy() for x in xs])
        losses.append([lg[r][0] for r in range(NODES)])
        leaders.append(lead)
    return history, losses, leaders


def main():
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "leader_worker.py")
    with harness.TempDir("python-torch-leader") as tmp:
        scenario = harness.embedded_scenario(
            tmp, "torch-leader", NODES,
            algorithm={"kind": "dsgd", "step_size": 0.05, "gamma": 1,
                       "leader": {"local_period": 1, "global_period": 1, "loss_window": 1,
                                  "pull_local": PULL, "pull_global": 0,
                                  "proximal_local": 0, "proximal_global": 0}},
            extra={"topology": {"kind": "complete"}})
        out = os.path.join(tmp, "run")
        rc, output = harness.run_launcher(scenario, out, [sys.executable, worker], timeout=120)
        print(output)
        harness.check(rc == 0, f"node-launcher exited {rc}")
        got = [np.load(os.path.join(out, f"leader-rank-{r}.npz")) for r in range(NODES)]
        want, want_losses, leaders = reference()
        for s in range(STEPS):
            for r in range(NODES):
                harness.check(abs(got[r]["losses"][s] - want_losses[s][r]) < 1e-12,
                              f"rank {r} step {s}: loss {got[r]['losses'][s]}, by hand "
                              f"{want_losses[s][r]}")
        for s in range(STEPS + 1):
            for r in range(NODES):
                harness.check(np.allclose(got[r]["params"][s], want[s][r], rtol=1e-9, atol=1e-12),
                              f"rank {r} after step {s}: {got[r]['params'][s]}, the reference "
                              f"{want[s][r]}")
        # The pull made the ranks differ (without it both would hold the average).
        harness.check(np.max(np.abs(want[STEPS][0] - want[STEPS][1])) > 1e-3,
                      "the reference's ranks agree: the test would not see a missing pull")
        print(f"python torch leader: {STEPS} steps match the reference (leaders {leaders})")


if __name__ == "__main__":
    main()
