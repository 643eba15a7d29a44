# Sourced by vs-llamacpp.sh and serve-vs-llamaserver.sh: where llama.cpp is cached and how it is
# built (from the llama-cpp-python sdist on PyPI; an sdist already in the cache is used as it is).
#   build_llama_cpp TARGET   builds llama-bench or llama-server into $build/bin
cache=${ISHIZUKI_BENCH_CACHE:-$HOME/.cache/ishizuki-bench}
version=0.3.36 # its vendor/llama.cpp is commit 0c1e57098
src=$cache/llama_cpp_python-$version/vendor/llama.cpp
build=$src/build-best

has_flag() { grep -qw "$1" /proc/cpuinfo; }
on_off() { if has_flag "$1"; then echo ON; else echo OFF; fi; }

build_llama_cpp() {
    local target=$1 server=OFF
    [ "$target" = llama-server ] && server=ON
    mkdir -p "$cache"
    if [ ! -d "$src" ]; then
        [ -f "$cache/llama_cpp_python-$version.tar.gz" ] ||
            python3 -m pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$cache"
        tar xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$cache"
        # GCC 12 drops the tile-config stores before _tile_loadconfig (SIGILL in the AMX kernel);
        # a compiler barrier keeps them.
        sed -i 's/^\(\s*\)_tile_loadconfig(&tc);/\1asm volatile("" ::: "memory");\n\1_tile_loadconfig(\&tc);/' \
            "$src/ggml/src/ggml-cpu/amx/mmq.cpp"
        grep -q 'asm volatile("" ::: "memory");' "$src/ggml/src/ggml-cpu/amx/mmq.cpp"
    fi
    command -v cmake >/dev/null || python3 -m pip install cmake
    # The best llama.cpp this CPU runs: explicit ISA flags (GGML_NATIVE crashes here), AMX where present.
    # One build dir for both targets: only LLAMA_BUILD_SERVER differs, so ggml is compiled once.
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
        -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
        -DGGML_AVX512="$(on_off avx512f)" -DGGML_AVX512_VNNI="$(on_off avx512_vnni)" \
        -DGGML_AVX512_VBMI="$(on_off avx512vbmi)" -DGGML_AVX512_BF16="$(on_off avx512_bf16)" \
        -DGGML_AMX_TILE="$(on_off amx_tile)" -DGGML_AMX_INT8="$(on_off amx_int8)" \
        -DGGML_AMX_BF16="$(on_off amx_bf16)" \
        -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server
    nice cmake --build "$build" --target "$target" -j"$(nproc)"
}
