#!/usr/bin/env python3
"""The GPU codecs beside PyTorch on the same device, in one run (docs/cuda.md, "Benchmarks").

Runs bench-cuda (Starling's kernels through the driver API, the device's copy as the yardstick)
and times PyTorch's versions of the same operations with CUDA events, then prints one table:
GB/s counted as the bytes each operation must read and write once, and that as % of the copy.

usage: bench_cuda_torch.py BENCH_CUDA_BINARY OUT.json [--max-d N] [--device cuda|cpu]
(--device cpu only checks the script on a machine without a GPU; its numbers mean nothing.)
"""
import json
import subprocess
import sys
import time

import torch


def timed(fn, reps, device):
    for _ in range(2):
        fn()
    runs = []
    for _ in range(5):
        if device == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            stop.record()
            stop.synchronize()
            runs.append(start.elapsed_time(stop) / reps)
        else:
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            runs.append((time.perf_counter() - t) * 1e3 / reps)
    runs.sort()
    return runs[2]


def torch_rows(max_d, device):
    rows = []
    d = 10**6
    while d <= max_d:
        reps = 5 if d >= 10**8 else 20 if d >= 10**7 else 100
        g = torch.Generator(device=device).manual_seed(1)
        x = torch.randn(d, device=device, generator=g) * 0.01
        h = x.half()
        nb = [x.clone() for _ in range(5)]
        out = torch.empty_like(x)

        def combine():
            torch.sub(nb[0], x, out=out)
            acc = nb[4] + 0.2 * out
            for j in range(1, 4):
                acc += 0.2 * (nb[j] - x)
            return acc

        def qsgd4():
            # QSGD, 4 bits (s = 7), l2 buckets of 512: codes as int8, not packed (torch has no
            # 4-bit packing; packing would add a pass).
            v = x[: d - d % 512].view(-1, 512)
            scale = v.norm(dim=1, keepdim=True)
            t = v.abs() / scale * 7
            low = t.floor()
            level = low + (torch.rand(t.shape, device=device) < (t - low)).to(t.dtype)
            return (level * v.sign()).to(torch.int8)

        # CSVec-style Count-Sketch (5 rows, a table of d / 500 columns, precomputed int64
        # buckets and signs, as CSVec keeps them): the sketch by index_add_, and the unsketch
        # (the median over rows, then the top 1%).
        rows_, cols_ = 5, max(1, d // 500)
        buckets = torch.randint(0, cols_, (rows_, d), device=device, generator=g)
        signs = torch.randint(0, 2, (rows_, d), device=device, generator=g).float() * 2 - 1
        flat = (buckets + torch.arange(rows_, device=device).unsqueeze(1) * cols_).view(-1)

        def csvec():
            table = torch.zeros(rows_ * cols_, device=device)
            table.index_add_(0, flat, (signs * x).view(-1))
            est = (table[flat].view(rows_, d) * signs).median(dim=0).values
            return est.abs().topk(d // 100, sorted=False)

        ops = [("torch: x.half()", 6.0 * d, lambda: x.half()),
               ("torch: x.bfloat16()", 6.0 * d, lambda: x.bfloat16()),
               ("torch: h.float()", 6.0 * d, lambda: h.float()),
               ("torch: combine, 4 neighbours", 28.0 * d, combine),
               ("torch: qsgd 4-bit codes (int8)", 5.0 * d, qsgd4),
               # top-1% by magnitude, as the codec keeps them: values and indices.
               ("torch: topk 1% (x.abs().topk)", 4.0 * d + 12.0 * (d // 100),
                lambda: x.abs().topk(d // 100, sorted=False)),
               ("torch: CSVec-style countsketch, sketch + median unsketch + top-1%", 4.0 * d,
                csvec),
               ("torch: copy (y.copy_(x))", 8.0 * d, lambda: out.copy_(x))]
        for name, nbytes, fn in ops:
            ms = timed(fn, reps, device)
            rows.append({"what": name, "d": d, "ms": ms, "gbps": nbytes / ms / 1e6})
        d *= 10
    return rows


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, out_path = sys.argv[1], sys.argv[2]
    max_d = 10**8
    device = "cuda"
    args = sys.argv[3:]
    while args:
        if args[0] == "--max-d":
            max_d = int(args[1])
            args = args[2:]
        elif args[0] == "--device":
            device = args[1]
            args = args[2:]
        else:
            sys.exit(__doc__)
    ours = {"device": None, "rows": []}
    if device == "cuda":
        subprocess.run([binary, "--json", out_path + ".starling", "--max-d", str(max_d)], check=True)
        with open(out_path + ".starling") as f:
            ours = json.load(f)
    theirs = torch_rows(max_d, device)
    copy = {r["d"]: r["gbps"] for r in ours["rows"] if r["what"].startswith("copy")}
    for r in theirs:
        if r["d"] in copy:
            r["pct_of_copy"] = round(100.0 * r["gbps"] / copy[r["d"]], 1)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    result = {"device": name, "torch": torch.__version__, "starling": ours, "torch_rows": theirs}
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"| operation | d | ms | GB/s | % of copy |   ({name}, torch {torch.__version__})")
    print("|---|---|---|---|---|")
    for r in ours["rows"] + theirs:
        print(f"| {r['what']} | {r['d']:.0e} | {r['ms']:.3f} | {r['gbps']:.0f} | {r.get('pct_of_copy', '')} |")


if __name__ == "__main__":
    main()
