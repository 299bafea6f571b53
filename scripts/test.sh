#!/usr/bin/env bash
# The project's whole test run: what CI runs and what a contributor runs before pushing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-assets.sh
# Imports inside the library point down the layers (docs/architecture.md).
python3 scripts/check_layers.py --self-test
python3 scripts/check_layers.py
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked

# Data-parallel training over MPI (issue 19): the `mpi` feature against the
# distribution's Open MPI (bindgen needs libclang), then `mpirun -np 2` on
# loopback (crates/lmkit-cli/tests/mpi_cli.rs). Only the binary and that
# test are built with the feature.
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null ||
  ! ldconfig -p | grep -q 'libclang[-.0-9]*\.so'; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get install -y -q libopenmpi-dev openmpi-bin libclang-dev ||
    { $sudo apt-get update -q && $sudo apt-get install -y -q libopenmpi-dev openmpi-bin libclang-dev; }
fi
cargo test -p lmkit-cli --features mpi --locked --test mpi_cli

# Every parser of a user's file, fuzzed for a few seconds each (seeded,
# from the committed corpora; cargo-fuzz on the nightly toolchain).
scripts/fuzz.sh 5

# `lmkit serve` driven by the official OpenAI Python client, unchanged
# (target/debug/lmkit is the binary the cargo test run above built).
python3 -m venv assets/.venv-openai
assets/.venv-openai/bin/pip install -q openai
assets/.venv-openai/bin/python scripts/check_openai_client.py target/debug/lmkit

# The README's `lmkit ...` examples, run on tiny data (skips listed by rule).
python3 scripts/check_readme.py --lmkit target/debug/lmkit

# `lmkit overlap` against the exact set of normalised 8-grams in Python.
python3 scripts/check_overlap.py target/debug/lmkit

# The full-size (124M GPT-2, BERT-base) parity tests: #[ignore]d unless
# assets/big exists, so build it (PyTorch from PyPI, a few minutes) and run them.
scripts/fetch-big-assets.sh
cargo test -p lmkit --locked --test gpt2_infer --test bert_fixtures -- --ignored

# A random-init GPT-2 fine-tuned as a classifier end to end (about 15 s).
cargo test -p lmkit --locked --test gpt2_heads -- --ignored

# HF round trips of every fine-tuned head (classify, regression, qa, BERT
# pretraining, multiple choice for both families): what `lmkit finetune` writes,
# transformers loads with the same outputs (scipy for the correlations).
fx=assets/.venv-fixtures/bin/python
"$fx" -c "import scipy" 2>/dev/null ||
  assets/.venv-fixtures/bin/pip install -q "$(grep -E '^scipy==' scripts/requirements-dev.txt)"
LMKIT=target/debug/lmkit "$fx" scripts/check_finetune_hf.py

# The examples, run tiny: each is a short program over the public API only.
ex="$(mktemp -d)"
trap 'rm -rf "$ex"' EXIT
head -c 300000 assets/books/corpus.txt >"$ex/text.txt"
cargo run -q --locked -p lmkit --example pretrain_gpt2 -- "$ex/text.txt" "$ex/gpt2" 200
cargo run -q --locked -p lmkit --example generate -- "$ex/gpt2/model" "The Rust programming language" 16
cargo run -q --locked -p lmkit --example finetune_classifier -- assets/minilm \
  tests/data/classify/prose_code.train.jsonl tests/data/classify/prose_code.eval.jsonl "$ex/classifier" 128
