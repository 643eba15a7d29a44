#!/usr/bin/env bash
# On the GPU host, once bench/cuda-carry.sh has joined the real models in STORE (default
# /tmp/models): the CLI's end-to-end tests (each model's reference fixture: greedy cases and
# perplexity) and, with the wheels of bench/cuda-pack.sh --wheels, the server's Python SDK suite,
# all on the GPU (ISHIZUKI_DEVICE=cuda). Tests of a model not in STORE skip. Logs go to $OUT.
#   OUT=/tmp/out [STORE=/tmp/models] [PYTEST_ARGS="-k tools"] bash bench/cuda-models.sh [DIR]
set -uo pipefail
root=$(pwd)
dir=${1:-$root/.device}
out=${OUT:-/tmp/cuda-run}
models=${STORE:-/tmp/models}
mkdir -p "$out"
. "$root/bench/cuda-env.sh"
export ISHIZUKI_DEVICE=${ISHIZUKI_DEVICE:-cuda} ISHIZUKI_TEST_MODELS=$models ISHIZUKI_FIXTURES=$root/fixtures
ls -la "$models" | tee "$out/models.log"
echo "== e2e"
timeout 400 "$b"/e2e-* --test-threads 1 --nocapture >/tmp/test-e2e.log 2>&1
echo "rc=$?"
grep -E "^test |test result|compared and equal|ppl |skipping" /tmp/test-e2e.log
sed -n '/^failures:$/,/^test result/p' /tmp/test-e2e.log | head -80
if [ -d "$dir/whl" ]; then
    echo "== python SDK suite"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$dir"/whl/*.whl
    # shellcheck disable=SC2086
    PYTHONPATH=/tmp/site ISHIZUKI_BIN=$b/ishizuki timeout 500 python3 -m pytest -p no:cacheprovider \
        -q -rs tests/python ${PYTEST_ARGS:-} >/tmp/pytest.log 2>&1
    echo "rc=$?"
    tail -40 /tmp/pytest.log
fi 2>&1
