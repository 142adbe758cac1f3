"""The least-squares terms of loss_worker.py's step() run, shared with test_peer_loss.py."""

import numpy as np


def problem(rank):
    """f_r(x) = 1/2 ||A_r x - b_r||^2."""
    a = np.eye(3) * (1.0 + 0.25 * rank) + 0.1 * np.arange(9).reshape(3, 3) / (rank + 1)
    b = np.array([rank, 1.0 - rank, 2.0 * rank + 1.0])
    return a, b
