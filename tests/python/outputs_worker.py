"""One rank of test_trainer_outputs.py, under `node-launcher run SCENARIO -- python3 ...`.

STARLING_TEST_CASE picks what it does:
  gaps       20 mix() rounds; rank 0 logs {"loss"} once, at round 7; rank 2 logs at every round.
  consensus  20 mix() rounds of a 2-rank complete graph: after each mix both hold the average
             (the same model), then each adds its rank (a local step that makes them differ
             until the next mix). Logged lines must show the mixed models: consensus exactly 0.
  restart    mix() rounds; a restarted process (STARLING_REJOIN=1) prints a line and exits 3.
"""

import os
import sys

import numpy as np

import starling

case = os.environ["STARLING_TEST_CASE"]
rank = int(os.environ["STARLING_RANK"])

if case == "restart" and os.environ.get("STARLING_REJOIN") == "1":
    print(f"rank {rank}: back after a restart, and crashing on purpose", flush=True)
    sys.exit(3)

peer = starling.Peer.from_env()
x = np.full(8, float(rank + 1))
rounds = 20 if case != "restart" else 200
for r in range(1, rounds + 1):
    peer.mix(x)
    if case == "consensus":
        x += rank  # the local step after each mix: the ranks differ until the next mix
    if case == "gaps":
        if rank == 0 and r == 7:
            peer.log(loss=7.0)
        if rank == 2:
            peer.log(loss=float(r))
print(f"rank {rank}: done after {peer.round} rounds", flush=True)
peer.close()
