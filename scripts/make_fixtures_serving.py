#!/usr/bin/env python3
"""References from sentence-transformers for `lmkit serve`'s embedding and rerank extensions
(issue 44), in make_fixtures.py's format (run by hand, never by CI):

    python3 scripts/make_fixtures_serving.py            # (re)write both cases
    python3 scripts/make_fixtures_serving.py --check    # recompute, compare with the stored ones

- minilm-chunked: a ~5,000-token document from assets/books embedded by the real MiniLM
  (assets/minilm) in windows of its token sequence (`"chunking": {"max_tokens": N,
  "overlap": K}`): each window `[CLS] tokens [SEP]` through the SentenceTransformer's
  Transformer and Pooling modules, the pooled vectors averaged weighted by each window's
  tokens (specials included), then L2-normalized (the model's Normalize module).
- cross-encoder-tiny: tests/fixtures/bert-tiny-rerank (a tiny random BertForSequenceClassification
  with one label) loaded as sentence-transformers' CrossEncoder and saved by it
  (`CrossEncoder.save`), with `CrossEncoder.predict` scores of (query, text) pairs: the default
  activation (sigmoid for num_labels=1) and raw (`activation_fn=Identity`), and pairs longer
  than the model's 32 positions truncated (`max_length=32`).

Needs scripts/requirements-dev.txt plus sentence-transformers, and assets/ (fetch-assets.sh).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

CHUNKINGS = [(256, 32), (128, 0)]  # (max_tokens, overlap)


def chunk_document():
    corpus = (mf.ASSETS / "books" / "corpus.txt").read_text(encoding="utf-8")
    return " ".join(corpus.split()[300000:302400])


def windows(n, room, stride):
    out, start = [], 0
    while True:
        end = min(start + room, n)
        out.append((start, end))
        if end >= n:
            return out
        start += stride


def compute_chunked(doc):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(mf.ASSETS / "minilm"), device="cpu")
    st.eval()
    assert [type(m).__name__ for m in st] == ["Transformer", "Pooling", "Normalize"]
    tok = st.tokenizer
    ids = tok(doc, add_special_tokens=False)["input_ids"]
    ref = mf.Ref()
    ref.add("ids", torch.tensor(ids), "[N] the document's token ids, no specials")
    for max_tokens, overlap in CHUNKINGS:
        room = max_tokens - 2
        spans = windows(len(ids), room, room - overlap)
        vecs, weights = [], []
        with torch.no_grad():
            for s, e in spans:
                w = [tok.cls_token_id] + ids[s:e] + [tok.sep_token_id]
                x = torch.tensor([w])
                feats = {"input_ids": x, "attention_mask": torch.ones_like(x),
                         "token_type_ids": torch.zeros_like(x)}
                pooled = st[1](st[0](feats))["sentence_embedding"][0]
                vecs.append(pooled)
                weights.append(len(w))
        wt = torch.tensor(weights, dtype=torch.float32)
        mean = (torch.stack(vecs) * wt[:, None]).sum(0) / wt.sum()
        key = f"{max_tokens}_{overlap}"
        ref.add(f"embedding_{key}", F.normalize(mean, dim=-1), f"[384] windows of {max_tokens} "
                f"tokens overlapping by {overlap}: the token-weighted mean of their pooled (mean, "
                "before Normalize) vectors, L2-normalized")
        ref.scalar(f"windows_{key}", len(spans), "windows of the document")
    ref.info["document"] = doc
    ref.info["chunkings"] = [{"max_tokens": m, "overlap": o} for m, o in CHUNKINGS]
    ref.info["model"] = {"path": "assets/minilm", "max_seq_length": st.max_seq_length}
    return ref


QUERY = "where is the old dog"
TEXTS = ["the old dog is by the river", "paris is in france", "a dog", "she found the red book",
         "the dog", "he said that the old man saw the dog by the river and the dog ran to the "
         "house of the old man in the town where they had a red book"]


def compute_cross_encoder(case_dir):
    from sentence_transformers import CrossEncoder

    ref = mf.Ref()
    pairs = [(QUERY, t) for t in TEXTS]
    ce = CrossEncoder(str(case_dir), device="cpu", max_length=32)
    assert ce.model.config.num_labels == 1
    ref.add("scores", torch.tensor(ce.predict(pairs, batch_size=4)),
            "[6] CrossEncoder.predict (default activation: sigmoid for one label), "
            "max_length=32 (the last pair is truncated, longest first)")
    ref.add("raw_scores", torch.tensor(ce.predict(pairs, batch_size=4,
                                                  activation_fn=torch.nn.Identity())),
            "[6] CrossEncoder.predict(activation_fn=Identity): the logits")
    ref.info["query"] = QUERY
    ref.info["texts"] = TEXTS
    return ref


def make_cross_encoder(root):
    from sentence_transformers import CrossEncoder

    case_dir = mf.fresh_dir(root / "cross-encoder-tiny")
    CrossEncoder(str(mf.FIXTURES / "bert-tiny-rerank"), device="cpu").save(str(case_dir))
    for junk in ("README.md",):
        (case_dir / junk).unlink(missing_ok=True)
    return case_dir, compute_cross_encoder(case_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    root = mf.FIXTURES
    if args.check:
        for name, new in [
            ("minilm-chunked", compute_chunked(chunk_document())),
            ("cross-encoder-tiny", compute_cross_encoder(root / "cross-encoder-tiny")),
        ]:
            stored = load_file(str(root / name / "reference.safetensors"))
            for k, t in stored.items():
                d = (t.double() - new.tensors[k].double()).abs().max().item()
                mf.log(f"{name}: {k} max |diff| {d:.3g}")
                if d > 1e-6:
                    raise SystemExit(f"{name}: {k} differs by {d}")
        return
    mf.log("== minilm-chunked")
    doc = chunk_document()
    ref = compute_chunked(doc)
    mf.compare_refs(ref, compute_chunked(doc), exact=True, label="minilm-chunked")
    mf.write_case(mf.fresh_dir(root / "minilm-chunked"), ref,
                  {"case": "minilm-chunked", "model_class": "SentenceTransformer(BertModel)",
                   "checkpoint": "assets/minilm (not in this folder)"})
    mf.log("== cross-encoder-tiny")
    case_dir, ref = make_cross_encoder(root)
    mf.compare_refs(ref, compute_cross_encoder(case_dir), exact=True, label="cross-encoder-tiny")
    mf.write_case(case_dir, ref, {"case": "cross-encoder-tiny",
                                  "model_class": "CrossEncoder(BertForSequenceClassification)",
                                  "checkpoint": "this folder, written by CrossEncoder.save"})


if __name__ == "__main__":
    main()
