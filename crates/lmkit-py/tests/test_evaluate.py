"""lmkit.evaluate against the CLI: every fine-tuning task of the registry
and every zero-shot benchmark returns the metrics `lmkit eval --json`
prints, key for key and value for value."""

import json
import os
import subprocess

import pytest

import lmkit

from conftest import FIXTURES, ROOT

DATA = ROOT / "tests" / "data"


def eval_cli(task, model, data, options):
    """`lmkit eval --task TASK ... --json`, the options as the CLI's flags."""
    exe = os.environ.get("LMKIT", str(ROOT / "target" / "debug" / "lmkit"))
    if not os.path.exists(exe):
        raise FileNotFoundError(f"{exe}: build the CLI (cargo build -p lmkit-cli) or set LMKIT")
    flags = []
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            flags.append(flag)
        else:
            flags += [flag, str(v)]
    args = [exe, "eval", "--task", task, "--model", str(model), "--data", str(data), *flags, "--json"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def squad(tmp_path):
    paras = []
    for i, sub in enumerate(["the old man", "a woman", "the king"]):
        ctx = f"it was a long day . {sub} saw the sea ."
        qa = {"id": f"q{i}", "question": "who saw the sea",
              "answers": [{"text": sub, "answer_start": ctx.find(sub)}]}
        paras.append({"context": ctx, "qas": [qa]})
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paras}]}))
    return path


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def cases(tmp_path):
    """(task, model, data, options) for every task and benchmark."""
    classify = "".join(
        json.dumps({"text": t, "label": l}) + "\n"
        for t, l in [("the dog was old", "pos"), ("paris is big", "neg"), ("a cat", "neu")]
    )
    tags = "the O\nking B-PER\nwalked O\nto O\nparis B-LOC\n\nthe O\nqueen B-PER\nof I-PER\nengland I-PER\n"
    choices = "".join(
        json.dumps({"context": f"the old {a} was big", "choices": [f"the {a} ran", "a red door"], "label": i % 2})
        + "\n"
        for i, a in enumerate(["dog", "cat", "bird"])
    )
    text = write(tmp_path, "text.txt", "The quick brown fox jumps over the lazy dog. " * 20)
    gpt2 = FIXTURES / "gpt2-zeroshot"
    tasks = {
        "classify": (FIXTURES / "bert-tiny-classify", write(tmp_path, "c.jsonl", classify), {}),
        "regression": (FIXTURES / "bert-tiny-regression", DATA / "regression" / "replaced.eval.jsonl",
                       {"limit": 4, "max_seq_len": 32}),
        "token-classify": (FIXTURES / "bert-tiny-token-classify", write(tmp_path, "t.conll", tags), {}),
        "qa": (FIXTURES / "bert-tiny-qa", squad(tmp_path), {"max_seq_len": 32, "doc_stride": 8}),
        "multiple-choice": (FIXTURES / "bert-tiny-multiple-choice", write(tmp_path, "m.jsonl", choices), {}),
        "lm": (gpt2, text, {"max_seq_len": 16}),
        "perplexity": (gpt2, text, {"context": 32}),
        "lambada": (gpt2, DATA / "lambada" / "rust_book.jsonl", {"limit": 3}),
        "summarize": (gpt2, DATA / "summarize" / "rust_book.jsonl",
                      {"limit": 1, "greedy": True, "max_new_tokens": 4}),
        "cbt": (gpt2, DATA / "cbt" / "tiny_NE.txt", {"limit": 2}),
        "translate": (gpt2, DATA / "translate" / "en_fr.jsonl",
                      {"limit": 2, "shots": 1, "max_new_tokens": 4}),
        "zero-shot-qa": (gpt2, DATA / "qa" / "coqa_tiny.jsonl", {"limit": 2, "max_new_tokens": 4}),
    }
    return tasks


NAMES = ["classify", "regression", "token-classify", "qa", "multiple-choice", "lm",
         "perplexity", "lambada", "summarize", "cbt", "translate", "zero-shot-qa"]


@pytest.mark.parametrize("task", NAMES)
def test_evaluate_equals_the_cli(task, tmp_path):
    model, data, options = cases(tmp_path)[task]
    got = lmkit.evaluate(task, model, data, **options)
    assert got == eval_cli(task, model, data, options)
    assert got["task"] == task


def test_evaluate_predictions_and_errors(tmp_path):
    model, data, options = cases(tmp_path)["classify"]
    metrics, rows = lmkit.evaluate("classify", model, data, predictions=True, **options)
    assert metrics["examples"] == len(rows) == 3
    assert {r["label"] for r in rows} <= {"neg", "neu", "pos"}
    with pytest.raises(ValueError, match="unknown field `epochs`"):
        lmkit.evaluate("classify", model, data, epochs=2)
    with pytest.raises(ValueError, match="zero-shot-qa"):
        lmkit.evaluate("nonsense", model, data)
    # `qa` is SQuAD: a GPT-2 gets the name of the zero-shot benchmark.
    with pytest.raises(ValueError, match="zero-shot-qa"):
        lmkit.evaluate("qa", FIXTURES / "gpt2-zeroshot", DATA / "qa" / "coqa_tiny.jsonl")
