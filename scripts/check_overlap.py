#!/usr/bin/env python3
"""Checks `lmkit overlap` against an exact computation: the set of the
training text's normalised 8-grams (the GPT-2 paper's normalisation:
lower-cased runs of letters and digits, `re.findall(r"[^\\W_]+", s.lower())`)
and, for each evaluation document, how many of its 8-grams are in the set.

Real prose (the Rust books, assets/books/corpus.txt) is cut into training
text and disjoint evaluation documents; passages of the training text are
planted into some of them (whole documents, halves, single sentences). The
Bloom filter may only add false positives, so lmkit's hits must be >= the
exact ones and above them by no more than its false-positive bound; the
n-gram counts must be equal. Then the false-positive rate is measured on
disjoint text with a deliberately small filter (1e-2) and must stay within
its bound; `--write-clean` must drop exactly the overlapping documents; a
saved filter must give the same answers; JSONL documents are read as rows.

Usage: python3 scripts/check_overlap.py PATH_TO_LMKIT   (after scripts/fetch-assets.sh)
Prints the throughput of the filter build on this text.
"""
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 8


def words(text):
    return re.findall(r"[^\W_]+", text.lower())


def ngrams(ws, n=N):
    return [tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)]


def run(lmkit, *args):
    out = subprocess.run([lmkit, "overlap", *args, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"lmkit overlap {' '.join(args)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main():
    lmkit = sys.argv[1]
    rng = random.Random(7)
    paras = [p.strip() for p in open(os.path.join(ROOT, "assets/books/corpus.txt"), encoding="utf-8").read()
             .split("\n\n") if len(words(p)) >= 30]
    assert len(paras) > 600, len(paras)
    train_paras, rest = paras[: len(paras) // 2], paras[len(paras) // 2:]
    # Evaluation documents: disjoint paragraphs, some with planted training text.
    train_set = set()
    train_text = "\n\n".join(train_paras)
    train_set.update(ngrams(words(train_text)))
    docs, planted = [], 0
    for i, p in enumerate(rest[:300]):
        kind = i % 6
        if kind == 0:  # a whole training paragraph
            p = rng.choice(train_paras)
        elif kind == 1:  # half new, half training
            t = rng.choice(train_paras)
            p = p[: len(p) // 2] + " " + t[len(t) // 2:]
        elif kind == 2:  # one training sentence inside
            t = rng.choice(train_paras).split(". ")
            p = p + " " + rng.choice(t)
        planted += kind <= 2
        docs.append(p.replace("\n\n", "\n"))
    tmp = tempfile.mkdtemp(prefix="lmkit-overlap-")
    train = os.path.join(tmp, "train.txt")
    open(train, "w", encoding="utf-8").write(train_text + "\n")
    ev = os.path.join(tmp, "eval.txt")
    open(ev, "w", encoding="utf-8").write("\n\n".join(docs) + "\n")

    exact = []
    for d in docs:
        g = ngrams(words(d))
        exact.append((len(g), sum(1 for x in g if x in train_set)))
    bloom = os.path.join(tmp, "train.bloom")
    clean = os.path.join(tmp, "clean.txt")
    r = run(lmkit, "--train", train, "--eval", ev, "--save-filter", bloom, "--write-clean", clean)
    f, e = r["filter"], r["eval"]
    fp = f["expected_fp_rate"]
    assert fp <= 1e-8, fp
    total_ngrams = sum(n for n, _ in exact)
    # Expected false positives over the non-overlapping n-grams, with a wide margin.
    allowance = max(1, math.ceil(10 * fp * total_ngrams))
    extra = 0
    for i, ((n, hits), got) in enumerate(zip(exact, e["per_document"])):
        assert got["ngrams"] == n, (i, got, n)
        assert got["hits"] >= hits, (i, got, hits)
        extra += got["hits"] - hits
    assert extra <= allowance, (extra, allowance)
    exact_share = sum(h for _, h in exact) / total_ngrams
    assert abs(e["share"] - exact_share) <= allowance / total_ngrams, (e["share"], exact_share)
    overlapping = [i for i, (_, h) in enumerate(exact) if h > 0]
    assert e["overlapping"] == overlapping, (e["overlapping"][:10], overlapping[:10])
    assert len(overlapping) >= planted, (len(overlapping), planted)
    kept = open(clean, encoding="utf-8").read().strip().split("\n\n")
    assert kept == [d for i, d in enumerate(docs) if i not in set(overlapping)], "write-clean"
    print(f"exact: {len(docs)} documents, {total_ngrams} 8-grams, share {exact_share:.4%}, "
          f"{len(overlapping)} overlapping ({planted} planted); lmkit equal ({extra} false positives)")
    print(f"filter: {f['ngrams_inserted']} 8-grams of {f['train_bytes'] / 1e6:.2f} MB in "
          f"{f['build_seconds']:.2f} s = {f['train_gb_per_minute']:.3f} GB/min, "
          f"{f['bytes_per_ngram']:.2f} bytes per 8-gram, {f['probes']} probes")

    # The saved filter answers the same; JSONL rows are documents.
    evj = os.path.join(tmp, "eval.jsonl")
    with open(evj, "w", encoding="utf-8") as w:
        for d in docs:
            w.write(json.dumps({"text": d, "label": "x"}) + "\n")
    r2 = run(lmkit, "--filter", bloom, "--eval", evj)
    assert r2["eval"]["per_document"] == e["per_document"], "saved filter / JSONL"

    # False-positive rate on text disjoint from the training set, with a
    # filter sized for 1e-2 so that it is measurable.
    disjoint = [d for i, d in enumerate(docs) if exact[i][1] == 0]
    dj = os.path.join(tmp, "disjoint.txt")
    open(dj, "w", encoding="utf-8").write("\n\n".join(disjoint) + "\n")
    r3 = run(lmkit, "--train", train, "--eval", dj, "--fp-rate", "1e-2")
    m = r3["eval"]
    rate = m["hits"] / m["ngrams"]
    bound = r3["filter"]["expected_fp_rate"]
    # Binomial: the measured rate within 4 standard deviations above the bound.
    sd = math.sqrt(bound * (1 - bound) / m["ngrams"])
    assert rate <= bound + 4 * sd, (rate, bound, sd)
    assert bound <= 1e-2 * 1.01, bound
    print(f"false positives on disjoint text (filter sized for 1e-2): measured {rate:.4%} over "
          f"{m['ngrams']} 8-grams, bound {bound:.4%}")
    print("overlap: ok")


if __name__ == "__main__":
    main()
