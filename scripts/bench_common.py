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
import platform
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


# The CPU features that decide which kernels run and which peaks exist.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni", "avx_vnni",
             "amx_tile", "amx_bf16", "amx_int8")


def cpu_fields(text=None):
    """The first processor's fields of /proc/cpuinfo (or of `text`): {} where there are none."""
    if text is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                text = f.read()
        except OSError:
            return {}
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_model(fields=None):
    """The CPU's model name, else the platform's processor name."""
    fields = cpu_fields() if fields is None else fields
    return fields.get("model name") or platform.processor() or "unknown"


def microarchitecture(fields):
    """AMD's Zen generation or Intel's server core from the family and model numbers a
    virtual machine still shows when its model name is generic ("AMD EPYC"); None where
    this table does not know them."""
    try:
        family, model = int(fields.get("cpu family", "")), int(fields.get("model", ""))
    except ValueError:
        return None
    if fields.get("vendor_id") == "AuthenticAMD":
        if family == 23:
            return "Zen 2" if model >= 0x30 else "Zen/Zen+"
        if family == 25:
            zen4 = 0x10 <= model <= 0x1f or 0x60 <= model <= 0x7f or 0xa0 <= model <= 0xaf
            return "Zen 4" if zen4 else "Zen 3"
        if family == 26:
            return "Zen 5"
    if fields.get("vendor_id") == "GenuineIntel" and family == 6:
        return {0x55: "Skylake/Cascade Lake/Cooper Lake", 0x6a: "Ice Lake", 0x6c: "Ice Lake",
                0x8f: "Sapphire Rapids", 0xcf: "Emerald Rapids", 0xad: "Granite Rapids",
                0xae: "Granite Rapids"}.get(model)
    return None


def cpu_line(fields=None):
    """The machine's CPU for a report header: model name, vendor family/model (and the
    micro-architecture they name) and which of CPU_FLAGS it has."""
    fields = cpu_fields() if fields is None else fields
    if not fields:
        return cpu_model(fields)
    flags = set(fields.get("flags", "").split())
    ident = " ".join(x for x in (fields.get("vendor_id"), fields.get("cpu family") and
                                 f"family {fields['cpu family']} model {fields.get('model', '?')}") if x)
    arch = microarchitecture(fields)
    have = [f for f in CPU_FLAGS if f in flags] or ["none of " + " ".join(CPU_FLAGS)]
    return f"{cpu_model(fields)} ({ident}{': ' + arch if arch else ''}; flags: {' '.join(have)})"
