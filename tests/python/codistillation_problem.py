"""The problem of test_torch_codistillation.py, shared by the test and its workers: each rank's
8 samples of 4 features in 3 classes, and the common start of torch.nn.Linear(4, 3)."""

import numpy as np

STEPS = 7
LR = 0.3
ALPHA = 0.5
PERIOD = 2
BURN_IN = 2
LAYOUT = [12, 3]


def problem(rank):
    rng = np.random.default_rng(100 + rank)
    x = rng.normal(size=(8, 4)) + rank
    y = rng.integers(0, 3, size=8)
    start = np.random.default_rng(7)
    return x, y, start.normal(size=(3, 4)) * 0.5, start.normal(size=3) * 0.1
