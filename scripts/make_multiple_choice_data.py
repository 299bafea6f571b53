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

It also writes tests/data/multiple_choice/rust_kind.{train,eval}.jsonl: "what comes next, prose or
code?", a set a small randomly initialised GPT-2 learns in a minute (the story-cloze set needs
knowledge of English that a random model does not have: it stays at chance). The context is one
line of the books, either a prose sentence or a line of a Rust code block; the two choices are the
line that follows it (the next sentence of the paragraph, or the next line of the code block) and
a line of the other kind from another page. Half the rows have prose contexts, half code, so a
model that looks at the choices alone (say, always picking the prose one) is right half the time,
as is chance: doing better needs the context. Code lines are the ASCII lines of blocks whose every
line is code-like (a code character and a Rust-like start or end), 12 to 100 characters with a
word in them. Same page split as above; 800 train / 200 eval rows, seed 16.

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
KIND_TRAIN, KIND_EVAL, KIND_SEED = 800, 200, 16
CODE = re.compile(r"[{}<>\[\]_`;=|#$\\]|::|\(\)|->|\.\w+\(|^\W")
# How a line of a Rust code block starts (or else it ends in ; { } ,).
CODE_START = re.compile(r"^(fn |let |use |impl\b|struct |enum |pub |match |if |else|for |while |loop\b|"
                        r"mod |trait |const |static |return\b|//|#!?\[|\}|[a-z_][a-z0-9_]*(\.|::|\(|!\())")


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


def code_line(s):
    return bool(CODE.search(s)) and (bool(CODE_START.match(s)) or s[-1] in ";{},")


def code_pairs(page):
    """(line, next line) of the page's code blocks: blocks of code lines only."""
    for block in re.split(r"\n\s*\n", page):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        if len(lines) < 2 or not all(code_line(line) for line in lines):
            continue
        good = [line.isascii() and 12 <= len(line) <= 100 and re.search("[A-Za-z]{2}", line)
                for line in lines]
        for i in range(len(lines) - 1):
            if good[i] and good[i + 1]:
                yield lines[i], lines[i + 1]


def build_kind(text):
    """The prose-or-code rows (module docstring): train rows, eval rows."""
    pages = [p for p in text.split("\f") if p.strip()]
    held_out = [p for i, p in enumerate(pages) if i % 5 == 0]
    rest = [p for i, p in enumerate(pages) if i % 5 != 0]
    rng = random.Random(KIND_SEED)
    out = []
    for part, n in ((rest, KIND_TRAIN), (held_out, KIND_EVAL)):
        # kind -> [(page, line, next line)]; kind -> pool of (page, line)
        pairs, pool = {"prose": [], "code": []}, {"prose": [], "code": []}
        for pi, page in enumerate(part):
            for para in paragraphs(page):
                good = [prose(s) for s in para]
                pool["prose"].extend((pi, s) for s, g in zip(para, good) if g)
                pairs["prose"].extend((pi, para[i], para[i + 1])
                                      for i in range(len(para) - 1) if good[i] and good[i + 1])
            for a, b in code_pairs(page):
                pairs["code"].append((pi, a, b))
                pool["code"].extend([(pi, a), (pi, b)])
        rows = []
        for kind, other in (("prose", "code"), ("code", "prose")):
            cands = list(dict.fromkeys(pairs[kind]))
            rng.shuffle(cands)
            seen = set()
            for pi, context, ending in cands:
                if ending in seen or context in seen:
                    continue
                while True:
                    pj, distractor = rng.choice(pool[other])
                    if pj != pi:
                        break
                choices = [ending, distractor]
                rng.shuffle(choices)
                rows.append({"context": context, "choices": choices, "label": choices.index(ending)})
                seen.update((context, ending))
                if len(rows) % (n // 2) == 0:
                    break
        assert len(rows) == n, (len(rows), n)
        rng.shuffle(rows)
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
    text = CORPUS.read_text(encoding="utf-8")
    train, ev = build(text)
    kind_train, kind_ev = build_kind(text)
    files = {OUT / "rust_story.train.jsonl": dump(train), OUT / "rust_story.eval.jsonl": dump(ev),
             OUT / "rust_kind.train.jsonl": dump(kind_train),
             OUT / "rust_kind.eval.jsonl": dump(kind_ev)}
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
