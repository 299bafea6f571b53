#!/usr/bin/env python3
"""HF round trip of `lmkit finetune` and `lmkit pretrain --arch bert`: each output folder must
load in transformers with no missing or unexpected keys, and give the same answers.

  - classify: all-MiniLM-L6-v2 fine-tuned for a few steps; BertForSequenceClassification's
    probabilities equal `lmkit classify --json` on real sentences (max abs diff <= 1e-4);
  - regression: the same fine-tuned as a one-output regression model on STS-like pairs: HF reads
    problem_type regression, its outputs equal `lmkit classify --json` scores (and its
    text-classification pipeline's), its MSE loss and scipy's Pearson / Spearman equal
    `lmkit eval --task regression`;
  - qa: the same for BertForQuestionAnswering; the start/end logits' argmax span equals
    `lmkit qa`'s best answer on the first SQuAD-format question;
  - pretrain: a tiny `lmkit pretrain --arch bert` run loads as BertForPreTraining;
  - multiple-choice: all-MiniLM-L6-v2 fine-tuned for a few steps loads as BertForMultipleChoice,
    and a small random GPT-2 (GPT-2's real vocabulary) as GPT2DoubleHeadsModel; their scores of
    every choice of the committed story-cloze eval rows equal `lmkit eval --task multiple-choice
    --predictions` (max abs diff <= 1e-4), the inputs built as HF run_swag (BERT) and GPT-1
    (GPT-2: `context <|endoftext|> choice`, mc_token_ids = the last token) build them.

    cargo build --release -p lmkit-cli
    python3 scripts/check_finetune_hf.py [--only classify regression qa pretrain multiple-choice]

`LMKIT=path/to/lmkit` runs another build (a debug one is slower, not different).

Needs torch + transformers (+ scipy for regression); scripts/test.sh runs it with the debug
build in assets/.venv-fixtures. Exits 1 on any mismatch.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import (AutoTokenizer, BertForMultipleChoice, BertForPreTraining,
                          BertForQuestionAnswering, BertForSequenceClassification, GPT2Config,
                          GPT2DoubleHeadsModel, GPT2LMHeadModel, GPT2TokenizerFast)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXE = os.environ.get("LMKIT") or os.path.join(ROOT, "target", "release", "lmkit")
MINILM = os.path.join(ROOT, "assets", "minilm")


def lmkit(*args, stdin=None):
    r = subprocess.run([EXE, *args], input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"lmkit {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def load_strict(cls, path):
    model, info = cls.from_pretrained(path, output_loading_info=True)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        sys.exit(f"{cls.__name__} from {path}: {bad}")
    return model.eval()


def check_classify(tmp):
    train = os.path.join(tmp, "train.jsonl")
    with open(os.path.join(ROOT, "tests/data/classify/prose_code.train.jsonl"), encoding="utf-8") as f:
        rows = f.readlines()[:64]
    with open(train, "w", encoding="utf-8") as f:
        f.writelines(rows)
    out = os.path.join(tmp, "classify")
    lmkit("finetune", "--task", "classify", "--model", MINILM, "--train", train, "--output", out,
          "--epochs", "1", "--batch-size", "16", "--lr", "1e-4")
    texts = [json.loads(r)["text"] for r in rows[:8]]
    ours = [json.loads(l) for l in lmkit("classify", "--model", out, "--json", "--truncate",
                                         stdin="\n".join(texts) + "\n").splitlines()]
    model = load_strict(BertForSequenceClassification, out)
    tok = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        probs = model(**tok(texts, padding=True, truncation=True, return_tensors="pt")).logits.softmax(-1)
    id2label = model.config.id2label
    worst = 0.0
    for p, r in zip(probs, ours):
        by_label = {s["label"]: s["score"] for s in r["scores"]}
        worst = max(worst, max(abs(p[i].item() - by_label[id2label[i]]) for i in range(len(p))))
    print(f"classify: {len(texts)} sentences, max |p_hf - p_lmkit| = {worst:.2e}")
    return worst <= 1e-4


def check_regression(tmp):
    from scipy.stats import pearsonr, spearmanr
    from transformers import pipeline

    data = os.path.join(ROOT, "tests/data/regression")
    train, dev = os.path.join(tmp, "sts.train.jsonl"), os.path.join(tmp, "sts.dev.jsonl")
    for src, dst, n in [("replaced.train.jsonl", train, 64), ("replaced.eval.jsonl", dev, 16)]:
        with open(os.path.join(data, src), encoding="utf-8") as f:
            rows = f.readlines()[:n]
        with open(dst, "w", encoding="utf-8") as f:
            f.writelines(rows)
    out = os.path.join(tmp, "regression")
    lmkit("finetune", "--task", "regression", "--model", MINILM, "--train", train, "--output", out,
          "--epochs", "1", "--batch-size", "16", "--lr", "1e-4")
    with open(dev, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    ours = [json.loads(l)["score"] for l in lmkit("classify", "--model", out, "--jsonl", "--json",
                                                  stdin=open(dev, encoding="utf-8").read()).splitlines()]
    ev = json.loads(lmkit("eval", "--task", "regression", "--model", out, "--data", dev, "--json"))
    model = load_strict(BertForSequenceClassification, out)
    ok = model.config.problem_type == "regression" and model.config.num_labels == 1
    tok = AutoTokenizer.from_pretrained(out)
    labels = torch.tensor([r["label"] for r in rows], dtype=torch.float32)
    enc = tok([r["text"] for r in rows], [r["text_pair"] for r in rows], padding=True,
              truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        res = model(**enc, labels=labels)
    hf = res.logits[:, 0]
    worst = max(abs(a - b) for a, b in zip(hf.tolist(), ours))
    pipe = pipeline("text-classification", model=model, tokenizer=tok, device="cpu")
    p0 = pipe({"text": rows[0]["text"], "text_pair": rows[0]["text_pair"]})
    p0 = p0[0] if isinstance(p0, list) else p0
    pear, spear = pearsonr(hf.tolist(), labels.tolist())[0], spearmanr(hf.tolist(), labels.tolist())[0]
    diffs = {"loss": abs(res.loss.item() - ev["loss"]), "pearson": abs(pear - ev["pearson"]),
             "spearmanr": abs(spear - ev["spearmanr"]), "pipeline": abs(p0["score"] - ours[0])}
    print(f"regression: problem_type {model.config.problem_type!r}, {len(rows)} pairs, "
          f"max |out_hf - out_lmkit| = {worst:.2e}; |diff| "
          + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items())
          + f"; pipeline label {p0['label']!r}")
    return (ok and worst <= 1e-4 and p0["label"] == "LABEL_0"
            and all(v <= 1e-4 for v in diffs.values()))


def check_qa(tmp):
    data = os.path.join(ROOT, "tests/data/squad/rust_book.json")
    out = os.path.join(tmp, "qa")
    lmkit("finetune", "--task", "qa", "--model", MINILM, "--train", data, "--output", out,
          "--epochs", "1", "--batch-size", "8", "--max-seq-len", "192", "--doc-stride", "64",
          "--max-steps", "4")
    para = json.load(open(data, encoding="utf-8"))["data"][0]["paragraphs"][0]
    question, context = para["qas"][0]["question"], para["context"]
    context_file = os.path.join(tmp, "context.txt")
    with open(context_file, "w", encoding="utf-8") as f:
        f.write(context)
    ours = json.loads(lmkit("qa", "--model", out, "--question", question, "--context", context_file,
                            "--max-answer-len", "30", "--json").splitlines()[0])
    model = load_strict(BertForQuestionAnswering, out)
    tok = AutoTokenizer.from_pretrained(out)
    enc = tok(question, context, truncation="only_second", max_length=384, return_offsets_mapping=True,
              return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0]
    seq = enc.sequence_ids(0)
    with torch.no_grad():
        r = model(**enc)
    best, span = -1e30, None
    for s in range(len(seq)):
        for e in range(s, min(len(seq), s + 30)):
            if seq[s] == 1 and seq[e] == 1:
                score = r.start_logits[0, s].item() + r.end_logits[0, e].item()
                if score > best:
                    best, span = score, (offsets[s][0].item(), offsets[e][1].item())
    hf_answer = context[span[0]:span[1]]
    answer = ours[0]["answer"] if isinstance(ours, list) else ours["answer"]
    print(f"qa: lmkit {answer!r}, transformers {hf_answer!r}")
    return answer == hf_answer


def check_pretrain(tmp):
    out = os.path.join(tmp, "pretrain")
    lmkit("pretrain", "--arch", "bert", "--data", os.path.join(ROOT, "tests/data/lambada/rust_book.jsonl"),
          "--tokenizer", MINILM, "--preset", "tiny", "--seq-len", "64",
          "--batch-size", "4", "--max-steps", "2", "--output", out)
    load_strict(BertForPreTraining, out)
    print("pretrain: BertForPreTraining loads with no missing or unexpected keys")
    return True


def mc_rows(tmp, n):
    path = os.path.join(tmp, "mc.jsonl")
    with open(os.path.join(ROOT, "tests/data/multiple_choice/rust_story.eval.jsonl"), encoding="utf-8") as f:
        rows = f.readlines()[:n]
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(rows)
    return path, [json.loads(r) for r in rows]


def lmkit_mc_scores(out, data):
    preds = os.path.join(os.path.dirname(out), os.path.basename(out) + ".preds.jsonl")
    lmkit("eval", "--task", "multiple-choice", "--model", out, "--data", data, "--max-seq-len", "64",
          "--predictions", preds)
    with open(preds, encoding="utf-8") as f:
        return torch.tensor([json.loads(l)["scores"] for l in f])


def check_multiple_choice(tmp):
    data, rows = mc_rows(tmp, 8)
    ok = True
    # BERT: BertForMultipleChoice on (context, choice) pairs, as HF run_swag encodes them.
    out = os.path.join(tmp, "mc-bert")
    lmkit("finetune", "--task", "multiple-choice", "--model", MINILM, "--train", data, "--output", out,
          "--epochs", "1", "--batch-size", "4", "--lr", "1e-4", "--max-seq-len", "64")
    model = load_strict(BertForMultipleChoice, out)
    tok = AutoTokenizer.from_pretrained(out)
    k = len(rows[0]["choices"])
    enc = tok([r["context"] for r in rows for _ in range(k)], [c for r in rows for c in r["choices"]],
              padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        hf = model(**{n: t.view(len(rows), k, -1) for n, t in enc.items()}).logits
    worst = (hf - lmkit_mc_scores(out, data)).abs().max().item()
    print(f"multiple-choice BERT: {len(rows)}x{k} choices, max |s_hf - s_lmkit| = {worst:.2e}")
    ok &= worst <= 1e-4
    # GPT-2: a small random GPT2LMHeadModel with GPT-2's vocabulary, fine-tuned as
    # GPT2DoubleHeadsModel; each choice `context <|endoftext|> choice`, scored at its last token.
    base = os.path.join(tmp, "gpt2-base")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64)).save_pretrained(base)
    for f in ("vocab.json", "merges.txt"):
        with open(os.path.join(ROOT, "assets/gpt2", f), "rb") as src, open(os.path.join(base, f), "wb") as dst:
            dst.write(src.read())
    out = os.path.join(tmp, "mc-gpt2")
    lmkit("finetune", "--task", "multiple-choice", "--model", base, "--train", data, "--output", out,
          "--epochs", "1", "--batch-size", "4", "--lr", "1e-3", "--max-seq-len", "64")
    model = load_strict(GPT2DoubleHeadsModel, out)
    tok = GPT2TokenizerFast(os.path.join(out, "vocab.json"), os.path.join(out, "merges.txt"))
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    seqs = []
    for r in rows:
        ctx = tok.encode(r["context"])
        for c in r["choices"]:
            ch = tok.encode(c)[:63]
            keep = min(len(ctx), 63 - len(ch))
            seqs.append(ctx[len(ctx) - keep:] + [eos] + ch)
    t = max(len(x) for x in seqs)
    ids = torch.tensor([x + [eos] * (t - len(x)) for x in seqs]).view(len(rows), k, t)
    mask = torch.tensor([[1] * len(x) + [0] * (t - len(x)) for x in seqs]).view(len(rows), k, t)
    mc = torch.tensor([len(x) - 1 for x in seqs]).view(len(rows), k)
    with torch.no_grad():
        hf = model(ids, attention_mask=mask, mc_token_ids=mc).mc_logits
    worst = (hf - lmkit_mc_scores(out, data)).abs().max().item()
    print(f"multiple-choice GPT-2: {len(rows)}x{k} choices, max |s_hf - s_lmkit| = {worst:.2e}")
    ok &= worst <= 1e-4
    return ok


def main():
    if not os.path.exists(EXE):
        sys.exit(f"{EXE} not found: run `cargo build --release -p lmkit-cli` first")
    checks = {"classify": check_classify, "regression": check_regression, "qa": check_qa,
              "pretrain": check_pretrain, "multiple-choice": check_multiple_choice}
    only = sys.argv[sys.argv.index("--only") + 1:] if "--only" in sys.argv else list(checks)
    unknown = [name for name in only if name not in checks]
    if unknown:
        sys.exit(f"unknown check(s) {unknown}: choose from {list(checks)}")
    with tempfile.TemporaryDirectory() as tmp:
        results = [checks[name](tmp) for name in only]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
