#!/usr/bin/env python3
"""Checks the `hub-download` feature against a local stand-in for the HF hub (no network):
`lmkit generate --model ORG/NAME` must fetch the model into a fresh HF cache, generate the
same ids as from the folder itself, then work again with the server gone and HF_HUB_OFFLINE=1.

    cargo build --release -p lmkit-cli --features hub-download
    python3 scripts/check_hub_download.py [MODEL_DIR]   (default: a random 2-layer GPT-2
                                                        with the real vocabulary)

The stand-in answers the two requests the hub client makes: the repository listing
(/api/models/REPO/revision/main) and ranged file reads (/REPO/resolve/main/FILE) with the
x-repo-commit / etag / content-range headers the hub sends.
"""
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXE = os.path.join(ROOT, "target", "release", "lmkit")
REPO = "lmkit-test/gpt2-mock"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def serve(folder):
    class Hub(http.server.BaseHTTPRequestHandler):
        def reply(self, status, body, headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.startswith(f"/api/models/{REPO}"):
                files = [{"rfilename": f} for f in sorted(os.listdir(folder))]
                return self.reply(200, json.dumps({"sha": COMMIT, "siblings": files}).encode())
            prefix = f"/{REPO}/resolve/main/"
            path = os.path.join(folder, self.path[len(prefix):])
            if not self.path.startswith(prefix) or not os.path.isfile(path):
                return self.reply(404, b"")
            data = open(path, "rb").read()
            first, last = 0, len(data) - 1
            if self.headers.get("Range"):
                a, b = self.headers["Range"].split("=")[1].split("-")
                first, last = int(a), min(int(b) if b else last, last)
            self.reply(206 if self.headers.get("Range") else 200, data[first:last + 1], [
                ("x-repo-commit", COMMIT),
                ("etag", '"%s"' % hashlib.sha256(data).hexdigest()),
                ("Content-Range", f"bytes {first}-{last}/{len(data)}"),
            ])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def generate(model, env):
    out = subprocess.run([EXE, "generate", "--model", model, "--prompt", "The hub", "--max-new-tokens", "5",
                          "--greedy", "--json"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"lmkit generate --model {model} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])["ids"]


def main():
    if not os.path.exists(EXE):
        sys.exit(f"{EXE} not found: cargo build --release -p lmkit-cli --features hub-download")
    with tempfile.TemporaryDirectory() as tmp:
        folder = sys.argv[1] if len(sys.argv) > 1 else None
        if folder is None:
            folder = os.path.join(tmp, "model")
            from transformers import GPT2Config, GPT2LMHeadModel
            import torch
            torch.manual_seed(0)
            GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64)).save_pretrained(folder)
            for f in ("vocab.json", "merges.txt"):
                shutil.copy(os.path.join(ROOT, "assets", "gpt2", f), folder)
        want = generate(folder, dict(os.environ))
        server = serve(folder)
        env = dict(os.environ, HF_HOME=os.path.join(tmp, "hf"), HF_HUB_CACHE="",
                   HF_ENDPOINT=f"http://127.0.0.1:{server.server_port}")
        env.pop("HF_HUB_OFFLINE", None)
        got = generate(REPO, env)
        server.shutdown()
        again = generate(REPO, dict(env, HF_HUB_OFFLINE="1"))
        snapshot = os.path.join(env["HF_HOME"], "hub", "models--" + REPO.replace("/", "--"), "snapshots", COMMIT)
        print(f"folder ids {want}, downloaded {got}, cached offline {again}; snapshot has {sorted(os.listdir(snapshot))}")
        if not (want == got == again):
            sys.exit("ids differ")
    print("ok")


if __name__ == "__main__":
    main()
