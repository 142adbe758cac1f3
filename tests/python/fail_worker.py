"""One rank of test_failure.py: rank 1 raises in the middle of training, the others keep mixing."""

import numpy as np

import starling

peer = starling.Peer.from_env()
x = np.full(100, float(peer.rank))
for step in range(1000):
    if peer.rank == 1 and step == 3:
        raise ValueError("user code failed on rank 1 at step 3")
    peer.mix(x)
