#!/usr/bin/env python3
"""The Python package against the packages Python users use, from Python, in
one process, interleaved, best of --reps:

- `encode_batch` MB/s on the Rust books' paragraphs (GPT-2 BPE): lmkit's
  tiktoken_compat vs tiktoken (ids), lmkit.Tokenizer vs HF tokenizers
  (Encodings with offsets);
- `embed` sentences/s, all-MiniLM-L6-v2 (assets/minilm): lmkit.Bert vs
  sentence-transformers' `encode` (batch 32, normalized);
- greedy `generate` tokens/s on a random-init GPT-2 (--layers x --dim, the
  GPT-2 vocabulary; written with transformers): lmkit.GPT2 vs transformers'
  `generate(do_sample=False)`, the same prompt ids and the same new ids.

Threads: torch and lmkit both get --threads (RAYON_NUM_THREADS is set before
lmkit is imported). Needs numpy, tiktoken, tokenizers, torch, transformers,
sentence-transformers and the lmkit wheel (a release build:
`maturin build --release -m crates/lmkit-py/Cargo.toml`) importable.

Usage: python3 scripts/bench_python.py [--reps 3] [--threads 2] [--mb 4]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def best(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mb", type=float, default=4.0, help="MB of text for encode_batch")
    ap.add_argument("--sentences", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--new-tokens", type=int, default=64)
    a = ap.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    os.environ["RAYON_RS_NUM_THREADS"] = str(a.threads)

    import numpy as np
    import tiktoken
    import torch
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, processors

    import lmkit
    from lmkit import tiktoken_compat

    torch.set_num_threads(a.threads)
    gpt2_dir = ROOT / "assets" / "gpt2"
    rows = []

    # -- tokenizers -----------------------------------------------------------
    text = (ROOT / "assets" / "books" / "corpus.txt").read_text(encoding="utf-8")
    paras = [p for p in text.split("\n\n") if p.strip()]
    batch, size = [], 0
    for p in paras:
        batch.append(p)
        size += len(p.encode())
        if size >= a.mb * 1e6:
            break
    mb = size / 1e6
    ranks = data_gym_to_mergeable_bpe_ranks(str(gpt2_dir / "merges.txt"), str(gpt2_dir / "vocab.json"))
    tt = tiktoken.Encoding(name="gpt2", explicit_n_vocab=50257, pat_str=r50k_pat_str,
                           mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
    ours_tt = tiktoken_compat.get_encoding("gpt2")
    hf = HFTokenizer(models.BPE.from_file(str(gpt2_dir / "vocab.json"), str(gpt2_dir / "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.post_processor = processors.ByteLevel(trim_offsets=False)
    ours = lmkit.Tokenizer.from_pretrained(str(gpt2_dir))
    t_ours_ids, ids_ours = best(lambda: ours_tt.encode_batch(batch, num_threads=a.threads), a.reps)
    t_tt, ids_tt = best(lambda: tt.encode_batch(batch, num_threads=a.threads), a.reps)
    assert ids_ours == ids_tt, "ids differ from tiktoken"
    t_ours_enc, encs = best(lambda: ours.encode_batch(batch), a.reps)
    t_hf, hf_encs = best(lambda: hf.encode_batch(batch), a.reps)
    assert [e.ids for e in encs[:200]] == [e.ids for e in hf_encs[:200]], "ids differ from HF"
    rows.append(("encode_batch ids (tiktoken API), MB/s", mb / t_ours_ids, "tiktoken", mb / t_tt))
    rows.append(("encode_batch Encodings (HF API), MB/s", mb / t_ours_enc, "HF tokenizers", mb / t_hf))

    # -- embeddings -----------------------------------------------------------
    from sentence_transformers import SentenceTransformer

    lines = [l.strip() for l in text.splitlines() if 20 < len(l.strip()) < 300][: a.sentences]
    minilm = str(ROOT / "assets" / "minilm")
    st = SentenceTransformer(minilm, device="cpu")
    bert = lmkit.Bert.from_pretrained(minilm)
    with torch.inference_mode():
        t_st, e_st = best(lambda: st.encode(lines, batch_size=32, convert_to_numpy=True), a.reps)
    t_lm, e_lm = best(lambda: bert.embed(lines, batch_size=32), a.reps)
    diff = float(np.abs(e_st - e_lm).max())
    rows.append((f"embed sentences/s (max |diff| {diff:.1e})", len(lines) / t_lm, "sentence-transformers", len(lines) / t_st))

    # -- generation -----------------------------------------------------------
    from transformers import GPT2Config, GPT2LMHeadModel

    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=a.layers, n_embd=a.dim, n_head=max(1, a.dim // 64), n_positions=1024,
                         initializer_range=0.2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(cfg).eval()
        model.save_pretrained(tmp)
        for f in ("vocab.json", "merges.txt"):
            (Path(tmp) / f).write_bytes((gpt2_dir / f).read_bytes())
        g = lmkit.GPT2.from_pretrained(tmp)
        prompt = tt.encode_ordinary("The Rust programming language helps you write faster, more reliable software.")
        n = a.new_tokens

        def hf_gen():
            with torch.inference_mode():
                out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                     pad_token_id=50256, eos_token_id=None)
            return out[0, len(prompt):].tolist()

        t_hfg, hf_ids = best(hf_gen, a.reps)
        t_lmg, lm_ids = best(lambda: g.generate_ids(prompt, n, temperature=0, ignore_eos=True), a.reps)
        same = "same ids" if hf_ids == lm_ids else "IDS DIFFER"
        rows.append((f"generate tokens/s ({a.layers}x{a.dim}, {n} new, greedy, {same})", n / t_lmg, "transformers", n / t_hfg))

    print(f"threads {a.threads}, best of {a.reps}; {len(batch)} paragraphs ({mb:.1f} MB), "
          f"{len(lines)} sentences; torch {torch.__version__}")
    print(f"{'what':58} {'lmkit':>10} {'peer':>22} {'peer value':>11} {'ratio':>7}")
    for what, ours_v, peer, peer_v in rows:
        print(f"{what:58} {ours_v:10.1f} {peer:>22} {peer_v:11.1f} {ours_v / peer_v:6.2f}x")


if __name__ == "__main__":
    sys.exit(main())
