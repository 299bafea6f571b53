#!/usr/bin/env python3
"""The machine's limits, for the "fraction of the hardware limit" column of
docs/benchmarks.md (scripts/bench.sh runs this next to the benchmarks):

- gemm peak GFLOP/s: the best of a few torch.mm of two N×N matrices (N = 2048 on
  several threads, 1024 on one), in float32 and bfloat16, at each thread count;
- read bandwidth GB/s: the best of 5 torch sums over 1 GiB (bench_gpt2_infer.read_peak_gbs,
  the probe its decode fraction uses), at each thread count.

    python3 scripts/bench_probe.py [--threads 2] [--json FILE]

Thread counts probed: 1 and --threads. JSON: {"threads": [1, N], "gemm_gflops":
{"f32": {"1": x, "N": y}, "bf16": {...}}, "read_gbs": {"1": x, "N": y}, "torch"}.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpt2_infer import read_peak_gbs  # noqa: E402


def gemm_gflops(torch, n, dtype, reps=5):
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    import torch

    threads = sorted({1, args.threads})
    out = {"threads": threads, "gemm_gflops": {"f32": {}, "bf16": {}}, "read_gbs": {},
           "torch": torch.__version__}
    for t in threads:
        torch.set_num_threads(t)
        n = 2048 if t > 1 else 1024
        for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            out["gemm_gflops"][name][str(t)] = gemm_gflops(torch, n, dtype)
        out["read_gbs"][str(t)] = read_peak_gbs(t, reduce=max)
        print(f"{t} thread(s): gemm f32 {out['gemm_gflops']['f32'][str(t)]:.0f} GFLOP/s, "
              f"bf16 {out['gemm_gflops']['bf16'][str(t)]:.0f} GFLOP/s, read {out['read_gbs'][str(t)]:.1f} GB/s",
              file=sys.stderr)
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
