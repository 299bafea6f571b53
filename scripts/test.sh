#!/usr/bin/env bash
# The project's whole test run: what CI runs and what a contributor runs before pushing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-assets.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
