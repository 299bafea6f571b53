#!/usr/bin/env python3
"""WordPiece speed: lmkit (Rust example) vs HF tokenizers (Python), same lines, same run.

    python3 scripts/bench_wordpiece.py [FILE] [TOKENIZER_DIR] [--json FILE]

Encodes every non-empty line of FILE (default assets/books/corpus.txt) with special tokens,
one call per line and in batches of 1000 lines, best of 5 runs each, and prints lines/s and ratios;
and loads TOKENIZER_DIR's tokenizer.json, best of 10 (wall time, one thread either side).
--json FILE also writes the figures in scripts/bench_common.py's format (work per line:
its UTF-8 bytes, read once) for scripts/bench.sh.
"""

import argparse
import os
import subprocess
import sys
import time

from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import figure, write_json  # noqa: E402

BATCH = 1000  # lines per encode_batch call, as in examples/wordpiece_bench.rs
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def best_of(n, f):
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=os.path.join(ROOT, "assets/books/corpus.txt"))
    ap.add_argument("tokenizer_dir", nargs="?", default=os.path.join(ROOT, "assets/minilm"))
    ap.add_argument("--json", metavar="FILE", help="also write the figures here (bench_common format)")
    args = ap.parse_args()
    path, tdir = args.file, args.tokenizer_dir
    with open(path, encoding="utf-8") as f:
        lines = [l for l in f.read().split("\n") if l.strip()]

    hf_load = best_of(10, lambda: Tokenizer.from_file(os.path.join(tdir, "tokenizer.json")))
    hf = Tokenizer.from_file(os.path.join(tdir, "tokenizer.json"))
    hf.no_truncation()
    hf.no_padding()
    hf_tokens = sum(len(hf.encode(l).ids) for l in lines)
    hf_single = len(lines) / best_of(5, lambda: [hf.encode(l) for l in lines])
    batches = [lines[i : i + BATCH] for i in range(0, len(lines), BATCH)]
    hf_batch = len(lines) / best_of(5, lambda: [hf.encode_batch(b) for b in batches])

    out = subprocess.run(
        ["cargo", "run", "--quiet", "--release", "--example", "wordpiece_bench",
         "-p", "lmkit-tokenizers", "--", path, tdir],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    rs = dict(line.split() for line in out.strip().splitlines())
    if int(rs["tokens"]) != hf_tokens:
        sys.exit(f"token counts differ: lmkit {rs['tokens']}, HF {hf_tokens}")

    print(f"{len(lines)} lines, {hf_tokens} tokens, {os.cpu_count()} CPUs")
    print(f"single call: lmkit {float(rs['single_lines_per_s']):,.0f} lines/s, "
          f"HF tokenizers {hf_single:,.0f} lines/s, ratio {float(rs['single_lines_per_s']) / hf_single:.1f}x")
    print(f"batch:       lmkit {float(rs['batch_lines_per_s']):,.0f} lines/s, "
          f"HF tokenizers {hf_batch:,.0f} lines/s, ratio {float(rs['batch_lines_per_s']) / hf_batch:.1f}x")
    lmkit_load = float(rs["load_ms"])
    print(f"load:        lmkit {lmkit_load:.2f} ms, HF tokenizers {hf_load * 1e3:.2f} ms, "
          f"ratio {hf_load * 1e3 / lmkit_load:.1f}x")
    if args.json:
        per_line = sum(len(l.encode("utf-8")) for l in lines) / len(lines)
        write_json(args.json, [
            figure("WordPiece encode, one call per line (MiniLM vocabulary)", "lines/s",
                   float(rs["single_lines_per_s"]), {"HF tokenizers": hf_single}, threads=1,
                   bytes_per_item=per_line),
            figure(f"WordPiece encode_batch, {BATCH} lines per call", "lines/s",
                   float(rs["batch_lines_per_s"]), {"HF tokenizers": hf_batch}, threads=os.cpu_count(),
                   bytes_per_item=per_line),
            figure("WordPiece start-up from tokenizer.json (MiniLM)", "ms", lmkit_load,
                   {"HF tokenizers": hf_load * 1e3}, better="lower", threads=1,
                   note="wall time, best of 10"),
        ], lines=len(lines), tokens=hf_tokens)


if __name__ == "__main__":
    main()
