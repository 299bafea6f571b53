#!/usr/bin/env python3
"""Golden references written by HF transformers for lmkit's tests (run by hand, never by CI).

    python3 scripts/make_fixtures.py                 # (re)write every case under tests/fixtures/
    python3 scripts/make_fixtures.py --only gpt2-tiny bert-tiny-mlm
    python3 scripts/make_fixtures.py --check         # reload committed cases, recompute, compare
    python3 scripts/make_fixtures.py --big assets/big          # full-size, never committed
    python3 scripts/make_fixtures.py --big assets/big --check  # verify them

Every case folder is an HF checkpoint (config.json + model.safetensors, written by
save_pretrained) plus reference.safetensors (inputs and outputs) and reference.json (scalars,
hyper-parameters, versions, a description of every tensor). tests/fixtures/README.md documents
the format. Each reference is computed twice, on the in-memory model and on the model reloaded
with from_pretrained, and the two must agree bit for bit before anything is written.

Needs the packages in scripts/requirements-dev.txt and, for minilm-embeddings and --big, the
assets from scripts/fetch-assets.sh.
"""

import argparse
import copy
import json
import math
import os
import platform
import random
import shutil
import sys
from pathlib import Path

# Offline and quiet before transformers is imported: everything here is local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertTokenizerFast,
    GenerationConfig,
    GPT2Config,
    GPT2DoubleHeadsModel,
    GPT2ForSequenceClassification,
    GPT2LMHeadModel,
    GPT2Model,
    GPT2TokenizerFast,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
ASSETS = ROOT / "assets"

# One step of torch.optim.AdamW, the same for every case that has a training step.
ADAMW = {"lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}
# Custom init of the tiny models (HF's N(0, 0.02) gives near-uniform logits and near-ties).
INIT = {"matrix_std": 0.35, "layernorm_weight": "1 + N(0, 0.1^2)", "bias_std": 0.1}

# Tiny WordPiece vocabulary shared by all tiny BERT cases: specials first, then real
# lower-case English words, punctuation and a few ## continuations (so "walking" is walk ##ing).
TINY_BERT_VOCAB = (
    "[PAD] [UNK] [CLS] [SEP] [MASK] . , ! ? ' \" - : ; ( ) "
    "the a an of and to in is was it that he she they we you i his her their this there on at "
    "for with as by from not but or be have has had are were will would can could do did said "
    "one two three time day night man woman child people world life house home city water fire "
    "light dark king queen dog cat bird tree book story word name old new good bad small big "
    "long little great first last go went come came see saw know knew think make made take took "
    "give gave find found tell told ask walk ran run look love like red green blue white black "
    "sun moon sea river road door hand eye head heart paris france london england capital "
    "what who where when why how very all some no yes up down out over after before "
    "##s ##ed ##ing ##ly ##er ##est ##y ##n"
).split()

GPT2_VOCAB = 128
GPT2_EOS = 127  # like real GPT-2 (50256): the last id is <|endoftext|>, used as bos/eos/pad

VERSIONS = {
    "python": platform.python_version(),
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "tokenizers": tokenizers.__version__,
    "safetensors": safetensors.__version__,
    "numpy": np.__version__,
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Reference container


class Ref:
    """Collects tensors (float32 / int64 only) and JSON scalars with a description each."""

    def __init__(self):
        self.tensors = {}
        self.tensor_meta = {}
        self.scalars = {}
        self.info = {}

    def add(self, name, t, desc):
        assert name not in self.tensors, name
        t = t.detach().cpu().contiguous().clone()
        if t.dtype in (torch.int32, torch.bool):
            t = t.to(torch.int64)
        assert t.dtype in (torch.float32, torch.int64), (name, t.dtype)
        self.tensors[name] = t
        self.tensor_meta[name] = {
            "dtype": "F32" if t.dtype == torch.float32 else "I64",
            "shape": list(t.shape),
            "description": desc,
        }

    def scalar(self, name, value, desc):
        assert name not in self.scalars, name
        if isinstance(value, torch.Tensor):
            value = value.item()
        self.scalars[name] = {"value": value, "description": desc}


def compare_refs(a, b, exact, label):
    """Returns the max abs difference per tensor; raises if `exact` and anything differs."""
    assert a.tensors.keys() == b.tensors.keys(), (label, a.tensors.keys() ^ b.tensors.keys())
    worst = {}
    for k in a.tensors:
        x, y = a.tensors[k], b.tensors[k]
        assert x.shape == y.shape and x.dtype == y.dtype, (label, k, x.shape, y.shape)
        d = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
        worst[k] = d
        if exact and d != 0.0:
            raise SystemExit(f"{label}: tensor {k} differs by {d} between in-memory and reloaded")
    for k in a.scalars:
        va, vb = a.scalars[k]["value"], b.scalars[k]["value"]
        if exact and va != vb:
            raise SystemExit(f"{label}: scalar {k} differs: {va} vs {vb}")
    return worst


def write_case(case_dir, ref, header):
    save_file(ref.tensors, str(case_dir / "reference.safetensors"), metadata={"format": "pt"})
    doc = dict(header)
    doc["versions"] = VERSIONS
    if (case_dir / "model.safetensors").exists():
        st = load_file(str(case_dir / "model.safetensors"))
        doc["checkpoint_keys"] = {k: list(v.shape) for k, v in sorted(st.items())}
    doc.update(ref.info)
    doc["scalars"] = ref.scalars
    doc["tensors"] = ref.tensor_meta
    with open(case_dir / "reference.json", "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


# --------------------------------------------------------------------------------------------
# Shared pieces: init, training step


def custom_init(model, seed):
    """Replaces every parameter: 2-D N(0, 0.35^2), LayerNorm weights 1+N(0, 0.1^2), other 1-D
    N(0, 0.1^2), drawn in named_parameters() order from torch.Generator().manual_seed(seed).
    Non-zero biases make loaders that drop or swap a bias fail the tests."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied parameters appear once
            n = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if p.dim() >= 2:
                p.copy_(n * INIT["matrix_std"])
            elif name.endswith(("LayerNorm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1.0 + 0.1 * n)
            else:
                p.copy_(n * INIT["bias_std"])


def gpt2_decays(name, p):
    # Only the 2-D matmul weights (Conv1D c_attn / c_proj / c_fc); not wte/wpe, biases, LN.
    return p.dim() == 2 and not name.endswith(("wte.weight", "wpe.weight"))


def bert_decays(name, p):
    # Every 2-D weight except the embedding tables (word / position / token_type).
    return p.dim() == 2 and "embeddings" not in name


DECAY_RULES = {
    "gpt2": "weight_decay 0.1 for 2-D parameters except transformer.wte.weight and "
    "transformer.wpe.weight (i.e. attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj weights); "
    "0 for biases, LayerNorm parameters, wte, wpe",
    "bert": "weight_decay 0.1 for 2-D parameters whose name does not contain 'embeddings' (all "
    "Linear weights: attention query/key/value/output.dense, intermediate/output dense, pooler, "
    "heads); 0 for biases, LayerNorm parameters and the word/position/token_type embeddings",
}


def train_step(model, loss, ref, decays, rule_text):
    """loss.backward(), record grad.<name> for every parameter, one AdamW step, record
    adamw.<name>. Names are model.named_parameters() names, which list a tied tensor once."""
    model.zero_grad(set_to_none=True)
    loss.backward()
    named = list(model.named_parameters())
    for n, p in named:
        if p.grad is None:
            raise SystemExit(f"parameter {n} got no gradient")
        ref.add(f"grad.{n}", p.grad, f"d loss / d {n} after one backward of `loss`")
    decay = [n for n, p in named if decays(n, p)]
    no_decay = [n for n, p in named if not decays(n, p)]
    groups = [
        {"params": [p for n, p in named if decays(n, p)], "weight_decay": ADAMW["weight_decay"]},
        {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(
        groups, lr=ADAMW["lr"], betas=tuple(ADAMW["betas"]), eps=ADAMW["eps"], foreach=False
    )
    opt.step()
    for n, p in named:
        ref.add(f"adamw.{n}", p, f"{n} after one torch.optim.AdamW step from the checkpoint value")
    ref.info["adamw"] = {
        **ADAMW,
        "optimizer": "torch.optim.AdamW (foreach=False, amsgrad=False, maximize=False), step 1, "
        "moments start at 0",
        "update": "p <- p * (1 - lr * wd); m = (1-b1) g; v = (1-b2) g^2; "
        "p <- p - (lr / (1 - b1)) * m / (sqrt(v) / sqrt(1 - b2) + eps)",
        "decay_rule": rule_text,
        "decay": decay,
        "no_decay": no_decay,
    }


def fresh_dir(path):
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def margins(logits_row, k):
    """Gaps between consecutive sorted values of the top k+1 entries (for near-tie checks)."""
    top = torch.topk(logits_row.double(), k + 1).values
    return (top[:-1] - top[1:]).tolist()


# --------------------------------------------------------------------------------------------
# GPT-2


def gpt2_tiny_config():
    return GPT2Config(
        vocab_size=GPT2_VOCAB,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=4,
        activation_function="gelu_new",
        layer_norm_epsilon=1e-5,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        initializer_range=INIT["matrix_std"],
        bos_token_id=GPT2_EOS,
        eos_token_id=GPT2_EOS,
        tie_word_embeddings=True,
        attn_implementation="eager",  # not serialized; from_pretrained below asks for it too
    )


GPT2_INPUT_IDS = [
    [5, 17, 99, 3, 64, 64, 120, 8, 0, 45, 77, 126],
    [127, 31, 2, 90, 58, 11, 11, 73, 100, 6, 39, 88],
]
GPT2_IGNORED = [(0, 4), (1, 0), (1, 7)]  # (row, col) of labels set to -100
GPT2_PADDED_PROMPTS = [
    [12, 7, 99, 40, 3],
    [56, 56, 1, 2, 118, 64, 9, 33, 101],
    [8, 77, 14, 120, 5, 62, 91, 30, 19, 44, 2, 117],
]
GPT2_GEN_PROMPTS = [[15, 93, 4, 60], [101, 3, 3, 77, 42, 19, 8]]
GPT2_GEN_NEW = 12


def perplexity(model, ids, max_length, stride):
    """HF perplexity guide's sliding window, with the exact per-token NLL accounted for.

    Returns (token_nll [N-1] float32 for target positions 1..N-1, windows, guide_mean_nll)."""
    seq_len = ids.size(1)
    token_nll = torch.full((seq_len - 1,), float("nan"))
    windows = []
    guide_sum, guide_n = 0.0, 0
    prev_end = 0
    for begin in range(0, seq_len, stride):
        end = min(begin + max_length, seq_len)
        trg_len = end - prev_end
        inp = ids[:, begin:end]
        tgt = inp.clone()
        tgt[:, :-trg_len] = -100
        with torch.no_grad():
            out = model(inp, labels=tgt)
        logp = torch.log_softmax(out.logits[0].float(), dim=-1)  # [T, V]
        scored = 0
        wsum = 0.0
        for j in range(1, end - begin):
            if tgt[0, j].item() == -100:
                continue
            pos = begin + j
            assert math.isnan(token_nll[pos - 1].item()), f"token {pos} scored twice"
            nll = -logp[j - 1, tgt[0, j]].item()
            token_nll[pos - 1] = nll
            wsum += nll
            scored += 1
        valid = int((tgt != -100).sum().item())
        guide_sum += out.loss.item() * (valid - 1)
        guide_n += valid - 1
        windows.append(
            {
                "begin": begin,
                "end": end,
                "trg_len": trg_len,
                "scored_tokens": scored,
                "nll_sum": wsum,
                "hf_loss": out.loss.item(),
                "guide_weight": valid - 1,
            }
        )
        prev_end = end
        if end == seq_len:
            break
    assert not torch.isnan(token_nll).any(), "some token was never scored"
    return token_nll, windows, guide_sum / guide_n, guide_n


def greedy_check(model, prompt, new_ids):
    """Re-derives greedy decoding with full forwards (no KV cache); returns the top-1 margins."""
    seq = list(prompt)
    gaps = []
    with torch.no_grad():
        for t in new_ids:
            logits = model(torch.tensor([seq])).logits[0, -1]
            assert int(torch.argmax(logits)) == t, "generate() disagrees with a greedy argmax loop"
            gaps.append(margins(logits, 1)[0])
            seq.append(t)
    return gaps


def compute_gpt2_tiny(model, case_dir):
    model.eval()
    ref = Ref()
    cfg = model.config
    ids = torch.tensor(GPT2_INPUT_IDS)
    labels = ids.clone()
    for r, c in GPT2_IGNORED:
        labels[r, c] = -100
    ref.add("input_ids", ids, "[B=2, T=12] token ids")
    ref.add("labels", labels, "[2, 12] = input_ids with -100 at (0,4), (1,0), (1,7); unshifted")

    with torch.no_grad():
        # (a) left-padded batch as generate() prepares it
        T = max(len(p) for p in GPT2_PADDED_PROMPTS)
        pids = torch.full((len(GPT2_PADDED_PROMPTS), T), GPT2_EOS)
        mask = torch.zeros_like(pids)
        for i, p in enumerate(GPT2_PADDED_PROMPTS):
            pids[i, T - len(p) :] = torch.tensor(p)
            mask[i, T - len(p) :] = 1
        pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        plogits = model(pids, attention_mask=mask, position_ids=pos).logits
        worst = 0.0
        for i, p in enumerate(GPT2_PADDED_PROMPTS):
            alone = model(torch.tensor([p])).logits[0]
            worst = max(worst, (alone - plogits[i, T - len(p) :]).abs().max().item())
        assert worst < 1e-4, f"left-padded logits differ from unpadded by {worst}"
        ref.add("padded.input_ids", pids, "[3, 12] three prompts (lengths 5, 9, 12) left-padded "
                "with 127 (eos used as pad)")
        ref.add("padded.attention_mask", mask, "[3, 12] 1 = real token, 0 = left padding")
        ref.add("padded.position_ids", pos, "[3, 12] cumsum(attention_mask) - 1, then 1 where "
                "attention_mask == 0 (what generate() computes)")
        ref.add("padded.logits", plogits, "[3, 12, 128] logits; compare only where "
                "attention_mask == 1 (rows of padding positions are not meaningful)")
        ref.scalar("padded.max_abs_diff_vs_unpadded", worst, "max |padded - unpadded| logits "
                   "over real positions, each prompt run alone without padding")

        # (b) greedy generation, batch 1 per prompt
        gen_cfg = GenerationConfig(
            max_new_tokens=GPT2_GEN_NEW, do_sample=False, num_beams=1, eos_token_id=None,
            pad_token_id=GPT2_EOS,
        )
        min_gap = float("inf")
        for i, p in enumerate(GPT2_GEN_PROMPTS):
            inp = torch.tensor([p])
            out = model.generate(inp, attention_mask=torch.ones_like(inp),
                                 generation_config=gen_cfg)
            new = out[0, len(p) :]
            assert new.numel() == GPT2_GEN_NEW, "generation stopped early"
            gaps = greedy_check(model, p, new.tolist())
            min_gap = min(min_gap, min(gaps))
            ref.add(f"generate.{i}.prompt_ids", inp, f"[1, {len(p)}] prompt {i}")
            ref.add(f"generate.{i}.new_ids", new.unsqueeze(0), f"[1, {GPT2_GEN_NEW}] greedy new "
                    "ids from model.generate(do_sample=False, max_new_tokens=12, no eos stop)")
        ref.scalar("generate.min_top1_margin", min_gap, "smallest (top1 - top2) logit gap over "
                   "all greedy steps; an implementation within this error picks the same ids")

        # (c) sliding-window perplexity
        rng = random.Random(3)
        seq = torch.tensor([[rng.randrange(GPT2_VOCAB) for _ in range(100)]])
        tok_nll, windows, guide_mean, guide_n = perplexity(model, seq, cfg.n_positions, 16)
        exact_mean = tok_nll.double().sum().item() / tok_nll.numel()
        ref.add("ppl.input_ids", seq, "[1, 100] token ids (random.Random(3).randrange(128))")
        ref.add("ppl.token_nll", tok_nll, "[99] -log p(token t | window context) for t = 1..99 "
                "(index t-1), float32 log_softmax of the window's logits")
        ref.scalar("ppl.max_length", cfg.n_positions, "window length (model context)")
        ref.scalar("ppl.stride", 16, "window start step")
        ref.scalar("ppl.scored_tokens", tok_nll.numel(), "tokens scored (each once): all but "
                   "the first")
        ref.scalar("ppl.nll_sum", tok_nll.double().sum().item(), "float64 sum of ppl.token_nll")
        ref.scalar("ppl.mean_nll", exact_mean, "exact mean NLL = nll_sum / scored_tokens")
        ref.scalar("ppl.perplexity", math.exp(exact_mean), "exp(ppl.mean_nll)")
        ref.scalar("ppl.guide_mean_nll", guide_mean, "HF perplexity guide's approximation: "
                   "sum(window loss * (valid_labels - 1)) / sum(valid_labels - 1)")
        ref.scalar("ppl.guide_tokens", guide_n, "the guide's token count sum(valid_labels - 1)")
        ref.scalar("ppl.guide_perplexity", math.exp(guide_mean), "exp(ppl.guide_mean_nll)")
        ref.info["ppl_windows"] = windows

    # main forward + loss + training step
    out = model(ids, labels=labels, output_hidden_states=True)
    logits = out.logits
    manual = F.cross_entropy(logits[:, :-1].reshape(-1, GPT2_VOCAB), labels[:, 1:].reshape(-1),
                             ignore_index=-100)
    assert torch.allclose(manual, out.loss, atol=1e-6), (manual, out.loss)
    ref.add("logits", logits, "[2, 12, 128] lm_head logits (h . wte^T)")
    ref.add("hidden_states", torch.stack(out.hidden_states), "[n_layer+1=3, 2, 12, 32]: [0] = "
            "wte+wpe, [1] = output of block 0, [2] = ln_f(output of block 1) (HF applies ln_f "
            "to the last entry)")
    n_targets = int((labels[:, 1:] != -100).sum())
    ref.scalar("loss", out.loss, "mean cross-entropy of logits[:, t] vs labels[:, t+1] over "
               f"targets != -100 (HF shifts internally; {n_targets} targets)")
    ref.scalar("loss_targets", n_targets, "targets counted in `loss`")
    train_step(model, out.loss, ref, gpt2_decays, DECAY_RULES["gpt2"])
    return ref


def make_gpt2_tiny(root):
    case_dir = fresh_dir(root / "gpt2-tiny")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(gpt2_tiny_config())
    custom_init(model, seed=1001)
    model.save_pretrained(case_dir)
    header = {
        "case": "gpt2-tiny",
        "model_class": "GPT2LMHeadModel",
        "attn_implementation": "eager",
        "init": {**INIT, "seed": 1001},
        "tied": {"lm_head.weight": "transformer.wte.weight (only the latter is in "
                 "model.safetensors; the gradient of the shared tensor sums both uses)"},
        "conv1d": "c_attn/c_proj/c_fc weights are stored [in, out] (y = x W + b)",
    }
    # The bare variant: the same tensors saved from a stand-alone GPT2Model, so its keys have
    # no `transformer.` prefix (like the hub's original gpt2 files, minus their attn.bias
    # buffers); its hidden states must equal gpt2-tiny's.
    bare = GPT2Model(copy.deepcopy(model.config))
    bare.load_state_dict(model.transformer.state_dict())
    bare_dir = fresh_dir(root / "gpt2-tiny-bare")
    bare.save_pretrained(bare_dir)
    bare_header = {
        "case": "gpt2-tiny-bare", "model_class": "GPT2Model", "attn_implementation": "eager",
        "init": {**INIT, "seed": 1001},
        "note": "the transformer of gpt2-tiny saved from a stand-alone GPT2Model: the same "
        "tensors under keys without the transformer. prefix; outputs equal gpt2-tiny's",
    }
    return [(case_dir, model, header), (bare_dir, bare, bare_header)]


def compute_gpt2_bare(model, case_dir):
    model.eval()
    ref = Ref()
    ids = torch.tensor(GPT2_INPUT_IDS)
    ref.add("input_ids", ids, "[2, 12] token ids (gpt2-tiny's input_ids)")
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    ref.add("last_hidden_state", out.last_hidden_state, "[2, 12, 32] ln_f(output of the last "
            "block) = gpt2-tiny's hidden_states[2]; logits would be this . wte^T")
    ref.add("hidden_states", torch.stack(out.hidden_states), "[3, 2, 12, 32] as in gpt2-tiny")
    return ref


# --------------------------------------------------------------------------------------------
# BERT


def bert_tiny_config(**extra):
    return BertConfig(
        vocab_size=len(TINY_BERT_VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_act="gelu",
        max_position_embeddings=32,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=INIT["matrix_std"],
        pad_token_id=0,
        attn_implementation="eager",
        **extra,
    )


def write_tiny_bert_tokenizer(case_dir):
    (case_dir / "vocab.txt").write_text("\n".join(TINY_BERT_VOCAB) + "\n")
    tok = BertTokenizerFast.from_pretrained(str(case_dir), do_lower_case=True)
    tok.save_pretrained(str(case_dir))
    return tok


def tiny_tok(case_dir):
    return BertTokenizerFast.from_pretrained(str(case_dir))


def add_bert_inputs(ref, enc, texts_desc):
    ref.add("input_ids", enc["input_ids"], f"[B, T] token ids of {texts_desc}")
    ref.add("token_type_ids", enc["token_type_ids"], "[B, T] 0 = segment A (incl. [CLS] and its "
            "[SEP]), 1 = segment B (incl. final [SEP]), 0 on padding")
    ref.add("attention_mask", enc["attention_mask"], "[B, T] 1 = token, 0 = padding")


PRETRAIN_PAIRS = [("the dog ran home", "she saw it"), ("he walked", "a cat")]
# (row, col, replacement id or None = keep) for the MLM targets; labels hold the original ids.
PRETRAIN_MLM = [(0, 2, "[MASK]"), (0, 6, "tree"), (1, 1, None)]


def pretrain_inputs(tok):
    enc = tok([a for a, _ in PRETRAIN_PAIRS], [b for _, b in PRETRAIN_PAIRS],
              padding="max_length", max_length=10, return_tensors="pt")
    enc = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    mlm = torch.full_like(enc["input_ids"], -100)
    for r, c, repl in PRETRAIN_MLM:
        mlm[r, c] = enc["input_ids"][r, c]
        if repl is not None:
            enc["input_ids"][r, c] = tok.convert_tokens_to_ids(repl)
    return enc, mlm


def compute_bert_pretraining(model, case_dir):
    model.eval()
    tok = tiny_tok(case_dir)
    ref = Ref()
    enc, mlm = pretrain_inputs(tok)
    nsp = torch.tensor([0, 1])
    add_bert_inputs(ref, enc, f"pairs {PRETRAIN_PAIRS} after masking")
    ref.add("mlm_labels", mlm, "[2, 10] original ids at (0,2) (input [MASK]), (0,6) (input "
            "replaced by 'tree'), (1,1) (input unchanged); -100 elsewhere")
    ref.add("next_sentence_label", nsp, "[2] 0 = B follows A, 1 = B is random")
    with torch.no_grad():
        b = model.bert(**enc, output_hidden_states=True)
    out = model(**enc, labels=mlm, next_sentence_label=nsp, output_hidden_states=True)
    hs = torch.stack(out.hidden_states)
    assert torch.equal(hs, torch.stack(b.hidden_states))
    assert torch.equal(b.last_hidden_state, hs[-1])
    ref.add("last_hidden_state", b.last_hidden_state, "[2, 10, 32] encoder output (model.bert)")
    ref.add("hidden_states", hs, "[n_layers+1=3, 2, 10, 32]: [0] = embeddings after LayerNorm, "
            "[i] = output of layer i-1; [2] = last_hidden_state")
    ref.add("pooler_output", b.pooler_output, "[2, 32] tanh(dense([CLS] hidden state))")
    ref.add("prediction_logits", out.prediction_logits, f"[2, 10, {len(TINY_BERT_VOCAB)}] MLM "
            "logits (decoder tied to word_embeddings, + cls.predictions.bias)")
    ref.add("seq_relationship_logits", out.seq_relationship_logits, "[2, 2] NSP logits")
    V = len(TINY_BERT_VOCAB)
    mlm_loss = F.cross_entropy(out.prediction_logits.reshape(-1, V), mlm.reshape(-1))
    nsp_loss = F.cross_entropy(out.seq_relationship_logits, nsp)
    assert torch.allclose(mlm_loss + nsp_loss, out.loss, atol=1e-6)
    ref.scalar("loss", out.loss, "mlm_loss + nsp_loss (HF BertForPreTraining)")
    ref.scalar("mlm_loss", mlm_loss, "mean CE over the 3 positions with mlm_labels != -100")
    ref.scalar("nsp_loss", nsp_loss, "mean CE of seq_relationship_logits vs next_sentence_label")
    train_step(model, out.loss, ref, bert_decays, DECAY_RULES["bert"])
    return ref


def compute_bert_bare(model, case_dir):
    model.eval()
    tok = tiny_tok(case_dir)
    ref = Ref()
    enc, _ = pretrain_inputs(tok)
    add_bert_inputs(ref, enc, f"pairs {PRETRAIN_PAIRS} after masking (as bert-tiny-pretraining)")
    with torch.no_grad():
        b = model(**enc, output_hidden_states=True)
    ref.add("last_hidden_state", b.last_hidden_state, "[2, 10, 32] encoder output")
    ref.add("hidden_states", torch.stack(b.hidden_states), "[3, 2, 10, 32] as in "
            "bert-tiny-pretraining")
    ref.add("pooler_output", b.pooler_output, "[2, 32] tanh(dense([CLS] hidden state))")
    return ref


CLASSIFY_TEXTS = ["the king was very good", "a bad day", "she found the old red book at home"]
CLASSIFY_LABELS = [2, 0, 1]


def compute_bert_classify(model, case_dir):
    model.eval()
    tok = tiny_tok(case_dir)
    ref = Ref()
    enc = tok(CLASSIFY_TEXTS, padding=True, return_tensors="pt")
    enc = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    labels = torch.tensor(CLASSIFY_LABELS)
    add_bert_inputs(ref, enc, f"{CLASSIFY_TEXTS} padded to the longest")
    ref.add("labels", labels, "[3] class ids (0 neg, 1 neu, 2 pos)")
    out = model(**enc, labels=labels)
    ref.add("logits", out.logits, "[3, 3] classifier(pooler_output)")
    assert torch.allclose(F.cross_entropy(out.logits, labels), out.loss, atol=1e-6)
    ref.scalar("loss", out.loss, "mean CE of logits vs labels (HF infers single_label_"
               "classification from num_labels > 1 and integer labels)")
    train_step(model, out.loss, ref, bert_decays, DECAY_RULES["bert"])
    return ref


# Token classification (NER): words with word-level tags; labels on the first word piece of
# each word (HF run_ner, label_all_tokens=False), -100 on later pieces, specials and padding.
TOKEN_WORDS = [
    ["the", "king", "walked", "to", "paris"],
    ["she", "found", "london", "and", "france", "."],
    ["the", "queen", "of", "england", "saw", "the", "walking", "dog"],
]
TOKEN_TAGS = [
    ["O", "B-PER", "O", "O", "B-LOC"],
    ["O", "O", "B-LOC", "O", "B-LOC", "O"],
    ["O", "B-PER", "I-PER", "I-PER", "O", "O", "O", "O"],
]
TOKEN_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
NER_TEXTS = ["The King walked to Paris, and Émile saw the Queen of England.",
             "she found london", "Walking dogs: a très long day in France!"]


def align_first_piece(enc, tags, label2id):
    labels = []
    for i, row_tags in enumerate(tags):
        prev, row = None, []
        for w in enc.word_ids(i):
            row.append(-100 if w is None or w == prev else label2id[row_tags[w]])
            prev = w
        labels.append(row)
    return torch.tensor(labels)


def compute_bert_token_classify(model, case_dir):
    model.eval()
    tok = tiny_tok(case_dir)
    ref = Ref()
    enc = tok(TOKEN_WORDS, is_split_into_words=True, padding=True, return_tensors="pt")
    label2id = {n: i for i, n in enumerate(TOKEN_LABELS)}
    labels = align_first_piece(enc, TOKEN_TAGS, label2id)
    enc = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    add_bert_inputs(ref, enc, f"the words {TOKEN_WORDS} (is_split_into_words=True), padded")
    ref.add("labels", labels, "[3, T] tag id on the first word piece of each word (HF run_ner, "
            "label_all_tokens=False); -100 on later pieces ('walking' = walk ##ing), [CLS], "
            "[SEP] and padding")
    out = model(**enc, labels=labels)
    ref.add("logits", out.logits, f"[3, T, {len(TOKEN_LABELS)}] classifier(last_hidden_state) "
            "on every token (no pooler)")
    L = len(TOKEN_LABELS)
    manual = F.cross_entropy(out.logits.reshape(-1, L), labels.reshape(-1), ignore_index=-100)
    assert torch.allclose(manual, out.loss, atol=1e-6)
    ref.scalar("loss", out.loss, "mean CE over the tokens with labels != -100")
    ref.info["words"] = TOKEN_WORDS
    ref.info["tags"] = TOKEN_TAGS
    # The token-classification pipeline on raw text, grouped as aggregation_strategy="simple"
    # (start/end are character offsets; "Émile" is [UNK], so its word is the text itself).
    ner = transformers.pipeline("token-classification", model=model, tokenizer=tok,
                                aggregation_strategy="simple", device="cpu")
    results = []
    with torch.no_grad():
        for text in NER_TEXTS:
            got = ner(text)
            results.append({"text": text, "entities": [
                {k: (float(e[k]) if k == "score" else e[k]) for k in
                 ("entity_group", "score", "word", "start", "end")} for e in got]})
            alone = tok(text, return_tensors="pt")
            probs = torch.softmax(model(**alone).logits[0], dim=-1)
            gaps = [margins(row, 1)[0] for row in probs[1:-1]]
            assert min(gaps) > 1e-4, f"near-tie in {text!r}; change the text"
    # The random model tags nearly every token B-LOC, so the grouping rules also get HF's own
    # group_entities on given per-token tags (then "O" groups dropped, as postprocess does).
    pieces = ["the", "king", "walk", "##ed", "to", "paris", "and", "queen", "of", "england",
              "saw", "a", "dog", "##s", "home"]
    tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "B-LOC", "I-PER", "O", "MISC",
            "MISC", "B-PER", "I-LOC", "I-LOC", "O"]
    scores = [0.9, 0.8, 0.7, 0.6, 0.95, 0.5, 0.55, 0.65, 0.75, 0.85, 0.45, 0.35, 0.25, 0.15, 0.99]
    spans, pos = [], 0
    for p in pieces:
        if p.startswith("##"):
            spans.append((pos, pos + len(p) - 2))
            pos += len(p) - 2
        else:
            pos += 1 if spans else 0
            spans.append((pos, pos + len(p)))
            pos += len(p)
    ents = [{"entity": t, "score": np.float32(sc), "index": i + 1, "word": w, "start": a,
             "end": b} for i, (w, t, sc, (a, b)) in enumerate(zip(pieces, tags, scores, spans))]
    grouped = [g for g in ner.group_entities(ents) if g["entity_group"] != "O"]
    ref.info["ner_pipeline"] = {
        "pipeline": "transformers.pipeline('token-classification', "
        "aggregation_strategy='simple') on each text alone (ignore_labels ['O'])",
        "results": results,
        "grouping": {"pieces": pieces, "tags": tags, "scores": scores, "spans": spans,
                     "groups": [{k: (float(g[k]) if k == "score" else g[k]) for k in
                                 ("entity_group", "score", "word", "start", "end")}
                                for g in grouped],
                     "note": "TokenClassificationPipeline.group_entities on these per-token "
                     "tags/scores/offsets, then groups tagged O removed"},
    }
    train_step(model, out.loss, ref, bert_decays, DECAY_RULES["bert"])
    return ref


# Multiple choice (HF run_swag): each choice a pair (context as segment A, ending as segment
# B); input [B, K, T] flattened to [B*K, T] inside the model, logits [B*K, 1] viewed [B, K].
MC_CONTEXTS = ["the king walked to the old house", "she found a book"]
MC_CHOICES = [["he saw the queen", "a dog ran", "the red door was open ."],
              ["it was very good", "they went to paris in the night", "the cat"]]
MC_LABELS = [2, 0]


def compute_bert_multiple_choice(model, case_dir):
    model.eval()
    tok = tiny_tok(case_dir)
    ref = Ref()
    B, K = len(MC_CONTEXTS), len(MC_CHOICES[0])
    first = [c for c in MC_CONTEXTS for _ in range(K)]
    second = [e for ends in MC_CHOICES for e in ends]
    enc = tok(first, second, padding=True, return_tensors="pt")
    enc = {k: enc[k].view(B, K, -1) for k in ("input_ids", "token_type_ids", "attention_mask")}
    labels = torch.tensor(MC_LABELS)
    ref.add("input_ids", enc["input_ids"], f"[B=2, K=3, T] token ids of the pairs (context, "
            f"choice): contexts {MC_CONTEXTS}, choices {MC_CHOICES}, all B*K pairs padded to "
            "the longest")
    ref.add("token_type_ids", enc["token_type_ids"], "[2, 3, T] 0 = segment A (incl. [CLS] and "
            "its [SEP]), 1 = segment B (incl. final [SEP]), 0 on padding")
    ref.add("attention_mask", enc["attention_mask"], "[2, 3, T] 1 = token, 0 = padding")
    ref.add("labels", labels, "[2] index of the right choice")
    out = model(**enc, labels=labels)
    ref.add("logits", out.logits, "[2, 3] classifier(pooler_output) of each choice, viewed [B, K]")
    assert torch.allclose(F.cross_entropy(out.logits, labels), out.loss, atol=1e-6)
    ref.scalar("loss", out.loss, "mean CE of logits [B, K] vs labels")
    train_step(model, out.loss, ref, bert_decays, DECAY_RULES["bert"])
    return grads_only(ref)


# Regression (STS-B style): one output, MSE on the squeezed logits.
REGRESSION_PAIRS = [("the dog ran home", "a dog went home"), ("paris is in france", "the sun"),
                    ("she found a book", "she found the old book")]
REGRESSION_LABELS = [3.8, 0.4, 4.25]
# Inputs of the text-classification pipeline: single texts and {"text", "text_pair"} dicts.
REGRESSION_PIPELINE = ["the old dog", "paris is a big city",
                       {"text": "she saw the king", "text_pair": "the queen saw him"},
                       {"text": "a red book", "text_pair": "the book was red"}]


def compute_bert_regression(model, case_dir):
    model.eval()
    # A [1, 32] Linear weight read from the file sits at an address whose alignment picks
    # another BLAS path than a fresh allocation (logits 1 ulp apart): fresh copies for both.
    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.clone()
    tok = tiny_tok(case_dir)
    ref = Ref()
    enc = tok([a for a, _ in REGRESSION_PAIRS], [b for _, b in REGRESSION_PAIRS], padding=True,
              return_tensors="pt")
    enc = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    labels = torch.tensor(REGRESSION_LABELS, dtype=torch.float32)
    add_bert_inputs(ref, enc, f"pairs {REGRESSION_PAIRS} padded to the longest")
    ref.add("labels", labels, "[3] float targets (problem_type regression)")
    out = model(**enc, labels=labels)
    ref.add("logits", out.logits, "[3, 1] classifier(pooler_output)")
    assert torch.allclose(F.mse_loss(out.logits.squeeze(), labels), out.loss, atol=1e-6)
    ref.scalar("loss", out.loss, "MSELoss(logits.squeeze(), labels): mean over the batch")
    clf = transformers.pipeline("text-classification", model=model, tokenizer=tok, device="cpu")
    with torch.no_grad():
        got = [clf(x) for x in REGRESSION_PIPELINE]
    got = [g[0] if isinstance(g, list) else g for g in got]
    ref.info["pipeline"] = {
        "pipeline": "transformers.pipeline('text-classification') on each input alone (defaults: "
        "problem_type regression -> function_to_apply none, top_k 1)",
        "inputs": REGRESSION_PIPELINE,
        "results": [{"label": g["label"], "score": float(g["score"])} for g in got],
    }
    train_step(model, out.loss, ref, bert_decays, DECAY_RULES["bert"])
    return ref


RERANK_QUERY = "where is the old dog"
RERANK_TEXTS = ["the old dog is by the river", "paris is in france", "a dog", "she found the red book"]


def compute_bert_rerank(model, case_dir):
    """A cross-encoder (one-label classifier over a text pair), as TEI's /rerank and
    sentence-transformers' CrossEncoder score (query, text): logits, and sigmoid for scores."""
    model.eval()
    tok = tiny_tok(case_dir)
    ref = Ref()
    enc = tok([RERANK_QUERY] * len(RERANK_TEXTS), RERANK_TEXTS, padding=True, return_tensors="pt")
    enc = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    add_bert_inputs(ref, enc, f"({RERANK_QUERY!r}, text) for text in {RERANK_TEXTS}, padded")
    with torch.no_grad():
        logits = model(**enc).logits
    ref.add("logits", logits, "[4, 1] classifier(pooler_output) of each pair")
    ref.add("scores", torch.sigmoid(logits[:, 0]), "[4] sigmoid(logits): TEI's rerank scores")
    return ref


QA_PAIRS = [
    ("who saw the dog", "the old man saw the dog by the river"),
    ("where is paris", "paris is in france"),
]
QA_SPANS = [("the old man", 0), ("france", 0)]  # answer text, occurrence


def compute_bert_qa(model, case_dir):
    model.eval()
    tok = tiny_tok(case_dir)
    ref = Ref()
    enc = tok([q for q, _ in QA_PAIRS], [c for _, c in QA_PAIRS], padding="max_length",
              max_length=16, return_tensors="pt")
    enc = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    starts, ends = [], []
    for i, (ans, _) in enumerate(QA_SPANS):
        a = tok(ans, add_special_tokens=False)["input_ids"]
        row = enc["input_ids"][i].tolist()
        tt = enc["token_type_ids"][i].tolist()
        s = next(j for j in range(len(row)) if tt[j] == 1 and row[j : j + len(a)] == a)
        starts.append(s)
        ends.append(s + len(a) - 1)
    sp, ep = torch.tensor(starts), torch.tensor(ends)
    add_bert_inputs(ref, enc, f"(question, context) pairs {QA_PAIRS} padded to 16")
    ref.add("start_positions", sp, f"[2] answer start token index; answers {QA_SPANS}")
    ref.add("end_positions", ep, "[2] answer end token index (inclusive)")
    out = model(**enc, start_positions=sp, end_positions=ep)
    ref.add("start_logits", out.start_logits, "[2, 16] qa_outputs(h)[..., 0]")
    ref.add("end_logits", out.end_logits, "[2, 16] qa_outputs(h)[..., 1]")
    manual = (F.cross_entropy(out.start_logits, sp) + F.cross_entropy(out.end_logits, ep)) / 2
    assert torch.allclose(manual, out.loss, atol=1e-6)
    ref.scalar("loss", out.loss, "(CE(start_logits, start) + CE(end_logits, end)) / 2, each "
               "mean over the batch, softmax over all 16 positions (padding included)")
    train_step(model, out.loss, ref, bert_decays, DECAY_RULES["bert"])
    return ref


FILL_TEXTS = [
    "the capital of france is [MASK] .",
    "the dog [MASK] to the house .",
    "she [MASK] a book and [MASK] it to her child .",
]
FILL_LABELS = [["paris"], ["ran"], ["found", "gave"]]  # MLM targets for the training step


def compute_bert_mlm(model, case_dir):
    model.eval()
    tok = tiny_tok(case_dir)
    ref = Ref()
    enc = tok(FILL_TEXTS, padding=True, return_tensors="pt")
    enc = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    mask_id = tok.mask_token_id
    labels = torch.full_like(enc["input_ids"], -100)
    for i, words in enumerate(FILL_LABELS):
        cols = (enc["input_ids"][i] == mask_id).nonzero().flatten().tolist()
        assert len(cols) == len(words)
        for c, w in zip(cols, words):
            labels[i, c] = tok.convert_tokens_to_ids(w)
    add_bert_inputs(ref, enc, f"{FILL_TEXTS} padded to the longest")
    ref.add("labels", labels, f"[3, T] -100 except at the [MASK]s: ids of {FILL_LABELS}")

    # fill-mask pipeline on each text alone (no padding), before the training step
    fill = transformers.pipeline("fill-mask", model=model, tokenizer=tok, top_k=5, device="cpu")
    results = []
    min_gap = float("inf")
    with torch.no_grad():
        for i, text in enumerate(FILL_TEXTS):
            alone = tok(text, return_tensors="pt")
            logits = model(**alone).logits[0]
            cols = (alone["input_ids"][0] == mask_id).nonzero().flatten()
            probs = torch.softmax(logits[cols], dim=-1)
            ref.add(f"fill_mask.{i}.input_ids", alone["input_ids"], f"[1, T] text {i} alone")
            ref.add(f"fill_mask.{i}.mask_positions", cols, "[n_masks] token index of each [MASK]")
            ref.add(f"fill_mask.{i}.probs", probs, f"[n_masks, {len(TINY_BERT_VOCAB)}] softmax "
                    "over the vocabulary at each [MASK] (each mask scored independently)")
            got = fill(text)
            if len(cols) == 1:
                got = [got]
            per_mask = []
            for m, preds in enumerate(got):
                top = torch.topk(probs[m], 5)
                assert [p["token"] for p in preds] == top.indices.tolist()
                assert np.allclose([p["score"] for p in preds], top.values.tolist(), atol=1e-6)
                min_gap = min(min_gap, min(margins(probs[m], 5)))
                per_mask.append([{"id": p["token"], "token": p["token_str"],
                                  "score": p["score"], "sequence": p["sequence"]} for p in preds])
            results.append({"text": text, "masks": per_mask})
    ref.info["fill_mask"] = {
        "pipeline": "transformers.pipeline('fill-mask', top_k=5) on each text alone",
        "results": results,
    }
    ref.scalar("fill_mask.min_score_gap", min_gap, "smallest gap between consecutive scores "
               "of the top 6 at any mask (so the top-5 order is unambiguous)")
    assert min_gap > 1e-3, f"fill-mask top-5 near-tie ({min_gap}); change the seed"

    out = model(**enc, labels=labels)
    ref.add("logits", out.logits, f"[3, T, {len(TINY_BERT_VOCAB)}] MLM logits of the padded batch")
    ref.scalar("loss", out.loss, "mean CE over the 4 positions with labels != -100")
    train_step(model, out.loss, ref, bert_decays, DECAY_RULES["bert"])
    return ref


NSP_PAIRS = [("the sun was up", "they walked to the sea"), ("a bird sang", "paris is big")]
NSP_LABELS = [0, 1]


def compute_bert_nsp(model, case_dir):
    model.eval()
    tok = tiny_tok(case_dir)
    ref = Ref()
    enc = tok([a for a, _ in NSP_PAIRS], [b for _, b in NSP_PAIRS], padding=True,
              return_tensors="pt")
    enc = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    labels = torch.tensor(NSP_LABELS)
    add_bert_inputs(ref, enc, f"pairs {NSP_PAIRS} padded to the longest")
    ref.add("labels", labels, "[2] 0 = B follows A, 1 = B is random")
    out = model(**enc, labels=labels)
    ref.add("logits", out.logits, "[2, 2] cls.seq_relationship(pooler_output)")
    ref.scalar("loss", out.loss, "mean CE of logits vs labels")
    train_step(model, out.loss, ref, bert_decays, DECAY_RULES["bert"])
    return ref


def make_bert(root, name, cls, seed, compute_note, **extra):
    case_dir = fresh_dir(root / name)
    write_tiny_bert_tokenizer(case_dir)
    torch.manual_seed(seed)
    model = cls(bert_tiny_config(**extra))
    custom_init(model, seed=seed)
    model.save_pretrained(case_dir)
    header = {
        "case": name,
        "model_class": cls.__name__,
        "attn_implementation": "eager",
        "init": {**INIT, "seed": seed},
        "note": compute_note,
    }
    if cls in (BertForPreTraining, BertForMaskedLM):
        header["tied"] = {
            "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.bias": "cls.predictions.bias",
            "in_file": "neither decoder key is in model.safetensors; gradients of a shared "
            "tensor sum both uses",
        }
    return case_dir, model, header


def make_bert_pretraining(root):
    case_dir, model, header = make_bert(root, "bert-tiny-pretraining", BertForPreTraining, 2000,
                                        "keys carry the bert. prefix")
    # The bare variant: the same encoder weights saved from a stand-alone BertModel, so its
    # keys have no `bert.` prefix; its outputs must equal this case's encoder outputs.
    bare = BertModel(copy.deepcopy(model.config))
    bare.load_state_dict(model.bert.state_dict())
    bare_dir = fresh_dir(root / "bert-tiny-bare")
    write_tiny_bert_tokenizer(bare_dir)
    bare.save_pretrained(bare_dir)
    bare_header = {
        "case": "bert-tiny-bare", "model_class": "BertModel", "attn_implementation": "eager",
        "init": {**INIT, "seed": 2000},
        "note": "the encoder of bert-tiny-pretraining saved from a stand-alone BertModel: the "
        "same tensors under keys without the bert. prefix; outputs equal bert-tiny-pretraining's",
    }
    return [(case_dir, model, header), (bare_dir, bare, bare_header)]


# --------------------------------------------------------------------------------------------
# GPT-2 zero-shot tasks (CBT, translation, QA) on a tiny random GPT-2 with a small BPE
# vocabulary trained on the committed data, so the whole case stays small.

ZS_DATA = ROOT / "tests" / "data"
ZS_MAX_NEW = 16  # tokens generated per translation / answer
ZS_SHOTS = 2  # example pairs held out from the front of the file (translate, NQ-style QA)


def read_jsonl(path):
    return [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]


def zs_texts():
    texts = [l.split(" ", 1)[1] for l in open(ZS_DATA / "cbt/tiny_NE.txt", encoding="utf-8")
             if l.strip()]
    for r in read_jsonl(ZS_DATA / "translate/en_fr.jsonl"):
        texts += [f"{r['source']} = {r['target']}"]
    for r in read_jsonl(ZS_DATA / "qa/coqa_tiny.jsonl"):
        texts += [r["story"]] + [f"Q: {q}\nA: {a}" for q, a in zip(r["questions"], r["answers"])]
    for r in read_jsonl(ZS_DATA / "qa/nq_tiny.jsonl"):
        texts += [f"Q: {r['question']}\nA: {r['answers'][0]}"]
    return texts


def read_cbt_file(path):
    """The original CBT format: numbered context lines, then `N query\tanswer\t\tc1|...`."""
    items, ctx = [], []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        rest = line.split(" ", 1)[1]
        if "\t" in rest:
            query, answer, _, cands = rest.split("\t")
            items.append({"context": " ".join(c.strip() for c in ctx), "query": query.strip(),
                          "answer": answer.strip(), "candidates": cands.split("|")})
            ctx = []
        else:
            ctx.append(rest.strip())
    return items


def translate_prompt(examples, source):
    return "".join(f"{s} = {t}\n" for s, t in examples) + f"{source} ="


def coqa_prompts(row):
    out = []
    for i, q in enumerate(row["questions"]):
        hist = "".join(f"Q: {hq}\nA: {ha}\n" for hq, ha in zip(row["questions"][:i], row["answers"][:i]))
        out.append((f"{row['story']}\n\n{hist}Q: {q}\nA:", [row["answers"][i]]))
    return out


def nq_prompt(examples, question):
    return "".join(f"Q: {q}\nA: {a[0]}\n" for q, a in examples) + f"Q: {question}\nA:"


def greedy_line(model, tok, prompt):
    """Greedy continuation of `prompt` (its last n_positions + 1 - ZS_MAX_NEW tokens), cut
    before the first newline; end-of-text ends it."""
    ids = tok(prompt)["input_ids"]
    keep = model.config.n_positions + 1 - ZS_MAX_NEW
    ids = ids[-keep:]
    eos = model.config.eos_token_id
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=ZS_MAX_NEW, do_sample=False, pad_token_id=eos,
                             eos_token_id=eos)
    new = out[0, len(ids):].tolist()
    if eos in new:
        new = new[:new.index(eos)]
    text = tok.decode(new)
    return {"prompt_ids": ids, "new_ids": new, "text": text.split("\n", 1)[0]}


def compute_gpt2_zeroshot(model, case_dir):
    import sacrebleu
    model.eval()
    tok = GPT2TokenizerFast.from_pretrained(str(case_dir))
    ref = Ref()
    n_pos = model.config.n_positions
    # CBT: log p(" " + filled query | context), context cut from the left to n_pos - longest.
    cbt = []
    for it in read_cbt_file(ZS_DATA / "cbt/tiny_NE.txt"):
        ctx = tok(it["context"])["input_ids"]
        qs = [tok(" " + it["query"].replace("XXXXX", c))["input_ids"] for c in it["candidates"]]
        keep = min(len(ctx), n_pos - max(len(q) for q in qs))
        kept = ctx[len(ctx) - keep:]
        scores = []
        for q in qs:
            ids = torch.tensor([kept + q])
            with torch.no_grad():
                lp = torch.log_softmax(model(ids).logits[0], dim=-1)
            scores.append(sum(lp[keep - 1 + j, t].double().item() for j, t in enumerate(q)))
        choice = max(range(len(scores)), key=lambda k: (scores[k], -k))
        cbt.append({"context_ids": ctx, "query_ids": qs, "truncated_tokens": len(ctx) - keep,
                    "scores": scores, "choice": choice,
                    "correct": it["candidates"][choice] == it["answer"]})
    ref.add("cbt.scores", torch.tensor([c["scores"] for c in cbt], dtype=torch.float32),
            "[questions, 10] log p(filled query | context) per candidate (float64 sums of "
            "float32 log_softmax, stored float32; exact doubles in cbt[].scores)")
    ref.add("cbt.choices", torch.tensor([c["choice"] for c in cbt]), "[questions] argmax (first best)")
    ref.scalar("cbt.accuracy", sum(c["correct"] for c in cbt) / len(cbt), "share of questions right")
    # Translation, both directions: the first ZS_SHOTS pairs are the examples, the rest scored.
    pairs = [(r["source"], r["target"]) for r in read_jsonl(ZS_DATA / "translate/en_fr.jsonl")]
    translate = {}
    for direction, ps in [("en-fr", pairs), ("fr-en", [(t, s) for s, t in pairs])]:
        ex, rest = ps[:ZS_SHOTS], ps[ZS_SHOTS:]
        outs = [greedy_line(model, tok, translate_prompt(ex, s)) for s, _ in rest]
        hyps = [o["text"].strip() for o in outs]
        b = sacrebleu.BLEU().corpus_score(hyps, [[t for _, t in rest]])
        translate[direction] = {"items": outs, "hypotheses": hyps, "bleu": b.score,
                                "counts": list(b.counts), "totals": list(b.totals),
                                "sys_len": b.sys_len, "ref_len": b.ref_len}
        ref.scalar(f"translate.{direction}.bleu", b.score, "sacrebleu corpus BLEU (defaults)")
    # QA: CoQA-style (story + history) and NQ-style (ZS_SHOTS example pairs held out).
    qa = {}
    coqa = [p for r in read_jsonl(ZS_DATA / "qa/coqa_tiny.jsonl") for p in coqa_prompts(r)]
    nq_rows = read_jsonl(ZS_DATA / "qa/nq_tiny.jsonl")
    nq_ex = [(r["question"], r["answers"]) for r in nq_rows[:ZS_SHOTS]]
    nq = [(nq_prompt(nq_ex, r["question"]), r["answers"]) for r in nq_rows[ZS_SHOTS:]]
    for name, prompts in [("coqa", coqa), ("nq", nq)]:
        outs = [greedy_line(model, tok, p) for p, _ in prompts]
        for o, (_, golds) in zip(outs, prompts):
            o["answer"] = o["text"].strip()
            o["golds"] = golds
        qa[name] = {"items": outs}
    ref.info = {"zeroshot": {"max_new_tokens": ZS_MAX_NEW, "shots": ZS_SHOTS, "cbt": cbt,
                             "translate": translate, "qa": qa}}
    return ref


def make_gpt2_zeroshot(root):
    from tokenizers import ByteLevelBPETokenizer

    case_dir = fresh_dir(root / "gpt2-zeroshot")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(zs_texts(), vocab_size=400, min_frequency=2,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(case_dir))
    vocab = json.loads((case_dir / "vocab.json").read_text())
    eos = vocab["<|endoftext|>"]
    cfg = gpt2_tiny_config()
    cfg.vocab_size = len(vocab)
    cfg.n_positions = 96
    cfg.bos_token_id = cfg.eos_token_id = eos
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    custom_init(model, seed=1501)
    # Nudge the newline logit up by 4 (ln_f's bias along wte["\n"]), so that some greedy
    # continuations stop at a newline within ZS_MAX_NEW tokens, as real ones do.
    nl = vocab["\u010a"]
    w = model.transformer.wte.weight.data[nl]
    with torch.no_grad():
        model.transformer.ln_f.bias += 4.0 * w / w.dot(w)
    model.generation_config.pad_token_id = eos
    model.save_pretrained(case_dir)
    header = {
        "case": "gpt2-zeroshot", "model_class": "GPT2LMHeadModel", "attn_implementation": "eager",
        "init": {**INIT, "seed": 1501, "then": "ln_f.bias += 4 wte[nl] / |wte[nl]|^2 (nl = the "
                 "newline token): the newline logit is 4 higher"},
        "tokenizer": "tokenizers.ByteLevelBPETokenizer trained (vocab 400, min_frequency 2) on "
        "tests/data/{cbt,translate,qa}; read with GPT2TokenizerFast.from_pretrained(dir)",
        "note": "zeroshot.cbt: per question the tokenized context and filled queries, the "
        "truncation, per-candidate scores and the choice; zeroshot.translate / zeroshot.qa: "
        "per prompt the fed prompt ids, the greedy new ids (end-of-text dropped) and the text "
        "up to the first newline (HF generate, do_sample=False)",
    }
    return [(case_dir, model, header)]
# GPT-2 task heads: untied LM head, sequence classification (+ auxiliary LM loss), multiple
# choice (GPT2DoubleHeadsModel). GPT-1 section 3.2: L3 = L2 + lm_coef * L1.

GPT2_LM_COEF = 0.5
# Right-padded with 127 (eos as pad, as HF users do); row 1 has 127 inside (a delimiter between
# a text pair), so "the rightmost token != pad" is not "the first pad - 1".
GPT2_CLS_ROWS = [
    [5, 17, 99, 3, 64, 64, 120, 8, 0, 45, 77, 126],
    [31, 2, 90, 127, 58, 11, 73],
    [100, 6, 39, 88],
]
GPT2_CLS_LABELS = [2, 0, 1]


def right_pad(rows, pad):
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


def lm_loss_of(logits, ids, mask):
    """HF's shifted LM loss: logits[.., t] vs ids[.., t+1], padding (mask 0) ignored."""
    labels = ids.masked_fill(mask == 0, -100)
    v = logits.shape[-1]
    return F.cross_entropy(logits[..., :-1, :].reshape(-1, v), labels[..., 1:].reshape(-1),
                           ignore_index=-100), labels


def grads_only(ref):
    """Drops the adamw.* tensors train_step recorded (the head cases check gradients; the AdamW
    step itself is checked by gpt2-tiny), halving the fixture."""
    for k in [k for k in ref.tensors if k.startswith("adamw.")]:
        del ref.tensors[k]
        del ref.tensor_meta[k]
    ref.info.pop("adamw", None)
    return ref


def compute_gpt2_untied(model, case_dir):
    model.eval()
    ref = Ref()
    assert model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr()
    ids = torch.tensor(GPT2_INPUT_IDS)
    labels = ids.clone()
    for r, c in GPT2_IGNORED:
        labels[r, c] = -100
    ref.add("input_ids", ids, "[B=2, T=12] token ids (gpt2-tiny's)")
    ref.add("labels", labels, "[2, 12] as gpt2-tiny's labels; unshifted")
    out = model(ids, labels=labels)
    ref.add("logits", out.logits, "[2, 12, 128] lm_head logits (h . lm_head.weight^T, untied)")
    ref.scalar("loss", out.loss, "mean shifted cross-entropy over targets != -100")
    train_step(model, out.loss, ref, gpt2_decays, DECAY_RULES["gpt2"])
    return grads_only(ref)


def compute_gpt2_classify(model, case_dir):
    model.eval()
    ref = Ref()
    cfg = model.config
    ids, mask = right_pad(GPT2_CLS_ROWS, cfg.pad_token_id)
    labels = torch.tensor(GPT2_CLS_LABELS)
    ref.add("input_ids", ids, f"[3, 12] {len(GPT2_CLS_ROWS)} rows (lengths 12, 7, 4) right-padded "
            "with pad_token_id 127; row 1 has 127 at position 3 (a pair delimiter)")
    ref.add("attention_mask", mask, "[3, 12] 1 = real token, 0 = right padding")
    ref.add("labels", labels, "[3] class ids")
    out = model(ids, attention_mask=mask, labels=labels, output_hidden_states=True)
    last = (torch.arange(ids.shape[1]) * (ids != cfg.pad_token_id).int()).argmax(-1)
    ref.add("last_non_pad", last, "[3] HF's pooled position: argmax(arange(T) * (ids != pad)) = "
            "the rightmost token != pad_token_id (0 if none)")
    ref.add("logits", out.logits, "[3, 3] score(h[last_non_pad]) (score has no bias)")
    assert torch.allclose(F.cross_entropy(out.logits, labels), out.loss, atol=1e-6)
    ref.scalar("cls_loss", out.loss, "mean CE of logits vs labels (HF's loss)")
    h = out.hidden_states[-1]
    lm_logits = h @ model.transformer.wte.weight.T
    lm_loss, lm_labels = lm_loss_of(lm_logits, ids, mask)
    ref.add("lm_labels", lm_labels, "[3, 12] input_ids with -100 at padding; unshifted")
    ref.scalar("lm_loss", lm_loss, "the auxiliary LM loss on the same inputs: tied head "
               "(h . wte^T), shifted CE over real next tokens (lm_labels != -100)")
    loss = out.loss + GPT2_LM_COEF * lm_loss
    ref.scalar("lm_coef", GPT2_LM_COEF, "lambda of GPT-1's L3 = L2 + lambda * L1")
    ref.scalar("loss", loss, "cls_loss + lm_coef * lm_loss; the grad.* tensors are its gradient")
    train_step(model, loss, ref, gpt2_decays, DECAY_RULES["gpt2"])
    return grads_only(ref)


# Two examples of three choices each, every choice one sequence (context, delimiter 127,
# ending), right-padded with 127; mc_token_ids = the last real token of each choice.
GPT2_MC_ROWS = [
    [[5, 17, 99, 127, 3, 64], [5, 17, 99, 127, 120, 8, 0, 45], [5, 17, 99, 127, 77]],
    [[31, 2, 90, 58, 127, 11], [31, 2, 90, 58, 127, 73, 100, 6, 39], [31, 2, 90, 58, 127, 88, 1]],
]
GPT2_MC_LABELS = [1, 2]


def compute_gpt2_mc(model, case_dir):
    model.eval()
    ref = Ref()
    pad = model.config.pad_token_id
    flat = [r for ex in GPT2_MC_ROWS for r in ex]
    ids, mask = right_pad(flat, pad)
    B, K, T = len(GPT2_MC_ROWS), len(GPT2_MC_ROWS[0]), ids.shape[1]
    ids, mask = ids.view(B, K, T), mask.view(B, K, T)
    mc_ids = torch.tensor([[len(r) - 1 for r in ex] for ex in GPT2_MC_ROWS])
    mc_labels = torch.tensor(GPT2_MC_LABELS)
    lm_labels = ids.masked_fill(mask == 0, -100)
    ref.add("input_ids", ids, "[B=2, K=3, T=9] choices right-padded with 127; 127 inside a "
            "choice is the delimiter between context and ending")
    ref.add("attention_mask", mask, "[2, 3, 9] 1 = real token")
    ref.add("mc_token_ids", mc_ids, "[2, 3] position of each choice's last real token")
    ref.add("mc_labels", mc_labels, "[2] the right choice")
    ref.add("lm_labels", lm_labels, "[2, 3, 9] input_ids with -100 at padding; unshifted")
    out = model(ids, attention_mask=mask, mc_token_ids=mc_ids, labels=lm_labels,
                mc_labels=mc_labels)
    ref.add("logits", out.logits, "[2, 3, 9, 128] LM logits (tied head)")
    ref.add("mc_logits", out.mc_logits, "[2, 3] multiple_choice_head.summary(h[mc_token_ids])")
    ref.scalar("mc_loss", out.mc_loss, "mean CE of mc_logits vs mc_labels")
    ref.scalar("lm_loss", out.loss, "HF's shifted LM loss over lm_labels != -100 (all choices)")
    loss = out.mc_loss + GPT2_LM_COEF * out.loss
    ref.scalar("lm_coef", GPT2_LM_COEF, "lambda of GPT-1's L3 = L2 + lambda * L1")
    ref.scalar("loss", loss, "mc_loss + lm_coef * lm_loss; the grad.* tensors are its gradient")
    train_step(model, loss, ref, gpt2_decays, DECAY_RULES["gpt2"])
    return grads_only(ref)


def make_gpt2_heads(root):
    out = []
    for name, cls, seed, extra in [
        ("gpt2-tiny-untied", GPT2LMHeadModel, 1101, {"tie_word_embeddings": False}),
        ("gpt2-tiny-classify", GPT2ForSequenceClassification, 1201,
         {"num_labels": 3, "id2label": {0: "neg", 1: "neu", 2: "pos"},
          "label2id": {"neg": 0, "neu": 1, "pos": 2}, "pad_token_id": GPT2_EOS}),
        ("gpt2-tiny-mc", GPT2DoubleHeadsModel, 1301,
         {"pad_token_id": GPT2_EOS, "summary_first_dropout": 0.0}),
    ]:
        case_dir = fresh_dir(root / name)
        cfg = gpt2_tiny_config()
        for k, v in extra.items():
            setattr(cfg, k, v)
        torch.manual_seed(0)
        model = cls(cfg)
        custom_init(model, seed=seed)
        model.save_pretrained(case_dir)
        # References from the saved checkpoint, reloaded: the in-memory multiple-choice head's
        # [N, 32] x [32, 1] product differs from the reloaded one's by 1 ulp (same weights,
        # another buffer alignment), and the checkpoint is what the Rust tests read.
        model = cls.from_pretrained(str(case_dir), attn_implementation="eager")
        out.append((case_dir, model, {
            "case": name, "model_class": cls.__name__, "attn_implementation": "eager",
            "init": {**INIT, "seed": seed}, "config_changes": {k: str(v) for k, v in extra.items()},
            "conv1d": "c_attn/c_proj/c_fc weights are stored [in, out] (y = x W + b)",
        }))
    return out


CASES = {}


def case(name, cls, compute):
    CASES[name] = (cls, compute)


case("gpt2-tiny", GPT2LMHeadModel, compute_gpt2_tiny)
case("gpt2-tiny-bare", GPT2Model, compute_gpt2_bare)
case("gpt2-tiny-untied", GPT2LMHeadModel, compute_gpt2_untied)
case("gpt2-tiny-classify", GPT2ForSequenceClassification, compute_gpt2_classify)
case("gpt2-tiny-mc", GPT2DoubleHeadsModel, compute_gpt2_mc)
case("bert-tiny-pretraining", BertForPreTraining, compute_bert_pretraining)
case("bert-tiny-bare", BertModel, compute_bert_bare)
case("bert-tiny-classify", BertForSequenceClassification, compute_bert_classify)
case("bert-tiny-qa", BertForQuestionAnswering, compute_bert_qa)
case("bert-tiny-rerank", BertForSequenceClassification, compute_bert_rerank)
case("bert-tiny-mlm", BertForMaskedLM, compute_bert_mlm)
case("bert-tiny-nsp", BertForNextSentencePrediction, compute_bert_nsp)
case("gpt2-zeroshot", GPT2LMHeadModel, compute_gpt2_zeroshot)
case("bert-tiny-token-classify", BertForTokenClassification, compute_bert_token_classify)
case("bert-tiny-regression", BertForSequenceClassification, compute_bert_regression)
case("bert-tiny-multiple-choice", BertForMultipleChoice, compute_bert_multiple_choice)


# --------------------------------------------------------------------------------------------
# Real MiniLM (assets/minilm) sentence embeddings

MINILM_EDGE = [
    "",
    "Café déjà vu: a naïve façade in São Paulo, Ångström and Zürich.",
    "日本語のテキスト、中文字符和한국어 mixed with English.",
    "Rust 🦀 makes systems programming fun 🚀🎉!",
    "  Tabs\tand\nnewlines   and\u00a0odd   spacing  ",
]


def minilm_sentences():
    corpus = (ASSETS / "books" / "corpus.txt").read_text(encoding="utf-8")
    lines = [ln.strip() for ln in corpus.split("\n")]
    cands = [ln for ln in lines if 8 <= len(ln.split()) <= 40 and ln.isascii()
             and ln[0].isupper() and ln.endswith(".")]
    picked = [cands[(i * len(cands)) // 16 + 11] for i in range(16)]
    words = corpus.split()
    long_line = " ".join(words[200000:200600])  # 600 words: far past max_seq_length 256
    return picked + MINILM_EDGE[:1] + [long_line] + MINILM_EDGE[1:]


def compute_minilm(sentences):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(ASSETS / "minilm"), device="cpu")
    st.eval()
    ref = Ref()
    feats = st.preprocess(sentences) if hasattr(st, "preprocess") else st.tokenize(sentences)
    ids, mask = feats["input_ids"], feats["attention_mask"]
    assert int(feats["token_type_ids"].abs().sum()) == 0
    with torch.no_grad():
        tok_out = st[0]({k: v for k, v in feats.items()})
        token_emb = tok_out["token_embeddings"]
        pooled = st[1](dict(tok_out))["sentence_embedding"]
        m = mask.unsqueeze(-1).float()
        manual = (token_emb * m).sum(1) / m.sum(1).clamp(min=1e-9)
        assert torch.allclose(manual, pooled, atol=1e-6)
        emb = st.encode(sentences, convert_to_tensor=True, batch_size=32)
        assert torch.allclose(emb, F.normalize(pooled, dim=-1), atol=1e-5)
    n = len(sentences)
    ref.add("input_ids", ids, f"[N={n}, L] token ids from the model's tokenizer (uncased, "
            "truncated to max_seq_length 256 incl. [CLS]/[SEP]), padded with 0 to the longest")
    ref.add("lengths", mask.sum(1), "[N] tokens per sentence: input_ids[i, :lengths[i]] are "
            "sentence i's ids (attention_mask = 1 there, 0 after); token_type_ids are all 0")
    ref.add("embeddings", emb, "[N, 384] SentenceTransformer.encode(): mean pooling over "
            "attention_mask, then L2 normalize (modules.json: Transformer, Pooling, Normalize)")
    ref.add("mean_pooled", pooled, "[N, 384] the same before Normalize (mean of token "
            "embeddings where attention_mask == 1)")
    L0 = int(mask[0].sum())
    ref.add("token_embeddings.0", token_emb[0, :L0], f"[{L0}, 384] last_hidden_state of "
            "sentence 0 (BertModel output)")
    ref.info["sentences"] = sentences
    ref.info["model"] = {"path": "assets/minilm", "max_seq_length": st.max_seq_length,
                         "modules": [type(mod).__name__ for mod in st]}
    import sentence_transformers

    ref.info["versions_extra"] = {"sentence_transformers": sentence_transformers.__version__}
    return ref


def make_minilm(root, sentences=None):
    case_dir = fresh_dir(root / "minilm-embeddings")
    sentences = sentences or minilm_sentences()
    ref = compute_minilm(sentences)
    again = compute_minilm(sentences)
    compare_refs(ref, again, exact=True, label="minilm-embeddings")
    header = {"case": "minilm-embeddings", "model_class": "SentenceTransformer(BertModel)",
              "checkpoint": "assets/minilm (not in this folder)"}
    write_case(case_dir, ref, header)


# --------------------------------------------------------------------------------------------
# --big: full-size random checkpoints (not committed)


def big_texts():
    corpus = (ASSETS / "books" / "corpus.txt").read_text(encoding="utf-8")
    docs = [d for d in corpus.split("\n\f\n") if len(d) > 20000]
    return docs


def compute_gpt2_big(model, case_dir):
    model.eval()
    tok = GPT2TokenizerFast.from_pretrained(str(case_dir))
    docs = big_texts()
    ref = Ref()
    ids = torch.tensor([tok(docs[0])["input_ids"][:64]])
    prompt = torch.tensor([tok("The Rust programming language helps you write")["input_ids"]])
    seq = torch.tensor([tok(docs[1])["input_ids"][:2000]])
    assert ids.shape == (1, 64) and seq.shape == (1, 2000)
    with torch.no_grad():
        ref.add("input_ids", ids, "[1, 64] GPT-2 token ids of the start of a corpus document")
        ref.add("logits", model(ids).logits, "[1, 64, 50257] logits")
        gen_cfg = GenerationConfig(max_new_tokens=20, do_sample=False, num_beams=1,
                                   eos_token_id=None, pad_token_id=50256)
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                             generation_config=gen_cfg)
        new = out[0, prompt.size(1):]
        assert new.numel() == 20
        gaps = greedy_check(model, prompt[0].tolist(), new.tolist())
        ref.add("generate.0.prompt_ids", prompt, "[1, P] prompt 'The Rust programming language "
                "helps you write'")
        ref.add("generate.0.new_ids", new.unsqueeze(0), "[1, 20] greedy new ids")
        ref.scalar("generate.min_top1_margin", min(gaps), "smallest top1 - top2 logit gap")
        tok_nll, windows, guide_mean, guide_n = perplexity(model, seq, 1024, 512)
        mean = tok_nll.double().sum().item() / tok_nll.numel()
        ref.add("ppl.input_ids", seq, "[1, 2000] GPT-2 token ids of a corpus document")
        ref.add("ppl.token_nll", tok_nll, "[1999] -log p(token t | window context), t = 1..1999")
        ref.scalar("ppl.max_length", 1024, "window length")
        ref.scalar("ppl.stride", 512, "window start step")
        ref.scalar("ppl.scored_tokens", tok_nll.numel(), "tokens scored (each once)")
        ref.scalar("ppl.nll_sum", tok_nll.double().sum().item(), "float64 sum of ppl.token_nll")
        ref.scalar("ppl.mean_nll", mean, "exact mean NLL")
        ref.scalar("ppl.perplexity", math.exp(mean), "exp(ppl.mean_nll)")
        ref.scalar("ppl.guide_mean_nll", guide_mean, "HF guide's (valid-1)-weighted mean")
        ref.scalar("ppl.guide_tokens", guide_n, "the guide's token count")
        ref.scalar("ppl.guide_perplexity", math.exp(guide_mean), "exp(ppl.guide_mean_nll)")
        ref.info["ppl_windows"] = windows
    return ref


def compute_gpt2_big_default_init(model, case_dir):
    """Logits only, single and left-padded batch: at HF's default init they are small enough
    (|logit| < 2) for a 1e-4 absolute check, which the 0.2-init model's ~30 are not."""
    model.eval()
    tok = GPT2TokenizerFast.from_pretrained(str(case_dir))
    docs = big_texts()
    ref = Ref()
    ids = torch.tensor([tok(docs[0])["input_ids"][:64]])
    short = tok(docs[1])["input_ids"][:40]
    pad = tok.eos_token_id
    batch = torch.tensor([[pad] * 24 + short, ids[0].tolist()])
    mask = torch.ones_like(batch)
    mask[0, :24] = 0
    # HF generate's position ids for left padding: cumsum(mask) - 1, 1 on padding.
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        ref.add("input_ids", ids, "[1, 64] GPT-2 token ids of the start of a corpus document")
        ref.add("logits", model(ids).logits, "[1, 64, 50257] logits")
        ref.add("batch.input_ids", batch, "[2, 64] row 0: 24 pads (50256) then 40 ids of another "
                "document; row 1: input_ids")
        ref.add("batch.attention_mask", mask, "[2, 64] 0 on row 0's left padding")
        ref.add("batch.position_ids", pos, "[2, 64] cumsum(mask) - 1, 1 on padding")
        out = model(batch, attention_mask=mask, position_ids=pos).logits
        ref.add("batch.logits", out, "[2, 64, 50257] logits (padding positions: don't care)")
    return ref


BIG_BERT_TEXTS = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("Rust is a systems programming language.", "It runs blazingly fast."),
    ("Héllo, wörld! 你好", None),
]


def compute_bert_big(model, case_dir):
    model.eval()
    tok = BertTokenizerFast.from_pretrained(str(case_dir))
    ref = Ref()
    firsts = [a for a, _ in BIG_BERT_TEXTS]
    enc = [tok(a, b) if b else tok(a) for a, b in BIG_BERT_TEXTS]
    T = max(len(e["input_ids"]) for e in enc)
    batch = {k: torch.zeros((len(enc), T), dtype=torch.int64)
             for k in ("input_ids", "token_type_ids", "attention_mask")}
    for i, e in enumerate(enc):
        for k in batch:
            batch[k][i, : len(e[k])] = torch.tensor(e[k])
    with torch.no_grad():
        out = model(**batch)
    add_bert_inputs(ref, batch, f"{BIG_BERT_TEXTS} (pairs where the second item is set), "
                    "right-padded with 0")
    ref.add("last_hidden_state", out.last_hidden_state, "[3, T, 768] encoder output")
    ref.add("pooler_output", out.pooler_output, "[3, 768] tanh(dense([CLS] hidden state))")
    ref.info["texts"] = firsts
    return ref


def make_big(root, only):
    if not only or "gpt2-124m-random" in only:
        yield from make_gpt2_big(root)
    if not only or "gpt2-124m-default-init" in only:
        d_dir = fresh_dir(root / "gpt2-124m-default-init")
        for f in ("vocab.json", "merges.txt"):
            shutil.copy(ASSETS / "gpt2" / f, d_dir / f)
        GPT2TokenizerFast.from_pretrained(str(d_dir)).save_pretrained(str(d_dir))
        cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
        torch.manual_seed(0)
        model = GPT2LMHeadModel(cfg)
        model.save_pretrained(d_dir)
        yield d_dir, model, {"case": "gpt2-124m-default-init", "model_class": "GPT2LMHeadModel",
                             "attn_implementation": "eager",
                             "init": "HF default init (initializer_range 0.02) after "
                             "torch.manual_seed(0)",
                             "tied": {"lm_head.weight": "transformer.wte.weight"}}
    if not only or "bert-base-random" in only:
        yield from make_bert_big(root)


def make_gpt2_big(root):
    g_dir = fresh_dir(root / "gpt2-124m-random")
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(ASSETS / "gpt2" / f, g_dir / f)
    GPT2TokenizerFast.from_pretrained(str(g_dir)).save_pretrained(str(g_dir))
    # initializer_range 0.2 instead of 0.02: at 0.02 the random model's greedy continuation is
    # one token repeated (a broken KV cache could pass that); at 0.2 all 20 new ids differ.
    cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2,
                     attn_implementation="eager")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    model.save_pretrained(g_dir)
    header = {"case": "gpt2-124m-random", "model_class": "GPT2LMHeadModel",
              "attn_implementation": "eager",
              "init": "HF init (N(0, initializer_range^2) = N(0, 0.2^2), residual projections "
              "/ sqrt(2 n_layer), LayerNorm 1/0, biases 0) after torch.manual_seed(0)",
              "tied": {"lm_head.weight": "transformer.wte.weight"}}
    yield g_dir, model, header


def make_bert_big(root):
    b_dir = fresh_dir(root / "bert-base-random")
    shutil.copy(ASSETS / "minilm" / "vocab.txt", b_dir / "vocab.txt")
    BertTokenizerFast.from_pretrained(str(b_dir), do_lower_case=True).save_pretrained(str(b_dir))
    cfg = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     attn_implementation="eager")
    torch.manual_seed(0)
    model = BertModel(cfg)
    model.save_pretrained(b_dir)
    header = {"case": "bert-base-random", "model_class": "BertModel",
              "attn_implementation": "eager",
              "init": "HF default init (initializer_range 0.02) after torch.manual_seed(0)",
              "note": "bare BertModel: keys without the bert. prefix"}
    yield b_dir, model, header


case("gpt2-124m-random", GPT2LMHeadModel, compute_gpt2_big)
case("gpt2-124m-default-init", GPT2LMHeadModel, compute_gpt2_big_default_init)
case("bert-base-random", BertModel, compute_bert_big)


# --------------------------------------------------------------------------------------------
# Driver


# (case names written, function root -> [(case_dir, in-memory model, reference.json header)])
MAKERS = [
    (["gpt2-zeroshot"], make_gpt2_zeroshot),
    (["gpt2-tiny", "gpt2-tiny-bare"], make_gpt2_tiny),
    (["gpt2-tiny-untied", "gpt2-tiny-classify", "gpt2-tiny-mc"], make_gpt2_heads),
    (["bert-tiny-pretraining", "bert-tiny-bare"], make_bert_pretraining),
    (["bert-tiny-classify"], lambda root: [make_bert(
        root, "bert-tiny-classify", BertForSequenceClassification, 3000,
        "keys carry the bert. prefix", num_labels=3, id2label={0: "neg", 1: "neu", 2: "pos"},
        label2id={"neg": 0, "neu": 1, "pos": 2})]),
    (["bert-tiny-rerank"], lambda root: [make_bert(
        root, "bert-tiny-rerank", BertForSequenceClassification, 3500,
        "keys carry the bert. prefix; one label: a cross-encoder", num_labels=1)]),
    (["bert-tiny-qa"], lambda root: [make_bert(
        root, "bert-tiny-qa", BertForQuestionAnswering, 4000,
        "keys carry the bert. prefix; no pooler (HF builds its BertModel without one)")]),
    (["bert-tiny-mlm"], lambda root: [make_bert(
        root, "bert-tiny-mlm", BertForMaskedLM, 5002, "keys carry the bert. prefix; no pooler")]),
    (["bert-tiny-nsp"], lambda root: [make_bert(
        root, "bert-tiny-nsp", BertForNextSentencePrediction, 6000,
        "keys carry the bert. prefix; no MLM head")]),
    (["bert-tiny-token-classify"], lambda root: [make_bert(
        root, "bert-tiny-token-classify", BertForTokenClassification, 7000,
        "keys carry the bert. prefix; no pooler; classifier on every token", num_labels=5,
        id2label=dict(enumerate(TOKEN_LABELS)), label2id={n: i for i, n in enumerate(TOKEN_LABELS)})]),
    (["bert-tiny-regression"], lambda root: [make_bert(
        root, "bert-tiny-regression", BertForSequenceClassification, 7600,
        "keys carry the bert. prefix; one output, problem_type regression", num_labels=1,
        problem_type="regression")]),
    (["bert-tiny-multiple-choice"], lambda root: [make_bert(
        root, "bert-tiny-multiple-choice", BertForMultipleChoice, 8000,
        "keys carry the bert. prefix; classifier [1, 32] on the pooler output of each choice")]),
]


def make_sharded(root):
    """gpt2-tiny saved again by HF in shards (max_shard_size 50KB): config.json,
    model-0000K-of-0000N.safetensors and model.safetensors.index.json. The same weights,
    so the same outputs as gpt2-tiny's reference (the Rust test compares with it)."""
    src = root / "gpt2-tiny"
    case_dir = fresh_dir(root / "gpt2-tiny-sharded")
    model = GPT2LMHeadModel.from_pretrained(str(src), attn_implementation="eager")
    model.save_pretrained(case_dir, max_shard_size="50KB")
    index = json.loads((case_dir / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and not (case_dir / "model.safetensors").exists(), shards
    log(f"   gpt2-tiny-sharded: {len(shards)} shards of gpt2-tiny's weights")


# --------------------------------------------------------------------------------------------
# sacreBLEU corpus BLEU (no model): tests/fixtures/sacrebleu/bleu.json

BLEU_CORPORA = {
    "translation": (
        ["The cat sat on the mat.", "It was 3.14 metres long, or 1,000 cm in 2019-2020!",
         "He said: \"Don't go there\" & left (quickly).", "Le chat est sur le tapis.",
         "We paid $5.00 for 2 coffees; they cost 2.50 each."],
        [["The cat is on the mat.", "A cat sat on the mat."],
         ["It was 3.14 metres long, or about 1,000 cm, in 2019-2020.", "It measured 3.14 m."],
         ["He said \"do not go there\" and left quickly.", "He said: &quot;Don't go&quot; &amp; left."],
         ["The cat is on the carpet.", "The cat sits on the rug."],
         ["We paid $5.00 for two coffees; they cost 2.50 each.", "Two coffees cost $5.00."]],
    ),
    # A short system: brevity penalty < 1.
    "short": (["the cat", "a dog ran", "hello"],
              [["the cat sat on the mat"], ["a dog ran across the road quickly"], ["hello there"]]),
    # Unigram matches only: the exp smoothing halves each missing order.
    "smoothing": (["cat the mat on", "dog a road"], [["the cat on the mat"], ["a dog on the road"]]),
    # No match at all, an empty hypothesis, odd whitespace, entities and <skipped>.
    "nothing": (["zzz qqq", ""], [["the cat"], ["a dog"]]),
    "edge": (["  Tabs\tand\nnewlines   here \u00a0 ", "x<skipped>y -\nz &lt;tag&gt; &#39;",
              "Ünïcode café déjà-vu…", "end ."],
             [["Tabs and newlines here"], ["xy z <tag> &#39;"], ["Ünïcode café déjà-vu…"], ["end."]]),
    # Longer than every order: exact 4-gram counts, repeated n-grams clipped.
    "clipping": (["the the the the the the the", "one two three four five six seven eight"],
                 [["the cat is on the mat"], ["one two three four five six seven nine"]]),
}


def make_sacrebleu(root):
    import sacrebleu
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    out_dir = root / "sacrebleu"
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer13a()
    corpora = {}
    for name, (hyps, refs) in BLEU_CORPORA.items():
        # sacrebleu takes reference *streams*: refs[k][i] is the k-th reference of segment i.
        n_refs = max(len(r) for r in refs)
        streams = [[r[k] if k < len(r) else None for r in refs] for k in range(n_refs)]
        metric = sacrebleu.BLEU()
        b = metric.corpus_score(hyps, streams)
        corpora[name] = {
            "signature": str(metric.get_signature()),
            "hypotheses": hyps, "references": refs,
            "score": b.score, "counts": list(b.counts), "totals": list(b.totals),
            "precisions": list(b.precisions), "bp": b.bp, "sys_len": b.sys_len,
            "ref_len": b.ref_len,
            "tokenized": {s: tok(s.rstrip()) for s in hyps + [x for r in refs for x in r]},
        }
    doc = {
        "case": "sacrebleu-bleu",
        "description": "sacrebleu.BLEU() defaults (13a, exp smoothing, 4-gram) corpus_score per "
        "corpus; references[i] are segment i's references; tokenized = Tokenizer13a()(s.rstrip())",
        "versions": {"python": platform.python_version(), "sacrebleu": sacrebleu.__version__},
        "corpora": corpora,
    }
    with open(out_dir / "bleu.json", "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    log(f"   sacrebleu-bleu: {len(corpora)} corpora")
def make_torch_bin(root):
    """PyTorch-format checkpoints as users have them. transformers 5 no longer writes
    pytorch_model.bin (save_pretrained has no safe_serialization switch), so these are
    torch.save(model.state_dict(), "pytorch_model.bin") (torch's zip format, as every torch >= 1.6
    writes it) next to config.json: gpt2-tiny-bin from gpt2-tiny (lm_head.weight and
    transformer.wte.weight share one storage in the pickle) and bert-tiny-bin from bert-tiny-bare.
    The same weights, so the same outputs as those cases' references; the script checks that
    from_pretrained(dir) reads each back to the same tensors. Plus tests/data/torch-bin/: small
    hand-made files for the reader's error paths (see its README)."""
    for src, name, cls in [("gpt2-tiny", "gpt2-tiny-bin", GPT2LMHeadModel),
                           ("bert-tiny-bare", "bert-tiny-bin", BertModel)]:
        model = cls.from_pretrained(str(root / src), attn_implementation="eager")
        case_dir = fresh_dir(root / name)
        shutil.copy(root / src / "config.json", case_dir / "config.json")
        torch.save(model.state_dict(), case_dir / "pytorch_model.bin")
        again = cls.from_pretrained(str(case_dir), attn_implementation="eager")
        a, b = model.state_dict(), again.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        log(f"   {name}: pytorch_model.bin of {src}'s {len(a)} tensors, reloaded equal")
        if name == "gpt2-tiny-bin":
            # The same state dict in two torch.save shards + pytorch_model.bin.index.json (the
            # layout older transformers wrote for large models).
            shard_dir = fresh_dir(root / "gpt2-tiny-bin-sharded")
            shutil.copy(root / src / "config.json", shard_dir / "config.json")
            keys = list(a)
            halves = [keys[: len(keys) // 2], keys[len(keys) // 2:]]
            weight_map = {}
            for i, part in enumerate(halves):
                fname = f"pytorch_model-{i + 1:05}-of-00002.bin"
                torch.save({k: a[k] for k in part}, shard_dir / fname)
                weight_map.update({k: fname for k in part})
            total = sum(t.numel() * t.element_size() for t in a.values())
            (shard_dir / "pytorch_model.bin.index.json").write_text(json.dumps(
                {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
            again = cls.from_pretrained(str(shard_dir), attn_implementation="eager").state_dict()
            assert all(torch.equal(a[k], again[k]) for k in a), "gpt2-tiny-bin-sharded"
            log("   gpt2-tiny-bin-sharded: two shards and an index, reloaded equal")
    make_torch_bin_cases(ROOT / "tests" / "data" / "torch-bin")


def _pickle_tensor_dict(items):
    """Protocol-2 pickle bytes of {name: tensor} the way torch.save writes a state dict, from
    hand-written opcodes so that a test can put any value in any field. items: (name, storage
    class, storage key, storage numel, offset, size, stride) with ints or raw opcode bytes."""
    import struct

    def uni(s):
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    def num(v):
        if isinstance(v, bytes):
            return v
        if -(2**31) <= v < 2**31:
            return b"J" + struct.pack("<i", v)
        raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
        return b"\x8a" + bytes([len(raw)]) + raw

    def tup(vals):
        return b"(" + b"".join(num(v) for v in vals) + b"t"

    out = b"\x80\x02" + b"ccollections\nOrderedDict\n)R("
    for name, storage, key, numel, offset, size, stride in items:
        out += uni(name) + b"ctorch._utils\n_rebuild_tensor_v2\n("
        out += b"(" + uni("storage") + b"ctorch\n" + storage.encode() + b"\n" + uni(key)
        out += uni("cpu") + num(numel) + b"tQ"
        out += num(offset) + tup(size) + tup(stride) + b"\x89" + b"ccollections\nOrderedDict\n)R"
        out += b"tR"
    return out + b"u."


def _torch_zip(path, pkl, storages, prefix="archive", byteorder=b"little"):
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{prefix}/data.pkl", pkl)
        z.writestr(f"{prefix}/byteorder", byteorder)
        for key, data in storages.items():
            z.writestr(f"{prefix}/data/{key}", data)
        z.writestr(f"{prefix}/version", b"3\n")


def make_torch_bin_cases(out):
    """Small torch-format files for the reader's tests; README.md there says what each holds."""
    import io

    fresh_dir(out)
    twelve = torch.arange(12, dtype=torch.float32)
    # Views as torch.save writes them: an offset slice, a transposed (strided) view, bf16, a
    # Parameter, all sharing or not sharing storages; the reader must give expected.safetensors.
    views = {"offset": twelve[2:5], "transposed": twelve.view(3, 4).t(),
             "bf16": torch.tensor([1.5, -2.0, 0.25], dtype=torch.bfloat16),
             "param": torch.nn.Parameter(torch.tensor([[0.5, -1.0]], dtype=torch.float16)),
             "int64": torch.tensor([3, -4], dtype=torch.int64),
             "scalar": torch.tensor(7.0)}
    torch.save(views, out / "views.bin")
    save_file({k: v.detach().contiguous() for k, v in views.items()}, out / "views.safetensors")
    # The pre-1.6 (non-zip) format: refused with a clear error.
    torch.save({"w": torch.ones(2)}, out / "legacy.bin", _use_new_zipfile_serialization=False)
    data = twelve.numpy().tobytes()
    ok = ("w", "FloatStorage", "0", 12, 0, (3, 4), (4, 1))
    # A hand-made file torch.load reads (so the hostile ones differ from it in one thing only).
    _torch_zip(out / "handmade.bin", _pickle_tensor_dict([ok]), {"0": data})
    got = torch.load(out / "handmade.bin", weights_only=True)
    assert torch.equal(got["w"], twelve.view(3, 4)), got
    hostile = {
        # A global that is not tensor storage: never called, named in the error.
        "os_system.bin": b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00idtR.",
        "builtins_eval.bin": b"\x80\x02cbuiltins\neval\nX\x01\x00\x00\x001\x85R.",
        # REDUCE on an allowed global that is not a function (a storage class).
        "reduce_storage.bin": b"\x80\x02ctorch\nFloatStorage\n)R.",
        # A size far beyond the storage; a huge size whose product overflows; an offset past
        # the end; a negative stride; a storage whose entry is shorter than its declared numel.
        "huge_size.bin": _pickle_tensor_dict([("w", "FloatStorage", "0", 12, 0, (1 << 40,), (1,))]),
        "overflow_size.bin": _pickle_tensor_dict(
            [("w", "FloatStorage", "0", 12, 0, (1 << 62, 1 << 62), (1, 1))]),
        "offset_out_of_range.bin": _pickle_tensor_dict(
            [("w", "FloatStorage", "0", 12, 11, (2,), (1,))]),
        "negative_stride.bin": _pickle_tensor_dict(
            [("w", "FloatStorage", "0", 12, 11, (2,), (-1,))]),
        "short_storage.bin": _pickle_tensor_dict([("w", "FloatStorage", "0", 1 << 30, 0, (4,), (1,))]),
        "missing_storage.bin": _pickle_tensor_dict([("w", "FloatStorage", "7", 12, 0, (4,), (1,))]),
    }
    for name, pkl in hostile.items():
        _torch_zip(out / name, pkl, {"0": data})
        try:
            torch.load(out / name, weights_only=True)
            loaded = True
        except Exception:
            loaded = False
        # os.system etc. are refused by torch's weights_only unpickler too; the size cases
        # fail in torch as well (they are not files torch would write).
        assert not loaded or name in ("negative_stride.bin",), name
    _torch_zip(out / "big_endian.bin", _pickle_tensor_dict([ok]), {"0": data}, byteorder=b"big")
    (out / "README.md").write_text(
        "# torch-format (pytorch_model.bin) files for the reader's tests\n\n"
        "Written by `scripts/make_fixtures.py --only torch-bin` (`make_torch_bin_cases`).\n\n"
        "- `views.bin`: `torch.save` of views (an offset slice, a transposed view, bf16, an f16\n"
        "  Parameter, int64, a 0-d tensor); `views.safetensors` holds the same tensors contiguous.\n"
        "- `legacy.bin`: the pre-1.6 non-zip format (`_use_new_zipfile_serialization=False`).\n"
        "- `handmade.bin`: a hand-written pickle torch.load reads: `w` = arange(12) as [3, 4].\n"
        "- hostile, each differing from handmade.bin in one thing: `os_system.bin`,\n"
        "  `builtins_eval.bin` (forbidden globals), `reduce_storage.bin` (REDUCE on a storage\n"
        "  class), `huge_size.bin` (size 2^40), `overflow_size.bin` (a size product overflowing\n"
        "  64 bits), `offset_out_of_range.bin`, `negative_stride.bin`, `short_storage.bin`\n"
        "  (declared numel 2^30, 48 bytes stored), `missing_storage.bin` (no data/7 entry),\n"
        "  `big_endian.bin` (byteorder `big`).\n")
    log(f"   torch-bin: {len(list(out.iterdir()))} files in {out}")


def generate(items):
    for case_dir, model, header in items:
        name = header["case"]
        cls, compute = CASES[name]
        log(f"== {name}")
        ref = compute(model, case_dir)
        reloaded = cls.from_pretrained(str(case_dir), attn_implementation="eager")
        again = compute(reloaded, case_dir)
        compare_refs(ref, again, exact=True, label=name)
        write_case(case_dir, ref, header)
        log(f"   {name}: reloaded checkpoint reproduces all {len(ref.tensors)} tensors exactly")


def check(root):
    """Reloads each case under root, recomputes and compares with the stored reference."""
    bad = 0
    for ref_json in sorted(root.glob("*/reference.json")):
        case_dir = ref_json.parent
        meta = json.loads(ref_json.read_text())
        name = meta["case"]
        if name == "minilm-embeddings":
            new = compute_minilm(meta["sentences"])
        else:
            cls, compute = CASES[name]
            new = compute(cls.from_pretrained(str(case_dir), attn_implementation="eager"), case_dir)
        stored = load_file(str(case_dir / "reference.safetensors"))
        worst_name, worst = None, 0.0
        for k, t in stored.items():
            if k not in new.tensors:
                log(f"{name}: {k} is no longer produced")
                bad += 1
                continue
            d = (t.double() - new.tensors[k].double()).abs().max().item() if t.numel() else 0.0
            tol = 1e-5 * max(1.0, t.double().abs().max().item()) if t.numel() else 0
            if d > tol:
                log(f"{name}: {k} differs by {d}")
                bad += 1
            if d >= worst:
                worst_name, worst = k, d
        for k, s in meta["scalars"].items():
            v, w = s["value"], new.scalars[k]["value"]
            if abs(v - w) > 1e-5 * max(1.0, abs(v)):
                log(f"{name}: scalar {k} {v} vs {w}")
                bad += 1
        log(f"{name}: {len(stored)} tensors, max abs diff {worst:.3g} ({worst_name})")
    if bad:
        raise SystemExit(f"{bad} mismatches")


# --------------------------------------------------------------------------------------------
# seqeval: entity-level P/R/F1 in its default (conlleval-like) mode, on tricky tag sequences


SEQEVAL_CASES = [
    # I- without B-, type switches inside a chunk, B- after I- of the same type
    ([["O", "I-PER", "I-PER", "O", "B-LOC", "I-LOC", "I-ORG", "O"]],
     [["O", "B-PER", "I-PER", "O", "B-LOC", "I-LOC", "B-ORG", "O"]]),
    # IOBES (E-, S-), a chunk running to the end of a sentence, sentence boundaries
    ([["S-PER", "O", "B-LOC", "E-LOC", "B-ORG", "I-ORG"], ["I-MISC", "E-MISC", "S-MISC"]],
     [["S-PER", "O", "B-LOC", "I-LOC", "B-ORG", "E-ORG"], ["B-MISC", "E-MISC", "O"]]),
    # prefix-less and odd tags, an empty sentence, nothing predicted
    ([["B", "I", "O", "B-X", "B-X"], [], ["O", "O"]],
     [["B", "O", "O", "B-X", "I-X"], [], ["O", "O"]]),
    ([["B-PER", "O"]], [["O", "O"]]),
    ([["O", "O"]], [["O", "O"]]),
]


def random_tags(rng, n):
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "E-LOC", "S-ORG"]
    return [[rng.choice(tags) for _ in range(rng.randrange(0, 9))] for _ in range(n)]


def make_seqeval(root):
    from seqeval.metrics import (accuracy_score, classification_report, f1_score,
                                 precision_score, recall_score)
    from seqeval.metrics.sequence_labeling import get_entities
    import seqeval
    import warnings

    case_dir = fresh_dir(root / "seqeval")
    rng = random.Random(17)
    cases = list(SEQEVAL_CASES)
    for _ in range(6):
        gold = random_tags(rng, 4)
        pred = [[t if rng.random() < 0.6 else rng.choice(["O", "B-PER", "I-LOC", "I-ORG"])
                 for t in row] for row in gold]
        cases.append((gold, pred))
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for gold, pred in cases:
            report = classification_report(gold, pred, output_dict=True, zero_division=0)
            per_type = {k: {m: float(v[m]) for m in ("precision", "recall", "f1-score")}
                        | {"support": int(v["support"])}
                        for k, v in report.items() if "avg" not in k}
            out.append({
                "gold": gold, "pred": pred,
                "gold_entities": [list(e) for e in get_entities(gold)],
                "pred_entities": [list(e) for e in get_entities(pred)],
                "precision": float(precision_score(gold, pred, zero_division=0)),
                "recall": float(recall_score(gold, pred, zero_division=0)),
                "f1": float(f1_score(gold, pred, zero_division=0)),
                "accuracy": float(accuracy_score(gold, pred)) if any(gold) else None,
                "per_type": per_type,
            })
    doc = {
        "case": "seqeval",
        "what": "seqeval.metrics precision_score / recall_score / f1_score (default mode, micro "
        "average, zero_division=0), accuracy_score (token level; null for no tokens), "
        "classification_report(output_dict=True) per type, and get_entities (type, start, end) "
        "over the sentences flattened with an 'O' after each",
        "versions": {**VERSIONS, "seqeval": seqeval.__version__
                     if hasattr(seqeval, "__version__") else "1.2.2"},
        "cases": out,
    }
    with open(case_dir / "reference.json", "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    log(f"   seqeval: {len(out)} cases")



# --------------------------------------------------------------------------------------------
# Pearson / Spearman as HF run_glue scores STS-B (scipy.stats), no model:
# tests/fixtures/correlation/reference.json

CORRELATION_CASES = {
    # ties in both vectors (Spearman ranks ties by their average)
    "ties": ([1.0, 2.5, 2.5, 4.0, 0.5, 3.0, 3.0, 3.0, -1.0, 7.0],
             [0.8, 2.0, 3.1, 3.9, 0.5, 2.5, 2.5, 4.4, 0.0, 5.0]),
    "negative": ([0.0, 1.0, 2.0, 3.0, 4.0], [5.0, 3.9, 3.2, 1.0, 0.5]),
    # monotone but not linear: Spearman 1, Pearson below
    "monotone": ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 4.0, 9.0, 16.0, 25.0, 1000.0]),
    "two": ([0.25, 0.75], [3.0, -1.0]),
    # a large common offset: centring first keeps the digits
    "offset": ([1e6 + 0.1, 1e6 + 0.2, 1e6 + 0.4, 1e6 + 0.3], [2.0, 2.1, 2.5, 2.2]),
    # constant input: scipy's NaN (a warning), null here
    "constant": ([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]),
}


def make_correlation(root):
    import warnings

    import scipy
    from scipy.stats import pearsonr, spearmanr

    case_dir = fresh_dir(root / "correlation")
    rng = random.Random(23)
    cases = dict(CORRELATION_CASES)
    # STS-B-like: gold on a 0-5 grid of fifths (many ties), predictions gold + noise in float32.
    gold = [rng.randrange(0, 26) / 5 for _ in range(200)]
    pred = [float(np.float32(g + rng.gauss(0, 1.2))) for g in gold]
    cases["stsb_like"] = (pred, gold)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (x, y) in cases.items():
            p, s = float(pearsonr(x, y)[0]), float(spearmanr(x, y)[0])
            out[name] = {"x": x, "y": y,
                         "pearson": None if math.isnan(p) else p,
                         "spearmanr": None if math.isnan(s) else s}
    doc = {
        "case": "correlation",
        "what": "scipy.stats.pearsonr(x, y)[0] and spearmanr(x, y)[0] (ties: average ranks) in "
        "float64, as HF run_glue computes STS-B's pearson / spearmanr; null where scipy gives NaN",
        "versions": {**VERSIONS, "scipy": scipy.__version__},
        "cases": out,
    }
    with open(case_dir / "reference.json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    log(f"   correlation: {len(out)} cases")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--check", action="store_true", help="verify instead of writing")
    ap.add_argument("--big", metavar="OUT_DIR", help="write/check the full-size random models")
    ap.add_argument("--only", nargs="+", metavar="CASE", help="cases to (re)write (tiny, or with --big)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if args.big:
        root = Path(args.big)
        if args.check:
            check(root)
        else:
            root.mkdir(parents=True, exist_ok=True)
            generate(make_big(root, set(args.only or [])))
        return
    if args.check:
        check(FIXTURES)
        return
    FIXTURES.mkdir(parents=True, exist_ok=True)
    only = set(args.only or [])
    unknown = only - set(CASES) - {
        "minilm-embeddings", "gpt2-tiny-sharded", "sacrebleu-bleu", "torch-bin", "seqeval",
        "correlation"}
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; known: {sorted(CASES)}")
    for names, make in MAKERS:
        if not only or only & set(names):
            generate(make(FIXTURES))
    if not only or "gpt2-tiny-sharded" in only:
        log("== gpt2-tiny-sharded")
        make_sharded(FIXTURES)
    if not only or "torch-bin" in only:
        log("== torch-bin (gpt2-tiny-bin, bert-tiny-bin, tests/data/torch-bin)")
        make_torch_bin(FIXTURES)
    if not only or "seqeval" in only:
        log("== seqeval")
        make_seqeval(FIXTURES)
    if not only or "correlation" in only:
        log("== correlation")
        make_correlation(FIXTURES)
    if not only or "minilm-embeddings" in only:
        log("== minilm-embeddings")
        make_minilm(FIXTURES)
    if not only or "sacrebleu-bleu" in only:
        log("== sacrebleu-bleu")
        make_sacrebleu(FIXTURES)


if __name__ == "__main__":
    main()
