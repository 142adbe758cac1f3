#!/usr/bin/env python3
"""PyTorch reference column of bench-codecs (docs/bench_codecs.md).

Times, on one CPU thread, the PyTorch codecs that Starling's goals are stated against, written
here from their descriptions in docs/algorithms.md §14 (nothing is downloaded):
  cs_sketch / cs_unsketch  a CSVec-equivalent count sketch (§14.1): precomputed bucket and sign
                           hashes, one torch.bincount per row to sketch; unsketch gathers
                           table[j, buckets[j]] * signs[j] for every row, takes the median over
                           rows and keeps the top k of the squares (dense output).
  topk_encode / _decode    GRACE-style top-k: torch.topk of |x|, gather the values; decode
                           scatters them into zeros.
  qsgd_encode / _decode    GRACE-style QSGD (§14.3): one l2 norm, floor, bernoulli,
                           sign * level in int8 plus the norm; decode norm / s * level.
Throughput is GB/s of float32 input (d * 4 bytes / median seconds), as bench-codecs reports.
Hash construction is not timed (CSVec caches it per (d, c, r)).

  bench_codecs_torch.py [--sizes 1e4,1e5,1e6,1e7] [--reps 5] [--min-time 0.25]
                        [--max-time 3] [--clock wall|cpu] [--format json|text]
--clock cpu times with the thread's CPU clock (torch runs single-threaded ops on the calling
thread), as bench-codecs --cpu-clock does on a machine shared with other jobs.
Exits 3 when torch cannot be imported.
"""
import argparse
import json
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("torch: not installed (apt-get install python3-torch)", file=sys.stderr)
    sys.exit(3)

LARGEPRIME = 2**61 - 1
ROWS = 5
QSGD_LEVELS = 7  # s for 4 bits including the sign, as bench-codecs' qsgd4


def time_op(fn, reps, min_time, max_time, clock):
    """Median seconds of fn() over at least `reps` calls and `min_time` seconds (after one
    warm-up), stopping after `max_time` seconds."""
    fn()
    times = []
    start = clock()
    while True:
        t0 = clock()
        fn()
        t1 = clock()
        times.append(t1 - t0)
        elapsed = t1 - start
        if (len(times) >= reps and elapsed >= min_time) or elapsed >= max_time:
            break
    return statistics.median(times), len(times)


class CountSketch:
    """CSVec's hashing and kernels (numBlocks = 1) for r rows and c columns."""

    def __init__(self, d, c, r):
        self.d, self.c, self.r = d, c, r
        state = torch.random.get_rng_state()
        torch.manual_seed(42)
        hashes = torch.randint(0, LARGEPRIME, (r, 6), dtype=torch.int64)
        torch.random.set_rng_state(state)
        tokens = torch.arange(d, dtype=torch.int64).reshape(1, d)
        h = hashes
        # int64 products wrap mod 2^64 and % is a floor-mod, exactly as in CSVec.
        self.buckets = ((h[:, 0:1] * tokens + h[:, 1:2]) % LARGEPRIME) % c
        poly = ((h[:, 2:3] * tokens + h[:, 3:4]) * tokens + h[:, 4:5]) * tokens + h[:, 5:6]
        self.signs = (((poly % LARGEPRIME) % 2) * 2 - 1).float()
        self.table = torch.zeros((r, c), dtype=torch.float32)

    def sketch(self, vec):
        self.table.zero_()
        for j in range(self.r):
            self.table[j, :] += torch.bincount(self.buckets[j, :], weights=self.signs[j, :] * vec,
                                               minlength=self.c)
        return self.table

    def unsketch(self, k):
        vals = torch.zeros(self.r, self.d, dtype=torch.float32)
        for j in range(self.r):
            vals[j] = self.table[j, self.buckets[j, :]] * self.signs[j, :]
        est = vals.median(dim=0)[0]
        _, idx = torch.topk(est * est, k, sorted=False)
        out = torch.zeros(self.d, dtype=torch.float32)
        out[idx] = est[idx]
        return out


def grace_topk(x, k):
    _, idx = torch.topk(x.abs(), k, sorted=False)
    return torch.gather(x, 0, idx), idx


def grace_topk_decode(values, idx, d):
    out = torch.zeros(d, dtype=values.dtype)
    out.scatter_(0, idx, values)
    return out


def grace_qsgd(x, s):
    norm = x.norm()
    level = s / norm * x.abs()
    floor = level.floor()
    level = floor + torch.bernoulli(level - floor)
    return (level * x.sign()).to(torch.int8), norm


def grace_qsgd_decode(codes, norm, s):
    return norm / s * codes.to(torch.float32)


def parse_size(text):
    return int(round(float(text)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.25)
    ap.add_argument("--max-time", type=float, default=3.0)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    ap.add_argument("--format", choices=["json", "text"], default="text")
    args = ap.parse_args()

    torch.set_num_threads(1)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    torch.manual_seed(1)
    rows = []
    for d in [parse_size(s) for s in args.sizes.split(",") if s]:
        x = torch.randn(d, dtype=torch.float32)
        nbytes = 4.0 * d
        k = max(1, d // 1000)
        cs = CountSketch(d, max(1, d // 100), ROWS)
        ops = [
            ("cs_sketch", lambda: cs.sketch(x)),
            ("cs_unsketch", lambda: cs.unsketch(k)),
        ]
        kt = max(1, int(d * 0.01))
        values, idx = grace_topk(x, kt)
        codes, norm = grace_qsgd(x, QSGD_LEVELS)
        ops += [
            ("topk_encode", lambda: grace_topk(x, kt)),
            ("topk_decode", lambda: grace_topk_decode(values, idx, d)),
            ("qsgd_encode", lambda: grace_qsgd(x, QSGD_LEVELS)),
            ("qsgd_decode", lambda: grace_qsgd_decode(codes, norm, QSGD_LEVELS)),
        ]
        for name, fn in ops:
            sec, reps = time_op(fn, args.reps, args.min_time, args.max_time, clock)
            rows.append({"op": name, "d": d, "seconds": sec, "gbps": nbytes / sec / 1e9,
                         "reps": reps})
        del cs
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "results": rows}
    if args.format == "json":
        json.dump(meta, sys.stdout)
        print()
    else:
        print(f"torch {meta['torch']}, {meta['threads']} thread")
        print("| op | d | ms | GB/s |\n|---|---:|---:|---:|")
        for r in rows:
            print(f"| {r['op']} | {r['d']:.0e} | {r['seconds'] * 1e3:.3g} | {r['gbps']:.3g} |")


if __name__ == "__main__":
    main()
