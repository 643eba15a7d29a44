#!/usr/bin/env bash
# Carries files larger than one device call's carry (64 MiB) to the GPU host in parts, one call
# each, while the machine stays warm; there they are joined and checked against their sha256.
#   bench/cuda-carry.sh split FILE...   here: .device/parts/NAME.NN (PART_MB, default 56 MiB)
#                                       and .device/parts/SHA256SUMS; prints each call's carry
#   bench/cuda-carry.sh take            there, every call: moves the carried parts to $STORE
#   bench/cuda-carry.sh join            there, last: joins $STORE/parts into $STORE, checks sums
# STORE defaults to /tmp/models, outside the working tree that each call refreshes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
parts=$root/.device/parts
store=${STORE:-/tmp/models}
case ${1:-} in
split)
    shift
    rm -rf "$parts" && mkdir -p "$parts"
    for f in "$@"; do
        name=$(basename "$f")
        split -d -a 2 -b "${PART_MB:-56}M" "$f" "$parts/$name."
        (cd "$(dirname "$f")" && sha256sum "$name") >>"$parts/SHA256SUMS"
    done
    # the sums ride with the first call; each call after carries one part
    first=1
    for p in "$parts"/*.[0-9][0-9]; do
        rel=.device/parts/$(basename "$p")
        if [ $first = 1 ]; then
            echo "carry: [\".device/parts/SHA256SUMS\", \"$rel\"]"
            first=0
        else
            echo "carry: [\"$rel\"]"
        fi
    done
    ;;
take)
    mkdir -p "$store/parts"
    for p in "$parts"/*; do
        [ -e "$p" ] && mv -f "$p" "$store/parts/"
    done
    ls "$store/parts" | tr '\n' ' '
    echo
    ;;
join)
    cd "$store"
    while read -r _ name; do
        cat "parts/$name".[0-9][0-9] >"$name"
    done <parts/SHA256SUMS
    sha256sum -c parts/SHA256SUMS && rm -f parts/*.[0-9][0-9]
    ;;
*)
    echo "usage: $0 split FILE... | take | join" >&2
    exit 2
    ;;
esac
