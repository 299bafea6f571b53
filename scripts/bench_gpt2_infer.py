#!/usr/bin/env python3
"""Peer benchmark: `lmkit generate` against HF transformers (PyTorch, CPU) on
GPT-2 124M, measured in the same run, interleaved, medians over repetitions.

Measures
- batch-1 greedy decode tokens/s: a 32-token prompt, 128 new tokens
  (decode rate = the 127 tokens after the first, over their time);
- prefill of a 512-token prompt (time to the first token's logits);
- peak RSS of each `lmkit` run (wait4 rusage) against the weight bytes;
- the memory-read peak of this machine (a parallel torch sum over 1 GiB),
  and the fraction of it the f32 decode reaches (bytes streamed per token =
  f32 weight bytes + the KV cache read at the average context length).

Ratios are lmkit (each --dtype) over HF in float32 (`model.generate`,
`torch.set_num_threads(THREADS)`, same prompt ids). lmkit runs with
RAYON_NUM_THREADS=THREADS.

Usage: python3 scripts/bench_gpt2_infer.py [--model DIR] [--reps 5] [--threads 2]
The model defaults to assets/big/gpt2-124m-random (scripts/make_fixtures.py
--big assets/big); when absent, a random-init 124M is written there with
transformers. The lmkit binary is built with `cargo build --release -p lmkit-cli`
unless --lmkit points at one.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def ensure_model(dir_: Path):
    if (dir_ / "model.safetensors").is_file() and (dir_ / "config.json").is_file():
        return
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    log(f"{dir_} absent: writing a random-init GPT-2 124M there")
    torch.manual_seed(0)
    cfg = GPT2Config(initializer_range=0.2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    GPT2LMHeadModel(cfg).save_pretrained(dir_)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(ROOT / "assets" / "gpt2" / f, dir_ / f)


def ensure_lmkit(path):
    if path:
        return Path(path)
    log("building lmkit (cargo build --release -p lmkit-cli)")
    subprocess.run(["cargo", "build", "--release", "-p", "lmkit-cli"], cwd=ROOT, check=True)
    return ROOT / "target" / "release" / "lmkit"


def prompt_text(tok, ids, n):
    """Text whose encoding is exactly the first n ids (cut shortened if needed)."""
    for cut in range(n, n + 8):
        text = tok.decode(ids[:cut])
        enc = tok(text)["input_ids"]
        if len(enc) == n:
            return text, enc
    raise SystemExit(f"could not find a {n}-token prompt")


def run_lmkit(exe, model, prompt, new_tokens, dtype, threads):
    cmd = [str(exe), "generate", "--model", str(model), "--prompt", prompt, "--max-new-tokens",
           str(new_tokens), "--greedy", "--ignore-eos", "--dtype", dtype, "--json"]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.communicate()
    # communicate() reaps the child; its rusage is in RUSAGE_CHILDREN only as a
    # max over all children, so measure peak RSS with a separate wait4 run below.
    if p.returncode != 0:
        raise SystemExit(f"lmkit failed ({p.returncode}): {err.decode()}")
    return json.loads(out.decode().strip().splitlines()[-1])


def peak_rss_kib(exe, model, prompt, new_tokens, dtype, threads):
    cmd = [str(exe), "generate", "--model", str(model), "--prompt", prompt, "--max-new-tokens",
           str(new_tokens), "--greedy", "--ignore-eos", "--dtype", dtype, "--json"]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    pid = os.posix_spawn(cmd[0], cmd, env, file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
    _, status, ru = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"lmkit failed: {cmd}")
    return ru.ru_maxrss  # KiB on Linux


class StepTimes:
    """A logits processor that timestamps every decoding step."""

    def __init__(self):
        self.t = []

    def __call__(self, input_ids, scores):
        self.t.append(time.perf_counter())
        return scores


def hf_decode(model, ids, new_tokens):
    import torch
    from transformers import LogitsProcessorList

    st = StepTimes()
    with torch.no_grad():
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                       pad_token_id=50256, logits_processor=LogitsProcessorList([st]))
    # st.t[0]: after the prompt's forward; st.t[-1]: after the last token's forward.
    return (new_tokens - 1) / (st.t[-1] - st.t[0]), (st.t[0] - t0) * 1e3


def hf_prefill_ms(model, ids):
    import torch

    with torch.no_grad():
        t0 = time.perf_counter()
        model(ids, use_cache=True, logits_to_keep=1)
        return (time.perf_counter() - t0) * 1e3


def read_peak_gbs(threads):
    import torch

    x = torch.ones(1 << 28)  # 1 GiB
    x.sum()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        x.sum()
        best.append(x.numel() * 4 / (time.perf_counter() - t0) / 1e9)
    del x
    return statistics.median(best)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "assets/big/gpt2-124m-random"))
    ap.add_argument("--lmkit", default=None, help="lmkit binary (default: build target/release/lmkit)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--prefill-tokens", type=int, default=512)
    ap.add_argument("--dtypes", default="f32,bf16,int8")
    ap.add_argument("--json-out", default=None, help="also write every measurement here")
    args = ap.parse_args()

    import torch
    from transformers import GPT2LMHeadModel, GPT2TokenizerFast

    torch.set_num_threads(args.threads)
    model_dir = Path(args.model)
    ensure_model(model_dir)
    exe = ensure_lmkit(args.lmkit)
    dtypes = args.dtypes.split(",")

    tok = GPT2TokenizerFast.from_pretrained(model_dir)
    corpus = (ROOT / "assets/books/corpus.txt").read_text(encoding="utf-8")[:200_000]
    all_ids = tok(corpus)["input_ids"]
    p_short, ids_short = prompt_text(tok, all_ids, args.prompt_tokens)
    p_long, ids_long = prompt_text(tok, all_ids, args.prefill_tokens)
    ids_short = torch.tensor([ids_short])
    ids_long = torch.tensor([ids_long])

    model = GPT2LMHeadModel.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    weight_file_bytes = (model_dir / "model.safetensors").stat().st_size
    hf_decode(model, ids_short, 8)  # warm-up
    hf_prefill_ms(model, ids_long)

    m = {"hf_decode_tps": [], "hf_prefill_ms": [], "peak_gbs": []}
    for d in dtypes:
        m[f"lmkit_{d}_decode_tps"] = []
        m[f"lmkit_{d}_prefill_ms"] = []
    weight_bytes = {}
    for rep in range(args.reps):
        log(f"repetition {rep + 1}/{args.reps}")
        m["peak_gbs"].append(read_peak_gbs(args.threads))
        tps, _ = hf_decode(model, ids_short, args.new_tokens)
        m["hf_decode_tps"].append(tps)
        for d in dtypes:
            r = run_lmkit(exe, model_dir, p_short, args.new_tokens, d, args.threads)
            assert r["prompt_tokens"] == args.prompt_tokens, r
            assert len(r["ids"]) == args.new_tokens, r
            m[f"lmkit_{d}_decode_tps"].append(r["decode_tokens_per_s"])
            weight_bytes[d] = r["weight_bytes"]
        m["hf_prefill_ms"].append(hf_prefill_ms(model, ids_long))
        for d in dtypes:
            r = run_lmkit(exe, model_dir, p_long, 1, d, args.threads)
            assert r["prompt_tokens"] == args.prefill_tokens, r
            m[f"lmkit_{d}_prefill_ms"].append(r["prefill_ms"])
    rss = {d: peak_rss_kib(exe, model_dir, p_short, args.new_tokens, d, args.threads) * 1024 for d in dtypes}

    med = {k: statistics.median(v) for k, v in m.items()}
    hf_tps, hf_pre = med["hf_decode_tps"], med["hf_prefill_ms"]
    print(f"GPT-2 124M ({model_dir.name}), {args.threads} threads, medians of {args.reps} interleaved runs")
    print(f"HF transformers {__import__('transformers').__version__} / torch {torch.__version__} float32: "
          f"decode {hf_tps:.1f} tok/s, prefill {args.prefill_tokens} tokens {hf_pre:.0f} ms")
    print(f"{'dtype':<6} {'decode tok/s':>12} {'vs HF':>7} {'prefill ms':>11} {'vs HF':>7} "
          f"{'peak RSS MB':>12} {'RSS/weights':>12} {'RSS/f32 file':>13}")
    for d in dtypes:
        tps, pre = med[f"lmkit_{d}_decode_tps"], med[f"lmkit_{d}_prefill_ms"]
        print(f"{d:<6} {tps:12.1f} {tps / hf_tps:6.2f}x {pre:11.0f} {hf_pre / pre:6.2f}x "
              f"{rss[d] / 1e6:12.0f} {rss[d] / weight_bytes[d]:11.2f}x {rss[d] / weight_file_bytes:12.2f}x")
    if "f32" in dtypes:
        # Bytes streamed per f32 decode token: the weights plus the keys and
        # values read at the average context length of the run.
        cfg = model.config
        avg_ctx = args.prompt_tokens + args.new_tokens / 2
        kv = 2 * cfg.n_layer * avg_ctx * cfg.n_embd * 4
        per_token = weight_bytes["f32"] + kv
        gbs = med["lmkit_f32_decode_tps"] * per_token / 1e9
        print(f"f32 decode streams {per_token / 1e6:.0f} MB/token = {gbs:.1f} GB/s, "
              f"{100 * gbs / med['peak_gbs']:.0f}% of the measured read peak ({med['peak_gbs']:.1f} GB/s, torch sum over 1 GiB)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"runs": m, "medians": med, "rss_bytes": rss,
                                                   "weight_bytes": weight_bytes,
                                                   "weight_file_bytes": weight_file_bytes}, indent=1))


if __name__ == "__main__":
    main()
