#!/usr/bin/env bash
# `ishizuki serve` against llama.cpp's `llama-server` on the same GGUF, threads and context, through
# /v1/chat/completions with streaming: TTFT of a ~2,000-token prompt, decode tok/s over 256 tokens,
# and the TTFT of a second turn that extends the first (the prefix cache). Prints medians and ratios.
#   bench/serve-vs-llamaserver.sh MODEL [-t THREADS] [--rounds N] [--ctx 4096]
#                                 [--prompt-tokens 2000] [--gen 256]
# llama-server is built like vs-llamacpp.sh builds llama-bench (same cache, version, ISA flags and
# build dir). ISHIZUKI_BIN names a prebuilt ishizuki (else cargo builds it). Both servers bind
# 127.0.0.1 only and are stopped on exit; their logs stay in $ISHIZUKI_BENCH_LOGS (else a temp dir).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/llama-cpp.sh"
llama_server=$build/bin/llama-server

[ $# -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
model=$1; shift
threads=2 ctx=4096 pass=()
while [ $# -gt 0 ]; do
    case $1 in
        -t|--threads) threads=$2; shift 2 ;;
        -c|--ctx) ctx=$2; shift 2 ;;
        --rounds|--prompt-tokens|--gen) pass+=("$1" "$2"); shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[ -f "$model" ] || { echo "no such model: $model" >&2; exit 2; }

[ -x "$llama_server" ] || build_llama_cpp llama-server
ishizuki=${ISHIZUKI_BIN:-}
if [ -z "$ishizuki" ]; then
    (cd "$root" && nice cargo build --release -p ishizuki)
    ishizuki=${CARGO_TARGET_DIR:-$root/target}/release/ishizuki
fi

logs=${ISHIZUKI_BENCH_LOGS:-$(mktemp -d /tmp/serve-vs-llamaserver.XXXXXX)}
mkdir -p "$logs"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port_ours=$(free_port)
port_theirs=$(free_port)
while [ "$port_theirs" = "$port_ours" ]; do port_theirs=$(free_port); done

pids=()
stop_servers() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
}
trap stop_servers EXIT
trap 'exit 130' INT TERM

"$ishizuki" serve -m "$model" --host 127.0.0.1 --port "$port_ours" -t "$threads" --ctx "$ctx" \
    >"$logs/ishizuki.log" 2>&1 &
pids+=($!)
pid_ours=$!
# -np 1: one slot with the whole context; prompt cache (cache_prompt) is on by default.
"$llama_server" -m "$model" --host 127.0.0.1 --port "$port_theirs" -t "$threads" -tb "$threads" \
    -c "$ctx" -np 1 --jinja --no-webui >"$logs/llama-server.log" 2>&1 &
pids+=($!)
pid_theirs=$!

echo "llama.cpp: $("$llama_server" --version 2>&1 | grep -m1 -i "^version" || echo "llama-cpp-python $version")"
echo "ishizuki: $("$ishizuki" --version 2>/dev/null || echo "$ishizuki"); logs in $logs"
timeout "${ISHIZUKI_BENCH_TIMEOUT:-3000}" python3 "$root/bench/serve_vs_llamaserver.py" \
    --model "$model" --threads "$threads" --ctx "$ctx" \
    --ishizuki "$port_ours:$pid_ours:$logs/ishizuki.log" \
    --llama-server "$port_theirs:$pid_theirs:$logs/llama-server.log" "${pass[@]}"
