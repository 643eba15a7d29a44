#!/usr/bin/env bash
# On the GPU host, from the repository root, after bench/cuda-pack.sh: the CUDA tests, a
# Llama-3.1-8B-shaped Q4_K_M (and with Q8=1 a Q8_0) synthesized there, `ishizuki bench` (pp512,
# tg128, rows 1..16, tg128 at depth 4096, tg128 without graphs and without PDL), per-kernel
# times by ncu, and with LLAMA=1 llama-bench built from the packed source on the same files.
# PREV=an earlier bins.tar.xz benches its tg128 rows beside ours (at PREV_DEPTHS, default
# "0 4096"). Logs go to $OUT. The real models' suites are bench/cuda-models.sh's.
# NCU=0 skips the profiles; NSYS=1 traces the decode graph's kernels; TUNES benches kernel variants (ISHIZUKI_CUDA_TUNE) beside the default,
# at the depths TUNE_DEPTHS (default "0 4096") or, for a variant written NAME=V@D, at depth D.
#   OUT=/tmp/out [LLAMA=1] [Q8=1] [PREV=tarball] [NCU=0] [NCU_KERNELS=regex] [TUNES="A=1 B=2"] \
#       bash bench/cuda-run.sh [DIR]
set -uo pipefail
root=$(pwd)
dir=${1:-$root/.device}
out=${OUT:-/tmp/cuda-run}
mkdir -p "$out"
. "$root/bench/cuda-env.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ "${LLAMA:-0}" = 1 ]; then
    (cd /tmp && tar xJf "$dir/llama.tar.xz" && cd llama.cpp &&
        cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
            -DCMAKE_BUILD_TYPE=Release >/tmp/llama-build.log 2>&1 &&
        nice cmake --build build -j 12 --target llama-bench >>/tmp/llama-build.log 2>&1
        echo "llama.cpp build rc=$?" >>/tmp/llama-build.log) &
    llama=$!
fi
q4=/tmp/q4km.gguf q8=/tmp/q8.gguf
(
    "$b/ishizuki" synth --arch llama --preset llama3-8b --type q4_k_m -o $q4 -t 10
    [ "${Q8:-0}" = 1 ] && "$b/ishizuki" synth --arch llama --preset llama3-8b --type q8_0 -o $q8 -t 10
) >/tmp/synth.log 2>&1 &
synth=$!
for t in "$b"/ishizuki_cuda-* "$b"/ops-* "$b"/select-* "$b"/decoder-*; do
    echo "== $(basename "$t")"
    log=/tmp/test-$(basename "$t").log
    timeout 300 "$t" --test-threads 1 >"$log" 2>&1
    echo "rc=$?"
    grep -E "^test |test result" "$log"
    sed -n '/^failures:$/,/^test result/p' "$log" | head -80
done 2>&1 | tee "$out/tests.log"
wait $synth
cat /tmp/synth.log >>"$out/bench.log"
bench() { timeout 200 "$b/ishizuki" bench --device cuda "$@" 2>&1 | tee -a "$out/bench.log"; }
bench -m $q4 -p 512 -n 128 -r 3
bench -m $q4 -p 0 -n 0 --rows 1,2,4,8,16 -r 3
bench -m $q4 -p 0 -n 128 -d 4096 -r 2
[ "${Q8:-0}" = 1 ] && bench -m $q8 -p 512 -n 128 -r 3 && bench -m $q8 -p 0 -n 128 -d 4096 -r 2
ISHIZUKI_CUDA_GRAPHS=0 bench -m $q4 -p 0 -n 128 -r 1
ISHIZUKI_CUDA_PDL=0 bench -m $q4 -p 0 -n 128 -r 2
# with PREV=tarball (an earlier bins.tar.xz), its tg128 rows beside ours, alternating
if [ -n "${PREV:-}" ]; then
    mkdir -p /tmp/prev && tar xJf "$PREV" -C /tmp/prev
    for v in /tmp/prev/bins "$b"; do
        for d in ${PREV_DEPTHS:-0 4096}; do
            echo "== $v d$d" >>"$out/variants.log"
            timeout 200 "$v/ishizuki" bench --device cuda -m $q4 -p 0 -n 128 -d $d -r 2 2>&1 |
                grep "tg128" | tee -a "$out/variants.log"
        done
    done
fi
# with TUNES="NAME=V[,NAME=V] ..." (ISHIZUKI_CUDA_TUNE values), each kernel variant's tg128
# rows after the default's
for tune in ${TUNES:-}; do
    depths=${TUNE_DEPTHS:-0 4096}
    case $tune in *@*) depths=${tune#*@} tune=${tune%@*} ;; esac
    for t in "" "$tune"; do
        for d in $depths; do
            echo "== tune '$t' d$d" >>"$out/variants.log"
            ISHIZUKI_CUDA_TUNE=$t timeout 200 "$b/ishizuki" bench --device cuda -m $q4 -p 0 -n 128 \
                -d $d -r 2 2>&1 | grep -E "tg128|rror" | tee -a "$out/variants.log"
        done
    done
done
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ "${NCU:-1}" = 1 ] || ncu=
[ -n "$ncu" ] && timeout 90 "$ncu" --clock-control none --metrics gpu__time_duration.sum \
    --launch-skip 300 --launch-count 1000 --print-summary per-kernel \
    "$b/ishizuki" bench -m $q4 --device cuda -p 0 -n 4 -r 1 >"$out/ncu.txt" 2>&1
# the decode attention at depth 4096, past the prefill's 8 chunks x 32 layers x 2 launches
[ -n "$ncu" ] && timeout 120 "$ncu" --clock-control none --metrics gpu__time_duration.sum \
    --kernel-name "regex:attention|rope_kv" --launch-skip 600 --launch-count 300 \
    --print-summary per-kernel "$b/ishizuki" bench -m $q4 --device cuda -p 0 -n 8 -d 4096 -r 1 \
    >"$out/ncu-depth.txt" 2>&1
# bandwidth, occupancy and stall reasons of the decode matmuls (NCU_KERNELS, a regex)
[ -n "$ncu" ] && [ -n "${NCU_KERNELS:-}" ] && timeout 120 "$ncu" --clock-control none \
    --kernel-name "regex:${NCU_KERNELS}" --launch-skip 40 --launch-count 6 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    "$b/ishizuki" bench -m $q4 --device cuda -p 0 -n 4 -r 1 >"$out/ncu-detail.txt" 2>&1
# and the decode attention's at depth 4096
[ -n "$ncu" ] && [ -n "${NCU_KERNELS:-}" ] && timeout 120 "$ncu" --clock-control none \
    --kernel-name "regex:attention" --launch-skip 600 --launch-count 4 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    "$b/ishizuki" bench -m $q4 --device cuda -p 0 -n 8 -d 4096 -r 1 >>"$out/ncu-detail.txt" 2>&1
# with NSYS=1, every kernel's start and end inside the replayed decode graph, PDL overlap included
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ "${NSYS:-0}" = 1 ] && [ -n "$nsys" ]; then
    timeout 120 "$nsys" profile --cuda-graph-trace=node -o /tmp/decode --force-overwrite true \
        "$b/ishizuki" bench -m $q4 --device cuda -p 0 -n 16 -r 1 >/tmp/nsys.log 2>&1
    timeout 120 "$nsys" stats --report cuda_gpu_trace --format csv -o /tmp/decode \
        /tmp/decode.nsys-rep >>/tmp/nsys.log 2>&1
    tail -5 /tmp/nsys.log >"$out/nsys.log"
    xz -c /tmp/decode_cuda_gpu_trace.csv >"$out/nsys-trace.csv.xz"
fi
if [ "${LLAMA:-0}" = 1 ]; then
    wait $llama
    tail -1 /tmp/llama-build.log | tee -a "$out/bench.log"
    grep -q "rc=0" /tmp/llama-build.log || tail -40 /tmp/llama-build.log >>"$out/bench.log"
    lb=/tmp/llama.cpp/build/bin/llama-bench
    for f in $q4 $( [ "${Q8:-0}" = 1 ] && echo $q8 ); do
        timeout 150 $lb -m "$f" -fa 1 -ngl 99 -p 512 -n 128 -r 3 2>&1 | grep "|" | tee -a "$out/bench.log"
    done
    for f in $q4 $( [ "${Q8:-0}" = 1 ] && echo $q8 ); do
        timeout 100 $lb -m "$f" -fa 1 -ngl 99 -p 0 -n 128 -d 4096 -r 2 2>&1 | grep "|" | tee -a "$out/bench.log"
    done
    bench -m $q4 -p 512 -n 128 -r 3
fi
