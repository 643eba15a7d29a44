#!/usr/bin/env bash
# Prints the directory of an NVRTC (libnvrtc.so.13) for compiling the CUDA kernels on a machine
# without CUDA: the PyPI wheel nvidia-cuda-nvrtc, fetched once into the test cache. The CUDA
# crate's host-side test then compiles every kernel module for sm_90, so a kernel that does not
# compile fails CI, not a GPU session.
set -euo pipefail
cache=${ISHIZUKI_TEST_CACHE:-$HOME/.cache/ishizuki-test}
version=13.0.88
dir=$cache/nvrtc-$version
lib=$dir/nvidia/cu13/lib
if [[ ! -f $lib/libnvrtc.so.13 ]]; then
    mkdir -p "$dir"
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        "nvidia-cuda-nvrtc==$version" -d "$dir" >&2
    python3 -m zipfile -e "$dir"/nvidia_cuda_nvrtc-*.whl "$dir" >&2
fi
echo "$lib"
