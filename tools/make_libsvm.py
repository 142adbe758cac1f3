#!/usr/bin/env python3
"""Writes the sparse LIBSVM data sets the shipped scenarios use.

Deterministic (fixed seeds, Python's own Mersenne Twister), standard library only:
    python3 tools/make_libsvm.py > scenarios/data/sparse-logistic.svm
    python3 tools/make_libsvm.py --zipf > scenarios/data/zipf-logistic.svm

The default set is small and fairly dense (600 samples, 40 features, 20% of them per sample).
--zipf writes a high-dimensional set (4000 samples, 2000 features) whose features are drawn with
Zipf-distributed popularity, as words in text are: a few features occur in most samples, most
occur rarely. Gradients (and CHOCO's differences x - x_hat) then have a few large coordinates
and a long tail of small ones, which is what top-k and Count-Sketch heavy-hitter recovery exploit.

--samples and --features size either set; --density is the dense set's, --nnz and --exponent
the Zipf set's (given to the other set, they are refused rather than ignored). Without them the
output is the shipped files byte for byte.
"""
import argparse
import bisect
import itertools
import math
import random
import shlex
import sys

DENSE = {"samples": 600, "features": 40, "density": 0.2}
ZIPF = {"samples": 4000, "features": 2000, "nnz": 30, "exponent": 1.1}


def command(argv):
    return " ".join(["tools/make_libsvm.py"] + [shlex.quote(a) for a in argv])


def dense_set(samples, features, density, argv):
    rng = random.Random(20261122)
    w = [rng.gauss(0, 1) for _ in range(features)]
    print(f"# {samples} samples, {features} features, density {density}: {command(argv)}")
    for _ in range(samples):
        cols = sorted(i for i in range(features) if rng.random() < density) or [rng.randrange(features)]
        vals = {i: round(rng.gauss(0, 1), 4) for i in cols}
        margin = sum(w[i] * v for i, v in vals.items())
        label = 1 if margin + rng.gauss(0, 0.5) > 0 else -1
        print(f"{label:+d} " + " ".join(f"{i + 1}:{v:g}" for i, v in vals.items()))


def zipf_set(samples, features, nnz, exponent, argv):
    rng = random.Random(20261123)
    cdf = list(itertools.accumulate(1.0 / (r + 1) ** exponent for r in range(features)))
    w = [rng.gauss(0, 1) for _ in range(features)]
    print(f"# {samples} samples, {features} features, {nnz} Zipf({exponent}) draws per sample: "
          f"{command(argv)}")
    for _ in range(samples):
        cols = sorted({bisect.bisect_left(cdf, rng.random() * cdf[-1]) for _ in range(nnz)})
        vals = {i: round(rng.gauss(0, 1), 4) for i in cols}
        margin = sum(w[i] * v for i, v in vals.items())
        label = 1 if margin + rng.gauss(0, 0.5) > 0 else -1
        print(f"{label:+d} " + " ".join(f"{i + 1}:{v:g}" for i, v in vals.items()))


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def fraction(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def exponent(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:  # 0: every feature equally popular
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zipf", action="store_true", help="the high-dimensional Zipf set")
    p.add_argument("--samples", type=positive_int,
                   help=f"samples (default {DENSE['samples']}, with --zipf {ZIPF['samples']})")
    p.add_argument("--features", type=positive_int,
                   help=f"features (default {DENSE['features']}, with --zipf {ZIPF['features']})")
    p.add_argument("--density", type=fraction,
                   help=f"without --zipf: fraction of features per sample (default {DENSE['density']})")
    p.add_argument("--nnz", type=positive_int,
                   help=f"with --zipf: feature draws per sample (default {ZIPF['nnz']})")
    p.add_argument("--exponent", type=exponent,
                   help=f"with --zipf: the Zipf exponent (default {ZIPF['exponent']})")
    a = p.parse_args(argv)
    chosen = ZIPF if a.zipf else DENSE
    wrong = [f"--{k}" for k in ("density", "nnz", "exponent")
             if getattr(a, k) is not None and k not in chosen]
    if wrong:
        p.error(f"{' and '.join(wrong)} only appl{'ies' if len(wrong) == 1 else 'y'} to the "
                f"{'dense set (without --zipf)' if a.zipf else 'Zipf set (--zipf)'}")
    opts = {k: getattr(a, k) if getattr(a, k) is not None else v for k, v in chosen.items()}
    if a.zipf:
        zipf_set(opts["samples"], opts["features"], opts["nnz"], opts["exponent"], argv)
    else:
        dense_set(opts["samples"], opts["features"], opts["density"], argv)


if __name__ == "__main__":
    main()
