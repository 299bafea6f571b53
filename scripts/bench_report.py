#!/usr/bin/env python3
"""Turns the JSON files of the bench_*.py scripts (`--json FILE`, the format of
scripts/bench_common.py) and of scripts/bench_probe.py into docs/benchmarks.md:
the machine, the date, the git commit, the exact command, one table of ratios
(lmkit / peer, same run) with the fraction of the machine's limit each figure
reaches, then the same-run values behind the ratios.

    python3 scripts/bench_report.py --probe P1.json [--probe P2.json] --command "scripts/bench.sh" \\
        [--out docs/benchmarks.md] [--failed NAME ...] [--note TEXT] BENCH.json ...

Fraction of the limit: a figure with FLOPs per item reaches rate × FLOPs GFLOP/s,
shown as a share of the true peak of its dtype at its thread count (`lmkit probe`:
f32 FMAs for f32, `vdpbf16ps` for bf16, `vpdpbusd` for int8; for bf16, the f32 peak
where that is higher: a bf16 product can run as f32 FMAs), or of PyTorch's gemm rate
of the dtype where a probe file has no true peak; one with bytes per item reaches
rate × bytes GB/s, a share of the probed read bandwidth. The header shows the true
peaks and PyTorch's gemm rates side by side.
With several probe files the best value of each limit is used (a probe on a loaded
machine reads low, and a low limit would flatter every fraction); a fraction above
100% is marked with a dagger all the same.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import cpu_line  # noqa: E402


def git(*args):
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def merge_probes(paths):
    """The best of each limit over the probe files: {"peak": {dtype: {threads: x}}} (the true
    peak, `lmkit probe`), "gemm" (PyTorch's gemm rate) alike, "read": {threads: x}, the peak's
    instructions, "instr": {dtype: name}, and every probe's read bandwidth, "reads":
    {threads: [x, ...]} (a shared machine's bandwidth swings between probes: the spread is
    printed beside the best)."""
    peak, gemm, read, reads, instr = {}, {}, {}, {}, {}
    for p in paths:
        with open(p, encoding="utf-8") as f:
            doc = json.load(f)
        for key, into in (("peak_gflops", peak), ("gemm_gflops", gemm)):
            for dtype, by_t in doc.get(key, {}).items():
                for t, v in by_t.items():
                    into.setdefault(dtype, {})[int(t)] = max(v, into.get(dtype, {}).get(int(t), 0.0))
        instr.update(doc.get("peak_instructions", {}))
        for t, v in doc["read_gbs"].items():
            read[int(t)] = max(v, read.get(int(t), 0.0))
            reads.setdefault(int(t), []).append(v)
    return {"peak": peak, "gemm": gemm, "read": read, "reads": reads, "instr": instr}


def nearest(by_threads, threads):
    """The limit probed at `threads`, else at the nearest thread count probed."""
    if not by_threads:
        return None, None
    t = threads if threads in by_threads else min(by_threads, key=lambda k: abs(k - (threads or 1)))
    return by_threads[t], t


def fraction(limits, rate, dtype, threads, flops, nbytes):
    """(share of the limit, what the limit is) for `rate` items/s of this work; (None, why) if none."""
    if rate is None:
        return None, ""
    if flops:
        # The true peak where probed (its dtype's instruction), else PyTorch's gemm rate.
        source = "peak" if limits.get("peak", {}).get(dtype) else "gemm"
        what = "true peak" if source == "peak" else "torch gemm peak"
        peak, t = nearest(limits[source].get(dtype, {}), threads)
        name = dtype
        if dtype == "bf16":
            # A bf16 product can run as f32 FMAs on the rounded operands (lmkit does where
            # the CPU's bf16 dot is slower than its FMAs): its limit is the faster of the two.
            p32, t32 = nearest(limits[source].get("f32", {}), threads)
            if p32 is not None and (peak is None or p32 > peak):
                peak, t, name = p32, t32, "f32 (above bf16's)"
        if peak is None:
            return None, f"no {dtype} peak probe"
        return rate * flops / 1e9 / peak, f"{name} {what}, {t} thr"
    if nbytes:
        peak, t = nearest(limits["read"], threads)
        if peak is None:
            return None, "no read probe"
        return rate * nbytes / 1e9 / peak, f"read bandwidth, {t} thr"
    return None, ""


def pct(x):
    if x is not None and x > 1:
        return f"{100 * x:.0f}% †"
    return "–" if x is None else f"{100 * x:.0f}%" if x >= 0.1 else f"{100 * x:.1f}%" if x >= 0.001 else f"{100 * x:.2g}%"


def num(x):
    if x is None:
        return "–"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="check the ratio and fraction arithmetic, then exit")
    ap.add_argument("inputs", nargs="*", help="JSON files written by the bench_*.py scripts' --json")
    ap.add_argument("--probe", action="append", default=[], help="bench_probe.py JSON (repeatable)")
    ap.add_argument("--command", help="the command that produced the inputs, quoted in the file")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/benchmarks.md"))
    ap.add_argument("--failed", action="append", default=[], help="a benchmark that did not finish (repeatable)")
    ap.add_argument("--note", action="append", default=[], help="a line for the notes (repeatable)")
    ap.add_argument("--threads", type=int, help="the thread count the benchmarks were given")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.command:
        ap.error("--command is required")

    limits = merge_probes(a.probe)
    docs = []
    for p in a.inputs:
        with open(p, encoding="utf-8") as f:
            docs.append(json.load(f))
    text = render(docs, limits, a.command, a.threads, a.failed, a.note, len(a.probe))
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {a.out}")


def render(docs, limits, command, threads, failed, notes, n_probes):
    """docs/benchmarks.md's text from the scripts' JSON documents and the merged limits."""
    loads = [d["loadavg"] for d in docs if d.get("loadavg") is not None]
    dates = sorted(d["date"] for d in docs if d.get("date"))
    commit = git("rev-parse", "--short=12", "HEAD")
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""

    lines = [
        "# Benchmarks: lmkit against its peers, same machine, same run",
        "",
        "Written by `scripts/bench_report.py` from one run of `scripts/bench.sh`; do not edit by hand.",
        "**The claims are the ratios** (lmkit / peer, both measured in the same run, interleaved or",
        "back to back): absolute rates move with the machine and its load, ratios much less.",
        "",
        f"- command: `{command}`",
        f"- date: {dates[0] if dates else time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
        + (f" to {dates[-1]}" if len(dates) > 1 else ""),
        f"- git commit: {commit}{dirty}",
        f"- machine: {cpu_line()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}",
        f"- threads: {threads if threads else 'per script'} for lmkit and every peer "
        "(\"thr\" in each row; single-thread rows use one)",
    ]
    if loads:
        lines.append(f"- load average seen by the scripts: {min(loads):.1f} to {max(loads):.1f} "
                     f"on {os.cpu_count()} CPUs")
    if limits.get("peak"):
        unit = {"int8": "GOP/s"}
        parts = [f"{d} ({limits['instr'].get(d, '?')}) "
                 + ", ".join(f"{v:.0f} {unit.get(d, 'GFLOP/s')} on {t} thr" for t, v in sorted(by.items()))
                 for d, by in limits["peak"].items()]
        lines.append("- true peak (`lmkit probe`, in-register multiply-adds, best of "
                     f"{n_probes} probe(s)): " + "; ".join(parts))
    if limits["gemm"] or limits["read"]:
        parts = [f"torch {d} gemm {', '.join(f'{v:.0f} GFLOP/s on {t} thr' for t, v in sorted(by.items()))}"
                 for d, by in limits["gemm"].items()]
        parts.append("read " + ", ".join(f"{v:.1f} GB/s on {t} thr" for t, v in sorted(limits["read"].items())))
        spread = [f"{min(v):.1f}-{max(v):.1f} (median {statistics.median(v):.1f}) GB/s on {t} thr"
                  for t, v in sorted(limits.get("reads", {}).items()) if len(v) > 1]
        if spread:
            parts.append("the probes' read bandwidth ranged " + ", ".join(spread))
        lines.append(f"- probed limits (scripts/bench_probe.py, best of {n_probes} probe(s)): " + "; ".join(parts))
    lines += ["", "## Ratios", "",
              "lmkit / peer in the row's unit: above 1 is lmkit ahead for rates, below 1 for peak RSS and",
              "start-up time. \"% of limit\": the rate times the work per item (FLOPs or bytes read), over the",
              "true peak of the row's dtype (f32 FMA, bf16 `vdpbf16ps`, int8 `vpdpbusd`; bf16: or f32's where",
              "higher, as a bf16 product can run as f32 FMAs; PyTorch's gemm rate where no true peak was",
              "probed) or the probed read bandwidth, on the row's thread count.",
              "",
              "| what | thr | peer | lmkit / peer | lmkit % of limit | peer % of limit | limit |",
              "|---|---|---|---|---|---|---|"]
    values = ["| what | unit | lmkit | peer | peer value | note |", "|---|---|---|---|---|---|"]
    for doc in docs:
        for fig in doc["figures"]:
            lm_frac, limit = fraction(limits, fig["lmkit"], fig["dtype"], fig["threads"],
                                      fig.get("flops_per_item"), fig.get("bytes_per_item"))
            for name, p in fig["peers"].items():
                pd = p.get("dtype", fig["dtype"])
                pf, plimit = fraction(limits, p["value"], pd, fig["threads"],
                                      p.get("flops_per_item", fig.get("flops_per_item")),
                                      p.get("bytes_per_item", fig.get("bytes_per_item")))
                if fig["better"] == "lower":
                    lm_frac = pf = None
                limit_txt = limit if fig["better"] != "lower" else ""
                if plimit and plimit != limit and pf is not None:
                    limit_txt = f"{limit}; peer: {plimit}" if limit else f"peer: {plimit}"
                ratio = fig["ratios"].get(name)
                r = "–" if ratio is None else f"{ratio:.2f}×"
                lines.append(f"| {fig['what']} | {fig['threads'] or ''} | {name} | **{r}** | {pct(lm_frac)} "
                             f"| {pct(pf)} | {limit_txt} |")
                values.append(f"| {fig['what']} | {fig['unit']} | {num(fig['lmkit'])} | {name} | "
                              f"{num(p['value'])} | {fig.get('note') or ''} |")
    for doc in docs:
        for why in doc.get("skipped", []):
            lines.append(f"| skipped ({doc['script']}): {why} | | | – | | | |")
    for name in failed:
        lines.append(f"| {name}: did not finish (see the bench.sh log) | | | – | | | |")
    lines += ["", "## Same-run values behind the ratios", "",
              "Not claims: one run on a shared machine. The unit says which way is better.", ""] + values
    lines += ["", "## Notes", "",
              "- Each script's docstring says exactly what it times; the peers run the same work on the same",
              "  thread count (PyTorch `set_num_threads`, ONNX Runtime `intra_op_num_threads`, lmkit",
              "  `RAYON_NUM_THREADS`).",
              "- Work per item: decode streams the weights in their dtype plus the KV cache read per token;",
              "  prefill, BERT and training count matmul and attention FLOPs (training: 6 per parameter per",
              "  token, fine-tuning: 3× the forward at each side's lengths: PyTorch runs its batches' padding,",
              "  lmkit's encoder only the real tokens); tokenizers read their input",
              "  bytes once. The limits are probed in the same run; a probe that reads low on a loaded machine",
              "  makes fractions read high; † marks a fraction above 100%: the rate beat every probe of",
              "  the limit in this run, so the probe read low (torch's gemm is the reference, not the",
              "  hardware's theoretical peak)."]
    cpus = os.cpu_count() or 1
    if loads and max(loads) > cpus:
        lines += [f"- The machine was shared and loaded during this run (load average up to {max(loads):.1f} on "
                  f"{cpus} CPUs): other work took turns on these cores, so the absolute rates are low and",
                  "  uneven. Every ratio compares two measurements taken back to back under the same load, but",
                  "  a peer that suffers more from preemption than lmkit does (or less) moves the ratio: rerun",
                  "  on an idle machine before relying on a single row."]
    # Notes the scripts wrote beside their figures (e.g. accuracy that goes with a speed).
    notes = [n for d in docs for n in d.get("notes", [])] + list(notes)
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def self_test():
    """Known figures against known limits: the ratios and fractions the table must show."""
    import tempfile

    from bench_common import figure, peer

    with tempfile.TemporaryDirectory() as tmp:
        probes = []
        for i, (f32, read) in enumerate(((100.0, 20.0), (50.0, 40.0))):  # best of each is kept
            probes.append(os.path.join(tmp, f"p{i}.json"))
            with open(probes[-1], "w", encoding="utf-8") as f:
                json.dump({"gemm_gflops": {"f32": {"2": f32}, "bf16": {"2": 2 * f32}}, "read_gbs": {"2": read}}, f)
        limits = merge_probes(probes)
    assert limits == {"peak": {}, "gemm": {"f32": {2: 100.0}, "bf16": {2: 200.0}}, "read": {2: 40.0},
                      "reads": {2: [20.0, 40.0]}, "instr": {}}, limits
    docs = [{"script": "t.py", "date": "2026-01-01T00:00:00Z", "loadavg": 1.0, "figures": [
        # 50 tokens/s x 4e8 B = 20 GB/s = 50% of 40 GB/s; HF bf16: 25 x 2e8 B = 5 GB/s = 12.5%.
        figure("decode f32", "tokens/s", 50.0, {"HF bf16": peer(25.0, dtype="bf16", bytes_per_item=2e8)},
               threads=2, bytes_per_item=4e8),
        # 1000 x 1e8 FLOP = 100 GFLOP/s = 100% of the f32 peak; the bf16 peer: 500 x 1e8 / 200 = 25%.
        figure("prefill f32", "tokens/s", 1000.0, {"HF bf16": peer(500.0, dtype="bf16")}, threads=2,
               flops_per_item=1e8),
        # Work on 1 thread uses the nearest probe (2 threads): 100 x 1e8 / 100 GFLOP/s = 10%;
        # int8 FLOPs have no torch peak.
        figure("prefill int8", "tokens/s", 300.0, {"HF f32": peer(100.0, dtype="f32")}, dtype="int8", threads=1, flops_per_item=1e8),
        # 1100 x 1e8 FLOP = 110% of the f32 peak: marked.
        figure("prefill big", "tokens/s", 1100.0, {"HF": 550.0}, threads=2, flops_per_item=1e8),
        figure("start-up", "ms", 20.0, {"tiktoken": 160.0}, better="lower", threads=1),
    ]}]
    text = render(docs, limits, "scripts/bench.sh", 2, ["serve"], [], 2)
    rows = {tuple(c.strip() for c in l.split("|")[1:4]): l for l in text.splitlines() if l.startswith("| ")}
    expect = {
        ("decode f32", "2", "HF bf16"): "| **2.00×** | 50% | 12% | read bandwidth, 2 thr |",
        ("prefill f32", "2", "HF bf16"):
            "| **2.00×** | 100% | 25% | f32 torch gemm peak, 2 thr; peer: bf16 torch gemm peak, 2 thr |",
        ("prefill int8", "1", "HF f32"): "| **3.00×** | – | 10% | no int8 peak probe; peer: f32 torch gemm peak, 2 thr |",
        ("prefill big", "2", "HF"): "| **2.00×** | 110% † | 55% | f32 torch gemm peak, 2 thr |",
        ("start-up", "1", "tiktoken"): "| **0.12×** | – | – |  |",
    }
    for key, tail in expect.items():
        assert key in rows and rows[key].endswith(tail), (key, rows.get(key), tail)
    # Where the bf16 probe is below the f32 one, bf16 work counts against the f32 peak.
    slow_bf16 = {"gemm": {"f32": {2: 100.0}, "bf16": {2: 50.0}}, "read": {2: 40.0}}
    assert fraction(slow_bf16, 500.0, "bf16", 2, 1e8, None) == (0.5, "f32 (above bf16's) torch gemm peak, 2 thr")
    assert fraction(limits, 500.0, "bf16", 2, 1e8, None) == (0.25, "bf16 torch gemm peak, 2 thr")
    # With the true peak probed, each dtype counts against its own instruction's peak
    # (int8 included), and the header shows it beside PyTorch's gemm rate.
    with tempfile.TemporaryDirectory() as tmp:
        probes.append(os.path.join(tmp, "p2.json"))
        with open(probes[-1], "w", encoding="utf-8") as f:
            json.dump({"gemm_gflops": {"f32": {"2": 100.0}}, "read_gbs": {"2": 40.0},
                       "peak_gflops": {"f32": {"1": 100.0, "2": 200.0}, "bf16": {"2": 400.0},
                                       "int8": {"1": 400.0, "2": 800.0}},
                       "peak_instructions": {"f32": "vfmadd231ps zmm", "bf16": "vdpbf16ps zmm",
                                             "int8": "vpdpbusd zmm"}}, f)
        true = merge_probes(probes[-1:])
    assert fraction(true, 1000.0, "f32", 2, 1e8, None) == (0.5, "f32 true peak, 2 thr")
    assert fraction(true, 1000.0, "bf16", 2, 1e8, None) == (0.25, "bf16 true peak, 2 thr")
    assert fraction(true, 1000.0, "int8", 1, 1e8, None) == (0.25, "int8 true peak, 1 thr")
    head = render(docs, true, "x", 2, [], [], 1)
    assert "int8 (vpdpbusd zmm) 400 GOP/s on 1 thr, 800 GOP/s on 2 thr" in head, head
    assert "torch f32 gemm 100 GFLOP/s on 2 thr" in head, head
    assert "serve: did not finish" in text and "- command: `scripts/bench.sh`" in text
    loaded = render([dict(docs[0], loadavg=10.0 * (os.cpu_count() or 1))], limits, "x", 2, [], [], 2)
    assert "shared and loaded" in loaded and "shared and loaded" not in text
    # The header's CPU: generic VM model names still show family, model and flags.
    from bench_common import cpu_fields
    zen3 = cpu_fields("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
                      "model name\t: AMD EPYC\nflags\t\t: fpu avx2 fma sha_ni\n\nprocessor\t: 1\n")
    assert cpu_line(zen3) == "AMD EPYC (AuthenticAMD family 25 model 1: Zen 3; flags: avx2 fma)", cpu_line(zen3)
    spr = cpu_fields("vendor_id : GenuineIntel\ncpu family : 6\nmodel : 143\nmodel name : Intel Xeon\n"
                     "flags : avx2 fma avx512f avx512_bf16 amx_tile amx_bf16\n")
    assert cpu_line(spr).endswith("143: Sapphire Rapids; flags: avx2 fma avx512f avx512_bf16 amx_tile amx_bf16)"), \
        cpu_line(spr)
    assert cpu_line({}) and "machine: " in text
    print("bench_report self-test: ok")


if __name__ == "__main__":
    main()
