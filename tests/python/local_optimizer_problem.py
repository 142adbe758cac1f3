"""The data, start and step sizes of local_optimizer_worker.py's run, shared with
test_torch_local_optimizer.py (numpy only)."""

import numpy as np

STEPS = 6
LAYOUT = [6, 2]  # torch.nn.Linear(3, 2): weight (2 x 3), then bias (2)


def problem(rank):
    """Rank r's samples X (4 x 3) and targets Y (4 x 2), and its start W0 (2 x 3), b0 (2)."""
    rng = np.random.default_rng(100 + rank)
    x = rng.normal(size=(4, 3))
    y = rng.normal(size=(4, 2)) + rank
    w0 = rng.normal(size=(2, 3))
    b0 = rng.normal(size=2)
    return x, y, w0, b0


def lr(step):
    """The learning rate of step `step` (0-based): LambdaLR's factor times the base 0.05."""
    return 0.05 / (1.0 + 0.5 * step)


def gradient(rank, flat):
    """d/dx of rank's mean((X W^T + b - Y)^2) at flat = [W.ravel(), b], by hand."""
    x, y, _, _ = problem(rank)
    w, b = flat[:6].reshape(2, 3), flat[6:]
    dpred = 2.0 * (x @ w.T + b - y) / y.size
    return np.concatenate([(dpred.T @ x).ravel(), dpred.sum(axis=0)])
