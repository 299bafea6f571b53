#!/usr/bin/env python3
"""GPT-2 encode speed: lmkit vs tiktoken (Python and tiktoken-rs) vs HF tokenizers,
measured in the same run on the same text, printed as throughput and ratios.

Usage: scripts/bench_tokenizers.py [FILE] [--reps N] [--whole-process] [--json [FILE]]
(default FILE: assets/books/corpus.txt, documents split at "\\n\\f\\n").
lmkit and tiktoken-rs are timed in-process by the `encode_file` bench binary
(vocabulary loading excluded, as for the Python peers). "single" encodes the
whole file as one text on one thread, timed in CPU time (robust on a shared
machine); "batch" encodes the documents on all cores, timed in wall time;
"load" is start-up from vocab.json + merges.txt (tiktoken-rs: r50k_base()),
in CPU time; "load cached" is lmkit's second load of the same files, which
reads the compiled form its cache keeps (the first parses and writes it).

--whole-process also times whole processes on one core, in CPU time (user +
sys of the child): `lmkit --threads 1 tokenize --count` (release build, best
of runs sharing a fresh tokenizer cache: the first writes it) and a
Python process that loads tiktoken from the same files and encodes, on the
text repeated to at least --whole-mb MB (default 30).

--json [FILE] writes one JSON object instead of the table (to FILE, or stdout
without one), for scripts/bench.sh: the figures in scripts/bench_common.py's
format (MB/s and start-up ms, lmkit / peer) plus {"machine", "file", "bytes",
"threads", "reps", "results": {name: {seconds, tokens, mb_per_s}}, "ratios":
{name: peer time / lmkit time}, "counts_equal"}.
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import cpu_model, figure, write_json  # noqa: E402


def best_of(reps, f, clock=time.perf_counter):
    out = f()
    best = float("inf")
    for _ in range(reps):
        t = clock()
        out = f()
        best = min(best, clock() - t)
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=os.path.join(ROOT, "assets/books/corpus.txt"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", nargs="?", const="-", metavar="FILE",
                    help="write one JSON object to FILE (stdout without one) instead of the table")
    ap.add_argument("--whole-process", action="store_true",
                    help="also time whole one-core processes (lmkit tokenize, Python tiktoken)")
    ap.add_argument("--whole-mb", type=float, default=30.0)
    ap.add_argument("--lmkit", default=os.path.join(ROOT, "target/release/lmkit"),
                    help="release lmkit binary for --whole-process (built if missing)")
    ap.add_argument("--encodings", action="store_true",
                    help="instead: every OpenAI encoding, lmkit.tiktoken_compat vs Python tiktoken")
    args = ap.parse_args()
    if args.encodings:
        return bench_encodings(args)

    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    gpt2 = os.path.join(ROOT, "assets/gpt2")

    def load_tiktoken():
        ranks = data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=os.path.join(gpt2, "merges.txt"),
            encoder_json_file=os.path.join(gpt2, "vocab.json"),
        )
        return tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                 special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)

    tik = load_tiktoken()
    hf = Tokenizer(models.BPE.from_file(os.path.join(gpt2, "vocab.json"), os.path.join(gpt2, "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()

    with open(args.file, encoding="utf-8") as f:
        text = f.read()
    docs = text.split("\n\f\n")
    nbytes = len(text.encode("utf-8"))
    threads = os.cpu_count()

    # lmkit + tiktoken-rs, in-process, first (the bench binary is built if needed).
    cmd = ["cargo", "bench", "-q", "-p", "lmkit-tokenizers", "--bench", "encode_file", "--",
           args.file, "--reps", str(args.reps)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    results = {}
    s, _ = best_of(args.reps, load_tiktoken, time.process_time)
    results["tiktoken-py load"] = (s, 0)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["name"]] = (r["seconds"], r["tokens"])

    # Single-thread runs are timed in CPU time (the bench binary does the same),
    # which holds on a busy shared machine; batch runs in wall time.
    s, ids = best_of(args.reps, lambda: tik.encode_ordinary(text), time.process_time)
    results["tiktoken-py single"] = (s, len(ids))
    s, ids = best_of(args.reps, lambda: hf.encode(text, add_special_tokens=False).ids, time.process_time)
    results["hf-tokenizers single"] = (s, len(ids))
    s, ids = best_of(args.reps, lambda: tik.encode_ordinary_batch(docs, num_threads=threads))
    results["tiktoken-py batch"] = (s, sum(map(len, ids)))
    s, encs = best_of(args.reps, lambda: hf.encode_batch(docs, add_special_tokens=False))
    results["hf-tokenizers batch"] = (s, sum(len(e.ids) for e in encs))

    if args.whole_process:
        results.update(whole_process(args, text, nbytes))

    counts_equal = {}
    for mode in ("single", "batch"):
        counts = {n for k, (_, n) in results.items() if k.endswith(mode)}
        counts_equal[mode] = len(counts) == 1
    ratios = {}
    for key, (s, _) in results.items():
        name, mode = key.rsplit(" ", 1)
        ours = results.get(f"lmkit {mode}")
        if name != "lmkit" and ours:
            ratios[key] = s / ours[0]

    if args.json:
        def size(key):
            return args.whole_bytes if key.endswith("whole-process") else nbytes
        write_json(
            args.json, figures(results, size, threads), **{
            "machine": {"cpu": cpu_model(), "cores": threads},
            "file": args.file, "bytes": nbytes, "documents": len(docs), "threads": threads,
            "reps": args.reps,
            "results": {k: {"seconds": s, "tokens": n,
                            "mb_per_s": None if k.endswith("load") else size(k) / s / 1e6}
                        for k, (s, n) in results.items()},
            "ratios": ratios,
            "counts_equal": counts_equal,
        })
        return

    print(f"text: {args.file} ({nbytes / 1e6:.2f} MB, {len(docs)} documents), {threads} threads, best of {args.reps}")
    print(f"{'encoder':<24}{'seconds':>10}{'MB/s':>10}{'tokens':>10}{'lmkit is':>12}")
    for mode in ("single", "batch"):
        ours = results[f"lmkit {mode}"][0]
        for name in ("lmkit", "tiktoken-rs", "tiktoken-py", "hf-tokenizers"):
            s, n = results[f"{name} {mode}"]
            print(f"{name + ' ' + mode:<24}{s:>10.4f}{nbytes / s / 1e6:>10.1f}{n:>10}{s / ours:>11.2f}x")
    ours = results["lmkit load"][0]
    for name in ("lmkit load", "lmkit load cached", "tiktoken-rs load", "tiktoken-py load"):
        s = results[name][0]
        print(f"{name:<24}{s:>10.4f}{'':>10}{'':>10}{s / ours:>11.2f}x")
    if args.whole_process:
        ours = results["lmkit whole-process"][0]
        for name in ("lmkit", "tiktoken-py"):
            s, n = results[f"{name} whole-process"]
            print(f"{name + ' whole-process':<24}{s:>10.4f}{args.whole_bytes / s / 1e6:>10.1f}{n:>10}{s / ours:>11.2f}x")
        print(f"(whole-process: one core, CPU time, {args.whole_bytes / 1e6:.1f} MB)")
    for mode, ok in counts_equal.items():
        if not ok:
            print(f"WARNING: {mode} token counts differ")


def figures(results, size, threads):
    """The bench_common figures: MB/s per mode (work: 1e6 bytes read per MB) and start-up ms."""
    def mbs(key):
        return size(key) / results[key][0] / 1e6 if key in results else None

    out = []
    for mode, what, n in (("single", "GPT-2 BPE encode, one thread, in-process", 1),
                          ("batch", "GPT-2 BPE encode_batch of the documents, all threads", threads),
                          ("whole-process", "GPT-2 BPE, whole one-core process (load + read + encode)", 1)):
        if f"lmkit {mode}" not in results:
            continue
        peers = {name: mbs(f"{name} {mode}") for name in ("tiktoken-rs", "tiktoken-py", "hf-tokenizers")}
        out.append(figure(what, "MB/s", mbs(f"lmkit {mode}"), peers, threads=n, bytes_per_item=1e6,
                          note="CPU time" if n == 1 else "wall time"))
    ms = {name: results[f"{name} load"][0] * 1e3 for name in ("lmkit", "tiktoken-rs", "tiktoken-py")}
    ours = ms.pop("lmkit")
    out.append(figure("GPT-2 BPE start-up from vocab.json + merges.txt", "ms", ours, ms,
                      better="lower", threads=1, note="CPU time; tiktoken-rs: r50k_base()"))
    if "lmkit load cached" in results:
        cached = results["lmkit load cached"][0] * 1e3
        out.append(figure("GPT-2 BPE start-up, same files again (compiled cache)", "ms", cached,
                          dict(ms, **{"lmkit first load": ours}), better="lower", threads=1,
                          note="CPU time; reads and hashes the files, then the cached compiled form"))
    return out


def tiktoken_reference(name):
    """Python tiktoken's encoding `name`, built by its own constructor
    (tiktoken_ext.openai_public) from the tiktoken-rs crate's rank files
    (hash-checked by tiktoken) instead of a download."""
    import glob

    import tiktoken
    import tiktoken_ext.openai_public as public
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks, load_tiktoken_bpe

    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    assets = glob.glob(os.path.join(home, "registry/src/*/tiktoken-rs-0.12.1/assets"))[0]
    public.load_tiktoken_bpe = lambda url, expected_hash=None: load_tiktoken_bpe(
        os.path.join(assets, url.rsplit("/", 1)[1]), expected_hash)
    public.data_gym_to_mergeable_bpe_ranks = lambda **_: data_gym_to_mergeable_bpe_ranks(
        os.path.join(assets, "vocab.bpe"), os.path.join(assets, "encoder.json"))
    return tiktoken.Encoding(**public.ENCODING_CONSTRUCTORS[name]())


def bench_encodings(args):
    """Per encoding: start-up (lmkit's built-in get_encoding vs tiktoken's
    Encoding from local rank files, CPU time), one text on one thread (CPU
    time) and the documents on all threads (wall time), MB/s and ratios;
    with --json, the same as bench_common figures (bench.sh's "encodings")."""
    from lmkit import tiktoken_compat

    with open(args.file, encoding="utf-8") as f:
        text = f.read()
    docs = text.split("\n\f\n")
    mb = len(text.encode("utf-8")) / 1e6
    threads = os.cpu_count()
    table = args.json in (None, "")
    out = []
    if table:
        print(f"{os.path.basename(args.file)}: {mb:.1f} MB, {len(docs)} documents, "
              f"{threads} threads, {cpu_model()}")
        print(f"{'encoding':<14} {'start-up ms':>19} {'single MB/s':>21} {'batch MB/s':>21}")
        print(f"{'':<14} {'lmkit tiktoken':>19} {'lmkit tiktoken ×':>21} {'lmkit tiktoken ×':>21}")
    peer = "tiktoken (Python)"
    for name in tiktoken_compat.list_encoding_names():
        tiktoken_compat._ENCODINGS.pop(name, None)
        t0 = time.process_time()
        ours = tiktoken_compat.get_encoding(name)
        ours_load = time.process_time() - t0
        t0 = time.process_time()
        theirs = tiktoken_reference(name)
        their_load = time.process_time() - t0
        row = [f"{ours_load * 1e3:6.0f} {their_load * 1e3:12.0f}"]
        for mode in ("single", "batch"):
            speed = []
            for enc in (ours, theirs):
                if mode == "single":
                    s, ids = best_of(args.reps, lambda: enc.encode_ordinary(text), time.process_time)
                else:
                    s, ids = best_of(args.reps, lambda: enc.encode_ordinary_batch(docs, num_threads=threads))
                speed.append((mb / s, ids))
            if speed[0][1] != speed[1][1]:
                sys.exit(f"{name} {mode}: lmkit's ids differ from tiktoken's")
            row.append(f"{speed[0][0]:6.1f} {speed[1][0]:8.1f} {speed[0][0] / speed[1][0]:5.1f}")
            what = (f"{name} encode_ordinary, one thread (tiktoken_compat)" if mode == "single"
                    else f"{name} encode_ordinary_batch of the documents, all threads (tiktoken_compat)")
            out.append(figure(what, "MB/s", speed[0][0], {peer: speed[1][0]},
                              threads=1 if mode == "single" else threads, bytes_per_item=1e6,
                              note="CPU time; same ids checked" if mode == "single"
                              else "wall time; same ids checked"))
        out.append(figure(f"{name} start-up (get_encoding vs tiktoken's Encoding of local rank files)",
                          "ms", ours_load * 1e3, {peer: their_load * 1e3}, better="lower", threads=1,
                          note="CPU time; lmkit's rank files are built in"))
        if table:
            print(f"{name:<14} " + "  ".join(row))
    if not table:
        write_json(args.json, out, machine={"cpu": cpu_model(), "cores": threads}, file=args.file,
                   reps=args.reps)


def child_cpu(cmd, reps, **kw):
    """Best CPU time (user + sys) of `cmd` as a child process, and its stdout."""
    best, out = float("inf"), ""
    for _ in range(reps):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best, out = min(best, cpu), proc.stdout
    return best, out


TIKTOKEN_PROCESS = """
import os, sys, tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str
gpt2, path = sys.argv[1], sys.argv[2]
ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=os.path.join(gpt2, "merges.txt"),
                                        encoder_json_file=os.path.join(gpt2, "vocab.json"))
enc = tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                        special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
with open(path, encoding="utf-8") as f:
    print(len(enc.encode_ordinary(f.read())))
"""


def whole_process(args, text, nbytes):
    """Whole one-core processes on the text repeated to >= --whole-mb MB."""
    if not os.path.exists(args.lmkit):
        cmd = ["cargo", "build", "--release", "-q", "-p", "lmkit-cli"]
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed")
    copies = max(1, math.ceil(args.whole_mb * 1e6 / nbytes))
    gpt2 = os.path.join(ROOT, "assets/gpt2")
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        # A cache of its own: the first rep writes the compiled tokenizer, the
        # best rep reads it, as a user's second and later runs do.
        env["LMKIT_CACHE_DIR"] = os.path.join(tmp, "cache")
        path = os.path.join(tmp, "text.txt")
        with open(path, "w", encoding="utf-8") as f:
            for _ in range(copies):
                f.write(text)
        args.whole_bytes = os.path.getsize(path)
        reps = max(1, min(args.reps, 3))
        s, out = child_cpu([args.lmkit, "--threads", "1", "tokenize", "--tokenizer", gpt2,
                            "--input", path, "--count"], reps, env=env)
        ours = (s, int(out.split()[0]))
        s, out = child_cpu([sys.executable, "-c", TIKTOKEN_PROCESS, gpt2, path], reps, env=env)
        theirs = (s, int(out.split()[0]))
    if ours[1] != theirs[1]:
        print(f"WARNING: whole-process token counts differ: {ours[1]} vs {theirs[1]}", file=sys.stderr)
    return {"lmkit whole-process": ours, "tiktoken-py whole-process": theirs}


if __name__ == "__main__":
    main()
