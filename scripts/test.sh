#!/usr/bin/env bash
# The test command: lints, the whole workspace's tests (real models fetched on first use into a
# cache outside the clone), the CUDA kernels compiled by NVRTC, and the kernels and decoder again
# with the scalar and AVX2 CPU tiers forced.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cache=${ISHIZUKI_TEST_CACHE:-$HOME/.cache/ishizuki-test}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$cache/target}
export ISHIZUKI_CACHE=$cache/ishizuki
export ISHIZUKI_TEST_MODELS=$ISHIZUKI_CACHE/models
export ISHIZUKI_REQUIRE_MODELS=1
export ISHIZUKI_FIXTURES=${ISHIZUKI_FIXTURES:-$root/fixtures}
export CARGO_TERM_COLOR=never

start=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - start ))s)"; }

step "format"
cargo fmt --all --check
step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "clippy with the CUDA backend"
cargo clippy --workspace --all-targets --locked --features ishizuki/cuda -- -D warnings
step "build"
cargo build --locked -p ishizuki
step "models"
"$CARGO_TARGET_DIR/debug/ishizuki" pull smollm2-135m gemma3-270m qwen2.5-coder-0.5b
step "tests"
cargo test --workspace --locked
step "the op timeline of a trace build"
cargo test --locked -p ishizuki-cpu --features trace --lib trace::
step "every CUDA kernel module compiled by NVRTC for sm_90 (no GPU needed)"
LD_LIBRARY_PATH=$(scripts/nvrtc.sh) ISHIZUKI_REQUIRE_NVRTC=1 \
    cargo test --locked -p ishizuki-cuda --lib kernels::
step "tests with the scalar CPU tier forced"
ISHIZUKI_CPU_TIER=scalar cargo test --locked -p ishizuki-cpu -p ishizuki-models
step "tests with the AVX2 CPU tier forced"
ISHIZUKI_CPU_TIER=avx2 cargo test --locked -p ishizuki-cpu -p ishizuki-models
step "the server through the openai and anthropic Python clients"
scripts/test_python.sh
step "done"
