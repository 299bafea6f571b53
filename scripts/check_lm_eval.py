#!/usr/bin/env python3
"""EleutherAI's lm-evaluation-harness against `lmkit serve`, unchanged.

Runs `lm_eval` (the pip package) twice on two small tasks made here from the
Rust books, on the same GPT-2 checkpoint:

- once with `--model hf` (transformers on the checkpoint: the reference);
- twice with `--model local-completions` against `lmkit serve` serving it
  (lm-eval's OpenAI-completions client: token-id prompts, `echo`,
  `logprobs`, `max_tokens` 1): tokenized on the client with the
  checkpoint's own HF tokenizer (`tokenizer_backend=huggingface`), and by
  the server through vLLM's tokenizer routes (`tokenizer_backend=remote`).

The tasks: `lmkit_books_next` (loglikelihood, as LAMBADA: a sentence's last
word after the rest; `acc` is lm-eval's is-greedy) and `lmkit_books_mc`
(multiple choice: which of four sentences follows a context; `acc`,
`acc_norm`). Both are written as `--include_path` YAML with `dataset_path:
json` over JSONL files. Items are kept shorter than the checkpoint's
positions (less the one the API backend keeps for a generated token), so
neither backend truncates and every item is compared.

Requires equal accuracies and every per-item loglikelihood within 1e-3
(`--log_samples`). Exit status 0 when they agree.

Usage: check_lm_eval.py LMKIT_BINARY [--python VENV_PYTHON] [--model DIR]
"""

import argparse
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-3


def sentences(text, lo, hi):
    """Sentences of `lo`..`hi` words from prose (lines of letters and
    punctuation only, so code samples stay out)."""
    out = []
    for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
        words = s.split()
        if lo <= len(words) <= hi and re.fullmatch(r"[A-Za-z ,;'()-]+[.!?]", s):
            out.append(s)
    return out


def write_tasks(folder, n_items, model, n_pos):
    """The two tasks' JSONL and YAML in `folder`. Items whose context and
    longest continuation exceed `n_pos - 1` tokens are left out: there
    lm-eval's two backends truncate differently by design (the API one keeps
    a position for the generated token: `max_length - 1`), so nothing
    compared is ever truncated."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    # As lm-eval encodes them: context and " " + continuation apart.
    n = lambda text: len(tok(text)["input_ids"])
    fits = lambda ctx, conts: n(ctx) + max(n(" " + c) for c in conts) <= n_pos - 1
    text = (ROOT / "assets/books/corpus.txt").read_text(encoding="utf-8")[:2_000_000]
    sents = sentences(text, 5, 12)
    nxt, used = [], 0
    for s in sents:
        used += 1
        body, last = s[:-1].rsplit(" ", 1)
        if fits(body, [last]):
            nxt.append({"context": body, "continuation": last})
            if len(nxt) == n_items:
                break
    pool = sents[used:]
    mc, i = [], 0
    while len(mc) < n_items:
        if 5 * i + 4 >= len(pool):
            raise SystemExit(f"only {len(mc)} multiple-choice items fit {n_pos} positions")
        ctx, follow = pool[5 * i], pool[5 * i + 1]
        choices = [follow] + pool[5 * i + 2 : 5 * i + 5]
        i += 1
        if not fits(ctx, choices):
            continue
        # The right answer moves around: label len(mc) % 4.
        k = len(mc) % 4
        choices[0], choices[k] = choices[k], choices[0]
        mc.append({"context": ctx, "choices": choices, "label": k})
    for name, rows in [("next", nxt), ("mc", mc)]:
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    (folder / "lmkit_books_next.yaml").write_text(
        f"""task: lmkit_books_next
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder / 'next.jsonl'}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{continuation}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: perplexity
    aggregation: perplexity
    higher_is_better: false
"""
    )
    (folder / "lmkit_books_mc.yaml").write_text(
        f"""task: lmkit_books_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder / 'mc.jsonl'}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lm_eval(python, folder, out, model, model_args):
    cmd = [python, "-m", "lm_eval", "--model", model, "--model_args", model_args,
           "--tasks", "lmkit_books_next,lmkit_books_mc", "--include_path", str(folder),
           "--output_path", str(out), "--log_samples", "--batch_size", "1"]
    if model == "hf":
        cmd += ["--device", "cpu"]
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", HF_DATASETS_CACHE=str(folder / "hf-datasets"))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"lm_eval --model {model} failed ({p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-6000:]}")
    results = json.loads(Path(sorted(glob.glob(f"{out}/**/results_*.json", recursive=True))[-1]).read_text())
    samples = {}
    for task in ("lmkit_books_next", "lmkit_books_mc"):
        path = sorted(glob.glob(f"{out}/**/samples_{task}_*.jsonl", recursive=True))[-1]
        rows = [json.loads(l) for l in open(path, encoding="utf-8")]
        # Per document: the loglikelihood of each request (one, or one per choice).
        samples[task] = {r["doc_id"]: [float(x[0]) for x in r["filtered_resps"]] for r in rows}
    return results["results"], samples


def wait_ready(url, proc, seconds=120):
    t0 = time.time()
    while time.time() - t0 < seconds:
        if proc.poll() is not None:
            raise SystemExit(f"lmkit serve exited ({proc.returncode})")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("lmkit serve did not come up")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lmkit", help="the lmkit binary")
    ap.add_argument("--python", default=str(ROOT / "assets/.venv-fixtures/bin/python"),
                    help="a Python with lm_eval, torch and transformers")
    ap.add_argument("--model", default=str(ROOT / "tests/fixtures/gpt2-zeroshot"),
                    help="a GPT-2 checkpoint in HF layout with its tokenizer")
    ap.add_argument("--items", type=int, default=40, help="items per task")
    args = ap.parse_args()
    model = Path(args.model).resolve()
    n_pos = json.loads((model / "config.json").read_text())["n_positions"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_tasks(tmp, args.items, model, n_pos)
        hf_res, hf_samples = lm_eval(args.python, tmp, tmp / "hf", "hf",
                                     f"pretrained={model},dtype=float32")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        serve = subprocess.Popen([args.lmkit, "serve", "--model", f"tiny={model}",
                                  "--addr", f"127.0.0.1:{port}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_ready(url, serve)
            served = {}
            for backend, tok in [("huggingface", f",tokenizer={model}"), ("remote", "")]:
                served[backend] = lm_eval(
                    args.python, tmp, tmp / f"lmkit-{backend}", "local-completions",
                    f"model=tiny,base_url={url}/v1/completions,tokenizer_backend={backend}"
                    f"{tok},max_length={n_pos},num_concurrent=1,max_retries=1")
        finally:
            serve.terminate()
            serve.wait(timeout=30)
    failures = []
    for backend, (lk_res, lk_samples) in served.items():
        print(f"tokenizer_backend={backend}:")
        failures += compare(hf_res, hf_samples, lk_res, lk_samples)
    if failures:
        print("\n".join(failures[:20]), file=sys.stderr)
        raise SystemExit(f"lm-eval: {len(failures)} disagreements between hf and lmkit serve")
    print("lm-eval: local-completions against lmkit serve (HF and remote tokenizer) agrees with --model hf")


def compare(hf_res, hf_samples, lk_res, lk_samples):
    """Disagreements of one lmkit run with the HF run (printing the figures)."""
    failures = []
    for task, hf_docs in hf_samples.items():
        lk_docs = lk_samples[task]
        if set(hf_docs) != set(lk_docs):
            failures.append(f"{task}: documents differ")
            continue
        worst = 0.0
        for doc, ll in hf_docs.items():
            d = max(abs(a - b) for a, b in zip(ll, lk_docs[doc]))
            worst = max(worst, d)
            if len(ll) != len(lk_docs[doc]) or d > TOL:
                failures.append(f"{task} doc {doc}: loglikelihoods {ll} vs {lk_docs[doc]}")
        for metric in ("acc,none", "acc_norm,none"):
            if metric in hf_res[task]:
                a, b = hf_res[task][metric], lk_res[task][metric]
                print(f"{task} {metric.split(',')[0]}: hf {a:.4f}, lmkit serve {b:.4f}")
                if a != b:
                    failures.append(f"{task} {metric}: {a} vs {b}")
        print(f"{task}: {len(hf_docs)} documents, largest loglikelihood difference {worst:.2e}")
    return failures


if __name__ == "__main__":
    main()
