#!/usr/bin/env bash
# The project's whole test run: what CI runs and what a contributor runs before pushing.
set -euo pipefail
cd "$(dirname "$0")/.."
# Disk: a one-shot run gains nothing from incremental caches (3 GB) or from
# pip keeping PyTorch's wheels after installing them (3 GB more).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}" PIP_NO_CACHE_DIR="${PIP_NO_CACHE_DIR:-1}"
# LMKIT_TEST_ONE_SHOT=1 (set by .ci/run): nothing is kept after this run, so
# build outputs are dropped once their last use is behind.
one_shot="${LMKIT_TEST_ONE_SHOT:-0}"
disk() { [ "$one_shot" = 1 ] && echo "test.sh: disk before $1: $(df -h . | awk 'NR==2 {print $4}') free" >&2 || true; }
disk "the assets"
scripts/fetch-assets.sh
# The full-size (124M GPT-2, BERT-base) assets and their PyTorch venv (~6 GB,
# PyPI's torch brings its CUDA libraries) first, while the disk holds no build:
# the install's downloads and unpacking need ~3 GB more for a moment.
scripts/fetch-big-assets.sh
# Imports inside the library point down the layers, and tasks are dispatched
# through their registry only (docs/architecture.md).
python3 scripts/check_layers.py --self-test
python3 scripts/check_layers.py
# Files <= 800 lines, CLI commands <= 300, functions <= 150 (or a named allow).
python3 scripts/check_sizes.py --self-test
python3 scripts/check_sizes.py
# The arithmetic of docs/benchmarks.md's ratios and "% of limit" (scripts/bench.sh).
python3 scripts/bench_report.py --self-test
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The API docs build without broken or private links.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
cargo test --workspace --locked
# Intel AMX tiles for the bf16 gemm (never required): their tests need the
# CPU's tiles, so they run where /proc/cpuinfo lists amx_bf16.
if grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null; then
  cargo test -p lmkit --lib --locked amx -- --ignored
fi
# The examples as built here (`cargo run -p lmkit` would resolve features for
# lmkit alone and build the library a second time), run at the end.
cargo build --workspace --examples --locked

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
[ "$one_shot" = 1 ] && rm -rf fuzz/target

# `lmkit serve` driven by the official OpenAI Python client, unchanged
# (target/debug/lmkit is the binary the cargo test run above built).
python3 -m venv assets/.venv-openai
assets/.venv-openai/bin/pip install -q openai
assets/.venv-openai/bin/python scripts/check_openai_client.py target/debug/lmkit
[ "$one_shot" = 1 ] && rm -rf assets/.venv-openai

# The page at / driven panel by panel in headless Chromium (installs Debian's
# chromium and chromium-driver when missing; about 10 s; screenshots under
# target/serve-page).
LMKIT=target/debug/lmkit scripts/check_serve_page.sh target/serve-page

# The Python package: the wheel (maturin, the dev profile this run built)
# installed into a venv with the light peers its tests compare against
# (tiktoken, HF tokenizers; transformers' and sentence-transformers' outputs
# are the committed fixtures), then pytest; the CLI is the reference for the
# pipelines and training runs.
pyv=target/py-venv
[ -x "$pyv/bin/python" ] || python3 -m venv "$pyv"
"$pyv/bin/pip" install -q -r crates/lmkit-py/requirements-test.txt
rm -rf target/py-wheels
"$pyv/bin/maturin" build -q -m crates/lmkit-py/Cargo.toml -o target/py-wheels -i "$pyv/bin/python" --strip
"$pyv/bin/pip" install -q --force-reinstall --no-deps target/py-wheels/lmkit-*.whl
LMKIT=target/debug/lmkit "$pyv/bin/python" -m pytest -q -p no:cacheprovider crates/lmkit-py/tests
# tiktoken's own public tests (the 0.14.0 sdist's tests/, fetched from PyPI
# by hash) with `import tiktoken` resolving to lmkit.tiktoken_compat (~10 s).
"$pyv/bin/python" scripts/check_tiktoken_suite.py

# The README's `lmkit ...` examples, run on tiny data (skips listed by rule).
python3 scripts/check_readme.py --lmkit target/debug/lmkit

# `lmkit overlap` against the exact set of normalised 8-grams in Python.
python3 scripts/check_overlap.py target/debug/lmkit

# The full-size (124M GPT-2, BERT-base) parity tests: #[ignore]d unless
# assets/big exists (built at the top) and run here.
disk "the full-size tests"
cargo test --workspace --locked --test gpt2_infer --test bert_fixtures -- --ignored

# A random-init GPT-2 fine-tuned end to end on real text: as a classifier (about
# 15 s) and as GPT2DoubleHeadsModel on prose-or-code multiple choice (about 20 s).
cargo test --workspace --locked --test gpt2_heads -- --ignored

# Mixed-precision GPT-2 training (--dtype bf16): a tiny GPT-2 on the Rust books,
# bf16's per-step loss within 3% of f32's, the final within 1% (about 50 s on 2 cores).
cargo test --workspace --locked --test gpt2_bf16 -- --ignored

# HF round trips of every fine-tuned head (classify, regression, qa, BERT
# pretraining, multiple choice for both families): what `lmkit finetune` writes,
# transformers loads with the same outputs (scipy for the correlations).
fx=assets/.venv-fixtures/bin/python
"$fx" -c "import scipy" 2>/dev/null ||
  assets/.venv-fixtures/bin/pip install -q "$(grep -E '^scipy==' scripts/requirements-dev.txt)"
LMKIT=target/debug/lmkit "$fx" scripts/check_finetune_hf.py

# EleutherAI's lm-evaluation-harness, unchanged, against `lmkit serve`: the
# same accuracies and per-item loglikelihoods (1e-3) as its own HF backend on
# two small tasks made from the books (about 1 minute, plus its install).
"$fx" -c "import lm_eval, accelerate, tenacity" 2>/dev/null ||
  assets/.venv-fixtures/bin/pip install -q "$(grep -E '^lm_eval' scripts/requirements-dev.txt)"
"$fx" scripts/check_lm_eval.py target/debug/lmkit --python "$fx"

# The examples, run tiny: each is a short program over the public API only.
ex="$(mktemp -d)"
trap 'rm -rf "$ex"' EXIT
head -c 300000 assets/books/corpus.txt >"$ex/text.txt"
target/debug/examples/pretrain_gpt2 "$ex/text.txt" "$ex/gpt2" 200
target/debug/examples/generate "$ex/gpt2/model" "The Rust programming language" 16
target/debug/examples/finetune_classifier assets/minilm \
  tests/data/classify/prose_code.train.jsonl tests/data/classify/prose_code.eval.jsonl "$ex/classifier" 128
