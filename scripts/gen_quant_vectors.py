#!/usr/bin/env python3
"""Generates crates/core/tests/data/quant_vectors.bin: reference (de)quantisation vectors.

Dequantisation entries: deterministic random blocks of every supported type (random bytes,
with the f16/f32 scale fields overwritten by finite values of varied magnitude) and the f32
output of gguf-py's `gguf.quants.dequantize`. Q8_K, which gguf-py lacks, is computed here with
numpy exactly as ggml's dequantize_row_q8_K (x = d * q in f32).

Quantisation entries: random f32 rows and the bytes of `gguf.quants.quantize` for the types
gguf-py implements with ggml's reference arithmetic.

File layout (little endian):
    b"ISQV", u32 version = 1, u32 entry count, then per entry:
    u8 kind (0 = dequantize, 1 = quantize), 3 zero bytes, u32 ggml type id,
    u32 element count n, u32 byte count m,
    kind 0: m input bytes, then n expected f32
    kind 1: n input f32, then m expected bytes

Run: python3 scripts/gen_quant_vectors.py  (needs numpy and gguf-py 0.19)
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

OUT = Path(__file__).resolve().parent.parent / "crates/core/tests/data/quant_vectors.bin"

# byte offsets of the f16 scale fields inside each block (ggml-common.h)
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
}
# scale magnitudes cycled over blocks: tiny (subnormal f16), typical, large, the f16 maximum
SCALE_MAGNITUDES = [3.0e-6, 1.0e-3, 0.02, 0.7, 13.0, 65504.0]

DEQUANT_BLOCKS = 8


def scale_values(rng: np.random.Generator, n: int) -> np.ndarray:
    mags = np.array([SCALE_MAGNITUDES[i % len(SCALE_MAGNITUDES)] for i in range(n)])
    signs = rng.choice([-1.0, 1.0], size=n)
    jitter = rng.uniform(0.5, 1.0, size=n)
    return (mags * signs * jitter).astype(np.float16)


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    _, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    if qtype == T.Q8_K:
        d = (rng.standard_normal(n_blocks) * 0.01).astype(np.float32)
        blocks[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
        return blocks
    for off in F16_FIELDS[qtype]:
        blocks[:, off:off + 2] = scale_values(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return blocks


def dequant_q8_k(blocks: np.ndarray) -> np.ndarray:
    d = blocks[:, 0:4].copy().view(np.float32)
    qs = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (d * qs).astype(np.float32)


def float_rows(rng: np.random.Generator, qtype: T) -> tuple[np.ndarray, np.ndarray]:
    """Plain (non-block) types: input bytes and expected f32 values."""
    n = 512
    if qtype == T.F32:
        raw = rng.integers(0, 256, size=4 * n, dtype=np.uint8)
        return raw, raw.view(np.float32)
    if qtype == T.BF16:
        raw = rng.integers(0, 256, size=2 * n, dtype=np.uint8)
        return raw, quants.dequantize(raw, qtype).reshape(-1)
    # F16: random finite halves plus zeros, subnormals and infinities; NaN payloads are
    # platform dependent in numpy's conversion, so they are left out
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    bits[:8] = [0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7bff, 0x0400]
    nan = (bits & 0x7c00) == 0x7c00
    nan &= (bits & 0x03ff) != 0
    bits[nan] &= 0xbfff  # clear the top exponent bit: finite
    raw = bits.view(np.uint8)
    return raw, quants.dequantize(raw, qtype).reshape(-1)


def dequant_entry(rng: np.random.Generator, qtype: T) -> bytes:
    if qtype in (T.F32, T.F16, T.BF16):
        raw, expected = float_rows(rng, qtype)
    else:
        blocks = random_blocks(rng, qtype, DEQUANT_BLOCKS)
        raw = blocks.reshape(-1)
        if qtype == T.Q8_K:
            expected = dequant_q8_k(blocks).reshape(-1)
        else:
            expected = quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1)
    expected = np.ascontiguousarray(expected, dtype=np.float32)
    head = struct.pack("<B3xIII", 0, int(qtype), expected.size, raw.size)
    return head + raw.tobytes() + expected.tobytes()


def quant_input(rng: np.random.Generator, n_blocks: int, block: int) -> np.ndarray:
    """Gaussian blocks of varied scale, plus an all-zero block and a constant block."""
    mags = [1.0e-4, 0.01, 1.0, 30.0, 1000.0]
    scales = np.array([mags[i % len(mags)] for i in range(n_blocks)])
    x = rng.standard_normal((n_blocks, block)) * scales[:, None]
    x[1] = 0.0
    x[2] = 0.25
    x[3, 5] = 40.0  # one outlier
    return x.astype(np.float32).reshape(-1)


def quant_entry(rng: np.random.Generator, qtype: T) -> bytes:
    block, _ = GGML_QUANT_SIZES[qtype]
    n_blocks = 12 if block == 32 else 96  # BF16/F16: block of one element
    x = quant_input(rng, n_blocks, 32 if block == 1 else block)
    q = np.ascontiguousarray(quants.quantize(x.reshape(1, -1), qtype)).view(np.uint8).reshape(-1)
    head = struct.pack("<B3xIII", 1, int(qtype), x.size, q.size)
    return head + x.tobytes() + q.tobytes()


DEQUANT_TYPES = [
    T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
    T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K, T.IQ4_NL, T.IQ4_XS,
]
QUANT_TYPES = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


def main() -> None:
    rng = np.random.default_rng(20240607)
    entries = [dequant_entry(rng, t) for t in DEQUANT_TYPES]
    entries += [quant_entry(rng, t) for t in QUANT_TYPES]
    data = b"ISQV" + struct.pack("<II", 1, len(entries)) + b"".join(entries)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data)} bytes, {len(entries)} entries)")


if __name__ == "__main__":
    main()
