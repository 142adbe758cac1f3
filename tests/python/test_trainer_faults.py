"""Trainers' step() across peer faults (docs/algorithms.md §17-§19), for the algorithms whose
first step() is a local step from x0 (NIDS, LEAD: api/peer.cc) and for a trainer that also
mix()es a second buffer. 4 Python trainers on a ring (trainer_faults_worker.py), each with its
least-squares term f_r(x) = 1/2 ||A_r x - b_r||^2 (loss_problem.py); one rank SIGKILLs itself.
Every check is against numpy's solve of the normal equations sum_r A_r^T A_r x = sum_r A_r^T b_r,
for the survivors' ranks or for all four, never against an earlier output of Starling.

1. nids, on_peer_loss "continue": rank 1 killed; the survivors restart NIDS at the change and
   end within 1e-8 of the survivors' optimum (and > 1e-2 from all four's); membership.jsonl has
   one change, without rank 1.
2. lead, the same, with a qsgd quantizer (LEAD sends compressed differences; its reference points
   and dual variable are rebuilt at the restart). LEAD with full gradients converges linearly to
   the exact optimum through an unbiased codec (docs/algorithms.md §8.3), so the tolerance stays
   1e-8.
3. nids step() plus mix() of a second buffer (a running average of the model) in one trainer,
   rank 1 killed between its step() and its mix(): the step state ends within 1e-8 of the
   survivors' optimum, and the survivors' mixed buffers end in consensus (spread < 1e-12), at
   that optimum too (their fixed point is the model's).
4. nids with faults.restart: rank 1 killed, restarted with STARLING_REJOIN=1, rejoins through
   its first step(); every rank, the returned one too, ends within 1e-8 of all four's optimum.
5. (skipped: a runtime bug, see case_step_mix_rejoin) 3 with faults.restart: rank 1 rejoins a
   run of step() + mix() trainers.
"""

import glob
import json
import os
import sys
import time

import harness

harness.require("numpy", "starling")

import numpy as np  # noqa: E402 (after the skip check)
from loss_problem import problem  # noqa: E402

NODES = 4
KILL_RANK = 1
HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "trainer_faults_worker.py")

# Cases believed to hit a runtime bug: kept in the file, skipped unless named on the command line
# (`python3 test_trainer_faults.py step_mix_rejoin`, with meson's environment); the diagnosis is at
# the case.


def optimum(ranks):
    """argmin sum_{r in ranks} f_r, solved directly by numpy."""
    m = sum(problem(r)[0].T @ problem(r)[0] for r in ranks)
    v = sum(problem(r)[0].T @ problem(r)[1] for r in ranks)
    return np.linalg.solve(m, v)


def rel(x, ref):
    return float(np.linalg.norm(np.asarray(x) - ref) / np.linalg.norm(ref))


class Run:
    def __init__(self, tmp, name, algorithm, mode, steps, restart=False, compression=None,
                 kill_call=5, kill_where="before_step", pause_ms=0, timeout=120):
        faults = {"on_peer_loss": "continue"}
        if restart:
            faults["restart"] = True
        extra = {"faults": faults, "transport": {"kind": "ucx", "round_timeout_ms": 3000}}
        if compression:
            extra["compression"] = compression
        scenario = harness.embedded_scenario(tmp, f"trainer-faults-{name}", NODES,
                                             algorithm=algorithm, extra=extra)
        self.name = name
        self.steps = steps
        self.out = os.path.join(tmp, f"run-{name}")
        self.results = os.path.join(tmp, f"results-{name}")
        os.makedirs(self.results)
        start = time.monotonic()
        self.rc, self.output = harness.run_launcher(
            scenario, self.out, [sys.executable, WORKER], timeout=timeout,
            env={"FAULTS_RESULTS": self.results, "FAULTS_STEPS": str(steps),
                 "FAULTS_KILL_RANK": str(KILL_RANK), "FAULTS_KILL_CALL": str(kill_call),
                 "FAULTS_KILL_WHERE": kill_where, "FAULTS_MODE": mode,
                 "PAUSE_MS": str(pause_ms)})
        self.seconds = time.monotonic() - start
        print(self.output)
        news_path = os.path.join(self.out, "membership.jsonl")
        self.news = [json.loads(l) for l in open(news_path)] if os.path.exists(news_path) else []
        self.changes = [n["membership"] for n in self.news if "membership" in n]
        self.final = {}
        for r in range(NODES):
            path = os.path.join(self.results, f"rank-{r}.json")
            if os.path.exists(path):
                self.final[r] = json.load(open(path))

    def check(self, condition, message):
        """harness.check, with every trainer process's own output on failure."""
        if not condition:
            for path in sorted(glob.glob(os.path.join(self.results, "rank-*-*.out"))):
                print(f"--- {path}\n{open(path).read()}", flush=True)
            harness.check(False, f"{self.name}: {message}")

    def check_loss(self):
        """The launcher carried on without rank 1; one change took it out, at the same round in
        every survivor's log; every survivor finished with its results."""
        self.check(self.rc == 0, f"node-launcher exited {self.rc}, expected 0")
        self.check(f"peer {KILL_RANK} was killed by signal 9" in self.output,
                   f"the launcher does not report the loss of rank {KILL_RANK}")
        self.check(len(self.changes) == 1 and self.changes[0]["left"] == [KILL_RANK] and
                   not self.changes[0].get("joined") and self.changes[0]["round"] < self.steps,
                   f"membership.jsonl: expected one change without rank {KILL_RANK}, "
                   f"got {self.news}")
        survivors = [r for r in range(NODES) if r != KILL_RANK]
        self.check(sorted(self.final) == survivors,
                   f"results from ranks {sorted(self.final)}, expected {survivors}")
        for r in survivors:
            _, applied = harness.read_peer_log(os.path.join(self.out, "peers", f"rank-{r}.jsonl"))
            self.check([c["round"] for c in applied] == [self.changes[0]["round"]],
                       f"rank {r} applied {applied}, expected {self.changes[0]}")
        return survivors


def survivors_reach_their_optimum(run, what):
    """The step state of every survivor: within 1e-8 of the survivors' optimum, far from all
    four's; the peer log's last line (the step node's model) says the same as the trainer."""
    survivors = run.check_loss()
    want, everyone = optimum(survivors), optimum(range(NODES))
    far = rel(everyone, want)
    run.check(far > 1e-2, f"the optimum of all four is only {far:.2e} from the survivors'")
    worst = 0.0
    for r in survivors:
        f = run.final[r]
        run.check(f["round"] >= run.steps, f"rank {r} stopped at round {f['round']}")
        err = rel(f["x"], want)
        run.check(err < 1e-8, f"rank {r} ends {err:.2e} from the survivors' optimum "
                              f"(x = {f['x']}, optimum {want.tolist()})")
        worst = max(worst, err)
    print(f"{what}: change at round {run.changes[0]['round']}; the survivors end {worst:.1e} "
          f"from their optimum (all four's is {far:.2f} away); {run.seconds:.1f} s")
    return survivors, want, worst


def case_nids_loss(tmp):
    run = Run(tmp, "nids", {"kind": "nids", "step_size": 0.2}, "step", steps=300)
    survivors, _, _ = survivors_reach_their_optimum(run, "1. nids, rank 1 lost")
    for r in survivors:
        rounds, _ = harness.read_peer_log(os.path.join(run.out, "peers", f"rank-{r}.jsonl"))
        last = max(rounds)
        run.check(last == run.final[r]["round"] and rounds[last] == run.final[r]["x"],
                  f"rank {r}'s log ends at round {last} with {rounds[last]}, the trainer at "
                  f"{run.final[r]['round']} with {run.final[r]['x']}")


def case_lead_loss(tmp):
    # qsgd, 8 bits with the max norm: 127 levels of max|v| per element, unbiased. LEAD
    # compresses Y - H, which goes to zero with full gradients, so the error does too.
    run = Run(tmp, "lead", {"kind": "lead", "step_size": 0.2, "gamma": 1.0, "alpha": 0.5},
              "step", steps=400, compression={"kind": "qsgd", "bits": 8, "norm": "linf"})
    survivors_reach_their_optimum(run, "2. lead (qsgd 8 bits), rank 1 lost")


def case_step_mix_loss(tmp):
    # 2 rounds per iteration (the step's and the mix's).
    run = Run(tmp, "step-mix", {"kind": "nids", "step_size": 0.2}, "step_mix", steps=600,
              kill_where="after_step")
    survivors, want, _ = survivors_reach_their_optimum(run, "3. nids step() + mix(), rank 1 lost")
    aux = [np.array(run.final[r]["aux"]) for r in survivors]
    spread = max(float(np.max(np.abs(u - v))) for u in aux for v in aux)
    run.check(spread < 1e-12, f"the survivors' mixed buffers differ by {spread:.2e}: {aux}")
    err = max(rel(u, want) for u in aux)
    run.check(err < 1e-8, f"the mixed buffers end {err:.2e} from the survivors' optimum")
    print(f"3. the survivors' mixed buffers: spread {spread:.1e}, {err:.1e} from the optimum")


def case_nids_rejoin(tmp):
    run = Run(tmp, "nids-rejoin", {"kind": "nids", "step_size": 0.2}, "step", steps=1000,
              restart=True, pause_ms=2)
    run.check(run.rc == 0, f"node-launcher exited {run.rc}, expected 0")
    run.check(f"peer {KILL_RANK} restarted" in run.output,
              f"the launcher did not restart rank {KILL_RANK}")
    run.check([c["left"] for c in run.changes] == [[KILL_RANK], []] and
              run.changes[1].get("joined") == [KILL_RANK] and
              run.changes[0]["round"] < run.changes[1]["round"] < run.steps,
              f"expected the departure and the return of rank {KILL_RANK}, got {run.news}")
    run.check(sorted(run.final) == list(range(NODES)) and run.final[KILL_RANK]["rejoined"],
              f"results {run.final}, expected every rank's, rank {KILL_RANK} from its new process")
    everyone, survivors = optimum(range(NODES)), optimum([0, 2, 3])
    far = rel(survivors, everyone)
    run.check(far > 1e-2, f"the survivors' optimum is only {far:.2e} from all four's")
    worst = 0.0
    for r in range(NODES):
        f = run.final[r]
        run.check(f["round"] >= run.steps, f"rank {r} stopped at round {f['round']}")
        err = rel(f["x"], everyone)
        run.check(err < 1e-8, f"rank {r} ends {err:.2e} from the optimum of all four "
                              f"(x = {f['x']}, optimum {everyone.tolist()})")
        worst = max(worst, err)
    print(f"4. nids, rank 1 lost at round {run.changes[0]['round']} and back at "
          f"{run.changes[1]['round']}: every rank ends {worst:.1e} from all four's optimum (the "
          f"survivors' is {far:.2f} away); {run.seconds:.1f} s")


def case_step_mix_rejoin(tmp):
    """A trainer that calls step() then mix() each iteration, killed and restarted. Its first
    call is always a step(), while at the return's round Y its neighbours may be in either call;
    the join state says which (api/peer.cc: a first call of the other kind only loads the
    neighbours' model). Before that existed, the returned trainer waited on one channel while
    its neighbours waited on the other: NIDS with the kill after the step (Y a step() round of
    the survivors, whose restarted NIDS takes its local step there without a round) and exact
    diffusion with the kill before it hung for good. Both, and NIDS with the kill before the step
    (Y a mix() round), must now end at the optimum of all four with the mixed buffers agreeing."""
    everyone = optimum(range(NODES))
    for algorithm, where in (("nids", "after_step"), ("exact_diffusion", "before_step"),
                             ("nids", "before_step")):
        run = Run(tmp, f"step-mix-rejoin-{algorithm}-{where}",
                  {"kind": algorithm, "step_size": 0.2}, "step_mix", steps=2000, restart=True,
                  kill_where=where, pause_ms=2, timeout=60)
        run.check(run.rc == 0, f"node-launcher exited {run.rc}, expected 0")
        run.check([c["left"] for c in run.changes] == [[KILL_RANK], []] and
                  run.changes[1].get("joined") == [KILL_RANK],
                  f"expected the departure and the return of rank {KILL_RANK}, got {run.news}")
        run.check(sorted(run.final) == list(range(NODES)) and run.final[KILL_RANK]["rejoined"],
                  f"results from {sorted(run.final)}")
        err = max(rel(f["x"], everyone) for f in run.final.values())
        run.check(err < 1e-8, f"the step states end {err:.2e} from all four's optimum")
        aux = [np.array(f["aux"]) for f in run.final.values()]
        spread = max(float(np.max(np.abs(u - v))) for u in aux for v in aux)
        run.check(spread < 1e-12, f"the mixed buffers differ by {spread:.2e}")
        print(f"5. {algorithm} step() + mix(), kill {where.replace('_', ' ')}: rank 1 back at "
              f"{run.changes[1]['round']}; every rank ends {err:.1e} from all four's optimum, "
              f"mixed buffers spread {spread:.1e}; {run.seconds:.1f} s")


CASES = [("nids_loss", case_nids_loss), ("lead_loss", case_lead_loss),
         ("step_mix_loss", case_step_mix_loss), ("nids_rejoin", case_nids_rejoin),
         ("step_mix_rejoin", case_step_mix_rejoin)]


def main():
    only = sys.argv[1:]
    start = time.monotonic()
    with harness.TempDir("python-trainer-faults") as tmp:
        for name, case in CASES:
            if only and name not in only:
                continue
            case(tmp)
    print(f"python trainer faults: ok ({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
