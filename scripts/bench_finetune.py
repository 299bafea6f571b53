#!/usr/bin/env python3
"""Fine-tuning throughput: lmkit vs PyTorch (transformers) on the same task, same run.

Fine-tunes all-MiniLM-L6-v2 (assets/minilm, a bare BertModel: the classifier head is new)
for sequence classification on tests/data/classify/prose_code.train.jsonl for one epoch
with the same hyper-parameters on both sides: batch 32, max length 128 (each batch padded
to its longest example), AdamW lr 5e-5 (betas 0.9/0.999, eps 1e-8, no weight decay),
linear decay, gradient clipping at 1.0, dropout off (lmkit trains without dropout; the
PyTorch model is built with every dropout probability 0 so both do the same arithmetic),
float32, the same thread count. Each side is timed over its optimizer steps only (no
data loading, tokenisation or evaluation), then both are scored on the held-out file.

    cargo build --release -p lmkit-cli
    python3 scripts/bench_finetune.py [--threads 2] [--limit N] [--epochs 1] [--json FILE]

lmkit runs twice: float32, and `--dtype bf16` (mixed precision: bf16 matmul operands, f32
sums, weights and optimizer), each against PyTorch float32.

Prints examples/s of each and the ratio lmkit / PyTorch, plus held-out accuracy; then the
held-out accuracy of lmkit's f32 fine-tuned classifier run in f32 and int8 by lmkit and by
ONNX Runtime (the same checkpoint exported; int8 = quantize_dynamic), the accuracy side of
the int8 speed figures in scripts/bench_bert.py.
--json FILE writes the figures in scripts/bench_common.py's format (work: 3x the
forward FLOPs per example: PyTorch's at the padded lengths of its batches, lmkit's at the
real lengths, as its encoder skips the padding) for scripts/bench.sh.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import bert_forward_flops, figure, peer, write_json  # noqa: E402


def read_jsonl(path, limit=None):
    rows = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
    return rows[:limit] if limit else rows


def bench_torch(args, train, held, labels):
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification, get_linear_schedule_with_warmup

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model_dir = os.path.join(ROOT, "assets", "minilm")
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = BertForSequenceClassification.from_pretrained(
        model_dir, num_labels=len(labels), hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
    model.train()
    label2id = {l: i for i, l in enumerate(labels)}

    def batches(rows, bs, shuffle):
        idx = list(range(len(rows)))
        if shuffle:
            random.Random(args.seed).shuffle(idx)
        for k in range(0, len(idx), bs):
            chunk = [rows[i] for i in idx[k:k + bs]]
            enc = tok([r["text"] for r in chunk], truncation=True, max_length=args.max_seq_len,
                      padding=True, return_tensors="pt")
            enc["labels"] = torch.tensor([label2id[r["label"]] for r in chunk])
            yield enc

    # Tokenise up front: only the steps are timed.
    train_batches = [b for _ in range(args.epochs) for b in batches(train, args.batch_size, True)]
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    sched = get_linear_schedule_with_warmup(opt, 0, len(train_batches))
    t0 = time.perf_counter()
    for b in train_batches:
        loss = model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    secs = time.perf_counter() - t0
    model.eval()
    correct = 0
    with torch.no_grad():
        for b in batches(held, 64, False):
            y = b.pop("labels")
            correct += (model(**b).logits.argmax(-1) == y).sum().item()
    n = len(train) * args.epochs
    c = model.config
    def work(seq):
        return 3 * bert_forward_flops(c.num_hidden_layers, c.hidden_size, c.intermediate_size, seq)

    # PyTorch runs every padded position; lmkit's encoder only the real tokens.
    flops = sum(work(b["input_ids"].shape[1]) * b["input_ids"].shape[0] for b in train_batches) / n
    real = sum(work(int(k)) for b in train_batches for k in b["attention_mask"].sum(1)) / n
    return {"examples_per_s": n / secs, "train_seconds": secs, "eval_accuracy": correct / len(held),
            "flops_per_example": flops, "real_flops_per_example": real}


def bench_lmkit(args, train_path, held_path, dtype="f32", keep=None):
    """Fine-tunes with lmkit; the model is written to `keep` when given."""
    exe = args.lmkit
    if not os.path.exists(exe):
        sys.exit(f"{exe} not found: run `cargo build --release -p lmkit-cli` first")
    with tempfile.TemporaryDirectory() as tmp:
        out = keep or tmp
        cmd = [exe, "finetune", "--task", "classify", "--model", os.path.join(ROOT, "assets", "minilm"),
               "--train", train_path, "--eval", held_path, "--output", out,
               "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
               "--max-seq-len", str(args.max_seq_len), "--lr", "5e-5", "--seed", str(args.seed),
               "--threads", str(args.threads), "--dtype", dtype, "--json"]
        res = subprocess.run(cmd, check=True, capture_output=True, text=True)
        s = json.loads(res.stdout.strip().splitlines()[-1])
    return {"examples_per_s": s["examples_per_s"], "train_seconds": s["train_seconds"],
            "eval_accuracy": s["eval"]["eval_accuracy"]}


def int8_accuracy(args, model_dir, held_path, held):
    """Held-out accuracy of one fine-tuned classifier (lmkit's f32 run) with f32 and int8
    weights: lmkit (`classify --dtype`), and ONNX Runtime on the same checkpoint exported
    from transformers, as is and after quantize_dynamic (QInt8 weights, u8 activations)."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    gold = [r["label"] for r in held]
    acc = {}
    for dtype in ("f32", "int8"):
        res = subprocess.run([args.lmkit, "classify", "--model", model_dir, "--input", held_path,
                              "--json", "--dtype", dtype, "--threads", str(args.threads), "--truncate"],
                             check=True, capture_output=True, text=True)
        rows = [json.loads(l) for l in res.stdout.splitlines() if l.strip()]
        best = [r[0]["label"] if isinstance(r, list) else r["label"] for r in rows]
        acc[f"lmkit {dtype}"] = sum(p == g for p, g in zip(best, gold)) / len(gold)
    try:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as e:
        print(f"ONNX Runtime accuracy skipped: {e}", flush=True)
        return acc
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = BertForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    id2label = model.config.id2label
    enc = tok([r["text"] for r in held], padding=True, truncation=True, max_length=args.max_seq_len,
              return_tensors="np")
    with tempfile.TemporaryDirectory() as tmp:
        path, qpath = os.path.join(tmp, "cls.onnx"), os.path.join(tmp, "cls.int8.onnx")
        names = ["input_ids", "attention_mask", "token_type_ids"]
        feed = {k: enc[k].astype(np.int64) for k in names}
        with torch.no_grad():
            torch.onnx.export(model, tuple(torch.from_numpy(feed[k][:2]) for k in names), path,
                              input_names=names, output_names=["logits"],
                              dynamic_axes={k: {0: "b", 1: "t"} for k in names}, opset_version=17,
                              dynamo=False)
        quantize_dynamic(path, qpath, weight_type=QuantType.QInt8)
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        for name, f in (("onnxruntime f32", path), ("onnxruntime int8", qpath)):
            sess = ort.InferenceSession(f, so, providers=["CPUExecutionProvider"])
            pred = []
            for k in range(0, len(held), 32):
                logits = sess.run(None, {n: v[k:k + 32] for n, v in feed.items()})[0]
                pred += [id2label[int(i)] for i in logits.argmax(-1)]
            acc[name] = sum(p == g for p, g in zip(pred, gold)) / len(gold)
    return acc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--limit", type=int, default=None, help="use the first N training rows")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--lmkit", default=os.path.join(ROOT, "target", "release", "lmkit"),
                    help="release lmkit binary")
    ap.add_argument("--json", metavar="FILE", help="write the figures here (bench_common format)")
    args = ap.parse_args()
    data = os.path.join(ROOT, "tests", "data", "classify")
    train_path = os.path.join(data, "prose_code.train.jsonl")
    held_path = os.path.join(data, "prose_code.eval.jsonl")
    train, held = read_jsonl(train_path, args.limit), read_jsonl(held_path)
    labels = sorted({r["label"] for r in train})  # lmkit's order for string labels
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.writelines(json.dumps(r) + "\n" for r in train)
        sliced = f.name
    keep = tempfile.mkdtemp(prefix="lmkit-finetuned-")
    try:
        lm = bench_lmkit(args, sliced, held_path, keep=keep)
        lm16 = bench_lmkit(args, sliced, held_path, "bf16")
        pt = bench_torch(args, train, held, labels)
        acc8 = int8_accuracy(args, keep, held_path, held)
    finally:
        os.unlink(sliced)
        shutil.rmtree(keep, ignore_errors=True)
    print(f"MiniLM-L6 classification fine-tune, {len(train)} examples x {args.epochs} epoch(s), "
          f"batch {args.batch_size}, max len {args.max_seq_len}, {args.threads} threads")
    for name, r in (("lmkit", lm), ("lmkit bf16", lm16), ("pytorch", pt)):
        print(f"  {name:10s} {r['examples_per_s']:8.2f} examples/s  ({r['train_seconds']:.1f} s)  "
              f"held-out accuracy {r['eval_accuracy']:.4f}")
    print(f"  ratio lmkit/pytorch: {lm['examples_per_s'] / pt['examples_per_s']:.2f}x, "
          f"lmkit bf16/pytorch: {lm16['examples_per_s'] / pt['examples_per_s']:.2f}x")
    print("  held-out accuracy of lmkit's f32 fine-tuned classifier, by inference format: "
          + ", ".join(f"{k} {v:.4f}" for k, v in acc8.items()))
    if args.json:
        what = f"MiniLM-L6 fine-tuning (classification, batch {args.batch_size}, max len {args.max_seq_len})"
        note = f"{len(train)} examples x {args.epochs} epoch(s); held-out accuracy lmkit "
        write_json(args.json, [
            figure(what, "examples/s", lm["examples_per_s"],
                   {"pytorch f32": peer(pt["examples_per_s"], flops_per_item=pt["flops_per_example"])},
                   threads=args.threads, flops_per_item=pt["real_flops_per_example"],
                   note=note + f"{lm['eval_accuracy']:.3f}, PyTorch {pt['eval_accuracy']:.3f}"),
            figure(f"{what}, bf16", "examples/s", lm16["examples_per_s"],
                   {"pytorch f32": peer(pt["examples_per_s"], dtype="f32",
                                        flops_per_item=pt["flops_per_example"])}, dtype="bf16",
                   threads=args.threads, flops_per_item=pt["real_flops_per_example"],
                   note=note + f"bf16 {lm16['eval_accuracy']:.3f}, PyTorch f32 {pt['eval_accuracy']:.3f}"),
        ], notes=["Held-out accuracy of lmkit's f32 fine-tuned MiniLM classifier run in each "
                  "inference format (int8: weights per channel, activations quantized as they run): "
                  + ", ".join(f"{k} {v:.4f}" for k, v in acc8.items()) + "."])

if __name__ == "__main__":
    main()
