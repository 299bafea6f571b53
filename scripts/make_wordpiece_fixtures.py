#!/usr/bin/env python3
"""Writes the WordPiece parity fixtures under crates/lmkit-tokenizers/tests/fixtures/wordpiece/.

Run by hand (needs the Python `tokenizers` and `transformers` packages and assets/ from
scripts/fetch-assets.sh); the outputs are committed, so CI needs no Python:

    python3 scripts/make_wordpiece_fixtures.py

References: HF `tokenizers` loading the real all-MiniLM-L6-v2 `tokenizer.json` (uncased), the
same vocabulary with other BertNormalizer settings (cased; lowercase keeping accents; accents
stripped without lowercasing), and transformers' fast BERT tokenizer for QA windows.
HF reports character offsets; the fixtures hold UTF-8 byte offsets, as lmkit does.
"""

import json
import os
import random
import sys

from tokenizers import Tokenizer, normalizers, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS = os.path.join(ROOT, "assets")
OUT = os.path.join(ROOT, "crates", "lmkit-tokenizers", "tests", "fixtures", "wordpiece")

# name -> BertNormalizer keyword arguments; "uncased" is the MiniLM tokenizer.json as it is.
CONFIGS = {
    "uncased": dict(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True),
    "cased": dict(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=False),
    "lower_keep_accents": dict(
        clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=True
    ),
    "strip_only_raw": dict(
        clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False
    ),
}

ADVERSARIAL = [
    "",
    " ",
    "\t\n\r ",
    "\u0000abc\ufffd def\u0000",
    "\u0007bell \u001b[31mred\u001b[0m \u007fdel",
    "zero\u200bwidth \u200djoiner\u200c \u00adsoft\u00adhyphen",
    "café Café CAFÉ naïve résumé Ångström",
    "e\u0301te\u0301 decomposed vs \u00e9t\u00e9 composed",
    "a\u0301\u0316b x\u0301\u1734y reordered marks",
    "İstanbul ΣΑΣ ß ﬁ ǅ Ǆ ẞ ΐ",
    "Ⅻ ① ½ ² ℃ Å K",
    "野口里佳 Noguchi Rika",
    "日本語のテキスト、中文文本。한국어 텍스트 が ぱ",
    "𠀀𪜀𫝀𫠠𬺰 extensions 豈更車 compat 丽",
    "emoji 😀👍🏽👨‍👩‍👧 🇫🇷 🥰 🫠 ☺️",
    "mixed: Привет мир! Ελληνικά; עברית, العربية؟ हिन्दी नमस्ते ไทย สวัสดี",
    "a" * 99,
    "a" * 100,
    "a" * 101,
    "é" * 100,
    "é" * 101,
    "İ" * 60,
    "supercalifragilisticexpialidocious" * 3,
    "[CLS] [SEP] [MASK] [PAD] [UNK] [cls] [SEP][SEP]x[MASK]y",
    "[MASK [SEP [SEP] SEP] ]]",
    "hello,world!...(test)[x]{y}<z> a-b_c @user #tag $5 100% ^&*~`|\\ 'quote' \"dq\"",
    "“quoted” ‘single’ — dash – en… ellipsis «guillemets» ¿qué? ¡sí! 「括弧」",
    "math ∑ ∞ ≠ ± × ÷ → currency € £ ¥ ₹ ₿",
    "a\u00a0b\u2003c\u3000d\u2028e\u0085f\u000bg\u000ch\u001ci\u001fj",
    "\ue000private\U000f0000 \u200e\u202etext\u202c \ufeffBOM",
    "\uffff\U0010ffff nonchars \U000e0001tag",
    "3.14159 1,000,000 2024-01-01 12:30pm 0x1F 1e-9",
    'fn main() { println!("Hello, world!"); }',
    "let x: Vec<u32> = vec![1, 2, 3]; self.0.iter().map(|x| x * 2)",
    "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇ zalgo",
    "x" + "\u0301" * 50 + "y",
    "ᄒ\u1161\u11ab jamo 한 Hangul",
    "don't I'm we've they're it's can't do not . , ? !",
    "unaffable tokenization ##ing ## #",
    "Tab\tseparated\tvalues\nnew line\r\ncarriage",
    " leading and trailing spaces   ",
]


def byte_offsets(text, offsets):
    """HF char offsets -> UTF-8 byte offsets."""
    pos = [0]
    for ch in text:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    return [x for s, e in offsets for x in (pos[s], pos[e])]


def tokenizer(config):
    tok = Tokenizer.from_file(os.path.join(ASSETS, "minilm", "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    if config != "uncased":
        tok.normalizer = normalizers.BertNormalizer(**CONFIGS[config])
    return tok


def enc_record(text, e, extra=None):
    rec = {"text": text, "ids": e.ids, "offsets": byte_offsets(text, e.offsets)}
    if extra:
        rec.update(extra)
    return rec


def write_jsonl(name, records):
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{name}: {len(records)} records, {os.path.getsize(path)} bytes")


def corpus_lines():
    with open(os.path.join(ASSETS, "books", "corpus.txt"), encoding="utf-8") as f:
        lines = [l for l in f.read().split("\n") if l.strip()]
    return lines


def hangul_jamo(cp):
    """Unicode's algorithmic NFD of a Hangul syllable (checked independently in Rust)."""
    s = cp - 0xAC00
    out = chr(0x1100 + s // 588) + chr(0x1161 + (s % 588) // 28)
    return out + (chr(0x11A7 + s % 28) if s % 28 else "")


def unicode_table(config):
    """Per code point c: the words HF makes of "x{c}x", run-length coded.
    Rows: ["R"|"S"|"I"|"H", first, last] for runs removed / split like whitespace /
    isolated as themselves / Hangul syllables decomposed into jamo; ["M", cp, words] for anything else. Identity is implied."""
    n = normalizers.BertNormalizer(**CONFIGS[config])
    p = pre_tokenizers.BertPreTokenizer()
    rows = []
    run = None  # [kind, first, last]
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        words = [w for w, _ in p.pre_tokenize_str(n.normalize_str("x" + c + "x"))]
        if words == ["x" + c + "x"]:
            kind = None
        elif words == ["xx"]:
            kind = "R"
        elif words == ["x", "x"]:
            kind = "S"
        elif words == ["x", c, "x"]:
            kind = "I"
        elif 0xAC00 <= cp <= 0xD7A3 and words == ["x" + hangul_jamo(cp) + "x"]:
            kind = "H"
        else:
            kind = "M"
        if run and (kind != run[0] or cp != run[2] + 1 or kind == "M"):
            rows.append(run)
            run = None
        if kind == "M":
            rows.append(["M", cp, words])
        elif kind is not None:
            if run is None:
                run = [kind, cp, cp]
            else:
                run[2] = cp
    if run:
        rows.append(run)
    return rows


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(20240611)
    lines = corpus_lines()
    sample = sorted(rng.sample(range(len(lines)), 1500))
    sample_lines = [lines[i] for i in sample]

    # Single-text encodings, with special tokens.
    for config, n_lines in [
        ("uncased", 1200),
        ("cased", 250),
        ("lower_keep_accents", 150),
        ("strip_only_raw", 100),
    ]:
        tok = tokenizer(config)
        texts = sample_lines[:n_lines] + ADVERSARIAL
        records = [enc_record(t, tok.encode(t)) for t in texts]
        write_jsonl(f"encode_{config}.jsonl", records)

    # Pairs with truncation and padding (uncased).
    tok = tokenizer("uncased")
    settings = [
        None,
        dict(max_length=16, strategy="longest_first"),
        dict(max_length=32, strategy="longest_first"),
        dict(max_length=7, strategy="longest_first"),
        dict(max_length=3, strategy="longest_first"),
        dict(max_length=20, strategy="only_first"),
        dict(max_length=20, strategy="only_second"),
        dict(max_length=24, strategy="only_second", direction="left"),
        dict(max_length=12, strategy="longest_first", direction="left"),
    ]
    paddings = [
        None,
        dict(length=48),
        dict(pad_to_multiple_of=8),
        dict(length=40, direction="left", pad_type_id=1),
    ]
    records = []
    for i in range(120):
        a = sample_lines[rng.randrange(len(sample_lines))]
        b = sample_lines[rng.randrange(len(sample_lines))]
        if i % 10 == 9:
            a = a[:12]
        trunc = settings[i % len(settings)]
        pad = paddings[(i // len(settings)) % len(paddings)]
        add_special = i % 7 != 3
        tok.no_truncation()
        tok.no_padding()
        if trunc:
            tok.enable_truncation(**trunc)
        if pad:
            tok.enable_padding(pad_id=0, pad_token="[PAD]", **pad)
        rec = {"a": a, "b": b, "truncation": trunc, "padding": pad, "add_special": add_special}
        try:
            e = tok.encode(a, b, add_special_tokens=add_special)
        except Exception as err:  # HF refuses, lmkit must too
            rec["error"] = str(err)
            records.append(rec)
            continue
        # Pad tokens and specials carry (0, 0); map B's offsets into b.
        seq = e.sequence_ids
        pos_a = [0]
        for ch in a:
            pos_a.append(pos_a[-1] + len(ch.encode()))
        pos_b = [0]
        for ch in b:
            pos_b.append(pos_b[-1] + len(ch.encode()))
        offs = []
        for (s, t), sid in zip(e.offsets, seq):
            pos = pos_b if sid == 1 else pos_a
            offs += [pos[s], pos[t]] if sid is not None else [0, 0]
        rec.update(
            ids=e.ids,
            type_ids=e.type_ids,
            offsets=offs,
            special=e.special_tokens_mask,
            attention=e.attention_mask,
        )
        records.append(rec)
    tok.no_truncation()
    tok.no_padding()
    write_jsonl("pairs.jsonl", records)

    # Batch padding to the longest.
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    batches = []
    for i in range(5):
        texts = [sample_lines[rng.randrange(len(sample_lines))] for _ in range(4)]
        encs = tok.encode_batch(texts)
        batches.append(
            {
                "texts": texts,
                "ids": [e.ids for e in encs],
                "attention": [e.attention_mask for e in encs],
            }
        )
    tok.no_padding()
    write_jsonl("batch.jsonl", batches)

    # QA windows through transformers, as a QA pipeline calls it.
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(os.path.join(ASSETS, "minilm"))
    records = []
    for i in range(16):
        q = sample_lines[rng.randrange(len(sample_lines))][:80]
        start = rng.randrange(len(sample_lines) - 8)
        c = " ".join(sample_lines[start : start + 8])
        max_len, stride = [(64, 16), (48, 8), (96, 32), (40, 0)][i % 4]
        r = hf(
            q,
            c,
            truncation="only_second",
            max_length=max_len,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        pos_q = [0]
        for ch in q:
            pos_q.append(pos_q[-1] + len(ch.encode()))
        pos_c = [0]
        for ch in c:
            pos_c.append(pos_c[-1] + len(ch.encode()))
        windows = []
        for w in range(len(r["input_ids"])):
            seq = r.sequence_ids(w)
            offs = []
            for (s, t), sid in zip(r["offset_mapping"][w], seq):
                pos = pos_c if sid == 1 else pos_q
                offs += [pos[s], pos[t]] if sid is not None else [0, 0]
            windows.append(
                {
                    "ids": r["input_ids"][w],
                    "type_ids": r["token_type_ids"][w],
                    "offsets": offs,
                    "seq_ids": seq,
                }
            )
        records.append({"question": q, "context": c, "max_len": max_len, "stride": stride, "windows": windows})
    write_jsonl("windows.jsonl", records)

    # Decoding.
    records = []
    for t in sample_lines[:100] + ADVERSARIAL:
        ids = tok.encode(t).ids
        records.append(
            {"ids": ids, "skip": tok.decode(ids, skip_special_tokens=True), "keep": tok.decode(ids, skip_special_tokens=False)}
        )
    write_jsonl("decode.jsonl", records)

    # Every code point through each normalizer + pre-tokenizer.
    for config in CONFIGS:
        write_jsonl(f"unicode_{config}.jsonl", unicode_table(config))


if __name__ == "__main__":
    sys.exit(main())
