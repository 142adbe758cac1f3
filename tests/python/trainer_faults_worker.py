"""One rank of test_trainer_faults.py: a trainer that drives the scenario's algorithm with step()
on this rank's least-squares term (loss_problem.py), and with FAULTS_MODE "step_mix" also mixes
a second buffer with mix() after every step. Rank FAULTS_KILL_RANK's first process kills itself
with SIGKILL at its FAULTS_KILL_CALL-th loop iteration (FAULTS_KILL_WHERE "before_step": at the
top of the iteration; "after_step": between its step() and its mix()). A restarted process
(STARLING_REJOIN=1, faults.restart) never kills itself. Every rank loops on peer.round, not on a
count of its own calls (a rejoined trainer's round starts where the others took it back), and at
the end writes what it holds to FAULTS_RESULTS/rank-R.json; its own output (the C++ runtime's
stderr too) goes to FAULTS_RESULTS/rank-R-PID.out, which the test prints when a check fails.

The second buffer, aux, is a running average of the model: aux <- (aux + x) / 2, then mix(aux).
It starts far apart on every rank, so its final spread says whether the gossip reached consensus
over the survivors' graph, and its fixed point is the step state's optimum."""

import json
import os
import signal
import sys
import time

import numpy as np

RESULTS = os.environ["FAULTS_RESULTS"]
RANK = int(os.environ["STARLING_RANK"])
# The runtime writes to fd 2 from C++: point fds 1 and 2 at a file of this process.
_out = os.open(os.path.join(RESULTS, f"rank-{RANK}-{os.getpid()}.out"),
               os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(_out, 1)
os.dup2(_out, 2)
sys.stdout = os.fdopen(1, "w", buffering=1)
sys.stderr = os.fdopen(2, "w", buffering=1)

import starling  # noqa: E402 (after the redirection, so that its messages land in the file)
from loss_problem import problem  # noqa: E402

STEPS = int(os.environ["FAULTS_STEPS"])
KILL_RANK = int(os.environ["FAULTS_KILL_RANK"])
KILL_CALL = int(os.environ["FAULTS_KILL_CALL"])
KILL_WHERE = os.environ.get("FAULTS_KILL_WHERE", "before_step")
MODE = os.environ["FAULTS_MODE"]
PAUSE = float(os.environ.get("PAUSE_MS", "0")) / 1000

peer = starling.Peer.from_env()
rank = peer.rank
restarted = os.environ.get("STARLING_REJOIN") == "1"
a, b = problem(rank)
x = np.zeros(3)
aux = np.array([1.0, 2.0, 3.0]) * (rank + 1) ** 2 + rank
dies = rank == KILL_RANK and not restarted
calls = 0
while peer.round < STEPS:
    if dies and calls == KILL_CALL and KILL_WHERE == "before_step":
        os.kill(os.getpid(), signal.SIGKILL)
    peer.step(x, a.T @ (a @ x - b))
    if MODE == "step_mix":
        if dies and calls == KILL_CALL and KILL_WHERE == "after_step":
            os.kill(os.getpid(), signal.SIGKILL)
        aux[:] = 0.5 * (aux + x)
        peer.mix(aux)
    calls += 1
    if restarted and calls == 1:
        print(f"rank {rank}: rejoined at round {peer.round}", flush=True)
    time.sleep(PAUSE)
done = peer.round
peer.close()
with open(os.path.join(RESULTS, f"rank-{rank}.json.tmp"), "w") as f:
    json.dump({"rank": rank, "round": done, "calls": calls, "rejoined": restarted,
               "x": x.tolist(), "aux": aux.tolist()}, f)
os.replace(os.path.join(RESULTS, f"rank-{rank}.json.tmp"),
           os.path.join(RESULTS, f"rank-{rank}.json"))
print(f"rank {rank}: done at round {done} after {calls} calls, x = {x.tolist()}", flush=True)
