#!/usr/bin/env python3
"""Load test of `lmkit serve` on loopback, bounded in requests and time:
throughput and p50/p99 latency for embeddings (dynamic batching on, then
off with --max-batch 1) and for completions, the server's peak RSS under the
flood, and the same embedding load against a peer measured in the same run:
HF transformers (PyTorch) behind a minimal threaded Python HTTP server with
the same route and pooling. Prints a table and the ratios.

Usage: python scripts/bench_serve.py LMKIT [--requests N] [--clients C] [--peer-python PY]
  LMKIT: the lmkit binary (a release build: cargo build --release -p lmkit-cli)
  --peer-python: a Python with torch + transformers (scripts/fetch-big-assets.sh
  makes assets/.venv-fixtures); without it the peer is skipped.
After scripts/fetch-assets.sh. Only 127.0.0.1 is contacted.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINILM = os.path.join(ROOT, "assets/minilm")

PEER = r'''
import json, sys, threading, torch
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from transformers import AutoModel, AutoTokenizer
torch.set_num_threads(int(sys.argv[2]))
tok = AutoTokenizer.from_pretrained(sys.argv[1]); model = AutoModel.from_pretrained(sys.argv[1]).eval()
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        with lock, torch.inference_mode():
            enc = tok(texts, padding=True, truncation=True, return_tensors="pt")
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).float()
            v = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)
        out = json.dumps({"data": [{"embedding": e} for e in v.tolist()]}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
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


def post(addr, path, body):
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
    return dt, json.loads(data)


def load(addr, path, bodies, clients, deadline_s=300):
    lat = []
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        for dt, _ in ex.map(lambda b: post(addr, path, b), bodies, timeout=deadline_s):
            lat.append(dt)
    wall = time.perf_counter() - t0
    lat.sort()
    return {"n": len(lat), "rps": len(lat) / wall, "p50": statistics.median(lat) * 1e3,
            "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3}


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lmkit")
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--peer-python")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
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
        for batch in (32, 1):
            p, addr = start([a.lmkit, "serve", "--addr", "127.0.0.1:0", "--model", "minilm=" + MINILM,
                             "--model", "gpt2=" + run, "--max-batch", str(batch), "--max-queue", "4096"], env)
            try:
                post(addr, "/v1/embeddings", embed_bodies[0])  # warm up
                r = load(addr, "/v1/embeddings", embed_bodies, a.clients)
                rows.append((f"lmkit embeddings, --max-batch {batch}", r, peak_rss_mib(p.pid)))
                if batch == 32:
                    comp = [{"model": "gpt2", "prompt": s[:60], "max_tokens": 16, "temperature": 0}
                            for s in sentences[: max(32, a.requests // 8)]]
                    r = load(addr, "/v1/completions", comp, a.clients)
                    r["tok_s"] = r["rps"] * 16
                    rows.append(("lmkit completions (16 tokens, small GPT-2)", r, peak_rss_mib(p.pid)))
            finally:
                p.terminate()
                p.wait(timeout=60)
        if a.peer_python:
            p, addr = start([a.peer_python, "-c", PEER, MINILM, str(a.threads)])
            try:
                post(addr, "/v1/embeddings", embed_bodies[0])
                r = load(addr, "/v1/embeddings", embed_bodies, a.clients)
                rows.append(("HF transformers (PyTorch), threaded http.server", r, peak_rss_mib(p.pid)))
            finally:
                p.terminate()
                p.wait(timeout=60)
    finally:
        shutil.rmtree(tmp)

    print(f"{a.requests} requests from {a.clients} concurrent clients, {a.threads} threads, loopback")
    print(f"{'server':<48} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'peak RSS MiB':>13}")
    for name, r, rss in rows:
        extra = f"  ({r['tok_s']:.0f} tokens/s)" if "tok_s" in r else ""
        print(f"{name:<48} {r['rps']:>8.1f} {r['p50']:>8.1f} {r['p99']:>8.1f} {rss:>13.1f}{extra}")
    base = rows[0][1]["rps"]
    print(f"dynamic batching: {base / rows[2][1]['rps']:.2f}x the req/s of --max-batch 1")
    if a.peer_python:
        print(f"lmkit / HF transformers embeddings: {base / rows[-1][1]['rps']:.2f}x req/s, "
              f"p99 {rows[-1][1]['p99'] / rows[0][1]['p99']:.2f}x lower")


if __name__ == "__main__":
    main()
