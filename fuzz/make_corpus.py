#!/usr/bin/env python3
"""Writes the seed corpora (fuzz/corpus/<target>/) from the repository's own
small fixtures and test data: valid files the fuzzer mutates from. Standard
library only; rerun after changing a format. Seeds stay small (< 8 KB each)."""

import json
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fuzz" / "corpus"
FIX = ROOT / "tests" / "fixtures"
DATA = ROOT / "tests" / "data"


def st_file(tensors, metadata=None):
    """A safetensors file of F32 tensors {name: (shape, values)}."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (shape, vals) in sorted(tensors.items()):
        blob = struct.pack(f"<{len(vals)}f", *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def shard(tokens, width=2):
    head = b"LMKTOK01" + struct.pack("<II", width, 0) + struct.pack("<Q", len(tokens))
    head += b"\0" * (32 - len(head))
    fmt = "<%d%s" % (len(tokens), "H" if width == 2 else "I")
    return head + struct.pack(fmt, *tokens)


def head_lines(path, n):
    return "".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:n]).encode()


def write(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    assert len(data) < 8192, (target, name, len(data))
    (d / name).write_bytes(data)


def main():
    # Tokenizer files.
    for case in ["bert-tiny-classify", "bert-tiny-mlm"]:
        write("wordpiece_parse_files", f"{case}-vocab.txt", (FIX / case / "vocab.txt").read_bytes())
        write("wordpiece_parse_files", f"{case}-tokenizer.json", (FIX / case / "tokenizer.json").read_bytes())
    byte_vocab = {chr(c): i for i, c in enumerate(range(0x21, 0x7F))}
    write("bpe_parse_files", "tiny", json.dumps(byte_vocab).encode() + b"\0#version: 0.2\n! \"\n")
    write("bpe_encode_decode", "text", b"Hello world, it's 2024! \xff\xfe <|endoftext|> caf\xc3\xa9")
    odd = "HELLOworld helloWorld I'M 12345!/\n/ \u017f'\u017f e\u0301 \u6f22\u5b57 \U0001f600 \r\n  x\n "
    write("openai_encode_decode", "text", odd.encode() + b" \xff\xfe <|endoftext|>")
    # A rank file: every byte, then a few merged tokens (base64 and rank per line).
    import base64
    toks = [bytes([b]) for b in range(256)] + [b"he", b"ll", b"hell", b"hello", b" w", b"\xe6\xbc"]
    write("tiktoken_parse", "ranks", b"".join(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate(toks)))

    # Configs.
    for case in ["gpt2-tiny", "bert-tiny-classify", "bert-tiny-qa", "bert-tiny-pretraining"]:
        write("model_config", case, (FIX / case / "config.json").read_bytes())
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    pooling = {"word_embedding_dimension": 32, "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}
    write("model_config", "sentence-transformers",
          json.dumps(modules).encode() + b"\0" + json.dumps(pooling).encode())

    # Safetensors.
    write("safetensors", "two-tensors", st_file(
        {"wte.weight": ([2, 3], [0.5, -1, 2, 0, 1e-3, 3]), "ln_f.bias": ([3], [0, 1, 2])},
        {"format": "pt"}))

    # PyTorch checkpoints (torch.save zips, written by make_fixtures.py --only torch-bin).
    for name in ["views.bin", "handmade.bin", "os_system.bin", "legacy.bin"]:
        write("torch_bin", name.removesuffix(".bin"), (DATA / "torch-bin" / name).read_bytes())

    # Training state: trainer_state.json NUL optimizer.safetensors.
    state = {
        "format": 1, "step": 3, "data": {"epoch": 0, "cursor": 12},
        "rng": {"s": [1, 2, 3, 4]}, "seed": 1, "tokens_seen": 96, "elapsed_s": 0.5,
        "optim": {"schedule": {"kind": "cosine", "max_lr": 0.001, "min_lr": 0.0001,
                               "warmup_steps": 0, "total_steps": 10},
                  "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
                  "grad_clip": 1.0, "grad_accum": 1},
        "batch_size": 2, "seq_len": 8, "num_params": 4, "extra": {"arch": "gpt2"},
    }
    optim = st_file({"exp_avg": ([4], [0.1, 0.2, 0.3, 0.4]), "exp_avg_sq": ([4], [1, 2, 3, 4])},
                    {"step": "3"})
    write("train_state", "step-3", json.dumps(state).encode() + b"\0" + optim)

    # Token shards: meta.json NUL train.bin NUL val.bin.
    train, val = list(b"hello shards\n") + [256], list(b"val\n")
    meta = {"version": 1, "token_width": 2, "vocab_size": 257, "eos_id": 256, "val_fraction": 0.1,
            "chunk_tokens": 1024, "train_tokens": len(train), "val_tokens": len(val),
            "documents": 1, "tokenizer": "bytes", "sources": []}
    write("token_shards", "small", json.dumps(meta).encode() + b"\0" + shard(train) + b"\0" + shard(val))

    # llm.c (header + uint16) and nanoGPT (raw uint16) token files.
    ids = struct.pack("<6H", 50256, 464, 2068, 7586, 21831, 50256)
    header = struct.pack("<3i", 20240520, 1, 6) + bytes(4 * 253)
    write("token_files", "llmc.bin", header + ids)
    write("token_files", "nanogpt.bin", ids)
    # Parquet files written by pyarrow (scripts/make_parquet_fixtures.py).
    for name in ["snappy.parquet", "zstd.parquet", "gzip.parquet"]:
        write("parquet_text", name, (ROOT / "tests" / "data" / "parquet" / name).read_bytes())

    # Data files.
    write("data_readers", "classify.jsonl", head_lines(DATA / "classify" / "prose_code.train.jsonl", 6))
    write("data_readers", "regression.jsonl", head_lines(DATA / "regression" / "replaced.train.jsonl", 6)
          + b'{"sentence1": "A b.", "sentence2": "A c.", "label": 2.5e0, "idx": 3}\n')
    write("data_readers", "multiple_choice.jsonl",
          head_lines(DATA / "multiple_choice" / "rust_story.train.jsonl", 2)
          + b'{"sent1": "A man", "sent2": "He", "ending0": "runs.", "ending1": "sits.", "label": 1}\n')
    write("data_readers", "lambada.jsonl", head_lines(DATA / "lambada" / "rust_book.jsonl", 4))
    write("data_readers", "summarize.jsonl", head_lines(DATA / "summarize" / "rust_book.jsonl", 2)[:6000])
    squad = json.loads((DATA / "squad" / "rust_book.json").read_text(encoding="utf-8"))
    art = squad["data"][0]
    para = dict(art["paragraphs"][0])
    para["qas"] = para["qas"][:2]
    para["context"] = para["context"]
    small = {"version": squad.get("version", "1.1"), "data": [{"title": art.get("title", ""), "paragraphs": [para]}]}
    write("data_readers", "squad.json", json.dumps(small).encode()[:8000])
    write("data_readers", "tagging.conll", b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n"
          b"rejects VBZ B-VP O\n\nPeter B-PER\nBlackburn I-PER\n")
    write("data_readers", "tagging.jsonl", b'{"tokens": ["Rust", "is", "fast"], '
          b'"tags": ["B-LANG", "O", "O"]}\n{"tokens": [], "tags": []}\n')
    write("data_readers", "cbt.txt", (DATA / "cbt" / "tiny_NE.txt").read_bytes())
    write("data_readers", "translate.jsonl", (DATA / "translate" / "en_fr.jsonl").read_bytes())
    write("data_readers", "qa.jsonl", (DATA / "qa" / "coqa_tiny.jsonl").read_bytes()
          + (DATA / "qa" / "nq_tiny.jsonl").read_bytes())
    write("data_readers", "documents.txt", b"First sentence.\nSecond one.\n\nA new document.\nIts end.\n")


if __name__ == "__main__":
    main()
