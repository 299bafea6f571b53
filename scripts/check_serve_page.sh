#!/usr/bin/env bash
# The page `lmkit serve` shows at / in headless Chromium (Debian's package):
# loads it with a prompt and two texts in the URL (the page submits them),
# checks the streamed completion and the similarity reached the DOM, and
# saves a screenshot.
# Usage: scripts/check_serve_page.sh [OUT_PNG]   (after scripts/fetch-assets.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-serve-page.png}"
command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }
cargo build -q --locked -p lmkit-cli
work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
# A small GPT-2 to complete with: one pretraining step on the books.
head -c 200000 assets/books/corpus.txt >"$work/text.txt"
target/debug/lmkit pretrain --tokenizer assets/gpt2 --data "$work/text.txt" --output "$work/run" \
  --preset tiny --max-steps 2 --seq-len 64 --batch-size 2 --eval-every 0 --sample-every 0 2>/dev/null
target/debug/lmkit serve --addr 127.0.0.1:0 --model "gpt2=$work/run" --model minilm=assets/minilm \
  2>"$work/serve.log" &
pid=$!
for _ in $(seq 100); do grep -q 'listening on' "$work/serve.log" && break; sleep 0.1; done
addr="$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$work/serve.log")"
url="$addr/?model=gpt2&max=12&prompt=The%20Rust%20programming%20language&a=A%20man%20is%20eating%20food.&b=Someone%20is%20having%20a%20meal."
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
  --disable-component-update --disable-sync --user-data-dir="$work/profile" --virtual-time-budget=20000)
chromium "${flags[@]}" --dump-dom "$url" 2>/dev/null >"$work/dom.html"
chromium "${flags[@]}" --window-size=900,900 --screenshot="$out" "$url" 2>/dev/null
status="$(sed -n 's/.*id="gstat">\([^<]*\)<.*/\1/p' "$work/dom.html")"
sim="$(sed -n 's/.*id="sim">\([^<]*\)<.*/\1/p' "$work/dom.html")"
text="$(tr '\n' ' ' <"$work/dom.html" | sed -n 's/.*<div id="out">\([^<]*\)<.*/\1/p')"
echo "completion: ${text:0:120}"
echo "status: $status; cosine: $sim; screenshot: $out"
[[ "$status" == finish:* || "$status" == done ]] || { echo "the completion did not finish" >&2; exit 1; }
[[ -n "$text" ]] || { echo "no completion text on the page" >&2; exit 1; }
[[ "$sim" =~ ^0\.[0-9]+$ ]] || { echo "no similarity on the page" >&2; exit 1; }
