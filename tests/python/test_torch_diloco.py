"""starling.torch.DiLoCo (docs/algorithms.md §29): four real trainer processes under
`node-launcher run SCENARIO -- python3 diloco_worker.py`, each with its own data, on a ring of 4
(Metropolis weights 1/3) and on the complete graph, with the outer steps nesterov and
exact_diffusion taken from the scenario. After every outer round each rank's parameters must
equal a numpy reference of the same recursion written here: H inner SGD steps of each rank's
mean-square loss (its gradient by hand), x-bar = W x, D = theta - x-bar, the outer step. With a
top-k codec (2 of the 8 parameters) the exchange carries compressed differences: each rank keeps
x-hat_j for itself and its neighbours, starting at the common initial model (DiLoCo's
shared_start), sends q_i = top-2(x_i - x-hat_i), x-hat_i += q_i, and x-bar_i = sum_j w_ij x-hat_j.
With overlap each round's outer step lands H steps later under the steps taken since; with
fragments (Streaming DiLoCo) a fragment of the parameters, in turn, is mixed every H / F steps;
noloco mixes [theta, x] and takes NoLoCo's momentum step with its pull toward theta-bar. With
by_time inner steps each rank takes as many steps a round as its own clock allows (a clock its
speed moves, so the counts are known), loops over opt.batches() and the mix is weighted by the
steps."""

import json
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


def fragment(k, fragments, d=8):
    """Round k's fragment of the d parameters: fragment k mod F of ceil(d / F) values (the last
    one shorter), Streaming DiLoCo's schedule."""
    size = -(-d // fragments)
    lo = min(d, (k % fragments) * size)
    return slice(lo, min(d, lo + size))


def noloco_step(theta, m, sl, thetabar, xbar, lr, mu, pull):
    """NoLoCo's outer step on theta[sl]: d <- mu d - lr (theta-bar - x-bar) - pull (theta -
    theta-bar); theta += d."""
    m[sl] = mu * m[sl] - lr * (thetabar - xbar) - pull * (theta[sl] - thetabar)
    theta[sl] = theta[sl] + m[sl]


def reference_overlap(lr, mu, h=H, fragments=1, outer="nesterov", pull=None):
    """overlap=True on the ring (outer nesterov, noloco or exact_diffusion): round k's fragment
    of the local models (all of it without fragments) leaves after its h / F steps and is mixed
    while the next h / F steps run; then that fragment of theta takes the outer step (y from the
    models as sent) and of each local model keeps the steps taken since it was sent
    (x <- theta + (x - sent)). The saved points: each rank's
    parameters after every round's steps (that round sent), and after the last round finishes."""
    _, _, w0, b0 = problem(0)
    theta = [np.concatenate([w0.ravel(), b0]) for _ in range(NODES)]
    x = [t.copy() for t in theta]
    m = [np.zeros(8) for _ in range(NODES)]
    y = [np.zeros(8) for _ in range(NODES)]
    w = weights("ring")
    pending = None
    history = [[t.copy() for t in theta]]

    def finish(sl, sent):
        thetas = [t[sl].copy() for t in theta]  # noloco's outer models, as sent
        for r in range(NODES):
            xbar = sum(w[r, j] * sent[j] for j in range(NODES))
            if outer == "exact_diffusion":
                # y from the model as sent; the inner steps since used the old y.
                y[r][sl] = y[r][sl] + (sent[r] - xbar) / (2 * LR * h)
                d = theta[r][sl] - xbar
                theta[r][sl] = xbar + (d - lr * d)
            elif outer == "noloco":
                thetabar = sum(w[r, j] * thetas[j] for j in range(NODES))
                noloco_step(theta[r], m[r], sl, thetabar, xbar, lr, mu, pull)
            else:
                d = theta[r][sl] - xbar
                m[r][sl] = mu * m[r][sl] + d
                theta[r][sl] = xbar + (d - lr * (d + mu * m[r][sl]))
            x[r][sl] = theta[r][sl] + (x[r][sl] - sent[r])

    for k in range(OUTER_ROUNDS * fragments):
        for r in range(NODES):
            for _ in range(h // fragments):
                x[r] = x[r] - LR * (gradient(r, x[r]) + y[r])
        if pending is not None:
            finish(*pending)
        sl = fragment(k, fragments)
        pending = (sl, [v[sl].copy() for v in x])
        history.append([v.copy() for v in x])
    finish(*pending)
    history.append([v.copy() for v in x])
    return history


def reference(topology, outer, lr, mu, topk=None, h=H, fragments=1, pull=None, ef=False):
    """Every round: h / F inner steps on each rank's local model, then round k's fragment (all of
    it without fragments) is mixed, takes the outer step there, and restarts from its new theta.
    With error feedback (ef) the top-k message is p = top-k(e + q) of the fragment's own residual
    e (e <- e + q - p), and the mix is CHOCO-gossip's x-bar_i = x_i + sum_j w_ij (x-hat_j -
    x-hat_i) (gamma 1). The saved points: each rank's parameters after every round."""
    _, _, w0, b0 = problem(0)
    theta = [np.concatenate([w0.ravel(), b0]) for _ in range(NODES)]
    x = [t.copy() for t in theta]
    hat = [t.copy() for t in theta]  # the reference points start at the common model
    width = -(-8 // fragments)
    residual = [[np.zeros(width) for _ in range(fragments)] for _ in range(NODES)]
    m = [np.zeros(8) for _ in range(NODES)]
    y = [np.zeros(8) for _ in range(NODES)]
    w = weights(topology)
    history = [[t.copy() for t in theta]]
    for k in range(OUTER_ROUNDS * fragments):
        for r in range(NODES):
            for _ in range(h // fragments):
                g = gradient(r, x[r])
                if outer == "exact_diffusion":
                    g = g + y[r]
                x[r] = x[r] - LR * g
        sl = fragment(k, fragments)
        sent = [v[sl].copy() for v in x]
        if topk:
            # Each fragment's reference points: q = top-k of the fragment's change, padded with
            # zeros to ceil(8 / F) values as the exchange carries it.
            for r in range(NODES):
                diff = np.zeros(width)
                diff[:len(sent[r])] = sent[r] - hat[r][sl]
                if ef:
                    e = residual[r][k % fragments]
                    p = top_k(e + diff, topk)
                    residual[r][k % fragments] = e + diff - p
                else:
                    p = top_k(diff, topk)
                hat[r][sl] = hat[r][sl] + p[:len(sent[r])]
        mixed = [h[sl] for h in hat] if topk else sent
        xbars = [sum(w[r, j] * mixed[j] for j in range(NODES)) for r in range(NODES)]
        if ef:
            xbars = [sent[r] + xbars[r] - hat[r][sl] for r in range(NODES)]
        thetabars = [sum(w[r, j] * theta[j][sl] for j in range(NODES)) for r in range(NODES)]
        for r in range(NODES):
            if outer == "noloco":
                noloco_step(theta[r], m[r], sl, thetabars[r], xbars[r], lr, mu, pull)
                x[r][sl] = theta[r][sl]
                continue
            d = theta[r][sl] - xbars[r]
            u = d
            if outer == "nesterov":
                m[r][sl] = mu * m[r][sl] + d
                u = d + mu * m[r][sl]
            if outer == "exact_diffusion":
                y[r][sl] = y[r][sl] + (sent[r] - xbars[r]) / (2 * LR * h)
            theta[r][sl] = theta[r][sl] - lr * u
            x[r][sl] = theta[r][sl]
        history.append([v.copy() for v in x])
    return history


def reference_shared_residual(lr, mu):
    """reference(..., topk=2, h=4, fragments=2, ef=True) with one residual for both fragments
    (what a codec state shared by the fragments would do): it must differ from the real one."""
    _, _, w0, b0 = problem(0)
    theta = [np.concatenate([w0.ravel(), b0]) for _ in range(NODES)]
    x = [t.copy() for t in theta]
    hat = [t.copy() for t in theta]
    m = [np.zeros(8) for _ in range(NODES)]
    residual = [np.zeros(4) for _ in range(NODES)]
    w = weights("ring")
    history = [[t.copy() for t in theta]]
    for k in range(OUTER_ROUNDS * 2):
        for r in range(NODES):
            for _ in range(2):
                x[r] = x[r] - LR * gradient(r, x[r])
        sl = fragment(k, 2)
        sent = [v[sl].copy() for v in x]
        for r in range(NODES):
            diff = sent[r] - hat[r][sl]
            p = top_k(residual[r] + diff, 2)
            residual[r] = residual[r] + diff - p
            hat[r][sl] = hat[r][sl] + p
        for r in range(NODES):
            xbar = sent[r] + sum(w[r, j] * hat[j][sl] for j in range(NODES)) - hat[r][sl]
            d = theta[r][sl] - xbar
            m[r][sl] = mu * m[r][sl] + d
            theta[r][sl] = theta[r][sl] - lr * (d + mu * m[r][sl])
            x[r][sl] = theta[r][sl]
        history.append([v.copy() for v in x])
    return history


def outer_of(outer):
    """The test's outer keys for `outer`: (lr, momentum, pull, the scenario's "outer")."""
    lr, mu = {"nesterov": (0.7, 0.9), "noloco": (0.7, 0.5)}.get(outer, (0.8, 0.0))
    pull = 0.3 if outer == "noloco" else None
    keys = {"kind": outer, "lr": lr}
    if outer in ("nesterov", "noloco"):
        keys["momentum"] = mu
    if pull is not None:
        keys["pull"] = pull
    return lr, mu, pull, keys


def check_history(name, got, want):
    """Every rank's saved parameters against the reference's, point by point; the largest
    difference."""
    harness.check(len(got[0]) == len(want), f"{name}: {len(got[0])} saved points, the "
                  f"reference has {len(want)}")
    worst = 0.0
    for s in range(len(want)):
        for r in range(NODES):
            harness.check(np.allclose(got[r][s], want[s][r], rtol=1e-10, atol=1e-12),
                          f"{name}: rank {r} after round {s}: {got[r][s]}, the reference "
                          f"{want[s][r]}")
            worst = max(worst, float(np.max(np.abs(got[r][s] - want[s][r]))))
    return worst


SECONDS, CAP, SPEEDS = 2.0, 16, (1, 2, 1, 4)


def reference_by_time(outer, lr, mu, fragments=1, overlap=False, pull=None):
    """by_time on the ring: rank r takes SECONDS / F * SPEEDS[r] inner steps a round (its clock
    moves 1 / SPEEDS[r] a step); round k mixes fragment k mod F of the local models, weighted by
    the steps that fragment took since its last exchange (h_j): x-bar_i = sum_j w_ij h_j x_j /
    sum_j w_ij h_j (exact_diffusion: unweighted, its correction over H = CAP); theta-bar
    unweighted. With overlap the round lands one round late under the steps taken since. The
    saved points: each rank's parameters after every round (and after the last one lands)."""
    _, _, w0, b0 = problem(0)
    theta = [np.concatenate([w0.ravel(), b0]) for _ in range(NODES)]
    x = [t.copy() for t in theta]
    m = [np.zeros(8) for _ in range(NODES)]
    y = [np.zeros(8) for _ in range(NODES)]
    since = [[0] * fragments for _ in range(NODES)]
    per_round = [int(SECONDS / fragments * v) for v in SPEEDS]
    w = weights("ring")
    history = [[t.copy() for t in theta]]
    pending = None

    def land(sl, sent, h):
        thetas = [t[sl].copy() for t in theta]
        for r in range(NODES):
            if outer == "exact_diffusion":
                xbar = sum(w[r, j] * sent[j] for j in range(NODES))
            else:
                xbar = sum(w[r, j] * h[j] * sent[j] for j in range(NODES)) / \
                    sum(w[r, j] * h[j] for j in range(NODES))
            if outer == "noloco":
                thetabar = sum(w[r, j] * thetas[j] for j in range(NODES))
                noloco_step(theta[r], m[r], sl, thetabar, xbar, lr, mu, pull)
            else:
                d = theta[r][sl] - xbar
                u = d
                if outer == "nesterov":
                    m[r][sl] = mu * m[r][sl] + d
                    u = d + mu * m[r][sl]
                if outer == "exact_diffusion":
                    y[r][sl] = y[r][sl] + (sent[r] - xbar) / (2 * LR * CAP)
                theta[r][sl] = theta[r][sl] - lr * u
            x[r][sl] = theta[r][sl] + (x[r][sl] - sent[r])

    for k in range(OUTER_ROUNDS * fragments):
        for r in range(NODES):
            for _ in range(per_round[r]):
                x[r] = x[r] - LR * (gradient(r, x[r]) + y[r])
            since[r] = [v + per_round[r] for v in since[r]]
        f = k % fragments
        sl = fragment(k, fragments)
        h = [since[r][f] for r in range(NODES)]
        for r in range(NODES):
            since[r][f] = 0
        sent = [v[sl].copy() for v in x]
        if overlap:
            if pending is not None:
                land(*pending)
            pending = (sl, sent, h)
        else:
            land(sl, sent, h)
        history.append([v.copy() for v in x])
    if overlap:
        land(*pending)
        history.append([v.copy() for v in x])
    return history


def run_by_time(tmp, outer, fragments=1, overlap=False):
    """4 trainers with the scenario's by_time inner steps, each on a clock its speed moves, looping
    over opt.batches(): against reference_by_time."""
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "diloco_worker.py")
    name = f"torch-diloco-by-time-{outer}" + ("-overlap" if overlap else "") + \
        (f"-{fragments}fragments" if fragments > 1 else "")
    lr, mu, pull, outer_keys = outer_of(outer)
    algorithm = {"kind": "diloco", "step_size": LR, "outer": outer_keys,
                 "inner_steps": {"kind": "by_time", "seconds": SECONDS, "max_steps": CAP},
                 "fragments": fragments, "overlap": overlap}
    scenario = harness.embedded_scenario(tmp, name, NODES, algorithm=algorithm,
                                         extra={"rounds": OUTER_ROUNDS * fragments})
    out = os.path.join(tmp, name)
    rc, output = harness.run_launcher(scenario, out, [sys.executable, worker], timeout=120,
                                      env={"EXPECT_COMPRESSED": "0", "EXPLICIT_PEER": "0",
                                           "SPEEDS": ",".join(str(v) for v in SPEEDS)})
    print(output)
    harness.check(rc == 0, f"{name}: node-launcher exited {rc}")
    got = [np.load(os.path.join(out, f"params-rank-{r}.npy")) for r in range(NODES)]
    steps = [np.load(os.path.join(out, f"steps-rank-{r}.npy")) for r in range(NODES)]
    per_round = [int(SECONDS / fragments * v) for v in SPEEDS]
    for r in range(NODES):
        want = [per_round[r] * (k + 1) for k in range(OUTER_ROUNDS * fragments)]
        harness.check(list(steps[r]) == want, f"{name}: rank {r} ended its rounds after "
                      f"{list(steps[r])} steps, not {want}")
    want = reference_by_time(outer, lr, mu, fragments, overlap, pull)
    worst = check_history(name, got, want)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        last = [json.loads(line) for line in f][-1]
    total = np.mean([per_round[r] * OUTER_ROUNDS * fragments for r in range(NODES)])
    harness.check(last.get("outer_round") == OUTER_ROUNDS * fragments and
                  last.get("inner_steps") == total, f"{name}: the last metrics record {last}")
    print(f"{name}: {len(want) - 1} rounds on {NODES} ranks of speeds {SPEEDS} match the numpy "
          f"reference (max |diff| {worst:.2e})")


def run(tmp, topology, outer, topk=None, overlap=False, h=H, fragments=1, ef=False):
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "diloco_worker.py")
    name = f"torch-diloco-{topology}-{outer}" + (f"-top{topk}" if topk else "") + \
        ("-ef" if ef else "") + \
        ("-overlap" if overlap else "") + (f"-{fragments}fragments" if fragments > 1 else "")
    lr, mu, pull, outer_keys = outer_of(outer)
    extra = {"topology": {"kind": topology}}
    if topk:
        extra["compression"] = {"kind": "topk", "k": topk, "error_feedback": ef}
    algorithm = {"kind": "diloco", "step_size": LR, "inner_steps": h, "outer": outer_keys}
    if overlap:
        algorithm["overlap"] = True
    if fragments > 1:
        algorithm["fragments"] = fragments
    scenario = harness.embedded_scenario(tmp, name, NODES, algorithm=algorithm, extra=extra)
    out = os.path.join(tmp, name)
    rc, output = harness.run_launcher(scenario, out, [sys.executable, worker], timeout=120,
                                      env={"EXPECT_COMPRESSED": "1" if topk else "0",
                                           "EXPLICIT_PEER": "1" if topk else "0"})
    print(output)
    harness.check(rc == 0, f"{name}: node-launcher exited {rc}")
    got = [np.load(os.path.join(out, f"params-rank-{r}.npy")) for r in range(NODES)]
    want = reference_overlap(lr, mu, h, fragments, outer, pull) if overlap else \
        reference(topology, outer, lr, mu, topk, h, fragments, pull, ef)
    worst = check_history(name, got, want)
    harness.check(np.max(np.abs(want[-1][0] - want[0][0])) > 1e-2, f"{name}: nothing moved")
    if topology == "complete":
        # All-reduce DiLoCo: every rank holds the same outer model.
        harness.check(all(np.allclose(got[r][-1], got[0][-1], rtol=1e-12, atol=1e-13)
                          for r in range(NODES)), f"{name}: the ranks disagree")
    # The round's metrics in metrics.jsonl (the mean over the ranks), as node-launcher's diloco
    # writes them: the last round's count, the inner steps, and (one fragment, no overlap, no
    # correction) ||theta - x|| after the round's inner steps, recomputed here from the
    # reference's models before the last round.
    with open(os.path.join(out, "metrics.jsonl")) as f:
        last = [json.loads(line) for line in f][-1]
    harness.check(last.get("outer_round") == OUTER_ROUNDS * fragments and
                  last.get("inner_steps") == OUTER_ROUNDS * h,
                  f"{name}: the last metrics record {last}")
    if fragments == 1 and not overlap and outer != "exact_diffusion":
        norms = []
        for r in range(NODES):
            x = want[-2][r].copy()
            for _ in range(h):
                x = x - LR * gradient(r, x)
            norms.append(np.linalg.norm(want[-2][r] - x))
        harness.check(np.isclose(last["pseudo_gradient_norm"], np.mean(norms), rtol=1e-9),
                      f"{name}: pseudo_gradient_norm {last['pseudo_gradient_norm']}, the "
                      f"reference's {np.mean(norms)}")
    print(f"{name}: {len(want) - 1} rounds on {NODES} ranks match the numpy reference "
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
        # Streaming DiLoCo: 3 fragments of the 8 parameters (3, 3 and 2 of them), one mixed every
        # 2 of the 6 inner steps; 2 fragments with exact_diffusion and with overlap.
        run(tmp, "ring", "nesterov", h=6, fragments=3)
        # With top-2 differences: reference points per fragment (3, 3 and 2 of the 8 values).
        run(tmp, "ring", "nesterov", topk=2, h=6, fragments=3)
        run(tmp, "ring", "exact_diffusion", h=4, fragments=2)
        # Top-2 with error feedback in 2 fragments: a residual and reference points per fragment.
        run(tmp, "ring", "nesterov", topk=2, h=4, fragments=2, ef=True)
        shared = reference_shared_residual(0.7, 0.9)
        harness.check(np.max(np.abs(shared[-1][0] - reference(
            "ring", "nesterov", 0.7, 0.9, 2, h=4, fragments=2, ef=True)[-1][0])) > 1e-6,
            "one residual for both fragments changes nothing in the reference")
        run(tmp, "ring", "nesterov", overlap=True, h=4, fragments=2)
        # NoLoCo's outer step (the scenario's pull 0.3): [theta, x] mixed, alone, in fragments
        # and with overlap.
        run(tmp, "ring", "noloco")
        run(tmp, "ring", "noloco", h=4, fragments=2)
        run(tmp, "ring", "noloco", overlap=True)
        # exact_diffusion with overlap: y from the models as sent, the inner steps between with
        # the old y; with 2 fragments.
        run(tmp, "ring", "exact_diffusion", overlap=True, h=4, fragments=2)
        # by_time: ranks of speeds 1, 2, 1 and 4 (4, 8, 4 and 16 steps a round; in 2 fragments
        # half that a round), the mix weighted by the steps (exact_diffusion: unweighted).
        run_by_time(tmp, "nesterov")
        run_by_time(tmp, "exact_diffusion")
        run_by_time(tmp, "noloco", fragments=2, overlap=True)
        weighted = reference_by_time("nesterov", 0.7, 0.9)
        harness.check(np.max(np.abs(weighted[-1][0] - plain[-1][0])) > 1e-3,
                      "by_time changes nothing in the reference")
        harness.check(np.max(np.abs(reference("ring", "noloco", 0.7, 0.5, pull=0.3)[-1][0] -
                                    plain[-1][0])) > 1e-3, "noloco is nesterov in the reference")
        harness.check(np.max(np.abs(
            reference("ring", "nesterov", 0.7, 0.9, 2, h=6, fragments=3)[-1][0] -
            reference("ring", "nesterov", 0.7, 0.9, h=6, fragments=3)[-1][0])) > 1e-3,
            "top-2 differences change nothing in fragments in the reference")
        whole, streamed = reference("ring", "nesterov", 0.7, 0.9, h=6), \
            reference("ring", "nesterov", 0.7, 0.9, h=6, fragments=3)
        harness.check(np.max(np.abs(whole[-1][0] - streamed[-1][0])) > 1e-3,
                      "fragments change nothing in the reference")
    print("python torch diloco: nesterov, exact_diffusion and noloco match the reference, with "
          "and without top-k differences, with overlap, and in fragments (Streaming DiLoCo)")


if __name__ == "__main__":
    main()
