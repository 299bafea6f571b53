#!/usr/bin/env python3
"""The 1.5B GPT-2 (gpt2-xl: 48 layers, 1600 wide, 25 heads) on this machine: peak RSS and
tokens/s of the release `lmkit generate` and `lmkit perplexity` in f32, bf16 and int8.
Run by hand (not by CI): it needs ~6.3 GB of disk and up to ~8 GB of memory.

The checkpoint is random-initialised as HF's GPT2LMHeadModel._init_weights does (weights
N(0, 0.02), c_proj weights N(0, 0.02/sqrt(2 n_layer)), biases 0, LayerNorm 1/0), drawn tensor
by tensor and streamed into model.safetensors (F32, HF keys, `transformer.` prefix, no
lm_head: it is tied), so writing it never holds more than one tensor. The keys and shapes are
checked against transformers' own GPT2LMHeadModel built on the meta device (no memory).
It is written once into --out (default assets/big-xl/gpt2-xl-random) with GPT-2's tokenizer
files from assets/gpt2.

Each measurement is one process at a time under /usr/bin/time -v (maximum resident set size):
- generate: a 32-token-ish prompt, --greedy, --max-new-tokens N (default 32); its --json
  gives prefill_ms and decode_tokens_per_s.
- perplexity: the first --ppl-chars characters of assets/books/corpus.txt, HF's sliding window
  (context 1024, stride 512); tokens/s = scored tokens / wall seconds of the whole process
  (load included, so it is a lower bound on the scoring rate).

Usage: assets/.venv-fixtures/bin/python scripts/measure_gpt2_xl.py [--out DIR]
       [--dtypes f32 bf16 int8] [--threads N] [--lmkit target/release/lmkit]
"""

import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
XL = {"n_layer": 48, "n_embd": 1600, "n_head": 25, "n_positions": 1024, "vocab_size": 50257}
PROMPT = ("The history of the city begins with a small settlement on the river, where "
          "fishermen and traders met every spring to exchange")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def xl_shapes():
    """(key, shape, init) in HF's order; init is 'normal', 'proj', 'zeros' or 'ones'."""
    c, v, p, n = XL["n_embd"], XL["vocab_size"], XL["n_positions"], XL["n_layer"]
    out = [("transformer.wte.weight", [v, c], "normal"), ("transformer.wpe.weight", [p, c], "normal")]
    for i in range(n):
        h = f"transformer.h.{i}."
        out += [
            (h + "ln_1.weight", [c], "ones"), (h + "ln_1.bias", [c], "zeros"),
            (h + "attn.c_attn.weight", [c, 3 * c], "normal"), (h + "attn.c_attn.bias", [3 * c], "zeros"),
            (h + "attn.c_proj.weight", [c, c], "proj"), (h + "attn.c_proj.bias", [c], "zeros"),
            (h + "ln_2.weight", [c], "ones"), (h + "ln_2.bias", [c], "zeros"),
            (h + "mlp.c_fc.weight", [c, 4 * c], "normal"), (h + "mlp.c_fc.bias", [4 * c], "zeros"),
            (h + "mlp.c_proj.weight", [4 * c, c], "proj"), (h + "mlp.c_proj.bias", [c], "zeros"),
        ]
    out += [("transformer.ln_f.weight", [c], "ones"), ("transformer.ln_f.bias", [c], "zeros")]
    return out


def write_checkpoint(out):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=XL["n_layer"], n_embd=XL["n_embd"], n_head=XL["n_head"],
                     n_positions=XL["n_positions"], vocab_size=XL["vocab_size"])
    cfg.architectures = ["GPT2LMHeadModel"]
    shapes = xl_shapes()
    with torch.device("meta"):
        meta = GPT2LMHeadModel(cfg)
    want = {k: list(t.shape) for k, t in meta.state_dict().items() if k != "lm_head.weight"}
    assert want == {k: s for k, s, _ in shapes}, "keys/shapes differ from transformers' GPT-2"
    n_params = meta.num_parameters()
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    cfg.to_json_file(tmp / "config.json")
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for k, s, _ in shapes:
        nbytes = 4 * math.prod(s)
        header[k] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + nbytes]}
        off += nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    g = torch.Generator().manual_seed(1500)
    proj_std = 0.02 / math.sqrt(2 * XL["n_layer"])
    t0 = time.time()
    with open(tmp / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for k, s, init in shapes:
            if init == "ones":
                t = torch.ones(s)
            elif init == "zeros":
                t = torch.zeros(s)
            else:
                t = torch.empty(s).normal_(0.0, 0.02 if init == "normal" else proj_std, generator=g)
            f.write(t.numpy().tobytes())
    for name in ["vocab.json", "merges.txt"]:
        shutil.copy(ROOT / "assets" / "gpt2" / name, tmp / name)
    tmp.rename(out)
    log(f"wrote {out} ({n_params:,} parameters, {off / 1e9:.2f} GB) in {time.time() - t0:.0f} s")


def timed(cmd, env):
    """Runs cmd under /usr/bin/time -v: (stdout, peak RSS in GB, wall s)."""
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env)
    wall = time.time() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    return r.stdout, kb * 1024 / 1e9, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "assets" / "big-xl" / "gpt2-xl-random")
    ap.add_argument("--dtypes", nargs="+", default=["f32", "bf16", "int8"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lmkit", type=Path, default=ROOT / "target" / "release" / "lmkit")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--ppl-chars", type=int, default=2000)
    args = ap.parse_args()
    if not (args.out / "model.safetensors").exists():
        write_checkpoint(args.out)
    if not args.lmkit.exists():
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "lmkit-cli"], cwd=ROOT, check=True)
    text = (ROOT / "assets" / "books" / "corpus.txt").read_text(encoding="utf-8")[: args.ppl_chars]
    ppl_input = args.out / "ppl-input.txt"
    ppl_input.write_text(text, encoding="utf-8")
    env = {**os.environ, "RAYON_NUM_THREADS": str(args.threads)}
    rows = []
    for dtype in args.dtypes:
        out, rss, wall = timed([str(args.lmkit), "generate", "--model", str(args.out), "--prompt", PROMPT,
                                "--greedy", "--max-new-tokens", str(args.new_tokens), "--dtype", dtype,
                                "--json"], env)
        g = json.loads(out.strip().splitlines()[-1])
        rows.append({"command": "generate", "dtype": dtype, "peak_rss_gb": round(rss, 2),
                     "wall_s": round(wall, 1), "prompt_tokens": g.get("prompt_tokens"),
                     "prefill_ms": g["prefill_ms"], "new_tokens": g["new_tokens"],
                     "decode_tokens_per_s": g["decode_tokens_per_s"],
                     "weight_bytes": g["weight_bytes"]})
        log(json.dumps(rows[-1]))
        out, rss, wall = timed([str(args.lmkit), "perplexity", "--model", str(args.out), "--input",
                                str(ppl_input), "--dtype", dtype, "--json"], env)
        p = json.loads(out.strip().splitlines()[-1])
        rows.append({"command": "perplexity", "dtype": dtype, "peak_rss_gb": round(rss, 2),
                     "wall_s": round(wall, 1), "tokens": p["tokens"], "windows": p["windows"],
                     "perplexity": p["perplexity"], "tokens_per_s_incl_load": round(p["tokens"] / wall, 1)})
        log(json.dumps(rows[-1]))
    print(json.dumps({"model": str(args.out), "threads": args.threads, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
