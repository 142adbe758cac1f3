"""A user's trainer under srun (slurm_test.py): starling.Peer.from_env() with only
STARLING_SCENARIO set finds its rank (SLURM_PROCID) and every rank's host from the Slurm step.
On a complete graph of 4 with Metropolis weights (1/4 each) one mix is the exact average, so every
rank must hold (1 + 2 + 3 + 4) / 4 = 2.5 after it: a closed form, not the code's own output."""

import os
import sys

import numpy as np

import starling

with starling.Peer.from_env() as peer:
    rank = int(os.environ["SLURM_PROCID"])
    x = np.full(1000, rank + 1.0, dtype=np.float64)
    peer.mix(x)
    if not np.all(x == 2.5):
        print(f"rank {rank}: mixed to {x[:3]}, expected 2.5", file=sys.stderr)
        sys.exit(1)
    print(f"rank {rank} on {os.environ.get('SLURMD_NODENAME')}: mixed to 2.5", flush=True)
