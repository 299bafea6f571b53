#!/usr/bin/env python3
"""Writes tests/data/regression/replaced.{train,eval}.jsonl: an STS-B-shaped sentence-pair
regression set on real English (the prose of the Rust books, assets/books/corpus.txt), with a
graded target that is computed exactly rather than annotated.

Each row is {"text": A, "text_pair": B, "label": y}:
  A  a sentence of the books (8-20 words, ASCII, starting upper-case, ending in ".");
  B  A with k of its n words replaced, at k positions drawn at random, by words of another
     sentence of the books (a replacement always differs from the word it replaces), k drawn
     uniformly from 0..n;
  y  5 * (n - k) / n, the share of A's words B keeps in place, on STS-B's 0-5 scale, rounded
     to 4 decimals.
So y is 5 for a copy, 0 when every word is replaced, and in between the more of the sentence
survives the higher the score — a graded "how much of A does B still say" that a cross-encoder
can learn from a few hundred pairs, and that a model scores with Pearson / Spearman as STS-B is.
Train and eval sentences are disjoint: train from the first 80% of the corpus, eval from the
last 20% (other books); donors of replacement words come from the same part. Deterministic
(seeded); needs only the Python standard library and the assets.

With pyarrow installed it also writes replaced.eval.glue.parquet: the first 20 eval rows as HF
datasets stores GLUE's STS-B (columns sentence1, sentence2, label float32, idx int32; Snappy),
which the JSONL reader's rows must equal.

    python3 scripts/make_regression_data.py        # 400 train, 100 eval rows
"""

import json
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "assets" / "books" / "corpus.txt"
OUT = ROOT / "tests" / "data" / "regression"
SENT_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
CODE = re.compile(r"[`{}()\[\]<>_=;:&|*#/\\$@%^~]|::|\d")


def sentences(text):
    """Prose sentences: paragraphs (blank-line separated, hard wraps joined) cut at . ! ?"""
    out, seen = [], set()
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        for s in SENT_END.split(para):
            words = s.split()
            if (8 <= len(words) <= 20 and s.isascii() and s[0].isupper() and s.endswith(".")
                    and not CODE.search(s) and s not in seen):
                seen.add(s)
                out.append(s)
    return out


def make_rows(pool, n, rng):
    rows = []
    for a in rng.sample(pool, n):
        words = a.split()
        k = rng.randint(0, len(words))
        positions = rng.sample(range(len(words)), k)
        donor = rng.choice(pool).split()
        b = list(words)
        for p in positions:
            w = rng.choice(donor)
            while w.lower().strip(".,") == words[p].lower().strip(".,"):
                w = rng.choice(donor + ["time", "value", "thread", "world"])
            b[p] = w
        y = round(5 * (len(words) - k) / len(words), 4)
        rows.append({"text": a, "text_pair": " ".join(b), "label": y})
    return rows


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    text = CORPUS.read_text(encoding="utf-8")
    cut = int(len(text) * 0.8)
    train_pool, eval_pool = sentences(text[:cut]), sentences(text[cut:])
    eval_pool = [s for s in eval_pool if s not in set(train_pool)]
    rng = random.Random(15)
    OUT.mkdir(parents=True, exist_ok=True)
    train, dev = make_rows(train_pool, 400, rng), make_rows(eval_pool, 100, rng)
    write(OUT / "replaced.train.jsonl", train)
    write(OUT / "replaced.eval.jsonl", dev)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("pyarrow is not installed: replaced.eval.glue.parquet not written")
    else:
        head = dev[:20]
        table = pa.table({
            "sentence1": pa.array([r["text"] for r in head], pa.string()),
            "sentence2": pa.array([r["text_pair"] for r in head], pa.string()),
            "label": pa.array([r["label"] for r in head], pa.float32()),
            "idx": pa.array(range(len(head)), pa.int32()),
        })
        pq.write_table(table, OUT / "replaced.eval.glue.parquet", compression="snappy")
    print(f"{len(train_pool)} / {len(eval_pool)} candidate sentences; "
          f"wrote {len(train)} train and {len(dev)} eval rows to {OUT}")


if __name__ == "__main__":
    main()
