"""lmkit.pretrain / lmkit.finetune: the CLI's options by name, the CLI's
runs (the same losses as `lmkit pretrain` / `lmkit finetune` with the same
flags), progress, callbacks, errors, and Ctrl-C stopping cleanly."""

import json
import os
import platform
import signal
import sys

import pytest

import lmkit

from conftest import FIXTURES, ROOT
from test_models import cli


def classify_rows(n, seed):
    """A separable toy task: texts of prose words vs texts of code words."""
    import random

    rnd = random.Random(seed)
    prose, code = ["the", "dog", "ran", "home", "old", "man"], ["fn", "let", "mut", "impl", "struct", "use"]
    out = []
    for i in range(n):
        words, label = (prose, "prose") if i % 2 else (code, "code")
        out.append(json.dumps({"text": " ".join(rnd.choice(words) for _ in range(6)), "label": label}))
    return "\n".join(out) + "\n"


def test_finetune_equals_the_cli(tmp_path):
    train, ev = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    train.write_text(classify_rows(32, 0))
    ev.write_text(classify_rows(16, 7))
    model = str(FIXTURES / "bert-tiny-bare")
    events = []
    py = lmkit.finetune(
        "classify", model, train, tmp_path / "py", eval=ev,
        epochs=2, batch_size=8, lr=3e-3, max_seq_len=16, callback=events.append, progress=False,
    )
    (want,) = cli("finetune", "--task", "classify", "--model", model, "--train", str(train),
                  "--eval", str(ev), "--output", str(tmp_path / "cli"), "--epochs", "2",
                  "--batch-size", "8", "--lr", "3e-3", "--max-seq-len", "16")
    assert py["steps"] == want["steps"] == 8
    assert py["final_loss"] == want["final_loss"]
    assert py["eval"] == want["eval"]
    assert py["interrupted"] is False and py["output"] == str(tmp_path / "py")
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds.count("step") == 8 and kinds.count("eval") == 2
    # The saved classifier loads in Python and gives what the CLI gives.
    assert lmkit.Bert.from_pretrained(str(tmp_path / "py")).classify("fn let mut")["label"] == "code"


def test_pretrain_equals_the_cli(tmp_path, corpus, capfd):
    data = tmp_path / "text.txt"
    data.write_text(corpus[:60_000], encoding="utf-8")
    common = dict(tokenizer=str(ROOT / "assets" / "gpt2"), data=[data], n_layer=2, n_embd=32, n_head=4,
                  seq_len=32, batch_size=2, max_steps=4, eval_every=2, sample_every=0, seed=3)
    s = lmkit.pretrain(output=tmp_path / "py", **common)
    err = capfd.readouterr().err
    assert "val loss" in err  # progress as the CLI logs it
    out = subprocess_pretrain(tmp_path / "cli", data)
    assert s["steps"] == 4 and s["final_loss"] == out["final_loss"] and s["last_val_loss"] == out["last_val_loss"]
    assert os.path.exists(tmp_path / "py" / "model.safetensors")
    # Resuming a finished run is refused with the library's message.
    with pytest.raises(ValueError, match="already at `max_steps` 4"):
        lmkit.pretrain(output=tmp_path / "py", resume=True, progress=False)
    assert lmkit.pretrain(output=tmp_path / "py", resume=True, max_steps=5, progress=False)["steps"] == 5


def subprocess_pretrain(out, data):
    """`lmkit pretrain` with the flags of the Python call above; its final metrics row."""
    import subprocess

    exe = os.environ.get("LMKIT", str(ROOT / "target" / "debug" / "lmkit"))
    subprocess.run([exe, "pretrain", "--tokenizer", str(ROOT / "assets" / "gpt2"), "--data", str(data),
                    "--n-layer", "2", "--n-embd", "32", "--n-head", "4", "--seq-len", "32", "--batch-size", "2",
                    "--max-steps", "4", "--eval-every", "2", "--sample-every", "0", "--seed", "3",
                    "--output", str(out)], check=True, capture_output=True)
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "loss" in r]
    val = [r for r in rows if "val_loss" in r]
    return {"final_loss": train[-1]["loss"], "last_val_loss": val[-1]["val_loss"]}


def test_options_are_checked_by_name(tmp_path):
    with pytest.raises(ValueError, match="unknown field `epoch`"):
        lmkit.finetune("classify", str(FIXTURES / "bert-tiny-bare"), tmp_path / "t.jsonl", tmp_path / "o", epoch=3)
    with pytest.raises(ValueError, match="unknown task"):
        lmkit.finetune("summarize", str(FIXTURES / "bert-tiny-bare"), tmp_path / "t.jsonl", tmp_path / "o")
    with pytest.raises(ValueError, match="unknown field `learning_rate`"):
        lmkit.pretrain(output=tmp_path / "o", learning_rate=1e-3)
    with pytest.raises(FileNotFoundError):
        lmkit.finetune("classify", str(FIXTURES / "bert-tiny-bare"), tmp_path / "missing.jsonl", tmp_path / "o")


def test_ctrl_c_saves_a_checkpoint_and_raises(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text(classify_rows(64, 1))
    model = str(FIXTURES / "bert-tiny-bare")
    opts = dict(epochs=2, batch_size=8, lr=3e-3, max_seq_len=16, progress=False)

    def interrupt_at_step_3(event):
        if event["event"] == "step" and event["step"] == 3:
            # To this (the main) thread, at once: os.kill lets the kernel pick
            # any thread of the process, rayon's workers included.
            signal.raise_signal(signal.SIGINT)

    # Python raises KeyboardInterrupt only if SIGINT was not ignored when it
    # started (a job started in the background with `&` inherits SIG_IGN):
    # install the handler a terminal's Ctrl-C reaches.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            lmkit.finetune("classify", model, train, tmp_path / "run", callback=interrupt_at_step_3, **opts)
    finally:
        signal.signal(signal.SIGINT, before)
    steps = [int(p.name.split("-")[1]) for p in (tmp_path / "run" / "checkpoints").iterdir()]
    assert steps == [3], steps
    done = lmkit.finetune("classify", model, train, tmp_path / "run", resume=True, **opts)
    assert done["steps"] == 16 and not done["interrupted"]
    whole = lmkit.finetune("classify", model, train, tmp_path / "whole", **opts)
    assert done["final_loss"] == whole["final_loss"]  # resumed exactly


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="the policy is glibc malloc's",
)
def test_keep_freed_memory_serves_large_blocks_from_the_heap():
    """After it, a 64 MiB block comes from the heap (glibc's default maps it
    apart: its largest mmap threshold is 32 MiB), which keeps it once freed."""
    import ctypes

    def heap():
        """The [heap] mappings (madvise, e.g. huge pages, can split it in several)."""
        with open("/proc/self/maps") as f:
            lines = [line.split()[0] for line in f if line.rstrip().endswith("[heap]")]
        return [tuple(int(x, 16) for x in r.split("-")) for r in lines]

    def in_heap(address, ranges):
        return any(start <= address < end for start, end in ranges)

    assert lmkit.keep_freed_memory() is None
    block = bytearray(64 << 20)
    first = ctypes.c_char.from_buffer(block)
    at = ctypes.addressof(first)
    ranges = heap()
    assert in_heap(at, ranges) and in_heap(at + len(block) - 1, ranges), (hex(at), ranges)
    del first, block
    assert sum(e - s for s, e in heap()) == sum(e - s for s, e in ranges), "freed memory is kept"
