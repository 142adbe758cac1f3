"""One rank of test_peer_loss.py: mix() on a small float64 model; rank KILL_RANK kills itself
with SIGKILL after KILL_STEP mixes (no goodbye, no flush), the others carry on to STEPS."""

import os
import signal

import numpy as np

import starling

STEPS = int(os.environ["LOSS_STEPS"])
KILL_RANK = int(os.environ["LOSS_KILL_RANK"])
KILL_STEP = int(os.environ["LOSS_KILL_STEP"])

peer = starling.Peer.from_env()
# Distinct models, not symmetric around anything: rank r holds (r+1)^2 * (1, 2, 3) + r.
x = np.array([1.0, 2.0, 3.0]) * (peer.rank + 1) ** 2 + peer.rank
for step in range(STEPS):
    if peer.rank == KILL_RANK and step == KILL_STEP:
        os.kill(os.getpid(), signal.SIGKILL)
    peer.mix(x)
rank = peer.rank
peer.close()
print(f"rank {rank}: done, x = {x.tolist()}", flush=True)
