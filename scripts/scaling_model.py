#!/usr/bin/env python3
"""The paper model of data-parallel scaling in docs/distributed.md.

    python3 scripts/scaling_model.py --tokens-per-s 1500 [--tokens-per-node 8192]

Per optimizer step every node all-reduces the f32 gradients: 4 bytes per
parameter. A ring all-reduce over N nodes moves 2(N-1)/N of those bytes
through each node's link, in 2(N-1) messages per bucket, so

    t_comm = 2(N-1)/N * bytes / bandwidth + 2(N-1) * buckets * latency

The compute time of a step comes from a measured single-node throughput
(tokens/s of GPT-2 124M, scaled to the other sizes by parameter count, as
the 6*P FLOPs per token are): t_comp = tokens_per_node / (tok/s * 124M / P).
Without overlap, step = t_comp + t_comm; efficiency = t_comp / step.
Gradient accumulation of k micro-batches multiplies t_comp by k and leaves
t_comm alone; ZeRO-1 moves the same bytes (reduce-scatter + all-gather =
one all-reduce) and divides the AdamW moments (8 bytes/parameter) by N.
"""
import argparse

SIZES = [("124M", 124_439_808), ("355M", 354_823_168), ("774M", 774_030_080), ("1.5B", 1_557_611_200)]
LINKS_GBIT = [25, 100, 400]
NODES = [8, 64, 512]
BUCKET = 16 * 2**20  # bytes per all-reduce (lmkit's GRAD_BUCKET, f32)


def comm_s(nbytes, n, gbit, latency):
    buckets = -(-nbytes // BUCKET)
    return 2 * (n - 1) / n * nbytes / (gbit * 1e9 / 8) + 2 * (n - 1) * buckets * latency


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens-per-s", type=float, required=True,
                    help="measured single-node training throughput of GPT-2 124M")
    ap.add_argument("--tokens-per-node", type=int, default=8192,
                    help="tokens per node per optimizer step (e.g. 8 x 1024)")
    ap.add_argument("--latency-us", type=float, default=5.0)
    a = ap.parse_args()
    lat = a.latency_us * 1e-6
    print("| model | bytes / step | ring all-reduce at 25 / 100 / 400 Gb/s (N→∞) |")
    print("|---|---|---|")
    for name, p in SIZES:
        b = 4 * p
        t = " / ".join(f"{2 * b / (g * 1e9 / 8):.3g} s" for g in LINKS_GBIT)
        print(f"| {name} | {b / 1e9:.2f} GB | {t} |")
    print()
    print(f"Step time and efficiency, {a.tokens_per_node} tokens per node per step, "
          f"{a.tokens_per_s:g} tok/s per node for 124M, no overlap:")
    print()
    print("| model | compute / step | link | 8 nodes | 64 nodes | 512 nodes |")
    print("|---|---|---|---|---|---|")
    for name, p in SIZES:
        tc = a.tokens_per_node / (a.tokens_per_s * SIZES[0][1] / p)
        for g in LINKS_GBIT:
            cells = []
            for n in NODES:
                tm = comm_s(4 * p, n, g, lat)
                cells.append(f"{tc + tm:.3g} s ({100 * tc / (tc + tm):.0f}%)")
            print(f"| {name} | {tc:.3g} s | {g} Gb/s | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
