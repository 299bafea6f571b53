#!/usr/bin/env bash
# Fuzz every parser of a user's file (fuzz/fuzz_targets) with cargo-fuzz:
# each target for SECS seconds (default 5), seeded, starting from the
# committed corpus fuzz/corpus/<target> (copied: runs never grow it).
# Allocations over 1 GiB and RSS over 2 GiB count as crashes.
# Usage: scripts/fuzz.sh [SECS] [TARGET...]   (after scripts/fetch-assets.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-5}"
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cd fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
# ASan off: the smoke is after panics, aborts and runaway allocations; it
# builds in a third of the time. Run with FUZZ_SANITIZER=address for the rest.
sanitizer="${FUZZ_SANITIZER:-none}"
if [ $# -gt 0 ]; then
  for t in "${targets[@]}"; do cargo +nightly fuzz build --sanitizer "$sanitizer" "$t"; done
else
  cargo +nightly fuzz build --sanitizer "$sanitizer"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  seeds="corpus/$t"
  [ -d "$seeds" ] || seeds=""
  log="$work/$t.log"
  if ! cargo +nightly fuzz run --sanitizer "$sanitizer" "$t" "$work/$t" $seeds -- \
      -max_total_time="$secs" -seed=1 -malloc_limit_mb=1024 -rss_limit_mb=2048 \
      -print_final_stats=1 >"$log" 2>&1; then
    cat "$log"
    echo "fuzz: $t FAILED" >&2
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  echo "fuzz: $t: $runs executions in ${secs}s, 0 crashes"
done
