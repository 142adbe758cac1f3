#!/usr/bin/env python3
"""Writes the sparse LIBSVM data sets the shipped scenarios use.

Deterministic (fixed seeds, Python's own Mersenne Twister), standard library only:
    python3 tools/make_libsvm.py > scenarios/data/sparse-logistic.svm
    python3 tools/make_libsvm.py --zipf > scenarios/data/zipf-logistic.svm

The default set is small and fairly dense (40 features, 20% of them per sample). --zipf writes
a high-dimensional set whose features are drawn with Zipf-distributed popularity, as words in
text are: a few features occur in most samples, most occur rarely. Gradients (and CHOCO's
differences x - x_hat) then have a few large coordinates and a long tail of small ones, which
is what top-k and Count-Sketch heavy-hitter recovery exploit.
"""
import argparse
import bisect
import itertools
import random


def dense_set():
    samples, features, density = 600, 40, 0.2
    rng = random.Random(20261122)
    w = [rng.gauss(0, 1) for _ in range(features)]
    print(f"# {samples} samples, {features} features, density {density}: tools/make_libsvm.py")
    for _ in range(samples):
        cols = sorted(i for i in range(features) if rng.random() < density) or [rng.randrange(features)]
        vals = {i: round(rng.gauss(0, 1), 4) for i in cols}
        margin = sum(w[i] * v for i, v in vals.items())
        label = 1 if margin + rng.gauss(0, 0.5) > 0 else -1
        print(f"{label:+d} " + " ".join(f"{i + 1}:{v:g}" for i, v in vals.items()))


def zipf_set(samples, features, nnz, exponent):
    rng = random.Random(20261123)
    cdf = list(itertools.accumulate(1.0 / (r + 1) ** exponent for r in range(features)))
    w = [rng.gauss(0, 1) for _ in range(features)]
    print(f"# {samples} samples, {features} features, {nnz} Zipf({exponent}) draws per sample: "
          f"tools/make_libsvm.py --zipf")
    for _ in range(samples):
        cols = sorted({bisect.bisect_left(cdf, rng.random() * cdf[-1]) for _ in range(nnz)})
        vals = {i: round(rng.gauss(0, 1), 4) for i in cols}
        margin = sum(w[i] * v for i, v in vals.items())
        label = 1 if margin + rng.gauss(0, 0.5) > 0 else -1
        print(f"{label:+d} " + " ".join(f"{i + 1}:{v:g}" for i, v in vals.items()))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zipf", action="store_true", help="the high-dimensional Zipf set")
    p.add_argument("--samples", type=int, default=4000)
    p.add_argument("--features", type=int, default=2000)
    p.add_argument("--nnz", type=int, default=30, help="feature draws per sample")
    p.add_argument("--exponent", type=float, default=1.1)
    a = p.parse_args()
    if a.zipf:
        zipf_set(a.samples, a.features, a.nnz, a.exponent)
    else:
        dense_set()


if __name__ == "__main__":
    main()
