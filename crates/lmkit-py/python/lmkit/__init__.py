"""lmkit: GPT-2 and BERT in Rust, from Python.

Tokenizers (byte-level BPE, WordPiece) with HF tokenizers' API and
tiktoken's special-token handling, GPT-2 generation / logits / perplexity,
BERT embeddings (the sentence-transformers pooling of the folder),
fill-mask, classification and QA, and pretraining / fine-tuning with the
CLI's options. Heavy calls release the GIL and use every core.

    >>> import lmkit
    >>> tok = lmkit.Tokenizer.from_pretrained("assets/gpt2")
    >>> tok.encode("Hello, world").ids
    [15496, 11, 995]
"""

import os as _os

from ._lmkit import (  # noqa: F401
    GPT2,
    Bert,
    Classifier,
    CrossEncoder,
    Encoding,
    GenerationStream,
    Tokenizer,
    __version__,
    keep_freed_memory,
)
from . import _lmkit

__all__ = [
    "Tokenizer",
    "Encoding",
    "GPT2",
    "GenerationStream",
    "Bert",
    "Classifier",
    "CrossEncoder",
    "pretrain",
    "finetune",
    "evaluate",
    "keep_freed_memory",
    "tiktoken_compat",
    "__version__",
]

# Keyword arguments of `pretrain` that describe the size of a new model:
# `PretrainOptions.size` in the library.
_SIZE_KEYS = ("preset", "n_layer", "n_embd", "n_head", "n_positions")


def _plain(value):
    """Paths as strings, so that the options serialize as the library reads them."""
    if isinstance(value, _os.PathLike):
        return _os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _options_json(options):
    import json

    return json.dumps({k: _plain(v) for k, v in options.items() if v is not None})


def pretrain(*, output, callback=None, progress=True, **options):
    """Pretrains GPT-2 (causal LM) or BERT (MLM + NSP) as `lmkit pretrain` does.

    The keyword arguments are the fields of the library's `PretrainOptions`
    (the CLI's flags with `_` for `-`): `family` ("gpt2" or "bert", the CLI's
    `--arch`), `data` (files or folders), `tokenizer`, `init_from`, `resume`,
    `preset` / `n_layer` / `n_embd` / `n_head` / `n_positions`, `seq_len`,
    `batch_size`, `grad_accum`, `max_steps`, `lr`, `min_lr`, `warmup_steps`,
    `schedule`, `weight_decay`, `beta1`, `beta2`, `grad_clip`, `eval_every`,
    `eval_batches`, `val_fraction`, `save_every`, `keep`, `log_every`, `seed`,
    `stop_after`, `sample_every`, `sample_prompt`, `sample_tokens`,
    `decay_embeddings`, `whole_word_masking`, `overlap_filter`,
    `max_shard_size`, `dtype` ("f32" or "bf16": mixed-precision GPT-2 training),
    `recompute` (GPT-2: recompute attention probabilities and GELU outputs in
    backward; the same gradients in less memory), `profile` (time each step's
    phases). An unknown name is a `ValueError`.

    Progress goes to stderr (`progress=False` silences it); `callback`, if
    given, gets a dict per event (`{"event": "step", "row": {...}}`, "eval",
    "saved", "note", ...). Returns the summary: `steps`, `final_loss`,
    `first_val_loss`, `last_val_loss`, `checkpoint`, `interrupted`, and with
    `profile=True` `profile`: the mean step after the first (`step_ms`,
    `phases`: a list of `{"phase", "ms"}`; the rows get `phase_ms`). Ctrl-C
    finishes the step, saves a checkpoint, then raises `KeyboardInterrupt`
    (continue with `resume=True`).

    For long runs call `lmkit.keep_freed_memory()` first, as the CLI does:
    with glibc's default malloc each step maps and faults in its largest
    buffers anew (GPT-2's vocabulary: ~50k page faults a step). It changes
    the malloc policy of the whole process, so it is not done for you.
    """
    if "arch" in options:
        options["family"] = options.pop("arch")
    size = {k: options.pop(k) for k in _SIZE_KEYS if options.get(k) is not None}
    for k in _SIZE_KEYS:
        options.pop(k, None)
    if size:
        options["size"] = size
    if isinstance(options.get("data"), (str, _os.PathLike)):
        options["data"] = [options["data"]]
    options["output"] = output
    return _lmkit._pretrain(_options_json(options), callback=callback, progress=progress)


def finetune(task, model, train, output, eval=None, *, callback=None, progress=True, **options):
    """Fine-tunes `model` (a folder or a hub name) as `lmkit finetune` does.

    `task`: "classify", "regression", "qa", "token-classify",
    "multiple-choice" (BERT), "classify", "multiple-choice", "lm" (GPT-2):
    the library's task registry, as `lmkit finetune --help` lists it.
    `train` / `eval` are the CLI's data files, `output` the run's folder.
    The keyword arguments are the fields of the library's `FinetuneOptions`:
    `epochs`, `batch_size`, `eval_batch_size`, `lr`, `warmup_ratio`,
    `max_seq_len` (default 128; qa 384), `seed`, `weight_decay`, `beta1`,
    `beta2`, `eps`, `grad_clip`, `doc_stride`, `max_answer_len`, `n_best`,
    `max_steps`, `log_every`, `overwrite`, `max_shard_size`, `lm_coef`,
    `resume`, `save_every`, `keep`, `dtype` ("f32" or "bf16"), `recompute`
    (GPT-2: less memory, the same gradients), `profile` (time each step's
    phases). An unknown name is a `ValueError`.

    Returns the summary (`steps`, `epochs`, `final_loss`, `eval` — the last
    evaluation row —, `output`, `checkpoint`, `interrupted`, throughput, and
    with `profile=True` `profile`, as `pretrain` returns it).
    Progress, Ctrl-C and `keep_freed_memory` as `pretrain`.
    """
    return _lmkit._finetune(
        task,
        _os.fspath(model) if isinstance(model, _os.PathLike) else model,
        _os.fspath(train),
        _os.fspath(output),
        None if eval is None else _os.fspath(eval),
        options_json=_options_json(options),
        callback=callback,
        progress=progress,
    )


def evaluate(task, model, data, *, predictions=False, **options):
    """Scores `model` (a folder or a hub name) on `data` as `lmkit eval` does.

    `task`: a fine-tuning task ("classify", "regression", "token-classify",
    "qa", "multiple-choice", "lm": the model fine-tuned for it, scored as
    fine-tuning scores it after every epoch) or a zero-shot GPT-2 benchmark
    ("perplexity", "lambada", "summarize", "cbt", "translate",
    "zero-shot-qa"). The keyword arguments are the fields of the library's
    `EvalOptions` (the CLI's flags with `_` for `-`): `limit`, `batch_size`,
    `max_seq_len`, `doc_stride`, `max_answer_len`, `n_best`, `context`,
    `stride`, `greedy`, `top_k`, `max_new_tokens`, `shots`, `reverse`,
    `targets`, `seed`. An unknown name is a `ValueError`.

    Returns the metrics dict `lmkit eval --json` prints (the names of
    fine-tuning's `eval_*` metrics without the prefix, and `task`); with
    `predictions=True`, `(metrics, rows)` with one row per scored item.
    """
    out = _lmkit._evaluate(
        task,
        _os.fspath(model) if isinstance(model, _os.PathLike) else model,
        _os.fspath(data),
        options_json=_options_json(options),
        predictions=predictions,
    )
    return tuple(out) if predictions else out


from . import tiktoken_compat  # noqa: E402,F401
