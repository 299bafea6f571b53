#!/usr/bin/env python3
"""Checks the `hub-download` feature against a local stand-in for the HF hub (no network):
`lmkit generate --model ORG/NAME` must fetch the model into a fresh HF cache, generate the
same ids as from the folder itself, then work again with the server gone and HF_HUB_OFFLINE=1;
`lmkit embed --model ORG/MINILM` must fetch the sentence-transformers files too (modules.json,
1_Pooling/config.json) and give the folder's normalised embeddings.

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
MINILM_REPO = "lmkit-test/minilm-mock"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def files_of(folder):
    """Every file under folder, as hub paths (nested ones with '/')."""
    out = []
    for d, _, names in os.walk(folder):
        for n in names:
            out.append(os.path.relpath(os.path.join(d, n), folder).replace(os.sep, "/"))
    return sorted(out)


def serve(repos):
    class Hub(http.server.BaseHTTPRequestHandler):
        def reply(self, status, body, headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            for repo, folder in repos.items():
                if self.path.startswith(f"/api/models/{repo}/"):
                    files = [{"rfilename": f} for f in files_of(folder)]
                    return self.reply(200, json.dumps({"sha": COMMIT, "siblings": files}).encode())
                prefix = f"/{repo}/resolve/main/"
                if self.path.startswith(prefix):
                    path = os.path.join(folder, self.path[len(prefix):])
                    break
            else:
                return self.reply(404, b"")
            if not os.path.isfile(path):
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


def embed(model, env):
    out = subprocess.run([EXE, "embed", "--model", model], input="A man is eating food.\n", env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"lmkit embed --model {model} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip())


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
        minilm = os.path.join(ROOT, "assets", "minilm")
        want_vec = embed(minilm, dict(os.environ))
        server = serve({REPO: folder, MINILM_REPO: minilm})
        env = dict(os.environ, HF_HOME=os.path.join(tmp, "hf"), HF_HUB_CACHE="",
                   HF_ENDPOINT=f"http://127.0.0.1:{server.server_port}")
        env.pop("HF_HUB_OFFLINE", None)
        got = generate(REPO, env)
        got_vec = embed(MINILM_REPO, env)
        server.shutdown()
        norm = sum(x * x for x in got_vec) ** 0.5
        print(f"embedding by hub name: norm {norm:.6f}, max difference from the folder's "
              f"{max(abs(a - b) for a, b in zip(got_vec, want_vec)):.2e}")
        if abs(norm - 1) > 1e-4 or max(abs(a - b) for a, b in zip(got_vec, want_vec)) > 1e-6:
            sys.exit("the downloaded MiniLM does not embed as the folder does")
        again = generate(REPO, dict(env, HF_HUB_OFFLINE="1"))
        snapshot = os.path.join(env["HF_HOME"], "hub", "models--" + REPO.replace("/", "--"), "snapshots", COMMIT)
        print(f"folder ids {want}, downloaded {got}, cached offline {again}; snapshot has {sorted(os.listdir(snapshot))}")
        if not (want == got == again):
            sys.exit("ids differ")
    print("ok")


if __name__ == "__main__":
    main()
