# Sourced on the GPU host by bench/cuda-run.sh and bench/cuda-models.sh, with root (the
# repository) and dir (the packed files) set: the CUDA libraries, the kernel cache, and the
# binaries of bench/cuda-pack.sh unpacked into $b, where their tests find what they were built by.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export ISHIZUKI_REQUIRE_CUDA=1 ISHIZUKI_REQUIRE_NVRTC=1 ISHIZUKI_CUDA_CACHE=/tmp/ishizuki-kernels
b=/tmp/bins
tar xJf "$dir/bins.tar.xz" -C /tmp
# the test executables find their fixtures, and the binary they run, where they were built
. "$b/built.env"
[ ! -e "$BUILT_ROOT" ] && mkdir -p "$(dirname "$BUILT_ROOT")" && ln -s "$root" "$BUILT_ROOT"
[ ! -e "$BUILT_EXE" ] && mkdir -p "$(dirname "$BUILT_EXE")" && ln -s "$b/ishizuki" "$BUILT_EXE"
