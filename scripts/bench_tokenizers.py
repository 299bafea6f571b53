#!/usr/bin/env python3
"""GPT-2 encode speed: lmkit vs tiktoken (Python and tiktoken-rs) vs HF tokenizers,
measured in the same run on the same text, printed as throughput and ratios.

Usage: scripts/bench_tokenizers.py [FILE] [--reps N]
(default FILE: assets/books/corpus.txt, documents split at "\\n\\f\\n").
lmkit and tiktoken-rs are timed in-process by the `encode_file` bench binary
(vocabulary loading excluded, as for the Python peers). "single" encodes the
whole file as one text on one thread, timed in CPU time (robust on a shared
machine); "batch" encodes the documents on all cores, timed in wall time.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def best_of(reps, f, clock=time.perf_counter):
    out = f()
    best = float("inf")
    for _ in range(reps):
        t = clock()
        out = f()
        best = min(best, clock() - t)
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=os.path.join(ROOT, "assets/books/corpus.txt"))
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    gpt2 = os.path.join(ROOT, "assets/gpt2")
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(gpt2, "merges.txt"),
        encoder_json_file=os.path.join(gpt2, "vocab.json"),
    )
    tik = tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    hf = Tokenizer(models.BPE.from_file(os.path.join(gpt2, "vocab.json"), os.path.join(gpt2, "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()

    with open(args.file, encoding="utf-8") as f:
        text = f.read()
    docs = text.split("\n\f\n")
    nbytes = len(text.encode("utf-8"))
    threads = os.cpu_count()

    # lmkit + tiktoken-rs, in-process, first (the bench binary is built if needed).
    cmd = ["cargo", "bench", "-q", "-p", "lmkit-tokenizers", "--bench", "encode_file", "--",
           args.file, "--reps", str(args.reps)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["name"]] = (r["seconds"], r["tokens"])

    # Single-thread runs are timed in CPU time (the bench binary does the same),
    # which holds on a busy shared machine; batch runs in wall time.
    s, ids = best_of(args.reps, lambda: tik.encode_ordinary(text), time.process_time)
    results["tiktoken-py single"] = (s, len(ids))
    s, ids = best_of(args.reps, lambda: hf.encode(text, add_special_tokens=False).ids, time.process_time)
    results["hf-tokenizers single"] = (s, len(ids))
    s, ids = best_of(args.reps, lambda: tik.encode_ordinary_batch(docs, num_threads=threads))
    results["tiktoken-py batch"] = (s, sum(map(len, ids)))
    s, encs = best_of(args.reps, lambda: hf.encode_batch(docs, add_special_tokens=False))
    results["hf-tokenizers batch"] = (s, sum(len(e.ids) for e in encs))

    print(f"text: {args.file} ({nbytes / 1e6:.2f} MB, {len(docs)} documents), {threads} threads, best of {args.reps}")
    print(f"{'encoder':<24}{'seconds':>10}{'MB/s':>10}{'tokens':>10}{'lmkit is':>12}")
    for mode in ("single", "batch"):
        ours = results[f"lmkit {mode}"][0]
        for name in ("lmkit", "tiktoken-rs", "tiktoken-py", "hf-tokenizers"):
            s, n = results[f"{name} {mode}"]
            print(f"{name + ' ' + mode:<24}{s:>10.4f}{nbytes / s / 1e6:>10.1f}{n:>10}{s / ours:>11.2f}x")
    for mode in ("single", "batch"):
        counts = {n for k, (_, n) in results.items() if k.endswith(mode)}
        if len(counts) != 1:
            print(f"WARNING: {mode} token counts differ: {counts}")


if __name__ == "__main__":
    main()
