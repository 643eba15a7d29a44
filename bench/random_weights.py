#!/usr/bin/env python3
"""Random-weight GGUF twins of real models, for speed benchmarks.

Real model files (100-300 MB) are too big to copy to a remote benchmark
machine.  This tool splits a GGUF into a small "skeleton" -- the header bytes
verbatim (metadata, tokenizer, tensor infos) plus a JSON layout -- and later
re-inflates it into a file with exactly the same metadata, tensor names,
types, shapes, offsets and size, but random, numerically sane weights
(quantized payloads are random bytes with every f16 scale/min forced to a
small positive normal value, 1e-3..1e-2, 1e-4..1e-3 for K-quants and IQ4_XS;
float tensors ~N(0, 0.02), norms ~N(1, 0.05): no inf/NaN/denormals).

  random_weights.py skeleton MODEL.gguf PREFIX     -> PREFIX.head, PREFIX.json
  random_weights.py fill PREFIX OUT.gguf [--seed N] (needs numpy)
  random_weights.py like MODEL.gguf OUT.gguf [--seed N]  (skeleton + fill)

`skeleton` is pure stdlib; `fill` needs only numpy (not gguf-py).
JSON: {"data_start", "file_size", "tensors": [{"name", "type", "offset",
"nbytes"}]}, with offset relative to data_start as in the GGUF tensor infos.
"""
import argparse
import json
import mmap
import os
import struct
import sys
import tempfile

# ggml type id -> (name, block size in elements, block size in bytes)
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    20: ("IQ4_NL", 32, 18), 23: ("IQ4_XS", 256, 136), 30: ("BF16", 1, 2),
}
# byte offsets of the f16 scale/min fields within one block
F16_FIELDS = {2: [0], 6: [0], 8: [0], 20: [0], 23: [0], 3: [0, 2], 7: [0, 2],
              12: [0, 2], 13: [0, 2], 9: [0, 2], 14: [208], 11: [108], 10: [80, 82]}
F32_FIELDS = {15: [0]}  # Q8_K keeps its scale as f32
# super-block types multiply d by 6-8 bit sub-scales: smaller d, still normal f16
SCALE_RANGE = {t: (1e-4, 1e-3) for t in (10, 11, 12, 13, 14, 15, 23)}
# GGUF metadata value type -> struct format of a scalar (8 = string, 9 = array)
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
           10: "Q", 11: "q", 12: "d"}


class Cursor:
    """Little-endian reader over a byte buffer."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt):
        vals = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return vals[0] if len(vals) == 1 else vals

    def string(self):
        n = self.take("Q")
        self.pos += n
        return bytes(self.buf[self.pos - n:self.pos]).decode("utf-8", "replace")

    def value(self, vtype):
        """Reads one metadata value; arrays of scalars are skipped (None)."""
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype, count = self.take("I"), self.take("Q")
            if etype in SCALARS:
                self.pos += count * struct.calcsize(SCALARS[etype])
            else:
                for _ in range(count):
                    self.value(etype)
            return None
        if vtype not in SCALARS:
            sys.exit(f"unknown GGUF metadata value type {vtype}")
        return self.take(SCALARS[vtype])


def tensor_nbytes(name, ttype, dims):
    if ttype not in GGML_TYPES:
        sys.exit(f"tensor {name}: ggml type {ttype} not supported "
                 f"(supported: {', '.join(t[0] for t in GGML_TYPES.values())})")
    tname, blk, tsize = GGML_TYPES[ttype]
    if dims[0] % blk:
        sys.exit(f"tensor {name}: row of {dims[0]} not a multiple of {tname} block {blk}")
    n = 1
    for d in dims:
        n *= d
    return n // blk * tsize


def parse_gguf(path):
    """Returns (data_start, file_size, tensors) of a GGUF v2/v3 file."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        c = Cursor(mm)
        magic, version, n_tensors, n_kv = c.take("4sIQQ")
        if magic != b"GGUF" or version not in (2, 3):
            sys.exit(f"{path}: not a GGUF v2/v3 file (magic {magic!r}, version {version})")
        alignment = 32
        for _ in range(n_kv):
            key = c.string()
            val = c.value(c.take("I"))
            if key == "general.alignment":
                alignment = int(val)
        tensors = []
        for _ in range(n_tensors):
            name = c.string()
            dims = [c.take("Q") for _ in range(c.take("I"))]
            ttype, offset = c.take("IQ")
            tensors.append({"name": name, "type": ttype, "offset": offset,
                            "nbytes": tensor_nbytes(name, ttype, dims)})
        data_start = -(-c.pos // alignment) * alignment
        return data_start, len(mm), tensors


def check_layout(data_start, file_size, tensors):
    end = data_start
    for t in sorted(tensors, key=lambda t: t["offset"]):
        if data_start + t["offset"] < end:
            sys.exit(f"tensor {t['name']} overlaps the previous one")
        end = data_start + t["offset"] + t["nbytes"]
    if end > file_size:
        sys.exit(f"tensors end at {end}, past the file size {file_size}")


def skeleton(model, prefix):
    data_start, file_size, tensors = parse_gguf(model)
    check_layout(data_start, file_size, tensors)
    with open(model, "rb") as f:
        head = f.read(data_start)
    with open(prefix + ".head", "wb") as f:
        f.write(head)
    with open(prefix + ".json", "w") as f:
        json.dump({"data_start": data_start, "file_size": file_size,
                   "tensors": tensors}, f, indent=1)
    print(f"{model}: {len(tensors)} tensors, header {data_start} B, "
          f"file {file_size} B -> {prefix}.head, {prefix}.json")


def float_data(np, rng, name, ttype, n):
    mean, std = (1.0, 0.05) if name.endswith("norm.weight") else (0.0, 0.02)
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(std) + np.float32(mean)
    if ttype == 0:
        return x
    if ttype == 1:
        return x.astype(np.float16)
    return (x.view(np.uint32) >> 16).astype(np.uint16)  # BF16, truncated


def quant_data(np, rng, ttype, nbytes):
    tsize = GGML_TYPES[ttype][2]
    blocks = np.frombuffer(rng.bytes(nbytes), np.uint8).reshape(-1, tsize).copy()
    for fields, dtype in ((F16_FIELDS, np.float16), (F32_FIELDS, np.float32)):
        width = np.dtype(dtype).itemsize
        for off in fields.get(ttype, []):
            lo, hi = SCALE_RANGE.get(ttype, (1e-3, 1e-2))
            scale = rng.uniform(lo, hi, len(blocks)).astype(dtype)
            blocks[:, off:off + width] = scale.view(np.uint8).reshape(-1, width)
    return blocks


def fill(prefix, out, seed):
    import numpy as np
    with open(prefix + ".json") as f:
        lay = json.load(f)
    with open(prefix + ".head", "rb") as f:
        head = f.read()
    if len(head) != lay["data_start"]:
        sys.exit(f"{prefix}.head is {len(head)} B, layout says {lay['data_start']}")
    rng = np.random.default_rng(seed)
    with open(out, "wb") as f:
        f.write(head)
        for t in sorted(lay["tensors"], key=lambda t: t["offset"]):
            f.write(b"\0" * (lay["data_start"] + t["offset"] - f.tell()))
            if GGML_TYPES[t["type"]][1] == 1:
                n = t["nbytes"] // GGML_TYPES[t["type"]][2]
                data = float_data(np, rng, t["name"], t["type"], n)
            else:
                data = quant_data(np, rng, t["type"], t["nbytes"])
            assert data.nbytes == t["nbytes"], t["name"]
            f.write(data.tobytes())
        f.write(b"\0" * (lay["file_size"] - f.tell()))
    print(f"wrote {out}: {os.path.getsize(out)} B, {len(lay['tensors'])} tensors, seed {seed}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("skeleton", help="MODEL.gguf -> PREFIX.head + PREFIX.json")
    s.add_argument("model"), s.add_argument("prefix")
    s = sub.add_parser("fill", help="PREFIX.head + PREFIX.json -> random OUT.gguf")
    s.add_argument("prefix"), s.add_argument("out")
    s.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("like", help="MODEL.gguf -> random OUT.gguf (skeleton + fill)")
    s.add_argument("model"), s.add_argument("out")
    s.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "skeleton":
        skeleton(a.model, a.prefix)
    elif a.cmd == "fill":
        fill(a.prefix, a.out, a.seed)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            skeleton(a.model, os.path.join(tmp, "model"))
            fill(os.path.join(tmp, "model"), a.out, a.seed)


if __name__ == "__main__":
    main()
