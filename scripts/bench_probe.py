#!/usr/bin/env python3
"""The machine's limits, for the "fraction of the hardware limit" column of
docs/benchmarks.md (scripts/bench.sh runs this next to the benchmarks):

- true peak GOP/s (`lmkit probe --json`, crates/lmkit/src/kernels/probe.rs): an
  in-register loop of independent multiply-adds per instruction — f32 FMA
  (AVX-512 or AVX2), bf16 `vdpbf16ps`, int8 `vpdpbusd` — on one thread and on
  N threads at once; the ceiling no gemm passes;
- torch gemm GFLOP/s: the best of a few torch.mm of two N×N matrices (N = 2048 on
  several threads, 1024 on one), in float32 and bfloat16, at each thread count
  (PyTorch's rate, shown beside the true peak: lmkit's f32 gemm can beat it);
- read bandwidth GB/s: the best of 5 torch sums over 1 GiB (bench_gpt2_infer.read_peak_gbs,
  the probe its decode fraction uses), at each thread count.

    python3 scripts/bench_probe.py [--threads 2] [--lmkit target/release/lmkit] [--json FILE]

Thread counts probed: 1 and --threads. JSON: {"threads": [1, N], "peak_gflops":
{"f32": {"1": x, "N": y}, "bf16": {...}, "int8": {...}}, "peak_instructions": {"f32":
"vfmadd231ps zmm", ...}, "cpu", "gemm_gflops": {"f32": {"1": x, "N": y}, "bf16": {...}},
"read_gbs": {"1": x, "N": y}, "torch"}. Without an lmkit binary the true peak is left
out (the report then falls back to torch's gemm rate).
"""
import argparse
import json
import os
import shutil
import subprocess
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


def default_lmkit():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    built = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target")), "release", "lmkit")
    return built if os.path.exists(built) else shutil.which("lmkit")


def true_peak(lmkit, threads):
    """`lmkit probe --json` on `threads` threads: ({dtype: {"1": GOP/s, "N": GOP/s}},
    {dtype: instruction}, cpu), or None where the binary is missing or fails."""
    if not lmkit:
        return None
    try:
        run = subprocess.run([lmkit, "--threads", str(threads), "probe", "--json"],
                             capture_output=True, text=True, check=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"lmkit probe failed: {e}", file=sys.stderr)
        return None
    doc = json.loads(run.stdout)
    peak, instr = {}, {}
    for dtype, p in doc["peak"].items():
        peak[dtype] = {"1": p["per_thread_gops"], str(doc["threads"]): p["all_threads_gops"]}
        instr[dtype] = p["instruction"]
    return peak, instr, doc["cpu"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lmkit", default=default_lmkit(), help="the lmkit binary (its hidden `probe` command)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    import torch

    threads = sorted({1, args.threads})
    out = {"threads": threads, "gemm_gflops": {"f32": {}, "bf16": {}}, "read_gbs": {},
           "torch": torch.__version__}
    found = true_peak(args.lmkit, args.threads)
    if found:
        out["peak_gflops"], out["peak_instructions"], out["cpu"] = found
        for dtype, by_t in out["peak_gflops"].items():
            print(f"true peak {dtype} ({out['peak_instructions'][dtype]}): "
                  + ", ".join(f"{v:.0f} GOP/s on {t} thr" for t, v in by_t.items()), file=sys.stderr)
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
