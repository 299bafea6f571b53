#!/usr/bin/env python3
"""Extracts the prose of the Rust toolchain's HTML books into plain text.

Writes OUT/corpus.txt (all books, documents separated by a blank line and a
form feed line) and OUT/books/<book>.txt per book. Standard library only, so
fetch-assets.sh needs no PyPI packages for it.
"""
import html.parser
import os
import sys

BOOKS = ["book", "reference", "rust-by-example", "nomicon", "cargo", "rustc",
         "edition-guide", "embedded-book", "rustdoc", "unstable-book", "error_codes"]
SKIP_TAGS = {"script", "style", "nav", "head", "noscript", "svg", "button"}
BLOCK_TAGS = {"p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "tr",
              "br", "blockquote", "dt", "dd", "section", "main", "table"}


class TextExtractor(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.skip = 0
        self.parts = []

    def handle_starttag(self, tag, attrs):
        if tag in SKIP_TAGS:
            self.skip += 1
        elif tag in BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in SKIP_TAGS and self.skip:
            self.skip -= 1
        elif tag in BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)

    def text(self):
        lines = [" ".join(line.split()) for line in "".join(self.parts).split("\n")]
        out, blank = [], False
        for line in lines:
            if line:
                out.append(line)
                blank = False
            elif not blank and out:
                out.append("")
                blank = True
        return "\n".join(out).strip() + "\n"


def main():
    html_root, out = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.join(out, "books"), exist_ok=True)
    seen = set()
    with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8") as corpus:
        for book in BOOKS:
            base = os.path.join(html_root, book)
            if not os.path.isdir(base):
                continue
            docs = []
            # mdBook pages repeat the same navigation help and licence blurbs;
            # keep each paragraph once so the corpus is prose, not boilerplate.
            for dirpath, _, files in sorted(os.walk(base)):
                for name in sorted(files):
                    if not name.endswith(".html") or name in ("print.html", "404.html", "toc.html"):
                        continue
                    with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                        parser = TextExtractor()
                        parser.feed(f.read())
                    paragraphs = []
                    for para in parser.text().split("\n\n"):
                        if para.strip() and para not in seen:
                            seen.add(para)
                            paragraphs.append(para)
                    text = "\n\n".join(paragraphs) + "\n"
                    if len(text) > 200:
                        docs.append(text)
            if not docs:
                continue
            joined = "\n\f\n".join(docs)
            with open(os.path.join(out, "books", book + ".txt"), "w", encoding="utf-8") as f:
                f.write(joined)
            corpus.write(joined)
            corpus.write("\n\f\n")


if __name__ == "__main__":
    main()
