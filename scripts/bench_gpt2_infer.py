#!/usr/bin/env python3
"""Peer benchmark: `lmkit generate` against HF transformers (PyTorch, CPU) on
GPT-2 124M, measured in the same run, interleaved, medians over repetitions.

Measures
- batch-1 greedy decode tokens/s: a 32-token prompt, 128 new tokens
  (decode rate = the 127 tokens after the first, over their time);
- prefill of a 512-token prompt (time to the first token's logits). HF's is
  timed in process after a first (warm-up) call, and llama-bench's likewise;
  with --lmkit-python (a Python with the lmkit wheel), lmkit's is too
  (`GPT2.generate_ids(ids, max_new_tokens=1)`: the prefill, the last row's
  logits, a greedy pick), and that is its figure. Without it, the figure is
  `lmkit generate`'s first prefill in a fresh process (its page faults and
  cold caches included, which the peers' figures are not); both are printed
  when both are measured;
- peak RSS of the `lmkit` decode runs (/usr/bin/time, the max over runs)
  against the weight bytes (in the --dtype format, and the f32 file);
- the memory-read peak of this machine (a parallel torch sum over 1 GiB),
  and the fraction of it the f32 decode reaches (bytes streamed per token =
  f32 weight bytes + the KV cache read at the average context length).

Ratios are lmkit (each --dtype) over HF in float32 (`model.generate`,
`torch.set_num_threads(THREADS)`, same prompt ids), and over HF with the whole
model in bfloat16 (--hf-dtypes). lmkit runs with RAYON_NUM_THREADS=THREADS.
With --llama-cpp, each lmkit dtype is also set against llama.cpp's own
`llama-bench` on a GGUF of the same checkpoint in the matching type (f32, bf16,
and q8_0 for int8: 8-bit weights, one scale per 32), `-t THREADS`: decode is
its `tg` test (NEW_TOKENS tokens after a context of PROMPT_TOKENS, `-d`),
prefill its `pp` test (PREFILL_TOKENS tokens); llama.cpp's defaults otherwise
(f16 KV cache). scripts/llama_cpp_peer.py builds it and writes the GGUFs.

Usage: python3 scripts/bench_gpt2_infer.py [--model DIR] [--reps 5] [--threads 2] [--json FILE]
--json FILE writes the figures in scripts/bench_common.py's format (decode:
bytes streamed per token; prefill: FLOPs per prompt token) for scripts/bench.sh.
The model defaults to assets/big/gpt2-124m-random (scripts/make_fixtures.py
--big assets/big); when absent, a random-init 124M is written there with
transformers. The lmkit binary is built with `cargo build --release -p lmkit-cli`
unless --lmkit points at one.
"""

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_common import figure, gpt2_matmul_params, peer, write_json  # noqa: E402


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


# lmkit's prefill in process, as HF's is timed: the model loaded once, a
# first prefill, then REPS more; prints the first and the median of the rest.
LMKIT_IN_PROCESS = """
import json, statistics, sys, time
import lmkit
lmkit.keep_freed_memory()  # the CLI's malloc policy
model_dir, dtype, ids, reps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
model = lmkit.GPT2.from_pretrained(model_dir, dtype=dtype)
ms = []
for _ in range(reps + 1):
    t0 = time.perf_counter()
    model.generate_ids(ids, max_new_tokens=1, top_k=1, ignore_eos=True)
    ms.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"first_ms": ms[0], "warm_ms": statistics.median(ms[1:])}))
"""


def lmkit_prefill_in_process(python, model, ids, dtype, threads, reps=3):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = [python, "-c", LMKIT_IN_PROCESS, str(model), dtype, json.dumps(list(ids)), str(reps)]
    p = subprocess.run(cmd, capture_output=True, env=env, text=True)
    if p.returncode != 0:
        raise SystemExit(f"lmkit in process ({python}) failed ({p.returncode}): {p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def lmkit_cmd(exe, model, prompt, new_tokens, dtype):
    return [str(exe), "generate", "--model", str(model), "--prompt", prompt, "--max-new-tokens",
            str(new_tokens), "--greedy", "--ignore-eos", "--dtype", dtype, "--json"]


def run_lmkit(exe, model, prompt, new_tokens, dtype, threads):
    """Runs lmkit under /usr/bin/time; returns its JSON plus `peak_rss_bytes`."""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = ["/usr/bin/time", "-f", "LMKIT_MAXRSS_KB=%M"] + lmkit_cmd(exe, model, prompt, new_tokens, dtype)
    p = subprocess.run(cmd, capture_output=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"lmkit failed ({p.returncode}): {p.stderr.decode()}")
    r = json.loads(p.stdout.decode().strip().splitlines()[-1])
    rss = [l for l in p.stderr.decode().splitlines() if l.startswith("LMKIT_MAXRSS_KB=")]
    r["peak_rss_bytes"] = int(rss[-1].split("=")[1]) * 1024
    return r


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


# The llama.cpp weight type set against each lmkit dtype.
LLAMA_TYPE = {"f32": "f32", "bf16": "bf16", "int8": "q8_0"}


def llama_bench_tps(exe, model, threads, prompt=0, gen=0, depth=0):
    """Tokens/s of one llama-bench test (after its own warm-up run): `pp` with `prompt`
    tokens, or `tg` with `gen` tokens after a context of `depth`."""
    cmd = [str(exe), "-m", str(model), "-t", str(threads), "-p", str(prompt), "-n", str(gen),
           "-d", str(depth), "-r", "1", "-o", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"llama-bench failed ({p.returncode}): {p.stderr[-2000:]}")
    (test,) = json.loads(p.stdout)
    return test["avg_ts"]


def hf_prefill_ms(model, ids):
    import torch

    with torch.no_grad():
        t0 = time.perf_counter()
        model(ids, use_cache=True, logits_to_keep=1)
        return (time.perf_counter() - t0) * 1e3


def read_peak_gbs(threads, reduce=statistics.median):
    """GB/s of a torch sum over 1 GiB on the threads torch is set to; the median of 5
    (scripts/bench_probe.py asks for the best, as a limit)."""
    import torch

    x = torch.ones(1 << 28)  # 1 GiB
    x.sum()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        x.sum()
        best.append(x.numel() * 4 / (time.perf_counter() - t0) / 1e9)
    del x
    return reduce(best)


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
    ap.add_argument("--hf-dtypes", default="f32,bf16", help="HF peers: f32 and/or bf16 (whole model)")
    ap.add_argument("--llama-cpp", action="store_true",
                    help="also measure llama.cpp (llama-bench) on GGUFs of the model (scripts/llama_cpp_peer.py)")
    ap.add_argument("--lmkit-python", default=None,
                    help="a Python with the lmkit wheel: also time lmkit's prefill in process, as HF's")
    ap.add_argument("--json-out", default=None, help="also write every measurement here")
    ap.add_argument("--json", default=None, metavar="FILE", help="write the figures here (bench_common format)")
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
    hf_models = {}
    for d in args.hf_dtypes.split(","):
        hf_models[d] = model if d == "f32" else copy.deepcopy(model).to(torch.bfloat16)
        hf_decode(hf_models[d], ids_short, 8)  # warm-up
        hf_prefill_ms(hf_models[d], ids_long)

    llama = {}
    if args.llama_cpp:
        import llama_cpp_peer

        bench_exe = llama_cpp_peer.tools()["llama-bench"]
        for d in dtypes:
            llama[d] = (LLAMA_TYPE[d], llama_cpp_peer.gguf(model_dir, LLAMA_TYPE[d]))
    m = {"hf_decode_tps": [], "hf_prefill_ms": [], "peak_gbs": []}
    for d in hf_models:
        if d != "f32":
            m[f"hf_{d}_decode_tps"] = []
            m[f"hf_{d}_prefill_ms"] = []
    for d in dtypes:
        m[f"lmkit_{d}_decode_tps"] = []
        m[f"lmkit_{d}_prefill_ms"] = []
        m[f"lmkit_{d}_rss"] = []
        if args.lmkit_python:
            m[f"lmkit_{d}_prefill_warm_ms"] = []
        if d in llama:
            m[f"llama_{d}_decode_tps"] = []
            m[f"llama_{d}_prefill_tps"] = []
    weight_bytes = {}
    for rep in range(args.reps):
        log(f"repetition {rep + 1}/{args.reps}")
        m["peak_gbs"].append(read_peak_gbs(args.threads))
        tps, _ = hf_decode(model, ids_short, args.new_tokens)
        m["hf_decode_tps"].append(tps)
        for d, hm in hf_models.items():
            if d != "f32":
                m[f"hf_{d}_decode_tps"].append(hf_decode(hm, ids_short, args.new_tokens)[0])
        for d in dtypes:
            r = run_lmkit(exe, model_dir, p_short, args.new_tokens, d, args.threads)
            assert r["prompt_tokens"] == args.prompt_tokens, r
            assert len(r["ids"]) == args.new_tokens, r
            m[f"lmkit_{d}_decode_tps"].append(r["decode_tokens_per_s"])
            m[f"lmkit_{d}_rss"].append(r["peak_rss_bytes"])
            weight_bytes[d] = r["weight_bytes"]
        m["hf_prefill_ms"].append(hf_prefill_ms(model, ids_long))
        for d, hm in hf_models.items():
            if d != "f32":
                m[f"hf_{d}_prefill_ms"].append(hf_prefill_ms(hm, ids_long))
        for d in dtypes:
            r = run_lmkit(exe, model_dir, p_long, 1, d, args.threads)
            assert r["prompt_tokens"] == args.prefill_tokens, r
            m[f"lmkit_{d}_prefill_ms"].append(r["prefill_ms"])
            if args.lmkit_python:
                w = lmkit_prefill_in_process(args.lmkit_python, model_dir, ids_long[0].tolist(), d, args.threads)
                m[f"lmkit_{d}_prefill_warm_ms"].append(w["warm_ms"])
        for d, (_, path) in llama.items():
            m[f"llama_{d}_decode_tps"].append(
                llama_bench_tps(bench_exe, path, args.threads, gen=args.new_tokens, depth=args.prompt_tokens))
            m[f"llama_{d}_prefill_tps"].append(
                llama_bench_tps(bench_exe, path, args.threads, prompt=args.prefill_tokens))

    med = {k: statistics.median(v) for k, v in m.items()}
    rss = {d: max(m[f"lmkit_{d}_rss"]) for d in dtypes}
    hf_tps, hf_pre = med["hf_decode_tps"], med["hf_prefill_ms"]
    load = os.getloadavg()[0]
    print(f"GPT-2 124M ({model_dir.name}), {args.threads} threads, medians of {args.reps} interleaved runs "
          f"(load average {load:.1f} on {os.cpu_count()} CPUs)")
    print(f"HF transformers {__import__('transformers').__version__} / torch {torch.__version__} float32: "
          f"decode {hf_tps:.1f} tok/s, prefill {args.prefill_tokens} tokens {hf_pre:.0f} ms")
    print(f"{'dtype':<6} {'decode tok/s':>12} {'vs HF':>7} {'prefill ms':>11} {'vs HF':>7} "
          f"{'peak RSS MB':>12} {'RSS/weights':>12} {'RSS/f32 file':>13}")
    for d in dtypes:
        tps, pre = med[f"lmkit_{d}_decode_tps"], lmkit_prefill_ms(med, d)
        print(f"{d:<6} {tps:12.1f} {tps / hf_tps:6.2f}x {pre:11.0f} {hf_pre / pre:6.2f}x "
              f"{rss[d] / 1e6:12.0f} {rss[d] / weight_bytes[d]:11.2f}x {rss[d] / weight_file_bytes:12.2f}x")
    print("lmkit prefill " + ("in process, after a first one (as HF's); " if args.lmkit_python else "")
          + "first of a fresh `lmkit generate`: "
          + ", ".join(f"{d} {med[f'lmkit_{d}_prefill_ms']:.0f} ms" for d in dtypes))
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
    for d in hf_models:
        if d != "f32":
            print(f"HF transformers bfloat16: decode {med[f'hf_{d}_decode_tps']:.1f} tok/s, "
                  f"prefill {med[f'hf_{d}_prefill_ms']:.0f} ms")
    for d, (t, path) in llama.items():
        tps, pre = med[f"lmkit_{d}_decode_tps"], args.prefill_tokens / lmkit_prefill_ms(med, d) * 1e3
        ltps, lpre = med[f"llama_{d}_decode_tps"], med[f"llama_{d}_prefill_tps"]
        print(f"llama.cpp {t}: decode {ltps:.1f} tok/s (lmkit {d} {tps / ltps:.2f}x), prefill {lpre:.0f} "
              f"tok/s (lmkit {d} {pre / lpre:.2f}x)")
    if args.json:
        sizes = {d: path.stat().st_size for d, (_, path) in llama.items()}
        write_json(args.json, figures(args, model.config, med, weight_bytes, rss, weight_file_bytes, list(hf_models),
                                      {d: t for d, (t, _) in llama.items()}, sizes),
                   medians=med, weight_bytes=weight_bytes, rss_bytes=rss)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"runs": m, "medians": med, "rss_bytes": rss,
                                                   "weight_bytes": weight_bytes,
                                                   "weight_file_bytes": weight_file_bytes}, indent=1))


def figures(args, cfg, med, weight_bytes, rss, weight_file_bytes, hf_dtypes, llama_types, gguf_bytes):
    """bench_common figures: decode tokens/s with the bytes streamed per token (weights in
    their dtype + the f32 KV cache read at the run's average context), prefill tokens/s with
    the FLOPs per prompt token (matmuls + causal attention; the LM head runs for one token).
    llama.cpp (where measured) is a peer of the lmkit dtype it matches; its bytes per token
    are its GGUF file's plus its f16 KV cache."""
    L, C = cfg.n_layer, cfg.n_embd
    kv = 2 * L * (args.prompt_tokens + args.new_tokens / 2) * C * 4
    hf_bytes = {"f32": weight_file_bytes, "bf16": weight_file_bytes / 2}
    prefill_flops = 2 * (gpt2_matmul_params(L, C, 0)) + 2 * L * C * args.prefill_tokens
    hf_key = {"f32": ("hf_decode_tps", "hf_prefill_ms")}
    hf_key.update({d: (f"hf_{d}_decode_tps", f"hf_{d}_prefill_ms") for d in hf_dtypes if d != "f32"})
    def alongside(bytes_per_s):
        # The table's limit is the best probe of the whole run; on a shared machine the
        # bandwidth swings between probes, so also the share of what this script's own
        # probes, interleaved with the decode runs, read (median).
        return (f"{100 * bytes_per_s / 1e9 / med['peak_gbs']:.0f}% of the read bandwidth probed "
                f"alongside ({med['peak_gbs']:.1f} GB/s)")

    out = []
    for d in args.dtypes.split(","):
        decode = {f"HF transformers {h}": peer(med[k[0]], dtype=h, bytes_per_item=hf_bytes[h] + kv)
                  for h, k in hf_key.items()}
        if d in llama_types:
            decode[f"llama.cpp {llama_types[d]}"] = peer(med[f"llama_{d}_decode_tps"], dtype=llama_types[d],
                                                          bytes_per_item=gguf_bytes[d] + kv / 2)
        out.append(figure(f"GPT-2 124M batch-1 decode {d}", "tokens/s", med[f"lmkit_{d}_decode_tps"], decode,
                          dtype=d, threads=args.threads, bytes_per_item=weight_bytes[d] + kv,
                          note=f"{args.prompt_tokens}-token prompt, {args.new_tokens} new; "
                               f"lmkit peak RSS {rss[d] / 1e6:.0f} MB; "
                               f"{alongside(med[f'lmkit_{d}_decode_tps'] * (weight_bytes[d] + kv))}"))
        prefill = {f"HF transformers {h}": peer(args.prefill_tokens / med[k[1]] * 1e3, dtype=h)
                   for h, k in hf_key.items()}
        if d in llama_types:
            prefill[f"llama.cpp {llama_types[d]}"] = peer(med[f"llama_{d}_prefill_tps"], dtype=llama_types[d])
        cold = med[f"lmkit_{d}_prefill_ms"]
        how = (f"in process after a first prefill, as the peers' (a fresh `lmkit generate`'s first: "
               f"{cold:.0f} ms)" if f"lmkit_{d}_prefill_warm_ms" in med
               else "the first prefill of a fresh `lmkit generate` (the peers': in process, warm)")
        out.append(figure(f"GPT-2 124M prefill {args.prefill_tokens} tokens {d}", "tokens/s",
                          args.prefill_tokens / lmkit_prefill_ms(med, d) * 1e3, prefill, dtype=d,
                          threads=args.threads, flops_per_item=prefill_flops, note=f"lmkit: {how}"))
    return out


def lmkit_prefill_ms(med, d):
    """lmkit's prefill figure: in process where measured (as the peers'), else a fresh process's."""
    return med.get(f"lmkit_{d}_prefill_warm_ms", med[f"lmkit_{d}_prefill_ms"])


if __name__ == "__main__":
    main()
