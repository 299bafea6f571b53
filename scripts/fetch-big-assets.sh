#!/usr/bin/env bash
# Builds assets/big: full-size random-init GPT-2 124M and BERT-base checkpoints
# with HF transformers' own outputs (scripts/make_fixtures.py --big), for the
# 124M parity tests that are #[ignore]d without them (scripts/test.sh runs them
# with --include-ignored). Needs scripts/fetch-assets.sh first (GPT-2 and
# MiniLM vocabularies).
#
# PyTorch and transformers (the versions in scripts/requirements-dev.txt, which
# wrote the committed fixtures) go into a venv under the git-ignored assets/;
# nothing is installed system-wide. Idempotent: skipped when every case is
# complete; written to a temporary folder and renamed, so an interrupted run
# leaves nothing half-made.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
assets="$root/assets"
cases=(gpt2-124m-random gpt2-124m-default-init bert-base-random)

complete=1
for c in "${cases[@]}"; do
  [ -s "$assets/big/$c/reference.json" ] || complete=0
done
[ "$complete" = 1 ] && exit 0

venv="$assets/.venv-fixtures"
if ! "$venv/bin/python" -c "import torch, transformers" 2>/dev/null; then
  echo "fetch-big-assets: PyTorch + transformers into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  pins="$(grep -E '^(torch|transformers|tokenizers|safetensors|numpy)==' "$root/scripts/requirements-dev.txt")"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q $pins
fi

echo "fetch-big-assets: writing assets/big (scripts/make_fixtures.py --big)" >&2
rm -rf "$assets/big.tmp"
"$venv/bin/python" "$root/scripts/make_fixtures.py" --big "$assets/big.tmp"
rm -rf "$assets/big" && mv "$assets/big.tmp" "$assets/big"
