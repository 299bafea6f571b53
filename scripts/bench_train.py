#!/usr/bin/env python3
"""Training throughput and memory: lmkit vs PyTorch, same machine, same run.

Both train GPT-2 (6 layers, d 384, 6 heads, vocab 50257, context 256) with
AdamW on batches of 4 x 256 tokens of the same text (the GPT-2 tokenization
of assets/books/corpus.txt, from lmkit's shard), --threads (default 2) each:
  - PyTorch: GPT2LMHeadModel (default SDPA attention, dropout 0) + torch.optim.AdamW,
    torch.set_num_threads(2); and the same with forward and loss under
    torch.autocast("cpu", dtype=torch.bfloat16) (bf16 autocast: f32 weights and
    optimizer, bf16 matmuls), in a second process.
  - lmkit: `lmkit pretrain` with the same shape, RAYON_NUM_THREADS=2, in f32 and
    with --dtype bf16 (f32 master weights and optimizer, bf16 matmul operands).
Each runs in its own process; peak RSS is that process' ru_maxrss (wait4).
Tokens/s is the median over the timed steps (after warmup steps).
MFU = model FLOP/s (6·N + 12·L·C·T per token, N = matmul parameters incl. the
tied LM head) over the measured f32 matmul peak (torch.mm 2048³, same threads).

Usage: scripts/bench_train.py [--steps 8] [--warmup 2] [--lmkit target/release/lmkit] [--json FILE]
--json FILE writes the figures in scripts/bench_common.py's format (work: the model
FLOPs per token above) for scripts/bench.sh.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import figure, peer, write_json  # noqa: E402
L, C, NH, V, T, B = 6, 384, 6, 50257, 256, 4


def run_measured(cmd, env=None):
    """Runs cmd to completion; returns (stdout, peak RSS of that process in MiB)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            sys.stderr.write(err.read()[-4000:])
            raise SystemExit(f"{' '.join(cmd[:3])} failed ({p.returncode})")
        return out.read(), ru.ru_maxrss / 1024


def torch_child(args):
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.shard, "rb") as f:
        f.read(32)
        toks = np.frombuffer(f.read(), dtype=np.uint16).astype(np.int64)
    cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=NH,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).train()  # default attention (SDPA): the fastest HF path
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n and "wpe" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "wte" not in n and "wpe" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(0)
    times = []
    for step in range(args.warmup + args.steps):
        starts = rng.integers(0, len(toks) - T - 1, size=B)
        x = torch.tensor(np.stack([toks[s:s + T] for s in starts]))
        y = torch.tensor(np.stack([toks[s + 1:s + T + 1] for s in starts]))
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            logits = model(x).logits
            loss = torch.nn.functional.cross_entropy(logits.view(-1, V).float(), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(dt)
    a = 2048
    m1, m2 = torch.randn(a, a), torch.randn(a, a)
    torch.mm(m1, m2)
    best = min((lambda t0: (torch.mm(m1, m2), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(5))
    print(json.dumps({"tokens_per_s": B * T / statistics.median(times),
                      "matmul_gflops": 2 * a ** 3 / best / 1e9, "loss": loss.item()}))


def model_flops_per_token():
    n_matmul = L * 12 * C * C + V * C  # blocks (attn 4C², mlp 8C²) + tied head
    return 6 * n_matmul + 12 * L * C * T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lmkit", default=os.path.join(ROOT, "target/release/lmkit"))
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", help=argparse.SUPPRESS)
    ap.add_argument("--autocast", default="f32", help=argparse.SUPPRESS)
    ap.add_argument("--json", metavar="FILE", help="write the figures here (bench_common format)")
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args)

    corpus = os.path.join(ROOT, "assets/books/corpus.txt")
    tok = os.path.join(ROOT, "assets/gpt2")
    if not (os.path.exists(corpus) and os.path.exists(tok)):
        raise SystemExit("run scripts/fetch-assets.sh first (needs assets/books/corpus.txt and assets/gpt2)")
    work = tempfile.mkdtemp(prefix="lmkit-bench-train-")
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    base = [args.lmkit, "pretrain", "--tokenizer", tok, "--data", corpus,
            "--n-layer", str(L), "--n-embd", str(C), "--n-head", str(NH), "--n-positions", str(T),
            "--seq-len", str(T), "--batch-size", str(B), "--lr", "6e-4", "--warmup-steps", "0",
            "--eval-every", "0", "--eval-batches", "1", "--save-every", "0"]
    # Tokenize once (not timed), then the timed run reuses the shards.
    prep = os.path.join(work, "prep")
    run_measured(base + ["--output", prep, "--max-steps", "1"], env)
    lms = {}
    for dt in ("f32", "bf16"):
        run = os.path.join(work, f"run-{dt}")
        shutil.copytree(os.path.join(prep, "data"), os.path.join(run, "data"))
        _, rss = run_measured(base + ["--output", run, "--dtype", dt,
                                      "--max-steps", str(args.warmup + args.steps)], env)
        rows = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
        tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] > args.warmup]
        lms[dt] = {"tokens_per_s": statistics.median(tps), "rss_mib": rss}
    lm, lm16 = lms["f32"], lms["bf16"]
    peers = {}
    for ac in ("f32", "bf16"):
        out, rss = run_measured([sys.executable, __file__, "--torch-child", "--shard",
                                 os.path.join(work, "prep/data/train.bin"), "--steps", str(args.steps),
                                 "--warmup", str(args.warmup), "--threads", str(args.threads),
                                 "--autocast", ac])
        peers[ac] = json.loads(out.strip().splitlines()[-1])
        peers[ac]["rss_mib"] = rss
    pt, pt16 = peers["f32"], peers["bf16"]
    shutil.rmtree(work, ignore_errors=True)

    fpt = model_flops_per_token()
    peak = pt["matmul_gflops"] * 1e9
    print(f"GPT-2 L{L} d{C} h{NH} V{V}, batch {B}x{T}, AdamW, {args.threads} threads, {args.steps} timed steps")
    print(f"{'':10}{'tokens/s':>12}{'peak RSS MiB':>14}{'MFU':>8}")
    for name, r in (("lmkit", lm), ("lmkit bf16", lm16), ("pytorch", pt), ("pytorch bf16", pt16)):
        print(f"{name:10}{r['tokens_per_s']:12.0f}{r['rss_mib']:14.0f}{r['tokens_per_s'] * fpt / peak:8.1%}")
    print(f"ratios lmkit/pytorch: tokens/s {lm['tokens_per_s'] / pt['tokens_per_s']:.2f}x, "
          f"peak RSS {lm['rss_mib'] / pt['rss_mib']:.2f}x; "
          f"tokens/s over PyTorch bf16 autocast {lm['tokens_per_s'] / pt16['tokens_per_s']:.2f}x")
    print(f"lmkit bf16: {lm16['tokens_per_s'] / lm['tokens_per_s']:.2f}x lmkit f32, "
          f"{lm16['tokens_per_s'] / pt16['tokens_per_s']:.2f}x PyTorch bf16 autocast")
    print(f"matmul peak (torch.mm 2048^3 f32, {args.threads} threads): {pt['matmul_gflops']:.0f} GFLOP/s; "
          f"model FLOPs/token {fpt / 1e6:.1f} M")
    if args.json:
        what = f"GPT-2 pretraining L{L} d{C} V{V}, batch {B}x{T}, AdamW"
        write_json(args.json, [
            figure(f"{what}, f32", "tokens/s", lm["tokens_per_s"],
                   {"pytorch f32": pt["tokens_per_s"],
                    "pytorch bf16 autocast": peer(pt16["tokens_per_s"], dtype="bf16")},
                   threads=args.threads, flops_per_item=fpt, note=f"{args.steps} timed steps, median"),
            figure(f"{what}, bf16", "tokens/s", lm16["tokens_per_s"],
                   {"pytorch bf16 autocast": pt16["tokens_per_s"],
                    "lmkit f32": peer(lm["tokens_per_s"], dtype="f32")},
                   dtype="bf16", threads=args.threads, flops_per_item=fpt,
                   note=f"{args.steps} timed steps, median; --dtype bf16"),
            figure(f"{what}, peak RSS", "MiB", lm["rss_mib"],
                   {"pytorch f32": pt["rss_mib"], "pytorch bf16 autocast": pt16["rss_mib"]},
                   better="lower", threads=args.threads),
        ], torch_matmul_gflops=pt["matmul_gflops"])


if __name__ == "__main__":
    main()
