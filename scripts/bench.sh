#!/usr/bin/env bash
# One command for every benchmark against the peers, in one run, written to
# docs/benchmarks.md (scripts/bench_report.py): tokenizers (tiktoken, tiktoken-rs,
# HF tokenizers), GPT-2 decode and prefill (HF transformers f32 and bf16,
# llama.cpp's llama-bench f32 / bf16 / q8_0), BERT (PyTorch f32 and bf16, ONNX
# Runtime f32 and int8, sentence-transformers), training (PyTorch f32 and bf16
# autocast), fine-tuning (PyTorch) and serving (HF behind a server, llama.cpp's
# llama-server), plus a probe of the machine's limits (true peak per instruction
# from `lmkit probe`, PyTorch's gemm rate, read
# bandwidth) before and after each benchmark, for the "% of limit" column (the
# best of all probes: on a shared machine a single probe can read low).
#
#   scripts/bench.sh [--quick] [--threads N] [--only LIST] [--out FILE] [--keep DIR]
#
#   --quick       fewer repetitions and smaller inputs (minutes, not tens of minutes)
#   --threads N   threads for lmkit and every peer (default: 2, as the scripts; the
#                 tokenizers' batch rows use every CPU, the single-thread rows one)
#   --only LIST   comma-separated subset of:
#                 tokenizers,encodings,wordpiece,gpt2,bert,train,finetune,serve
#   --out FILE    default docs/benchmarks.md (an existing file is replaced: it is generated)
#   --keep DIR    keep the JSON files and logs in DIR (default: a temporary folder, removed)
#
# Python: $PYTHON, else assets/.venv-fixtures/bin/python (scripts/fetch-big-assets.sh
# makes it; the peers also need `pip install tiktoken sentence-transformers onnx onnxruntime`).
# The "encodings" rows (every OpenAI encoding, lmkit.tiktoken_compat against Python
# tiktoken) need a Python with the lmkit wheel and tiktoken: $LMKIT_PYTHON, else
# target/py-venv/bin/python (scripts/test.sh makes it; rebuild the wheel first, a
# stale one times stale code). With the wheel there, GPT-2's prefill is also timed in
# process through it, as HF's and llama-bench's are (the figure; a fresh
# `lmkit generate`'s first prefill is in the note).
# llama.cpp is built from the sources in a pinned PyPI sdist on first use
# (scripts/llama_cpp_peer.py, minutes; kept in assets/.llama.cpp).
# Needs scripts/fetch-assets.sh; the full-size random GPT-2 124M and BERT-base under
# assets/big are written with scripts/make_fixtures.py --big when absent.
# A benchmark that fails is named in the report and the others still run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

quick=0 threads=2 only="tokenizers,encodings,wordpiece,gpt2,bert,train,finetune,serve"
out="docs/benchmarks.md" keep=""
cmdline="${PYTHON:+PYTHON=$PYTHON }scripts/bench.sh${*:+ $*}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --threads) threads="$2"; shift ;;
    --only) only="$2"; shift ;;
    --out) out="$2"; shift ;;
    --keep) keep="$2"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    *) echo "bench.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$threads" in ''|*[!0-9]*|0) echo "bench.sh: --threads wants a positive number" >&2; exit 2 ;; esac

py="${PYTHON:-$root/assets/.venv-fixtures/bin/python}"
if ! "$py" -c "import torch, transformers, tokenizers, tiktoken" 2>/dev/null; then
  echo "bench.sh: $py lacks torch / transformers / tokenizers / tiktoken: set PYTHON to one that has them" >&2
  exit 1
fi
for m in sentence_transformers onnx onnxruntime; do
  "$py" -c "import $m" 2>/dev/null || echo "bench.sh: warning: $py lacks $m: its peer will be missing from the report" >&2
done
for a in assets/books/corpus.txt assets/gpt2/vocab.json assets/minilm/model.safetensors; do
  [ -e "$a" ] || { echo "bench.sh: $a is missing: run scripts/fetch-assets.sh" >&2; exit 1; }
done

if [ -n "$keep" ]; then
  mkdir -p "$keep"; work="$(cd "$keep" && pwd)"
else
  work="$(mktemp -d "${TMPDIR:-/tmp}/lmkit-bench.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
fi
log() { echo "bench.sh: $*" >&2; }

log "building the release binary (cargo build --release -p lmkit-cli)"
cargo build --release -q -p lmkit-cli
lmkit="${CARGO_TARGET_DIR:-$root/target}/release/lmkit"

want() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
missing_big=()
for c in gpt2-124m-random bert-base-random; do
  [ -s "assets/big/$c/model.safetensors" ] || missing_big+=("$c")
done
if { want gpt2 || want bert; } && [ ${#missing_big[@]} -gt 0 ]; then
  log "writing ${missing_big[*]} under assets/big (scripts/make_fixtures.py --big)"
  rm -rf assets/big.tmp
  "$py" scripts/make_fixtures.py --big assets/big.tmp --only "${missing_big[@]}" >"$work/make_big.log" 2>&1
  mkdir -p assets/big
  for c in "${missing_big[@]}"; do mv "assets/big.tmp/$c" "assets/big/$c"; done
  rm -rf assets/big.tmp
fi

if [ "$quick" = 1 ]; then
  tok_args=(--reps 2 --whole-mb 8) enc_args=(--reps 1) gpt2_args=(--reps 2 --new-tokens 64 --prefill-tokens 256)
  bert_args=(--quick --rounds 1 --reps 2) train_args=(--steps 4 --warmup 1) ft_args=(--limit 1000)
  serve_args=(--requests 128)
  # WordPiece on the first 20,000 lines of the corpus.
  head -n 20000 assets/books/corpus.txt >"$work/wordpiece.txt"
  wp_file="$work/wordpiece.txt"
else
  tok_args=() enc_args=() gpt2_args=() bert_args=() train_args=() ft_args=() serve_args=()
  wp_file=assets/books/corpus.txt
fi

failed=() probes=()
probe() {
  local f="$work/probe-$(( ${#probes[@]} + 1 )).json"
  if "$py" scripts/bench_probe.py --threads "$threads" --lmkit "$lmkit" --json "$f" 2>>"$work/probe.log"; then probes+=("$f"); fi
}
# run NAME CMD...: one benchmark, its output in $work/NAME.log, its figures in $work/NAME.json.
run() {
  local name="$1"; shift
  want "$name" || return 0
  log "$name: $*"
  local t0=$SECONDS
  if "$@" >"$work/$name.log" 2>&1 && [ -s "$work/$name.json" ]; then
    log "$name: done in $((SECONDS - t0)) s"
    probe
  else
    log "$name: FAILED (last lines of $work/$name.log below)"
    tail -n 15 "$work/$name.log" >&2 || true
    rm -f "$work/$name.json"
    failed+=("$name")
  fi
}

llama_args=()
if want gpt2 || want serve; then
  log "llama.cpp: llama-bench and llama-server (scripts/llama_cpp_peer.py; built once into assets/.llama.cpp)"
  if "$py" scripts/llama_cpp_peer.py >"$work/llama_cpp.log" 2>&1; then
    llama_args=(--llama-cpp)
  else
    log "llama.cpp: FAILED (last lines of $work/llama_cpp.log below); its rows will be missing"
    tail -n 15 "$work/llama_cpp.log" >&2 || true
    failed+=("llama.cpp")
  fi
fi

probe
run tokenizers "$py" scripts/bench_tokenizers.py "${tok_args[@]}" --whole-process --lmkit "$lmkit" --json "$work/tokenizers.json"
enc_py="${LMKIT_PYTHON:-$root/target/py-venv/bin/python}"
run encodings "$enc_py" scripts/bench_tokenizers.py --encodings "${enc_args[@]+"${enc_args[@]}"}" --json "$work/encodings.json"
run wordpiece "$py" scripts/bench_wordpiece.py "$wp_file" --json "$work/wordpiece.json"
# lmkit's prefill is timed in process as the peers' are, where that Python has the wheel.
gpt2_py=()
if "$enc_py" -c "import lmkit" 2>/dev/null; then gpt2_py=(--lmkit-python "$enc_py"); fi
run gpt2 "$py" scripts/bench_gpt2_infer.py "${gpt2_args[@]}" "${gpt2_py[@]+"${gpt2_py[@]}"}" "${llama_args[@]+"${llama_args[@]}"}" --threads "$threads" --lmkit "$lmkit" --json "$work/gpt2.json"
run bert "$py" scripts/bench_bert.py "${bert_args[@]}" --threads "$threads" --json "$work/bert.json"
run train "$py" scripts/bench_train.py "${train_args[@]}" --threads "$threads" --lmkit "$lmkit" --json "$work/train.json"
run finetune "$py" scripts/bench_finetune.py "${ft_args[@]}" --threads "$threads" --lmkit "$lmkit" --json "$work/finetune.json"
run serve "$py" scripts/bench_serve.py "$lmkit" "${serve_args[@]}" "${llama_args[@]+"${llama_args[@]}"}" --threads "$threads" --peer-python "$py" --json "$work/serve.json"

report=("$py" scripts/bench_report.py --command "$cmdline" --out "$out" --threads "$threads")
for f in "${probes[@]+"${probes[@]}"}"; do report+=(--probe "$f"); done
for f in "${failed[@]+"${failed[@]}"}"; do report+=(--failed "$f"); done
[ "$quick" = 1 ] && report+=(--note "--quick: fewer repetitions and smaller inputs than the default run (see scripts/bench.sh).")
jsons=()
for n in tokenizers encodings wordpiece gpt2 bert train finetune serve; do
  [ -s "$work/$n.json" ] && jsons+=("$work/$n.json")
done
"${report[@]}" "${jsons[@]+"${jsons[@]}"}"
[ ${#failed[@]} -eq 0 ] || { log "failed: ${failed[*]} (logs in $work; --keep DIR keeps them)"; exit 1; }
