#!/usr/bin/env bash
# The page `lmkit serve` shows at /, driven panel by panel in headless
# Chromium (Debian's chromium + chromium-driver, installed when missing) by
# scripts/check_serve_page.py: a tiny GPT-2 made here by two pretraining
# steps on the books, assets/minilm and the committed tiny BERT fixtures.
# Screenshots (desktop and phone widths) go to OUT_DIR (not committed).
# Usage: scripts/check_serve_page.sh [OUT_DIR]   (after scripts/fetch-assets.sh;
# builds target/debug/lmkit unless LMKIT names a binary)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/serve-page}"
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get install -y -qq chromium chromium-driver ||
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium chromium-driver; }
fi
lmkit="${LMKIT:-}"
if [ -z "$lmkit" ]; then
  cargo build -q --locked -p lmkit-cli
  lmkit="${CARGO_TARGET_DIR:-target}/debug/lmkit"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A small GPT-2 to complete with: two pretraining steps on the books (its
# tokenizer is GPT-2's, so the token view shows real tokens).
head -c 200000 assets/books/corpus.txt >"$work/text.txt"
"$lmkit" pretrain --tokenizer assets/gpt2 --data "$work/text.txt" --output "$work/run" \
  --preset tiny --max-steps 2 --seq-len 64 --batch-size 2 --eval-every 0 --sample-every 0 2>/dev/null
python3 scripts/check_serve_page.py "$lmkit" "$work/run" "$out"
