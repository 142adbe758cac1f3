"""Rejoining for trainers (faults.restart, docs/algorithms.md §19): 4 Python trainers on a ring;
rank 2 (mix) or rank 1 (step) kills itself with SIGKILL early, the launcher starts it again with
STARLING_REJOIN=1, and its starling.Peer asks its neighbours to take it back. Checked: the launcher
exits 0; membership.jsonl has the departure and the return; metrics.jsonl has every round; the
returned rank logs from its return to the last round. mix(): every model ends in consensus.
step() (exact diffusion on least squares): every rank, the returned one too, ends within 1e-8
of the optimum of all four terms, solved here with numpy, and far from the survivors' optimum."""

import json
import os
import sys

import harness

harness.require("numpy", "starling")

import numpy as np  # noqa: E402 (after the skip check)
from loss_problem import problem  # noqa: E402

NODES = 4


def run(worker, tmp, mode, steps, kill_rank, algorithm=None, script=None, name=None,
        restore=False):
    """`script`: the scenario's fault script does the kill (and whatever else it says) instead
    of the worker."""
    name = name or mode
    faults = {"on_peer_loss": "continue", "restart": True}
    if script:
        faults["script"] = script
    scenario = harness.embedded_scenario(
        tmp, f"python-rejoin-{name}", NODES, algorithm=algorithm,
        extra={"faults": faults, "transport": {"kind": "ucx", "round_timeout_ms": 3000}})
    out = os.path.join(tmp, f"run-{name}")
    rc, output = harness.run_launcher(
        scenario, out, [sys.executable, worker], timeout=180,
        env={"LOSS_STEPS": str(steps), "LOSS_KILL_RANK": str(-1 if script else kill_rank),
             "LOSS_KILL_STEP": "5", "LOSS_MODE": mode, "PAUSE_MS": "2",
             "RESTORE": "1" if restore else "0"})
    print(output)
    harness.check(rc == 0, f"{mode} run: node-launcher exited {rc}, expected 0")
    harness.check(f"peer {kill_rank} restarted" in output,
                  f"{mode} run: the launcher did not restart rank {kill_rank}")
    news = [json.loads(l) for l in open(os.path.join(out, "membership.jsonl"))]
    changes = [n["membership"] for n in news if "membership" in n]
    harness.check([c["left"] for c in changes] == [[kill_rank], []] and
                  changes[1].get("joined") == [kill_rank] and
                  changes[0]["round"] < changes[1]["round"] < steps,
                  f"{mode} run: expected the departure and the return of rank {kill_rank}, "
                  f"got {news}")
    back = changes[1]["round"]
    metrics = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    harness.check([m["round"] for m in metrics] == list(range(steps + 1)),
                  f"{mode} run: metrics.jsonl rounds {[m['round'] for m in metrics][:20]}...")
    logs = {r: harness.read_peer_log(os.path.join(out, "peers", f"rank-{r}.jsonl")) for r in range(NODES)}
    mine = sorted(logs[kill_rank][0])
    harness.check(mine[-1] == steps and not any(5 < r < back for r in mine),
                  f"{mode} run: rank {kill_rank} logged rounds {mine[:8]}...{mine[-3:]}, "
                  f"expected up to its loss and from {back} to {steps}")
    for r in range(NODES):
        if r != kill_rank:
            harness.check([c["round"] for c in logs[r][1]] == [changes[0]["round"], back],
                          f"{mode} run: rank {r} applied {logs[r][1]}")
    # A state transfer: the returned rank's model at its return is a neighbour's, bit for bit.
    neighbours = [(kill_rank - 1) % NODES, (kill_rank + 1) % NODES]
    harness.check(any(logs[kill_rank][0][back] == logs[r][0][back] for r in neighbours),
                  f"{mode} run: rank {kill_rank} came back with {logs[kill_rank][0][back]}, "
                  f"its neighbours held {[logs[r][0][back] for r in neighbours]}")
    print(f"{mode} run: rank {kill_rank} left at round {changes[0]['round']}, back at {back}")
    return out, logs, metrics


def main():
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rejoin_worker.py")
    with harness.TempDir("python-rejoin") as tmp:
        # mix(): gossip; the returned rank starts from a neighbour's model and all agree.
        steps = 600
        _, logs, metrics = run(worker, tmp, "mix", steps, kill_rank=2)
        harness.check(metrics[-1]["consensus_distance"] < 1e-20,
                      f"mix run: final consensus distance {metrics[-1]['consensus_distance']}")
        final = [logs[r][0][steps] for r in range(NODES)]
        spread = max(abs(a - b) for v in final for w in final for a, b in zip(v, w))
        harness.check(spread < 1e-9, f"mix run: final models differ by {spread:.2e}")

        # step(): exact diffusion; everyone's optimum once rank 1 is back.
        steps = 1500
        _, logs, _ = run(worker, tmp, "step", steps, kill_rank=1,
                         algorithm={"kind": "exact_diffusion", "step_size": 0.2})
        # The same with restore(): the restarted trainer takes the model before its first
        # gradient, so its first step() runs with a gradient at it.
        _, logs_restored, _ = run(worker, tmp, "step", steps, kill_rank=1, name="step-restore",
                                  algorithm={"kind": "exact_diffusion", "step_size": 0.2},
                                  restore=True)

        def optimum(ranks):
            m = sum(problem(r)[0].T @ problem(r)[0] for r in ranks)
            v = sum(problem(r)[0].T @ problem(r)[1] for r in ranks)
            return np.linalg.solve(m, v)

        everyone = optimum(range(NODES))
        survivors = optimum([r for r in range(NODES) if r != 1])
        worst = 0.0
        for r in range(NODES):
            for which in (logs, logs_restored):
                err = (np.linalg.norm(np.array(which[r][0][steps]) - everyone) /
                       np.linalg.norm(everyone))
                harness.check(err < 1e-8,
                              f"step run: rank {r} ends {err:.2e} from everyone's optimum")
                worst = max(worst, err)
        far = np.linalg.norm(survivors - everyone) / np.linalg.norm(everyone)
        harness.check(far > 1e-2, f"step run: the survivors' optimum is only {far:.2e} away")
        print(f"step run: every rank ends {worst:.1e} from everyone's optimum (the survivors' "
              f"is {far:.2f} away)")

        # The scenario's fault script drives trainers too: its kill is a real SIGKILL of the
        # trainer, and its link faults (here 10% corrupted copies) hit step() and mix() messages,
        # rejected and counted while the genuine ones get through.
        steps = 400
        out, logs, metrics = run(worker, tmp, "mix", steps, kill_rank=3, name="script",
                                 script=[{"kill": 3, "at_round": 5},
                                         {"corrupt": 0.1, "from_round": 0, "to_round": 400}])
        corrupt = metrics[-1]["corrupt_messages"]
        harness.check(corrupt > 0, "script run: no corrupted copy was counted")
        harness.check(metrics[-1]["consensus_distance"] < 1e-20,
                      f"script run: final consensus distance {metrics[-1]['consensus_distance']}")
        print(f"script run: rank 3 killed by the script, back; {corrupt} corrupted copies "
              "rejected")
    print("python rejoin: ok")


if __name__ == "__main__":
    main()
