#!/usr/bin/env bash
# Side by side with llama.cpp on the same GGUF: builds llama.cpp from the llama-cpp-python sdist on
# PyPI if missing (cached outside the repo), then alternates `ishizuki bench` and `llama-bench` with
# the same threads and p/n/d and prints the median ratios.
#   bench/vs-llamacpp.sh MODEL [-t THREADS] [-p 512] [-n 128] [-d 0,2048] [-r 5] [--rounds 5]
# ISHIZUKI_BIN names a prebuilt ishizuki (else cargo builds it); an sdist already in the cache is
# used as it is (offline machines).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/llama-cpp.sh"
llama_bench=$build/bin/llama-bench

[ -x "$llama_bench" ] || build_llama_cpp llama-bench
ishizuki=${ISHIZUKI_BIN:-}
if [ -z "$ishizuki" ]; then
    (cd "$root" && cargo build --release -p ishizuki)
    ishizuki=${CARGO_TARGET_DIR:-$root/target}/release/ishizuki
fi
exec python3 "$root/bench/vs_llamacpp.py" --ishizuki "$ishizuki" --llama-bench "$llama_bench" "$@"
