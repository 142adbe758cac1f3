#!/usr/bin/env python3
"""Writes the small sparse LIBSVM data set used by scenarios/libsvm-ring8-logistic.json.

Deterministic (fixed seed, Python's own Mersenne Twister), standard library only:
    python3 tools/make_libsvm.py > scenarios/data/sparse-logistic.svm
"""
import random

SAMPLES, FEATURES, DENSITY = 600, 40, 0.2

rng = random.Random(20261122)
w = [rng.gauss(0, 1) for _ in range(FEATURES)]
print(f"# {SAMPLES} samples, {FEATURES} features, density {DENSITY}: tools/make_libsvm.py")
for _ in range(SAMPLES):
    cols = sorted(i for i in range(FEATURES) if rng.random() < DENSITY) or [rng.randrange(FEATURES)]
    vals = {i: round(rng.gauss(0, 1), 4) for i in cols}
    margin = sum(w[i] * v for i, v in vals.items())
    label = 1 if margin + rng.gauss(0, 0.5) > 0 else -1
    print(f"{label:+d} " + " ".join(f"{i + 1}:{v:g}" for i, v in vals.items()))
