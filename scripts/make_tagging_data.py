#!/usr/bin/env python3
"""Writes tests/data/tagging/rust_prose.{train,eval}.conll: a rule-labelled token-tagging set on
real text, the prose sentences of tests/data/classify/prose_code.{train,eval}.jsonl (from the
Rust books, held-out books for eval).

Words are the whitespace-separated tokens of a sentence; a word's tag comes from rules on it with
surrounding punctuation stripped:
  CODE  a code-like word: contains `_`, `::`, `()`, `<`/`>`, `&`, `.` between letters
        (`iter.map`), ends in `!` after a letter (`println!`), or is a Rust type/keyword that is
        not an English word (usize, i32, fn, impl, struct, enum, mut, Vec, Option, String, ...);
  NUM   a number (digits, optionally with `.` or `,` inside);
  O     anything else.
Consecutive words of one type form one entity (B- then I-, IOB2). Sentences with an entity are
kept first, then plain ones, to fill the counts.

    python3 scripts/make_tagging_data.py
"""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tests" / "data" / "classify"
OUT = ROOT / "tests" / "data" / "tagging"
KEYWORDS = {"usize", "isize", "i8", "i16", "i32", "i64", "i128", "u8", "u16", "u32", "u64",
            "u128", "f32", "f64", "bool", "char", "str", "fn", "impl", "struct", "enum", "mut",
            "Vec", "Option", "Result", "String", "Box", "Rc", "RefCell", "Arc", "Mutex", "HashMap",
            "Some", "None", "Ok", "Err", "unwrap", "self", "Self", "dyn", "pub", "crate", "cargo",
            "rustc", "trait", "const", "enum", "async", "await"}
STRIP = "\"'“”‘’,.;:?!()[]{}"
NUMBER = re.compile(r"^\d+([.,]\d+)*$")


def tag_of(word):
    core = word.strip(STRIP) if not word.rstrip(",.;:").endswith(("!", "()")) else word.rstrip(",.;:")
    if not core:
        return "O"
    if NUMBER.match(core):
        return "NUM"
    if (core in KEYWORDS or "_" in core or "::" in core or "()" in core or "<" in core
            or ">" in core or "&" in core or re.search(r"[A-Za-z]\.[A-Za-z]", core)
            or re.match(r"^[A-Za-z_]+!$", core)):
        return "CODE"
    return "O"


def tags_of(words):
    out, prev = [], "O"
    for w in words:
        t = tag_of(w)
        out.append("O" if t == "O" else ("I-" if t == prev else "B-") + t)
        prev = t
    return out


def sentences(path, n):
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    prose = [r["text"].split() for r in rows if r["label"] == "prose"]
    prose = [w for w in prose if 5 <= len(w) <= 40]
    tagged = [(w, tags_of(w)) for w in prose]
    with_ent = [x for x in tagged if any(t != "O" for t in x[1])]
    without = [x for x in tagged if all(t == "O" for t in x[1])]
    k = min(len(with_ent), (n * 3) // 4)
    return with_ent[:k] + without[: n - k]


def write(path, sents):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for words, tags in sents:
            for w, t in zip(words, tags):
                f.write(f"{w} {t}\n")
            f.write("\n")
    ents = sum(t.startswith("B-") for _, tags in sents for t in tags)
    print(f"{path.relative_to(ROOT)}: {len(sents)} sentences, {ents} entities")


def main():
    write(OUT / "rust_prose.train.conll", sentences(SRC / "prose_code.train.jsonl", 400))
    write(OUT / "rust_prose.eval.conll", sentences(SRC / "prose_code.eval.jsonl", 120))


if __name__ == "__main__":
    main()
