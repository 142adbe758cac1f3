"""starling.torch.DiLoCo (docs/algorithms.md §29): four real trainer processes under
`node-launcher run SCENARIO -- python3 diloco_worker.py`, each with its own data, on a ring of 4
(Metropolis weights 1/3) and on the complete graph, with the outer steps nesterov and
exact_diffusion taken from the scenario. After every outer round each rank's parameters must
equal a numpy reference of the same recursion written here: H inner SGD steps of each rank's
mean-square loss (its gradient by hand), x-bar = W x, D = theta - x-bar, the outer step. With a
top-k codec (2 of the 8 parameters) the exchange carries compressed differences: each rank keeps
x-hat_j for itself and its neighbours, starting at the common initial model (DiLoCo's
shared_start), sends q_i = top-2(x_i - x-hat_i), x-hat_i += q_i, and x-bar_i = sum_j w_ij x-hat_j."""

import os
import sys

import harness

harness.require("numpy", "torch", "starling")

import numpy as np  # noqa: E402

from local_optimizer_problem import gradient, problem  # noqa: E402

NODES = 4
LR = 0.05
H = 3
OUTER_ROUNDS = 5


def weights(topology):
    if topology == "complete":
        return np.full((NODES, NODES), 1.0 / NODES)
    w = np.zeros((NODES, NODES))
    for i in range(NODES):
        for j in (i - 1, i, i + 1):
            w[i, j % NODES] = 1.0 / 3
    return w


def top_k(v, k):
    """v with all but its k largest magnitudes set to zero."""
    out = np.zeros_like(v)
    keep = np.argsort(-np.abs(v), kind="stable")[:k]
    out[keep] = v[keep]
    return out


def reference_overlap(lr, mu):
    """overlap=True on the ring, outer Nesterov: round k's models leave after its H steps and
    are mixed while the next H steps run; then theta takes the outer step and each local model
    keeps the steps taken since it was sent (x <- theta + (x - sent)). The saved points: each
    rank's local model after every H-th step (that round sent), and theta after the last round
    finishes."""
    _, _, w0, b0 = problem(0)
    theta = [np.concatenate([w0.ravel(), b0]) for _ in range(NODES)]
    x = [t.copy() for t in theta]
    m = [np.zeros(8) for _ in range(NODES)]
    w = weights("ring")
    sent = None
    history = [[t.copy() for t in theta]]

    def finish():
        for r in range(NODES):
            xbar = sum(w[r, j] * sent[j] for j in range(NODES))
            d = theta[r] - xbar
            m[r] = mu * m[r] + d
            theta[r] = xbar + (d - lr * (d + mu * m[r]))
            x[r] = theta[r] + (x[r] - sent[r])

    for _ in range(OUTER_ROUNDS):
        for r in range(NODES):
            for _ in range(H):
                x[r] = x[r] - LR * gradient(r, x[r])
        if sent is not None:
            finish()
        sent = [v.copy() for v in x]
        history.append([v.copy() for v in x])
    finish()
    history.append([v.copy() for v in x])
    return history


def reference(topology, outer, lr, mu, topk=None):
    _, _, w0, b0 = problem(0)
    theta = [np.concatenate([w0.ravel(), b0]) for _ in range(NODES)]
    hat = [t.copy() for t in theta]  # the reference points start at the common model
    m = [np.zeros(8) for _ in range(NODES)]
    y = [np.zeros(8) for _ in range(NODES)]
    w = weights(topology)
    history = [[t.copy() for t in theta]]
    for _ in range(OUTER_ROUNDS):
        xs = []
        for r in range(NODES):
            x = theta[r].copy()
            for _ in range(H):
                g = gradient(r, x)
                if outer == "exact_diffusion":
                    g = g + y[r]
                x = x - LR * g
            xs.append(x)
        if topk:
            hat = [hat[r] + top_k(xs[r] - hat[r], topk) for r in range(NODES)]
        for r in range(NODES):
            mixed = hat if topk else xs
            xbar = sum(w[r, j] * mixed[j] for j in range(NODES))
            d = theta[r] - xbar
            u = d
            if outer == "nesterov":
                m[r] = mu * m[r] + d
                u = d + mu * m[r]
            if outer == "exact_diffusion":
                y[r] = y[r] + (xs[r] - xbar) / (2 * LR * H)
            theta[r] = theta[r] - lr * u
        history.append([t.copy() for t in theta])
    return history


def run(tmp, topology, outer, topk=None, overlap=False):
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "diloco_worker.py")
    name = f"torch-diloco-{topology}-{outer}" + (f"-top{topk}" if topk else "") + \
        ("-overlap" if overlap else "")
    lr, mu = (0.7, 0.9) if outer == "nesterov" else (0.8, 0.0)
    outer_keys = {"kind": outer, "lr": lr}
    if outer == "nesterov":
        outer_keys["momentum"] = mu
    extra = {"topology": {"kind": topology}}
    if topk:
        extra["compression"] = {"kind": "topk", "k": topk}
    algorithm = {"kind": "diloco", "step_size": LR, "inner_steps": H, "outer": outer_keys}
    if overlap:
        algorithm["overlap"] = True
    scenario = harness.embedded_scenario(tmp, name, NODES, algorithm=algorithm, extra=extra)
    out = os.path.join(tmp, name)
    rc, output = harness.run_launcher(scenario, out, [sys.executable, worker], timeout=120)
    print(output)
    harness.check(rc == 0, f"{name}: node-launcher exited {rc}")
    got = [np.load(os.path.join(out, f"params-rank-{r}.npy")) for r in range(NODES)]
    want = reference_overlap(lr, mu) if overlap else reference(topology, outer, lr, mu, topk)
    harness.check(len(got[0]) == len(want), f"{name}: {len(got[0])} saved points, the "
                  f"reference has {len(want)}")
    worst = 0.0
    for s in range(len(want)):
        for r in range(NODES):
            harness.check(np.allclose(got[r][s], want[s][r], rtol=1e-10, atol=1e-12),
                          f"{name}: rank {r} after outer round {s}: {got[r][s]}, the reference "
                          f"{want[s][r]}")
            worst = max(worst, float(np.max(np.abs(got[r][s] - want[s][r]))))
    harness.check(np.max(np.abs(want[-1][0] - want[0][0])) > 1e-2, f"{name}: nothing moved")
    if topology == "complete":
        # All-reduce DiLoCo: every rank holds the same outer model.
        harness.check(all(np.allclose(got[r][-1], got[0][-1], rtol=1e-12, atol=1e-13)
                          for r in range(NODES)), f"{name}: the ranks disagree")
    print(f"{name}: {OUTER_ROUNDS} outer rounds on {NODES} ranks match the numpy reference "
          f"(max |diff| {worst:.2e})")


def main():
    with harness.TempDir("python-torch-diloco") as tmp:
        run(tmp, "ring", "nesterov")
        run(tmp, "complete", "nesterov")
        run(tmp, "ring", "exact_diffusion")
        run(tmp, "ring", "nesterov", topk=2)
        # The compressed run differs from the uncompressed one: the codec is in the loop.
        plain, top2 = reference("ring", "nesterov", 0.7, 0.9), \
            reference("ring", "nesterov", 0.7, 0.9, 2)
        harness.check(np.max(np.abs(plain[-1][0] - top2[-1][0])) > 1e-3,
                      "top-2 differences change nothing in the reference")
        run(tmp, "ring", "nesterov", overlap=True)
        delayed = reference_overlap(0.7, 0.9)
        harness.check(np.max(np.abs(plain[-1][0] - delayed[-1][0])) > 1e-3,
                      "overlap changes nothing in the reference")
    print("python torch diloco: nesterov and exact_diffusion match the reference, with and "
          "without top-k differences, and nesterov with overlap")


if __name__ == "__main__":
    main()
