#!/usr/bin/env python3
"""Writes tests/data/multiple_choice/rust_story.{train,eval}.jsonl: a story-cloze style
multiple-choice set on real English, the prose of the Rust books (assets/books/corpus.txt, from
scripts/fetch-assets.sh).

Each row is {"context", "choices", "label"}: the context is two consecutive sentences of a
paragraph, the choices are the sentence that follows them in the book and 3 sentences drawn from
other pages, in a shuffled order; label is the index of the true next sentence. Sentences are
the prose ones (6 to 40 words, starting with a capital letter, ending in . ! or ?, no code-like
characters). Pages (the corpus's form-feed separated pages) are split in two: evaluation rows
(and their distractors) come from every fifth page, training rows from the others, so the
evaluation is on unseen text. 400 train / 100 eval rows, seed 15.

    python3 scripts/make_multiple_choice_data.py            # writes the files
    python3 scripts/make_multiple_choice_data.py --check    # rebuilds in memory, compares
"""
import argparse
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "assets" / "books" / "corpus.txt"
OUT = ROOT / "tests" / "data" / "multiple_choice"
N_TRAIN, N_EVAL, K, SEED = 400, 100, 4, 15
CODE = re.compile(r"[{}<>\[\]_`;=|#$\\]|::|\(\)|->|\.\w+\(|^\W")


def prose(s):
    words = s.split()
    return (6 <= len(words) <= 40 and s[0].isupper() and s[-1] in ".!?"
            and not CODE.search(s) and sum(c.isalpha() for c in s) > 0.7 * len(s))


def paragraphs(page):
    """Blank-line separated blocks, hard wraps joined, cut into sentences."""
    for block in re.split(r"\n\s*\n", page):
        text = " ".join(line.strip() for line in block.splitlines()).strip()
        if text:
            yield [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text)]


def build(text):
    pages = [p for p in text.split("\f") if p.strip()]
    held_out = [p for i, p in enumerate(pages) if i % 5 == 0]
    rest = [p for i, p in enumerate(pages) if i % 5 != 0]
    rng = random.Random(SEED)
    out = []
    for part, n in ((rest, N_TRAIN), (held_out, N_EVAL)):
        # (page, context, next sentence) where all three sentences are prose.
        triples, pool = [], []
        for pi, page in enumerate(part):
            for para in paragraphs(page):
                good = [prose(s) for s in para]
                pool.extend((pi, s) for s, g in zip(para, good) if g)
                for i in range(len(para) - 2):
                    if all(good[i:i + 3]):
                        triples.append((pi, para[i] + " " + para[i + 1], para[i + 2]))
        seen, rows = set(), []
        rng.shuffle(triples)
        for pi, context, ending in triples:
            if ending in seen:
                continue
            distractors = []
            while len(distractors) < K - 1:
                pj, s = rng.choice(pool)
                if pj != pi and s != ending and s not in distractors:
                    distractors.append(s)
            choices = [ending] + distractors
            rng.shuffle(choices)
            rows.append({"context": context, "choices": choices, "label": choices.index(ending)})
            seen.add(ending)
            if len(rows) == n:
                break
        assert len(rows) == n, (len(rows), n)
        out.append(rows)
    return out


def dump(rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if not CORPUS.exists():
        sys.exit(f"{CORPUS} is missing: run scripts/fetch-assets.sh first")
    train, ev = build(CORPUS.read_text(encoding="utf-8"))
    files = {OUT / "rust_story.train.jsonl": dump(train), OUT / "rust_story.eval.jsonl": dump(ev)}
    for path, text in files.items():
        if args.check:
            if path.read_text(encoding="utf-8") != text:
                sys.exit(f"{path} differs from a rebuild")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        print(f"{path.relative_to(ROOT)}: {text.count(chr(10))} rows")


if __name__ == "__main__":
    main()
