#!/usr/bin/env python3
"""HF round trip of `lmkit pretrain`: loads a training output folder with
transformers' GPT2LMHeadModel.from_pretrained and recomputes the final
validation loss lmkit logged, on the same validation batches.

Usage: scripts/check_train_hf.py OUTPUT_DIR  (after `lmkit pretrain --output OUTPUT_DIR`)
Needs torch + transformers (not used by CI). Exits 1 if the losses differ by > 1e-4.
"""
import json
import struct
import sys

import numpy as np
import torch
from transformers import GPT2LMHeadModel


def read_shard(path):
    with open(path, "rb") as f:
        head = f.read(32)
        assert head[:8] == b"LMKTOK01", "not an lmkit shard"
        width, _, n = struct.unpack("<IIQ", head[8:24])
        dtype = np.uint16 if width == 2 else np.uint32
        return np.frombuffer(f.read(), dtype=dtype, count=n).astype(np.int64)


def main():
    out = sys.argv[1]
    rows = [json.loads(l) for l in open(f"{out}/metrics.jsonl")]
    val = [r for r in rows if "val_loss" in r][-1]
    state_dir = sorted(__import__("glob").glob(f"{out}/checkpoints/step-*"))[-1]
    st = json.load(open(f"{state_dir}/trainer_state.json"))
    run = st["extra"]["run"]
    b, t, max_batches = run["batch_size"], run["seq_len"], run["eval_batches"]
    tokens = read_shard(f"{out}/data/val.bin")
    windows = (len(tokens) - 1) // t
    n_batches = min(max_batches, windows // b)
    torch.set_num_threads(2)
    model = GPT2LMHeadModel.from_pretrained(out, attn_implementation="eager").eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(n_batches):
            rows_ = [tokens[(i * b + r) * t:(i * b + r) * t + t + 1] for r in range(b)]
            x = torch.tensor(np.stack([w[:-1] for w in rows_]))
            y = torch.tensor(np.stack([w[1:] for w in rows_]))
            logits = model(x).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
            total += loss.item()
            count += y.numel()
    hf = total / count
    print(f"step {val['step']}: lmkit val_loss {val['val_loss']:.6f}, transformers {hf:.6f}, |diff| {abs(hf - val['val_loss']):.2e}")
    sys.exit(0 if abs(hf - val["val_loss"]) <= 1e-4 else 1)


if __name__ == "__main__":
    main()
