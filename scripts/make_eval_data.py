#!/usr/bin/env python3
"""Builds the small real-text evaluation sets committed under tests/data/.

Source: the Rust toolchain's HTML books ($(rustc --print sysroot)/share/doc/rust/html),
the same text as assets/books but with the HTML structure, which gives the labels.
Run by hand (standard library only), never by CI:

    python3 scripts/make_eval_data.py            # writes tests/data/...
    python3 scripts/make_eval_data.py --check    # rebuilds in memory, compares with the files

Outputs:
  tests/data/classify/prose_code.{train,eval}.jsonl
      {"text", "label"} with label "prose" (a sentence of a <p> paragraph) or "code"
      (one line of a Rust code block, hidden "boring" lines excluded). Train rows come
      from The Book, the Reference and Rust by Example; held-out rows from the Rustonomicon,
      the Cargo book, the rustc book, the Edition Guide and the Embedded book, so the
      evaluation is on unseen documents. Balanced, 2000 train / 500 eval rows.
  tests/data/squad/rust_book.json
      SQuAD v1.1 format: hand-written questions over real paragraphs of The Book; every
      answer is a span of its paragraph (answer_start in characters, as SQuAD).
  tests/data/lambada/rust_book.jsonl
      LAMBADA's JSONL format ({"text": passage}): paragraphs of The Book whose last word
      is a plain word (letters only); the target is that word.
  tests/data/summarize/rust_book.jsonl
      {"article", "summary"}: the first paragraphs of a chapter section and, as the
      reference, the section's first sentence (a stand-in for a real summary; the file
      exercises the summarize pipeline, not summarization quality).
"""
import argparse
import functools
import html.parser
import json
import os
import random
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data")
TRAIN_BOOKS = ["book", "reference", "rust-by-example"]
EVAL_BOOKS = ["nomicon", "cargo", "rustc", "edition-guide", "embedded-book"]
SEED = 20240607


def html_root():
    sysroot = subprocess.check_output(["rustc", "--print", "sysroot"], text=True).strip()
    return os.path.join(sysroot, "share", "doc", "rust", "html")


class PageParser(html.parser.HTMLParser):
    """Collects <p> paragraph texts and the visible lines of Rust code blocks."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paras, self.code_blocks, self.headed = [], [], []
        self.in_p = 0
        self.p_parts = []
        self.code = None  # list of parts while inside <pre><code class="language-rust...">
        self.in_pre = False
        self.boring = 0  # depth of <span class="boring"> (lines hidden in the rendered book)
        self.span_stack = []
        self.heading = None
        self.h_parts = None
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "style", "nav"):
            self.skip += 1
        if tag == "pre":
            self.in_pre = True
        elif tag == "code" and self.in_pre and "language-rust" in (a.get("class") or ""):
            self.code = []
        elif tag == "span":
            is_boring = "boring" in (a.get("class") or "").split()
            self.span_stack.append(is_boring)
            if is_boring:
                self.boring += 1
        elif tag == "p" and not self.skip:
            self.in_p += 1
            self.p_parts = []
        elif tag in ("h1", "h2") and not self.skip:
            self.h_parts = []

    def handle_endtag(self, tag):
        if tag in ("script", "style", "nav") and self.skip:
            self.skip -= 1
        if tag == "pre":
            self.in_pre = False
        elif tag == "code" and self.code is not None:
            self.code_blocks.append("".join(self.code))
            self.code = None
        elif tag == "span" and self.span_stack:
            if self.span_stack.pop():
                self.boring -= 1
        elif tag == "p" and self.in_p:
            self.in_p -= 1
            text = " ".join("".join(self.p_parts).split())
            if text:
                self.paras.append(text)
                self.headed.append((self.heading, text))
        elif tag in ("h1", "h2") and self.h_parts is not None:
            self.heading = " ".join("".join(self.h_parts).split())
            self.h_parts = None

    def handle_data(self, data):
        if self.code is not None and not self.boring:
            self.code.append(data)
        if self.in_p:
            self.p_parts.append(data)
        if self.h_parts is not None:
            self.h_parts.append(data)


# The Book keeps stub pages of its old editions ("There is a new edition of the book
# and this is an old link."), in subfolders and at the top level: skip them.
OLD_EDITIONS = ("first-edition", "second-edition", "2018-edition")


@functools.lru_cache(maxsize=None)
def pages(book):
    out = []
    base = os.path.join(html_root(), book)
    for dirpath, _, files in sorted(os.walk(base)):
        if any(part in OLD_EDITIONS for part in os.path.relpath(dirpath, base).split(os.sep)):
            continue
        for name in sorted(files):
            if name.endswith(".html") and name not in ("print.html", "404.html", "toc.html"):
                p = PageParser()
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    p.feed(f.read())
                if any("this is an old link" in para for para in p.paras):
                    continue
                out.append((os.path.relpath(os.path.join(dirpath, name), html_root()), p))
    return out


SENT_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"“(])")


def sentences(paragraph):
    return [s.strip() for s in SENT_END.split(paragraph) if s.strip()]


def ok_length(text):
    return 20 <= len(text) <= 200


def collect(books):
    prose, code = [], []
    for book in books:
        for _, page in pages(book):
            for para in page.paras:
                prose.extend(s for s in sentences(para) if ok_length(s))
            for block in page.code_blocks:
                for line in block.split("\n"):
                    line = line.strip()
                    # Real statements, not lone braces: at least one letter.
                    if ok_length(line) and re.search(r"[A-Za-z]", line):
                        code.append(line)
    return list(dict.fromkeys(prose)), list(dict.fromkeys(code))


def classify_rows(books, per_class, rng, exclude):
    prose, code = collect(books)
    prose = [t for t in prose if t not in exclude]
    code = [t for t in code if t not in exclude]
    if len(prose) < per_class or len(code) < per_class:
        sys.exit(f"not enough text in {books}: {len(prose)} prose, {len(code)} code")
    rows = [{"text": t, "label": "prose"} for t in rng.sample(prose, per_class)]
    rows += [{"text": t, "label": "code"} for t in rng.sample(code, per_class)]
    rng.shuffle(rows)
    return rows


# (page, start of the paragraph, [(question, answer, occurrence)]); occurrence is the
# 0-based index of the answer among its occurrences in the paragraph.
SQUAD = [
    ("book/ch00-00-introduction.html", "Welcome to The Rust Programming Language", [
        ("What kind of book is The Rust Programming Language?", "an introductory book about Rust", 0),
        ("What does the Rust programming language help you write?", "faster, more reliable software", 0),
        ("What are often at odds in programming language design?", "High-level ergonomics and low-level control", 0),
        ("Which details does Rust give you the option to control?", "low-level details", 0),
        ("What is given as an example of a low-level detail?", "memory usage", 0),
    ]),
    ("book/ch00-00-introduction.html", "Rust is proving to be a productive tool", [
        ("What kind of code is prone to various subtle bugs?", "Low-level code", 0),
        ("What role does the compiler play in Rust?", "a gatekeeper role", 0),
        ("Besides extensive testing, how are such bugs caught in most other languages?",
         "careful code review by experienced developers", 0),
        ("What can the team focus on instead of chasing down bugs?", "the program’s logic", 0),
        ("What kind of bugs are named among the elusive bugs the compiler refuses?", "concurrency bugs", 0),
    ]),
    ("book/ch00-00-introduction.html", "Hundreds of companies, large and small", [
        ("Which web browser has major parts that use Rust?", "Firefox", 0),
        ("How many companies use Rust in production?", "Hundreds", 0),
        ("Name a kind of tool that companies build with Rust.", "command line tools", 0),
        ("Which kind of devices are among Rust's uses?", "embedded devices", 0),
    ]),
    ("book/ch04-01-what-is-ownership.html", "Ownership is a set of rules", [
        ("What is ownership?", "a set of rules that govern how a Rust program manages memory", 0),
        ("What do some languages use to look for no-longer-used memory?", "garbage collection", 0),
        ("Who must explicitly allocate and free memory in other languages?", "the programmer", 0),
        ("What happens if any of the rules of ownership are violated?", "the program won’t compile", 0),
        ("Who checks the rules of ownership?", "the compiler", 0),
    ]),
    ("book/ch04-01-what-is-ownership.html", "Both the stack and the heap are parts of memory", [
        ("In what order does the stack remove values?", "the opposite order", 0),
        ("What is the stack's ordering referred to as?", "last in, first out (LIFO)", 0),
        ("What analogy is used for the stack?", "a stack of plates", 0),
        ("What is adding data to the stack called?", "pushing onto the stack", 0),
        ("What is removing data from the stack called?", "popping off the stack", 0),
        ("Where must data with an unknown size at compile time be stored?", "on the heap", 0),
    ]),
    ("book/ch04-01-what-is-ownership.html", "Pushing to the stack is faster than allocating", [
        ("Which is faster, pushing to the stack or allocating on the heap?", "Pushing to the stack", 0),
        ("What never has to search for a place to store new data when pushing?", "the allocator", 0),
        ("Where is the location of new data on the stack?", "at the top of the stack", 0),
        ("What must the allocator find when allocating on the heap?", "a big enough space to hold the data", 0),
    ]),
    ("book/ch04-01-what-is-ownership.html", "Accessing data in the heap is generally slower", [
        ("Why is accessing heap data slower?", "you have to follow a pointer to get there", 0),
        ("What kind of processors are faster if they jump around less in memory?", "Contemporary processors", 0),
        ("Who takes orders in the analogy?", "a server at a restaurant", 0),
        ("What is it most efficient for the server to do?",
         "get all the orders at one table before moving on to the next table", 0),
    ]),
    ("book/ch04-01-what-is-ownership.html", "There is a natural point at which we can return the memory", [
        ("When can the memory of a String be returned to the allocator?", "when s goes out of scope", 0),
        ("What is the special function Rust calls when a variable goes out of scope?", "drop", 0),
        ("Where does Rust call drop automatically?", "at the closing curly bracket", 0),
    ]),
    ("book/ch04-01-what-is-ownership.html", "Earlier, we said that when a variable goes out of scope", [
        ("What is freeing the same memory twice known as?", "a double free error", 0),
        ("What can freeing memory twice lead to?", "memory corruption", 0),
        ("Which figure shows both data pointers pointing to the same location?", "Figure 4-2", 0),
    ]),
    ("book/ch08-01-vectors.html", "The first collection type we’ll look at is", [
        ("What is the first collection type the chapter looks at?", "Vec<T>", 0),
        ("What is Vec<T> also known as?", "a vector", 0),
        ("Where do vectors put all their values?", "next to each other in memory", 0),
        ("What kind of values can a vector store?", "values of the same type", 0),
        ("Give an example of a list of items a vector is useful for.", "the lines of text in a file", 0),
    ]),
    ("book/ch08-01-vectors.html", "When the get method is passed an index that is outside", [
        ("What does get return for an index outside the vector?", "None", 0),
        ("In which chapter are Some(&element) and None discussed?", "Chapter 6", 0),
        ("Where could the index come from, for example?", "a person entering a number", 0),
        ("What would be more user-friendly than crashing the program?",
         "tell the user how many items are in the current vector and give them another chance to enter a valid value", 0),
    ]),
    ("book/ch01-01-installation.html", "In this chapter and throughout the book", [
        ("What character do lines you enter in a terminal start with?", "$", 0),
        ("What does the $ character indicate?", "the start of each command", 0),
        ("What do PowerShell-specific examples use instead of $?", ">", 0),
    ]),
]


def squad_data():
    paras = {}
    for book in ["book"]:
        for rel, page in pages(book):
            paras[rel] = page.paras
    data, qid = [], 0
    for page, start, qas in SQUAD:
        matches = [p for p in paras.get(page, []) if p.startswith(start)]
        if len(matches) != 1:
            sys.exit(f"{page}: {len(matches)} paragraphs start with {start!r}")
        context = matches[0]
        entries = []
        for question, answer, occurrence in qas:
            starts = [m.start() for m in re.finditer(re.escape(answer), context)]
            if len(starts) <= occurrence:
                sys.exit(f"{page}: answer {answer!r} not in paragraph {start!r}")
            qid += 1
            entries.append({
                "id": f"rust-book-{qid:03d}",
                "question": question,
                "answers": [{"text": answer, "answer_start": starts[occurrence]}],
            })
        data.append({"title": page, "paragraphs": [{"context": context, "qas": entries}]})
    return {"version": "1.1", "data": data}


def lambada_rows(rng, n=40):
    cands = []
    for rel, page in pages("book"):
        for para in page.paras:
            words = para.split()
            if 40 <= len(words) <= 120 and re.fullmatch(r"[A-Za-z]{3,}", words[-1].rstrip(".")):
                # LAMBADA passages end with the target word, no final period.
                cands.append(para[:-1] if para.endswith(".") else para)
    return [{"text": t} for t in rng.sample(sorted(set(cands)), n)]


def summarize_rows(rng, n=12):
    rows = []
    for rel, page in pages("book"):
        by_heading = {}
        for heading, para in page.headed:
            if heading:
                by_heading.setdefault(heading, []).append(para)
        for heading, paras in by_heading.items():
            article = " ".join(paras[:3])
            if 300 <= len(article) <= 1500 and len(paras) >= 3:
                first = sentences(paras[0])[0]
                rest = " ".join(sentences(paras[0])[1:] + paras[1:3])
                if len(rest) >= 200:
                    rows.append({"article": rest, "summary": first})
    return rng.sample(rows, n)


def write_jsonl(path, rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def build():
    rng = random.Random(SEED)
    train = classify_rows(TRAIN_BOOKS, 1000, rng, set())
    held = classify_rows(EVAL_BOOKS, 250, rng, {r["text"] for r in train})
    return {
        "classify/prose_code.train.jsonl": write_jsonl(None, train),
        "classify/prose_code.eval.jsonl": write_jsonl(None, held),
        "squad/rust_book.json": json.dumps(squad_data(), ensure_ascii=False, indent=1) + "\n",
        "lambada/rust_book.jsonl": write_jsonl(None, lambada_rows(rng)),
        "summarize/rust_book.jsonl": write_jsonl(None, summarize_rows(rng)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    args = ap.parse_args()
    files = build()
    bad = 0
    for rel, text in files.items():
        path = os.path.join(OUT, rel)
        if args.check:
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    print(f"DIFFERS: {rel}")
                    bad += 1
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote {rel} ({len(text.encode())} bytes)")
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
