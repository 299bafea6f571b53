#!/usr/bin/env python3
"""Peak memory and time of the `lmkit` binary on the hostile inputs of issue 13
(items 1, 2 and 7): each case is built in a scratch folder, run once, and
reported as exit code, peak RSS (the child's own, from wait4), wall time and
the first line of its stderr. Every case must end in an orderly way: exit 0
or 1, never a signal or a panic.

Usage: scripts/hardening_rss.py [PATH_TO_LMKIT]   (default target/release/lmkit;
after scripts/fetch-assets.sh)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gpt2_tokenizer_json(merge_indent=0):
    """GPT-2's vocabulary as an HF tokenizer.json (from assets/gpt2)."""
    vocab = json.load(open(os.path.join(ROOT, "assets/gpt2/vocab.json"), encoding="utf-8"))
    merges = [
        line
        for line in open(os.path.join(ROOT, "assets/gpt2/merges.txt"), encoding="utf-8").read().split("\n")[1:]
        if line
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": True, "special": True}
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": []},
    }
    text = json.dumps(doc, ensure_ascii=False, indent=2)
    pad = " " * merge_indent
    body = ",\n".join(pad + json.dumps(m, ensure_ascii=False) for m in merges)
    return doc, text.replace('"merges": []', '"merges": [\n' + body + "\n]", 1)


def copy_fixture(name, dest, **config):
    shutil.copytree(os.path.join(ROOT, "tests/fixtures", name), dest)
    p = os.path.join(dest, "config.json")
    c = json.load(open(p))
    c.update(config)
    json.dump(c, open(p, "w"))
    return dest


def run(lmkit, args):
    t0 = time.time()
    p = subprocess.Popen([lmkit] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(p.pid, 0)
    secs = time.time() - t0
    code = os.waitstatus_to_exitcode(status)
    first = " | ".join(l.strip() for l in err.splitlines() if l.strip())
    return code, usage.ru_maxrss / 1024, secs, first, err


def prepare(tmp):
    """Writes every input under `tmp`; returns the cases."""
    hi = os.path.join(tmp, "hi.txt")
    open(hi, "w").write("hello world\n")
    cases = []

    # Item 1: an added token with id 2^32 - 1.
    d = os.path.join(tmp, "tok-hostile")
    os.makedirs(d)
    doc, _ = gpt2_tokenizer_json()
    doc["added_tokens"].append(dict(doc["added_tokens"][0], id=4294967295, content="<|hostile|>"))
    json.dump(doc, open(os.path.join(d, "tokenizer.json"), "w"), ensure_ascii=False)
    cases.append(("1", "tokenizer.json, added token id 4294967295", ["tokenize", "--tokenizer", d, "--input", hi]))

    # Item 2: sizes in config.json and on the command line.
    m = copy_fixture("bert-tiny-classify", os.path.join(tmp, "labels"), num_labels=10**9)
    cases.append(("2", "BERT config num_labels 1e9 (classify)", ["classify", "--model", m, "--input", hi]))
    m = copy_fixture("bert-tiny-classify", os.path.join(tmp, "hidden"), hidden_size=10**9, num_attention_heads=1)
    cases.append(("2", "BERT config hidden_size 1e9 (classify)", ["classify", "--model", m, "--input", hi]))
    m = copy_fixture("gpt2-tiny", os.path.join(tmp, "layers"), n_layer=10**6)
    cases.append(("2", "GPT-2 config n_layer 1e6 (generate)",
                  ["generate", "--model", m, "--prompt", "hi", "--max-new-tokens", "1"]))
    text = os.path.join(tmp, "text.txt")
    open(text, "w").write("some text to train on.\n" * 50)
    cases.append(("2", "pretrain --n-embd 1e9",
                  ["pretrain", "--tokenizer", os.path.join(ROOT, "assets/gpt2"), "--data", text,
                   "--output", os.path.join(tmp, "run"), "--n-layer", "1", "--n-embd", "1000000000",
                   "--n-head", "1", "--seq-len", "16"]))
    cases.append(("2", "train-tokenizer --vocab-size 4e9",
                  ["train-tokenizer", "--kind", "bpe", "--output", os.path.join(tmp, "newtok"),
                   "--vocab-size", "4000000000", text]))

    # Item 7: a 7 MB tokenizer.json, a 97 MB safetensors header, a 50 MB line.
    d = os.path.join(tmp, "tok-big")
    os.makedirs(d)
    _, big = gpt2_tokenizer_json(merge_indent=96)
    open(os.path.join(d, "tokenizer.json"), "w").write(big)
    mb = os.path.getsize(os.path.join(d, "tokenizer.json")) / 2**20
    cases.append(("7", f"tokenizer.json of {mb:.1f} MiB (load + encode)", ["tokenize", "--tokenizer", d, "--input", hi]))
    m = copy_fixture("gpt2-tiny", os.path.join(tmp, "header"))
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(ROOT, "assets/gpt2", f), m)
    header = json.dumps({"__metadata__": {"pad": "x" * (97 * 2**20)}}).encode()
    with open(os.path.join(m, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
    cases.append(("7", "model.safetensors with a 97 MiB header (generate)",
                  ["generate", "--model", m, "--prompt", "hi", "--max-new-tokens", "1"]))
    corpus = open(os.path.join(ROOT, "assets/books/corpus.txt"), encoding="utf-8").read().replace("\n", " ")
    line = os.path.join(tmp, "line.txt")
    with open(line, "w", encoding="utf-8") as f:
        left = 50 * 2**20
        while left > 0:
            f.write(corpus[:left])
            left -= len(corpus[:left])
    del corpus
    for name, tok in [("BPE", "assets/gpt2"), ("WordPiece", "assets/minilm")]:
        cases.append(("7", f"tokenize --count, one 50 MiB line ({name})",
                      ["tokenize", "--tokenizer", os.path.join(ROOT, tok), "--input", line, "--count"]))

    return cases


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--prepare":
        json.dump(prepare(sys.argv[2]), sys.stdout)
        return
    lmkit = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/lmkit")
    tmp = tempfile.mkdtemp(prefix="lmkit-rss-")
    # Built by a child: a process's peak RSS counts what its parent held at
    # fork, so the measuring process must stay small.
    cases = json.loads(subprocess.check_output([sys.executable, __file__, "--prepare", tmp]))
    print(f"{'item':<5} {'case':<52} {'exit':>4} {'peak RSS MiB':>12} {'seconds':>8}  first line of stderr")
    bad = 0
    for item, name, args in cases:
        code, rss, secs, first, err = run(lmkit, args)
        orderly = code in (0, 1) and "panicked" not in err
        bad += not orderly
        print(f"{item:<5} {name:<52} {code:>4} {rss:>12.1f} {secs:>8.2f}  {first[:160]}")
    shutil.rmtree(tmp)
    if bad:
        sys.exit(f"{bad} case(s) did not end in an orderly way")


if __name__ == "__main__":
    main()
