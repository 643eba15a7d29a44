#!/usr/bin/env bash
# The server through the official Python clients: makes (or reuses) a venv in the test cache with
# pinned openai, anthropic, jsonschema, pytest and httpx, and runs pytest on tests/python against
# the debug build of ishizuki. Extra arguments go to pytest (e.g. -k tools, -m "not constrained").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cache=${ISHIZUKI_TEST_CACHE:-$HOME/.cache/ishizuki-test}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$cache/target}
export ISHIZUKI_BIN=${ISHIZUKI_BIN:-$CARGO_TARGET_DIR/debug/ishizuki}
export ISHIZUKI_TEST_MODELS=${ISHIZUKI_TEST_MODELS:-$cache/ishizuki/models}
export ISHIZUKI_FIXTURES=${ISHIZUKI_FIXTURES:-$root/fixtures}
export PIP_DISABLE_PIP_VERSION_CHECK=1

requirements="openai==3.60.0 anthropic==2.17.0 jsonschema==4.26.0 pytest==9.2.0 httpx==0.29.0"
venv=$cache/venv
stamp=$venv/.ishizuki-requirements

make_venv() {
    rm -rf "$venv"
    python3 -m venv "$venv"
}

if [[ ! -x $venv/bin/python || "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]]; then
    mkdir -p "$cache"
    if ! make_venv; then
        # Debian and Ubuntu ship venv's pip bootstrap apart from python3
        if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
            echo "python3 -m venv failed; installing python3-venv"
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
            make_venv
        else
            echo "python3 -m venv failed: install python3-venv (as root: apt-get install python3-venv)" >&2
            exit 1
        fi
    fi
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q $requirements
    echo "$requirements" >"$stamp"
fi

if [[ ! -x $ISHIZUKI_BIN ]]; then
    echo "no ishizuki binary at $ISHIZUKI_BIN (cargo build -p ishizuki first)" >&2
    exit 1
fi
exec "$venv/bin/python" -m pytest -p no:cacheprovider tests/python "$@"
