#!/usr/bin/env python3
"""Load test of `lmkit serve` on loopback, bounded in requests and time:
throughput and p50/p99 latency for embeddings (dynamic batching) and
completions (continuous batching), each with batching on and then off
(--max-batch 1), the server's peak RSS under the flood, and the same loads
against a peer measured in the same run: HF transformers (PyTorch) behind a
minimal threaded Python HTTP server with the same routes (mean pooling for
embeddings; `generate`, greedy, for completions — one request at a time, as
HF has no batching across requests). With --llama-cpp, both loads also go to
llama.cpp's `llama-server` (one slot per client, batching across slots,
-t THREADS), one server per model, on f32 GGUFs of the same checkpoints
(MiniLM with `--embeddings --pooling mean`, its vectors L2-normalized as
lmkit's; scripts/llama_cpp_peer.py builds the server and converts the models).
Prints a table and the ratios.

--few-shot runs a few-shot load instead: every prompt is one ~400-token
prefix (book sentences) plus a distinct question, 16 greedy tokens streamed,
from 32 clients; requests/s and p50/p99 time to the first token for lmkit
with its prefix cache (--prefix-cache-mb 256) and without (0), and, with
--llama-cpp, llama-server with `cache_prompt` (each slot reuses the longest
common prefix of its previous prompt). The prefix cache's hit and miss
tokens come from lmkit's /metrics.

Usage: python scripts/bench_serve.py LMKIT [--requests N] [--clients C] [--peer-python PY] [--llama-cpp]
                                          [--json FILE] [--few-shot]
  LMKIT: the lmkit binary (a release build: cargo build --release -p lmkit-cli)
  --peer-python: a Python with torch + transformers (scripts/fetch-big-assets.sh
  makes assets/.venv-fixtures); without it the peer is skipped.
  --json FILE: the figures (req/s, lmkit with batching over the peer and over
  --max-batch 1) in scripts/bench_common.py's format, for scripts/bench.sh.
After scripts/fetch-assets.sh. Only 127.0.0.1 is contacted.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINILM = os.path.join(ROOT, "assets/minilm")
TOKENS = 16
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import figure, write_json  # noqa: E402

PEER = r'''
import json, sys, threading, torch
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, GPT2TokenizerFast
torch.set_num_threads(int(sys.argv[3]))
tok = AutoTokenizer.from_pretrained(sys.argv[1]); model = AutoModel.from_pretrained(sys.argv[1]).eval()
gtok = GPT2TokenizerFast.from_pretrained(sys.argv[4])
gpt2 = AutoModelForCausalLM.from_pretrained(sys.argv[2]).eval()
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/v1/completions":
            ids = gtok(body["prompt"], return_tensors="pt").input_ids
            n = body["max_tokens"]
            with lock, torch.inference_mode():
                new = gpt2.generate(ids, do_sample=False, max_new_tokens=n, min_new_tokens=n,
                                    pad_token_id=gtok.eos_token_id)[0, ids.shape[1]:]
            out = json.dumps({"choices": [{"text": gtok.decode(new)}],
                              "usage": {"completion_tokens": len(new)}}).encode()
        else:
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            with lock, torch.inference_mode():
                enc = tok(texts, padding=True, truncation=True, return_tensors="pt")
                h = model(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).float()
                v = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)
            out = json.dumps({"data": [{"embedding": e} for e in v.tolist()]}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
ThreadingHTTPServer.request_queue_size = 1024  # 32+ clients connect at once
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print("listening on http://127.0.0.1:%d" % srv.server_port, file=sys.stderr, flush=True)
srv.serve_forever()
'''


def start(cmd, env=None):
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    for line in p.stderr:
        m = re.search(r"listening on http://(\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, m.group(1)
    raise SystemExit(f"{cmd[0]} did not start")


def post(addr, path, body, want_tokens=None):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    t0 = time.perf_counter()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    dt = time.perf_counter() - t0
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:200]!r}")
    out = json.loads(data)
    if want_tokens is not None and out["usage"]["completion_tokens"] != want_tokens:
        raise RuntimeError(f"{path}: {out['usage']['completion_tokens']} tokens, not {want_tokens}")
    return dt, out


def load(addr, path, bodies, clients, deadline_s=300, want_tokens=None):
    print(f"  {path} on {addr}: {len(bodies)} requests", file=sys.stderr, flush=True)
    lat = []
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        for dt, _ in ex.map(lambda b: post(addr, path, b, want_tokens), bodies, timeout=deadline_s):
            lat.append(dt)
    wall = time.perf_counter() - t0
    lat.sort()
    return {"n": len(lat), "rps": len(lat) / wall, "p50": statistics.median(lat) * 1e3,
            "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3}


def stream_ttft(addr, body):
    """POSTs a streamed completion: (seconds to the first token, total seconds)."""
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=300)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"/v1/completions: {r.status} {r.read()[:200]!r}")
    first = None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        choices = json.loads(line[5:]).get("choices") or [{}]
        if first is None and choices[0].get("text"):
            first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    c.close()
    return (first if first is not None else total), total


def few_shot_load(addr, bodies, clients, deadline_s=900):
    print(f"  few-shot on {addr}: {len(bodies)} requests", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        res = list(ex.map(lambda b: stream_ttft(addr, b), bodies, timeout=deadline_s))
    wall = time.perf_counter() - t0
    ttft = sorted(r[0] for r in res)
    return {"n": len(res), "rps": len(res) / wall, "p50": statistics.median(ttft) * 1e3,
            "p99": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))] * 1e3}


def metric(addr, name):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(name + "{"))


def few_shot(a, run, tmp, env):
    """The few-shot load (see the module docs): rows of (server, result, notes)."""
    book = [l.strip() for l in open(os.path.join(ROOT, "assets/books/corpus.txt"), encoding="utf-8")
            if 40 < len(l.strip()) < 200]
    prefix = ""
    for s in book:  # ~4.3 characters per GPT-2 token in the books: about 400 tokens
        if len(prefix) > 1720:
            break
        prefix += s + "\n"
    questions = book[len(book) // 2:][: a.requests]
    bodies = [{"model": "gpt2", "prompt": prefix + "Q: " + q + "\nA:", "max_tokens": TOKENS,
               "temperature": 0, "ignore_eos": True, "stream": True}
              for q in questions]
    rows = []
    for mb in (256, 0):
        p, addr = start([a.lmkit, "serve", "--addr", "127.0.0.1:0", "--model", "gpt2=" + run,
                         "--max-batch", "32", "--max-queue", "4096", "--prefix-cache-mb", str(mb)], env)
        try:
            _, out = post(addr, "/v1/completions", dict(bodies[0], stream=False), TOKENS)
            prompt_tokens = out["usage"]["prompt_tokens"]
            r = few_shot_load(addr, bodies, a.clients)
            hit = metric(addr, "lmkit_prefix_cache_hit_tokens_total")
            miss = metric(addr, "lmkit_prefix_cache_miss_tokens_total")
            note = f"{prompt_tokens} prompt tokens; cache hit {hit:.0f}, miss {miss:.0f} tokens" if mb else \
                f"{prompt_tokens} prompt tokens"
            rows.append((f"lmkit, --prefix-cache-mb {mb}", r, note, peak_rss_mib(p.pid)))
        finally:
            p.terminate()
            p.wait(timeout=60)
    if a.llama_cpp:
        import llama_cpp_peer

        server = llama_cpp_peer.tools()["llama-server"]
        gguf = llama_cpp_peer.gguf(run, "f32", dest=os.path.join(tmp, "few-shot.gguf"))
        # One slot per client, each with room for the prompt and the new tokens.
        p, addr = start([str(server), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(free_port()),
                         "-t", str(a.threads), "-tb", str(a.threads), "-np", str(a.clients),
                         "-c", str(a.clients * 512), "--no-webui"])
        try:
            bodies = [dict(b, cache_prompt=True) for b in bodies]  # llama.cpp's own field
            post(addr, "/v1/completions", dict(bodies[0], stream=False), TOKENS)
            r = few_shot_load(addr, bodies, a.clients)
            rows.append((f"llama.cpp llama-server, cache_prompt, -np {a.clients}", r, "",
                         peak_rss_mib(p.pid)))
        finally:
            p.terminate()
            p.wait(timeout=60)
    print(f"few-shot: {len(bodies)} completions ({TOKENS} tokens each, streamed) of prompts sharing a "
          f"~400-token prefix, {a.clients} concurrent clients, {a.threads} threads, loopback")
    print(f"{'server':<48} {'req/s':>8} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} {'peak RSS MiB':>13}  notes")
    for name, r, note, rss in rows:
        print(f"{name:<48} {r['rps']:>8.2f} {r['p50']:>12.1f} {r['p99']:>12.1f} {rss:>13.1f}  {note}")
    on, off = rows[0][1], rows[1][1]
    print(f"few-shot: the prefix cache gives {on['rps'] / off['rps']:.2f}x the req/s, "
          f"p50 time to first token {off['p50'] / on['p50']:.2f}x lower")
    for name, r, _, _ in rows[2:]:
        print(f"few-shot: lmkit with the cache / {name}: {on['rps'] / r['rps']:.2f}x req/s, "
              f"p50 time to first token {r['p50'] / on['p50']:.2f}x lower")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lmkit")
    ap.add_argument("--requests", type=int, help="embedding requests (default 512), or few-shot ones (128)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--peer-python")
    ap.add_argument("--llama-cpp", action="store_true", help="also load llama.cpp's llama-server")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", metavar="FILE", help="write the figures here (bench_common format)")
    ap.add_argument("--few-shot", action="store_true",
                    help="only the few-shot load: prefix cache on and off (and llama.cpp's cache_prompt)")
    a = ap.parse_args()
    if a.requests is None:
        a.requests = 128 if a.few_shot else 512
    sentences = [l.strip() for l in open(os.path.join(ROOT, "assets/books/corpus.txt"), encoding="utf-8")
                 if 40 < len(l.strip()) < 200][: a.requests]
    embed_bodies = [{"model": "minilm", "input": s} for s in sentences]
    rows = []
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads))

    tmp = tempfile.mkdtemp(prefix="lmkit-bench-serve-")
    try:
        # A small GPT-2 to complete with (one pretraining step on the books).
        text = os.path.join(tmp, "text.txt")
        open(text, "w", encoding="utf-8").write("\n".join(sentences))
        run = os.path.join(tmp, "run")
        subprocess.run([a.lmkit, "pretrain", "--tokenizer", os.path.join(ROOT, "assets/gpt2"), "--data", text,
                        "--output", run, "--preset", "small", "--max-steps", "1", "--seq-len", "64",
                        "--batch-size", "1", "--eval-every", "0", "--sample-every", "0", "--val-fraction", "0"],
                       check=True, capture_output=True)
        if a.few_shot:
            few_shot(a, run, tmp, env)
            return
        # Completions of exactly TOKENS tokens each (no early end of text).
        comp = [{"model": "gpt2", "prompt": s[:60], "max_tokens": TOKENS, "temperature": 0,
                 "ignore_eos": True} for s in sentences[: max(32, a.requests // 4)]]
        for batch in (32, 1):
            p, addr = start([a.lmkit, "serve", "--addr", "127.0.0.1:0", "--model", "minilm=" + MINILM,
                             "--model", "gpt2=" + run, "--max-batch", str(batch), "--max-queue", "4096"], env)
            try:
                post(addr, "/v1/embeddings", embed_bodies[0])  # warm up
                r = load(addr, "/v1/embeddings", embed_bodies, a.clients)
                rows.append(("embeddings", f"lmkit, --max-batch {batch}", r, peak_rss_mib(p.pid)))
                post(addr, "/v1/completions", comp[0], TOKENS)
                r = load(addr, "/v1/completions", comp, a.clients, want_tokens=TOKENS)
                rows.append(("completions", f"lmkit, --max-batch {batch}", r, peak_rss_mib(p.pid)))
            finally:
                p.terminate()
                p.wait(timeout=60)
        if a.peer_python:
            p, addr = start([a.peer_python, "-c", PEER, MINILM, run, str(a.threads),
                             os.path.join(ROOT, "assets/gpt2")])
            try:
                post(addr, "/v1/embeddings", embed_bodies[0])
                r = load(addr, "/v1/embeddings", embed_bodies, a.clients)
                rows.append(("embeddings", "HF transformers, threaded http.server", r, peak_rss_mib(p.pid)))
                post(addr, "/v1/completions", comp[0], TOKENS)
                r = load(addr, "/v1/completions", comp, a.clients, want_tokens=TOKENS)
                rows.append(("completions", "HF transformers generate, threaded http.server", r,
                             peak_rss_mib(p.pid)))
            finally:
                p.terminate()
                p.wait(timeout=60)
        if a.llama_cpp:
            import llama_cpp_peer

            server = llama_cpp_peer.tools()["llama-server"]
            for load_name, path, bodies, model, flags, tokens in (
                    ("embeddings", "/v1/embeddings", embed_bodies, MINILM, ["--embeddings", "--pooling", "mean"], None),
                    ("completions", "/v1/completions", comp, run, [], TOKENS)):
                gguf = llama_cpp_peer.gguf(model, "f32", dest=os.path.join(tmp, f"{load_name}.gguf"))
                # One slot per client, each with room for 128 tokens (a sentence of under 200
                # characters, or a 60-character prompt and TOKENS new ones).
                p, addr = start([str(server), "-m", str(gguf), *flags, "--host", "127.0.0.1",
                                 "--port", str(free_port()), "-t", str(a.threads), "-tb", str(a.threads),
                                 "-np", str(a.clients), "-c", str(a.clients * 128), "--no-webui"])
                try:
                    post(addr, path, bodies[0], tokens)
                    r = load(addr, path, bodies, a.clients, want_tokens=tokens)
                    rows.append((load_name, f"llama.cpp llama-server, -np {a.clients}", r, peak_rss_mib(p.pid)))
                finally:
                    p.terminate()
                    p.wait(timeout=60)
    finally:
        shutil.rmtree(tmp)

    print(f"{a.requests} embedding and {len(comp)} completion requests ({TOKENS} tokens each) "
          f"from {a.clients} concurrent clients, {a.threads} threads, loopback")
    print(f"{'load':<12} {'server':<48} {'req/s':>8} {'tokens/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'peak RSS MiB':>13}")
    for load_name, name, r, rss in rows:
        tok_s = f"{r['rps'] * TOKENS:.0f}" if load_name == "completions" else "-"
        print(f"{load_name:<12} {name:<48} {r['rps']:>8.1f} {tok_s:>9} {r['p50']:>8.1f} {r['p99']:>8.1f} {rss:>13.1f}")
    by = {(l, n): r for l, n, r, _ in rows}
    if a.json:
        figs = []
        for load_name, what in (("embeddings", "MiniLM embeddings"), ("completions", f"completions, {TOKENS} tokens")):
            peers = {"lmkit --max-batch 1": by[(load_name, "lmkit, --max-batch 1")]["rps"]}
            peers.update({n: r["rps"] for (l, n), r in by.items()
                          if l == load_name and not n.startswith("lmkit")})
            figs.append(figure(f"serving {what}, {a.clients} clients (lmkit --max-batch 32)", "requests/s",
                               by[(load_name, "lmkit, --max-batch 32")]["rps"], peers, threads=a.threads,
                               note="loopback; p50/p99 in the script's table"))
        write_json(a.json, figs, requests=a.requests, clients=a.clients)
    for load_name in ("embeddings", "completions"):
        on, off = by[(load_name, "lmkit, --max-batch 32")], by[(load_name, "lmkit, --max-batch 1")]
        print(f"{load_name}: batching gives {on['rps'] / off['rps']:.2f}x the req/s of --max-batch 1, "
              f"p99 {off['p99'] / on['p99']:.2f}x lower")
        for (l, n), r in by.items():
            if l == load_name and not n.startswith("lmkit"):
                print(f"{load_name}: lmkit / {n}: {on['rps'] / r['rps']:.2f}x req/s, "
                      f"p99 {r['p99'] / on['p99']:.2f}x lower")


if __name__ == "__main__":
    main()
