#!/usr/bin/env python3
"""The Python package against the heavy peers themselves, where they are
installed (CI compares against their committed outputs in tests/fixtures):

- embeddings of 256 lines of the Rust books: lmkit.Bert.embed vs
  sentence-transformers' encode on all-MiniLM-L6-v2 (assets/minilm), max
  |difference| < 1e-5;
- greedy generation on a random-init GPT-2 with GPT-2's vocabulary (written
  by transformers): lmkit.GPT2.generate_ids / generate vs transformers'
  `generate(do_sample=False)` — the same ids and the same text — and the
  logits within 1e-4;
- ids of the books' paragraphs: lmkit.Tokenizer vs GPT2TokenizerFast and
  BertTokenizerFast (transformers), offsets too.

Needs torch, transformers, sentence-transformers and the lmkit wheel.
Usage: python3 scripts/check_python_parity.py
"""

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import BertTokenizerFast, GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    import lmkit

    torch.manual_seed(0)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    text = (ROOT / "assets" / "books" / "corpus.txt").read_text(encoding="utf-8")
    lines = [l.strip() for l in text.splitlines() if l.strip()][:256]
    minilm = str(ROOT / "assets" / "minilm")
    st = SentenceTransformer(minilm, device="cpu").encode(lines, batch_size=32, convert_to_numpy=True)
    ours = lmkit.Bert.from_pretrained(minilm).embed(lines)
    d = float(np.abs(st - ours).max())
    check(d < 1e-5, f"embeddings vs sentence-transformers: max |diff| {d:.2e} over {ours.shape}")

    gpt2_dir = ROOT / "assets" / "gpt2"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=256, initializer_range=0.2,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(cfg).eval()
        model.save_pretrained(tmp)
        hf_tok = GPT2TokenizerFast.from_pretrained(str(gpt2_dir))
        hf_tok.save_pretrained(tmp)
        g = lmkit.GPT2.from_pretrained(tmp)
        for prompt in ["The Rust programming language", "fn main() {", "Ownership is"]:
            ids = hf_tok(prompt)["input_ids"]
            with torch.inference_mode():
                out = model.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False, pad_token_id=50256)
                logits = model(torch.tensor([ids])).logits[0].numpy()
            want = out[0, len(ids):].tolist()
            got = g.generate_ids(ids, 40, temperature=0)
            check(got == want, f"greedy ids vs transformers generate: {prompt!r} ({len(want)} new)")
            want_text = hf_tok.decode([t for t in want if t != 50256])
            check(g.generate(prompt, 40, temperature=0) == want_text, f"greedy text vs transformers: {prompt!r}")
            ld = float(np.abs(g.logits(ids) - logits).max())
            check(ld < 1e-4, f"logits vs transformers: max |diff| {ld:.1e}")

    paras = [p for p in text.split("\n\n") if p.strip()][:500]
    tok = lmkit.Tokenizer.from_pretrained(str(gpt2_dir))
    fast = GPT2TokenizerFast.from_pretrained(str(gpt2_dir))
    enc = fast(paras, return_offsets_mapping=True)
    ok = all(e.ids == i and e.offsets == [tuple(o) for o in off]
             for e, i, off in zip(tok.encode_batch(paras), enc["input_ids"], enc["offset_mapping"]))
    check(ok, f"GPT-2 ids and offsets vs GPT2TokenizerFast on {len(paras)} paragraphs")
    btok = lmkit.Tokenizer.from_pretrained(minilm)
    btok.no_truncation()
    btok.no_padding()
    bfast = BertTokenizerFast.from_pretrained(minilm)
    benc = bfast(paras, return_offsets_mapping=True)
    ok = all(e.ids == i and e.offsets == [tuple(o) for o in off]
             for e, i, off in zip(btok.encode_batch(paras), benc["input_ids"], benc["offset_mapping"]))
    check(ok, f"WordPiece ids and offsets vs BertTokenizerFast on {len(paras)} paragraphs")
    print(f"{len(failures)} failed" if failures else "all equal")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
