"""One rank of test_rejoin.py. Rank KILL_RANK's first process kills itself with SIGKILL after
KILL_STEP calls; the launcher (faults.restart) starts it again with STARLING_REJOIN=1, and its
first call rejoins: the parameters then hold a neighbour's model and peer.round is the round the
others agreed on. Every rank loops on peer.round, not on a count of its own calls. LOSS_MODE "mix":
mix() on a small float64 model; "step": step() with the gradient of this rank's least-squares
term (loss_problem.py). Each call sleeps PAUSE_MS so that the run outlasts the restart."""

import os
import signal
import time

import numpy as np

import starling
from loss_problem import problem

STEPS = int(os.environ["LOSS_STEPS"])
KILL_RANK = int(os.environ["LOSS_KILL_RANK"])
KILL_STEP = int(os.environ["LOSS_KILL_STEP"])
MODE = os.environ["LOSS_MODE"]
PAUSE = float(os.environ.get("PAUSE_MS", "0")) / 1000

peer = starling.Peer.from_env()
rank = peer.rank
restarted = os.environ.get("STARLING_REJOIN") == "1"
if MODE == "mix":
    x = np.array([1.0, 2.0, 3.0]) * (rank + 1) ** 2 + rank
else:
    x = np.zeros(3)
    a, b = problem(rank)
if restarted and os.environ.get("RESTORE") == "1":
    peer.restore(x)  # the neighbours' model, before the first gradient is taken
calls = 0
while peer.round < STEPS:
    if rank == KILL_RANK and calls == KILL_STEP and not restarted:
        os.kill(os.getpid(), signal.SIGKILL)
    if MODE == "mix":
        peer.mix(x)
    else:
        peer.step(x, a.T @ (a @ x - b))
    calls += 1
    if restarted and calls == 1:
        print(f"rank {rank}: rejoined at round {peer.round}", flush=True)
    time.sleep(PAUSE)
done = peer.round
peer.close()
print(f"rank {rank}: done at round {done}, x = {x.tolist()}", flush=True)
