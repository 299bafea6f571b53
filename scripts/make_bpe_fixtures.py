#!/usr/bin/env python3
"""Writes the HF tokenizers fixtures the BPE tests compare against (run by hand;
the outputs are committed so tests need no Python):

  tests/fixtures/bpe_hf_gpt2.json      texts and the ids HF tokenizers gives them
                                       with GPT-2's vocabulary (assets/gpt2)
  tests/fixtures/bpe_hf_trained/tokenizer.json
                                       a small byte-level BPE trained and saved by
                                       HF tokenizers (tests that we load HF's format)
  tests/fixtures/bpe_hf_trained.json   texts and that tokenizer's ids

Usage: scripts/fetch-assets.sh && python3 scripts/make_bpe_fixtures.py
"""
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates/lmkit-tokenizers/tests/fixtures")

ADVERSARIAL = [
    "I'm can't won't they're we've he'll she'd it's 'S 'LL '",
    "''''s'''t 're've ' m",
    "don\u2019t \u201cquoted\u201d \u2014 dash\u2026",
    "  leading and trailing   ",
    "tabs\tand\r\nCRLF\x0b\x0c\x85\xa0\u2028\u3000ideographic",
    "emoji \U0001F600\U0001F44D\U0001F3FD\U0001F468\u200d\U0001F469\u200d\U0001F467 and more",
    "combining e\u0301\u0301 a\u0308 \u0301start \xf1 n\u0303",
    "CJK \u6f22\u5b57\u304b\u306a\u30ab\u30ca\ud55c\uad6d\uc5b4 \u4e2d\u6587\uff0c\u6807\u70b9\u3002",
    "mixed \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u03b5\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "digits 123 4567 \u0661\u0662\u0663 \u216b\u2162 \xbd \xb2\xb3 3.14159 1,000,000",
    "control \x00\x01\x07\x1b[31m\x7f\x9f chars",
    "a" * 3000,
    "Donaudampfschifffahrtsgesellschaftskapit\xe4n" * 50,
    " " * 500 + "x",
    "\n" * 300,
    " a" * 500 + "  \n \t ",
]


def gpt2():
    g = os.path.join(ROOT, "assets/gpt2")
    tok = Tokenizer(models.BPE.from_file(os.path.join(g, "vocab.json"), os.path.join(g, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def main():
    with open(os.path.join(ROOT, "assets/books/corpus.txt"), encoding="utf-8") as f:
        docs = f.read().split("\n\f\n")
    sample = [d[:2000] for d in docs[::97][:20]] + ADVERSARIAL
    tok = gpt2()
    ids = [e.ids for e in tok.encode_batch(sample, add_special_tokens=False)]
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "bpe_hf_gpt2.json"), "w", encoding="utf-8") as f:
        json.dump({"texts": sample, "ids": ids}, f, ensure_ascii=False)

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trained.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    trained.train_from_iterator(docs[:100], trainer=trainer)
    os.makedirs(os.path.join(OUT, "bpe_hf_trained"), exist_ok=True)
    trained.save(os.path.join(OUT, "bpe_hf_trained/tokenizer.json"))
    texts = [d[:1500] for d in docs[500::211][:8]] + ADVERSARIAL[:11]
    ids = [e.ids for e in trained.encode_batch(texts, add_special_tokens=False)]
    with open(os.path.join(OUT, "bpe_hf_trained.json"), "w", encoding="utf-8") as f:
        json.dump({"texts": texts, "ids": ids}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
