"""The one JSON format the bench_*.py scripts write with `--json FILE`, read by
scripts/bench_report.py (scripts/bench.sh runs them all and the report).

A file holds {"script", "argv", "date", "loadavg", "cpus", "figures": [...]}; a figure is

    {"what": "GPT-2 124M batch-1 decode f32", "unit": "tokens/s", "better": "higher",
     "lmkit": 61.2, "dtype": "f32", "threads": 2,
     "flops_per_item": null, "bytes_per_item": 5.1e8,
     "peers": {"HF transformers f32": {"value": 27.0, "dtype": "f32", "bytes_per_item": 5.1e8, ...}},
     "ratios": {"HF transformers f32": 2.27}, "note": "..."}

`ratios` are lmkit / peer in the figure's unit (so above 1 is better for lmkit when
`better` is "higher", below 1 when it is "lower", e.g. peak RSS or start-up ms).
`flops_per_item` / `bytes_per_item` are the work per unit item (a token, a sentence, a
step, a MB of text) from which the report derives the fraction of the machine's limit:
achieved GFLOP/s over the probed gemm peak of the same dtype and thread count, or GB/s
over the probed read bandwidth. A peer inherits the figure's dtype and work unless it
states its own (HF bf16 streams half the bytes of HF f32).
"""
import json
import os
import sys
import time


def peer(value, **fields):
    """A peer measurement with its own dtype / work where it differs from lmkit's."""
    return dict(value=value, **fields)


def figure(what, unit, lmkit, peers, *, better="higher", dtype="f32", threads=None,
           flops_per_item=None, bytes_per_item=None, note=None):
    peers = {k: v if isinstance(v, dict) else peer(v) for k, v in peers.items() if v is not None}
    return {
        "what": what, "unit": unit, "better": better, "lmkit": lmkit, "dtype": dtype,
        "threads": threads, "flops_per_item": flops_per_item, "bytes_per_item": bytes_per_item,
        "peers": peers,
        "ratios": {k: lmkit / p["value"] for k, p in peers.items() if p["value"] and lmkit is not None},
        "note": note,
    }


def write_json(path, figures, **extra):
    """Writes the figures (and any extra fields) to path; "-" is stdout."""
    doc = {
        "script": os.path.basename(sys.argv[0]),
        "argv": sys.argv[1:],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "figures": figures,
        **extra,
    }
    text = json.dumps(doc, indent=1) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def gpt2_matmul_params(n_layer, n_embd, vocab):
    """Matmul weights of a GPT-2 (blocks: attention 4C², MLP 8C²) plus the tied LM head."""
    return n_layer * 12 * n_embd * n_embd + vocab * n_embd


def bert_forward_flops(n_layer, d, d_ff, seq):
    """Forward FLOPs per sentence of `seq` tokens of a BERT encoder (matmuls and attention)."""
    matmul = n_layer * (4 * d * d + 2 * d * d_ff)
    return 2 * matmul * seq + 4 * n_layer * seq * seq * d
