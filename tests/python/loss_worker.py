"""One rank of test_peer_loss.py: rank KILL_RANK kills itself with SIGKILL after KILL_STEP calls
(no goodbye, no flush), the others carry on to STEPS. LOSS_MODE "mix": mix() on a small float64
model; "step": step() with the gradient of this rank's least-squares term (loss_problem.py)."""

import os
import signal

import numpy as np

import starling
from loss_problem import problem

STEPS = int(os.environ["LOSS_STEPS"])
KILL_RANK = int(os.environ["LOSS_KILL_RANK"])
KILL_STEP = int(os.environ["LOSS_KILL_STEP"])
MODE = os.environ["LOSS_MODE"]


peer = starling.Peer.from_env()
rank = peer.rank
if MODE == "mix":
    # Distinct models, not symmetric around anything: rank r holds (r+1)^2 * (1, 2, 3) + r.
    x = np.array([1.0, 2.0, 3.0]) * (rank + 1) ** 2 + rank
else:
    x = np.zeros(3)
    a, b = problem(rank)
for step in range(STEPS):
    if rank == KILL_RANK and step == KILL_STEP:
        os.kill(os.getpid(), signal.SIGKILL)
    if MODE == "mix":
        peer.mix(x)
    else:
        peer.step(x, a.T @ (a @ x - b))
peer.close()
print(f"rank {rank}: done, x = {x.tolist()}", flush=True)
