#!/usr/bin/env python3
"""Generate tiny random-weight GGUF fixtures plus Hugging Face transformers reference logits.

Writes crates/models/tests/fixtures/tiny-<arch>.{gguf,json} for arch in (llama, gemma3).
The GGUF files mirror what llama.cpp's convert_hf_to_gguf.py writes (keys, tensor names,
q/k permutation for llama, +1 norm shift for gemma3); transformers then loads each GGUF back
(undoing those conventions) and runs an fp32 CPU forward that serves as the reference.

Usage: python3 scripts/gen_tiny_fixtures.py [--out crates/models/tests/fixtures]
Needs: torch, transformers (5.24), gguf (gguf-py), numpy.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, LlamaFileType, dequantize, quantize
from gguf.constants import GGML_QUANT_VERSION, TokenType
from transformers import AutoModelForCausalLM

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "crates" / "models" / "tests" / "fixtures"

# Small corpus for training a made-up BPE vocabulary (only so the GGUF has a plausible tokenizer).
CORPUS = """
The quick brown fox jumps over the lazy dog. A tiny model is trained on nothing at all, yet it has
weights, a vocabulary and a config, so that an inference engine can be tested against a reference.
Stones in the garden are polished by water; the river carries sand from the mountains to the sea.
Every layer normalizes its input, attends to earlier positions, and mixes features through a gated
feed forward network. Rotary position embeddings rotate pairs of query and key channels by angles
that grow with the position. Sliding window attention only looks back a fixed number of tokens,
while global layers see the whole prefix. Quantized matrices store blocks of small integers with a
shared scale, which the reference dequantizes exactly before multiplying. Hello world! How are you
today? I am fine, thank you, and you? Numbers like 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 also appear.
"""


@dataclass
class TinySpec:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    rope_theta: float
    rms_eps: float
    context_length: int
    n_tokens: int
    seed: int
    # GGUF tensor name -> quant type for the few matrices stored quantized (all others F32).
    quantized: dict[str, GGMLQuantizationType] = field(default_factory=dict)
    sliding_window: int | None = None
    rope_theta_local: float | None = None
    swa_pattern: int | None = None


LLAMA = TinySpec(
    arch="llama", n_vocab=512, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=16,
    # n_ff=256 so that ffn_down rows (length n_ff) can hold one 256-wide Q4_K super-block.
    n_ff=256, rope_theta=10000.0, rms_eps=1e-5, context_length=256, n_tokens=16, seed=1234,
    quantized={
        "token_embd.weight": GGMLQuantizationType.Q8_0,
        "blk.0.attn_q.weight": GGMLQuantizationType.Q8_0,
        "blk.1.ffn_down.weight": GGMLQuantizationType.Q4_K,
    },
)

GEMMA3 = TinySpec(
    arch="gemma3", n_vocab=512, n_embd=64, n_layer=6, n_head=4, n_head_kv=2, head_dim=32,
    n_ff=128, rope_theta=1_000_000.0, rms_eps=1e-6, context_length=256, n_tokens=20, seed=4321,
    quantized={
        "blk.2.ffn_gate.weight": GGMLQuantizationType.Q8_0,
        "blk.5.attn_output.weight": GGMLQuantizationType.Q8_0,
    },
    sliding_window=4, rope_theta_local=10000.0, swa_pattern=6,
)


# ---------------------------------------------------------------- tokenizer (made up)

def gpt2_byte_alphabet() -> list[tuple[int, str]]:
    """GPT-2 byte-level alphabet as (byte, char) in GPT-2's vocabulary order (printable bytes first)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    others = [b for b in range(256) if b not in printable]
    return [(b, chr(b)) for b in printable] + [(b, chr(256 + n)) for n, b in enumerate(others)]


def train_bpe(words: list[list[str]], n_merges: int) -> list[tuple[str, str]]:
    """Greedy BPE: repeatedly merge the most frequent adjacent pair (ties broken lexically)."""
    merges: list[tuple[str, str]] = []
    words = [w[:] for w in words]
    while len(merges) < n_merges:
        pairs = Counter((a, b) for w in words for a, b in zip(w, w[1:]))
        if not pairs:
            raise ValueError("BPE corpus too small for the requested vocabulary")
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == best:
                    w[i:i + 2] = [w[i] + w[i + 1]]
                i += 1
    return merges


def gpt2_vocab(n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = gpt2_byte_alphabet()
    byte_char = dict(alphabet)
    pieces = re.findall(r" ?\w+| ?[^\w\s]+|\s+", CORPUS.strip())
    words = [[byte_char[b] for b in p.encode()] for p in pieces]
    merges = train_bpe(words, n_vocab - len(specials) - len(alphabet))
    tokens = specials + [c for _, c in alphabet] + [a + b for a, b in merges]
    types = [TokenType.CONTROL] * len(specials) + [TokenType.NORMAL] * (len(tokens) - len(specials))
    return tokens, [int(t) for t in types], [f"{a} {b}" for a, b in merges]


def spm_vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    words = [list("▁" + w) for w in CORPUS.split()]
    chars = sorted({c for w in words for c in w})
    n_merges = n_vocab - len(specials) - len(byte_tokens) - len(chars)
    merges = train_bpe(words, n_merges)
    pieces = chars + [a + b for a, b in merges]
    tokens = specials + byte_tokens + pieces
    scores = [-1000.0] * len(specials) + [0.0] * len(byte_tokens) + [-float(i) for i in range(len(pieces))]
    types = [TokenType.CONTROL] * len(specials) + [TokenType.BYTE] * len(byte_tokens)
    types += [TokenType.NORMAL] * len(pieces)
    return tokens, scores, [int(t) for t in types]


# ---------------------------------------------------------------- weights

def hf_to_gguf_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half rows -> interleaved (rope NORM) rows."""
    rows_per_head = weights.shape[0] // n_head
    return (weights.reshape(n_head, 2, rows_per_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def random_weights(spec: TinySpec) -> dict[str, np.ndarray]:
    """HF-convention weights keyed by GGUF tensor name; matrices are [out, in] (GGUF ne = [in, out])."""
    rng = np.random.default_rng(spec.seed)
    is_gemma = spec.arch == "gemma3"

    def mat(n_out: int, n_in: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((n_out, n_in)) * gain / math.sqrt(n_in)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        # gemma multiplies by (1 + w): random around 0; llama multiplies by w: random around 1.
        centre = 0.0 if is_gemma else 1.0
        return (centre + 0.25 * rng.standard_normal(n)).astype(np.float32)

    q_dim, kv_dim = spec.n_head * spec.head_dim, spec.n_head_kv * spec.head_dim
    embd_std = 0.15 if is_gemma else 0.5
    tensors = {"token_embd.weight": (embd_std * rng.standard_normal((spec.n_vocab, spec.n_embd))).astype(np.float32)}
    for il in range(spec.n_layer):
        blk = f"blk.{il}."
        tensors[blk + "attn_norm.weight"] = norm(spec.n_embd)
        tensors[blk + "attn_q.weight"] = mat(q_dim, spec.n_embd, 2.0)
        tensors[blk + "attn_k.weight"] = mat(kv_dim, spec.n_embd, 2.0)
        tensors[blk + "attn_v.weight"] = mat(kv_dim, spec.n_embd)
        tensors[blk + "attn_output.weight"] = mat(spec.n_embd, q_dim)
        if is_gemma:
            tensors[blk + "attn_q_norm.weight"] = norm(spec.head_dim)
            tensors[blk + "attn_k_norm.weight"] = norm(spec.head_dim)
            tensors[blk + "post_attention_norm.weight"] = norm(spec.n_embd)
            tensors[blk + "post_ffw_norm.weight"] = norm(spec.n_embd)
        tensors[blk + "ffn_norm.weight"] = norm(spec.n_embd)
        tensors[blk + "ffn_gate.weight"] = mat(spec.n_ff, spec.n_embd)
        tensors[blk + "ffn_up.weight"] = mat(spec.n_ff, spec.n_embd)
        tensors[blk + "ffn_down.weight"] = mat(spec.n_embd, spec.n_ff)
    tensors["output_norm.weight"] = norm(spec.n_embd)
    if not is_gemma:
        tensors["output.weight"] = mat(spec.n_vocab, spec.n_embd, 0.8)
    return tensors


def to_gguf_convention(spec: TinySpec, name: str, weights: np.ndarray) -> np.ndarray:
    """Apply what convert_hf_to_gguf.py does to a tensor before writing it."""
    if spec.arch == "llama" and name.endswith("attn_q.weight"):
        return hf_to_gguf_permute(weights, spec.n_head)
    if spec.arch == "llama" and name.endswith("attn_k.weight"):
        return hf_to_gguf_permute(weights, spec.n_head_kv)
    if spec.arch == "gemma3" and name.endswith("norm.weight"):
        return weights + np.float32(1.0)  # Gemma3Model.norm_shift: GGUF stores (1 + w)
    return weights


# ---------------------------------------------------------------- Q4_K packing (gguf-py has no Q4_K quantizer)

QK_K = 256


def quantize_q4_k(weights: np.ndarray) -> np.ndarray:
    """Pack [rows, n] (n % 256 == 0) into Q4_K blocks: x ~= d*sc*q - dmin*m per 32-wide sub-block."""
    rows, n = weights.shape
    if n % QK_K:
        raise ValueError(f"Q4_K needs rows of a multiple of {QK_K}, got {n}")
    blocks = weights.reshape(-1, 8, 32).astype(np.float32)
    sub_min = np.minimum(blocks.min(axis=2), 0.0)  # [nb, 8], <= 0
    sub_scale = (blocks.max(axis=2) - sub_min) / 15.0  # [nb, 8]
    d = (sub_scale.max(axis=1) / 63.0).astype(np.float16)
    dmin = ((-sub_min).max(axis=1) / 63.0).astype(np.float16)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.clip(np.rint(np.divide(sub_scale, d32, out=np.zeros_like(sub_scale), where=d32 > 0)), 0, 63)
    m = np.clip(np.rint(np.divide(-sub_min, dmin32, out=np.zeros_like(sub_min), where=dmin32 > 0)), 0, 63)
    step = (d32 * sc)[:, :, None]
    offset = (dmin32 * m)[:, :, None]
    q = np.clip(np.rint(np.divide(blocks + offset, step, out=np.zeros_like(blocks), where=step > 0)), 0, 15)
    sc, m, q = sc.astype(np.uint8), m.astype(np.uint8), q.astype(np.uint8)
    return _pack_q4_k(d, dmin, sc, m, q).reshape(rows, -1)


def _pack_q4_k(d, dmin, sc, m, q) -> np.ndarray:
    nb = d.shape[0]
    scales = np.zeros((nb, 12), dtype=np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    # qs: 4 chunks of 32 bytes; chunk c holds sub-block 2c in low nibbles, 2c+1 in high nibbles.
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)
    return np.concatenate(
        [d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2), scales, qs], axis=1)


def quantize_tensor(weights: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    packed = quantize_q4_k(weights) if qtype == GGMLQuantizationType.Q4_K else quantize(weights, qtype)
    restored = dequantize(packed, qtype)
    rel_err = np.abs(restored - weights).max() / np.abs(weights).max()
    if restored.shape != weights.shape or rel_err > 0.1:
        raise ValueError(f"{qtype.name} round trip failed: shape {restored.shape}, rel err {rel_err}")
    return packed


# ---------------------------------------------------------------- GGUF writing

def write_metadata(writer: GGUFWriter, spec: TinySpec) -> None:
    """Keys as convert_hf_to_gguf.py writes them (compare the real SmolLM2 / gemma-3 GGUFs)."""
    writer.add_type("model")
    writer.add_name(f"Ishizuki Tiny Random {spec.arch}")
    writer.add_size_label("tiny")
    writer.add_license("apache-2.0")
    if spec.arch == "llama":
        write_llama_hparams(writer, spec)
    else:
        write_gemma3_hparams(writer, spec)
    write_tokenizer(writer, spec)
    writer.add_quantization_version(GGML_QUANT_VERSION)


def write_llama_hparams(writer: GGUFWriter, spec: TinySpec) -> None:
    writer.add_block_count(spec.n_layer)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_freq_base(spec.rope_theta)
    writer.add_layer_norm_rms_eps(spec.rms_eps)
    writer.add_file_type(LlamaFileType.ALL_F32)
    writer.add_vocab_size(spec.n_vocab)
    writer.add_rope_dimension_count(spec.head_dim)


def write_gemma3_hparams(writer: GGUFWriter, spec: TinySpec) -> None:
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_layer_norm_rms_eps(spec.rms_eps)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_file_type(LlamaFileType.ALL_F32)
    writer.add_rope_freq_base(spec.rope_theta)
    writer.add_sliding_window(spec.sliding_window)
    writer.add_head_count_kv(spec.n_head_kv)


def write_tokenizer(writer: GGUFWriter, spec: TinySpec) -> None:
    if spec.arch == "llama":
        tokens, types, merges = gpt2_vocab(spec.n_vocab)
        writer.add_add_space_prefix(False)
        writer.add_add_bos_token(False)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("smollm")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_unk_token_id(0)
        writer.add_pad_token_id(2)
    else:
        tokens, scores, types = spm_vocab(spec.n_vocab)
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_bos_token_id(2)
        writer.add_eos_token_id(1)
        writer.add_unk_token_id(3)
        writer.add_pad_token_id(0)
        writer.add_add_bos_token(True)
        writer.add_add_sep_token(False)
        writer.add_add_eos_token(False)
        writer.add_add_space_prefix(False)
    if len(tokens) != spec.n_vocab:
        raise ValueError(f"made-up vocab has {len(tokens)} tokens, want {spec.n_vocab}")


def write_gguf(spec: TinySpec, path: Path) -> dict[str, str]:
    """Write the GGUF; return {tensor name: stored type name}."""
    writer = GGUFWriter(str(path), spec.arch)
    write_metadata(writer, spec)
    stored: dict[str, str] = {}
    for name, weights in random_weights(spec).items():
        data = to_gguf_convention(spec, name, weights)
        qtype = spec.quantized.get(name)
        if qtype is None:
            writer.add_tensor(name, data)
            stored[name] = "F32"
        else:
            writer.add_tensor(name, quantize_tensor(data, qtype), raw_dtype=qtype)
            stored[name] = qtype.name
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    unknown = set(spec.quantized) - set(stored)
    if unknown:
        raise ValueError(f"quantized tensors not in the model: {sorted(unknown)}")
    return stored


# ---------------------------------------------------------------- transformers reference

def load_reference_model(spec: TinySpec, gguf_path: Path, **config_overrides) -> torch.nn.Module:
    if spec.arch == "gemma3":
        # The GGUF has no query_pre_attn_scalar key and transformers defaults it to 256; llama.cpp
        # scales by 1/sqrt(key_length) for gemma3 (all sizes except 27B), so match that here.
        config_overrides.setdefault("query_pre_attn_scalar", spec.head_dim)
    model, info = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32,
        attn_implementation="eager", output_loading_info=True, **config_overrides)
    if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
        raise ValueError(f"transformers did not load every weight: {info}")
    return model.eval()


def expected_config(spec: TinySpec) -> dict[str, object]:
    common = {
        "hidden_size": spec.n_embd, "num_hidden_layers": spec.n_layer, "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv, "head_dim": spec.head_dim, "intermediate_size": spec.n_ff,
        "vocab_size": spec.n_vocab, "max_position_embeddings": spec.context_length,
    }
    if spec.arch == "llama":
        return {**common, "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
                "mlp_bias": False}
    layer_types = ["full_attention" if il % spec.swa_pattern == spec.swa_pattern - 1 else "sliding_attention"
                   for il in range(spec.n_layer)]
    return {**common, "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh",
            "sliding_window": spec.sliding_window, "layer_types": layer_types,
            "query_pre_attn_scalar": spec.head_dim, "attn_logit_softcapping": None,
            "final_logit_softcapping": None, "attention_bias": False, "use_bidirectional_attention": False}


def check_config(spec: TinySpec, config) -> None:
    """Fail unless transformers picked up every value the GGUF (plus overrides) was meant to convey."""
    print(f"[{spec.arch}] transformers config:\n{config}")
    for key, want in expected_config(spec).items():
        got = getattr(config, key)
        if got != want:
            raise ValueError(f"[{spec.arch}] config.{key} = {got!r}, want {want!r}")
    if not math.isclose(config.rms_norm_eps, spec.rms_eps, rel_tol=1e-6):
        raise ValueError(f"[{spec.arch}] rms_norm_eps {config.rms_norm_eps} != {spec.rms_eps}")
    rope = config.rope_parameters
    if spec.arch == "llama":
        thetas = {"global": (rope["rope_theta"], spec.rope_theta)}
        rope_types = [rope["rope_type"]]
    else:
        thetas = {"global": (rope["full_attention"]["rope_theta"], spec.rope_theta),
                  "local": (rope["sliding_attention"]["rope_theta"], spec.rope_theta_local)}
        rope_types = [rope["full_attention"]["rope_type"], rope["sliding_attention"]["rope_type"]]
    for which, (got, want) in thetas.items():
        if not math.isclose(got, want):
            raise ValueError(f"[{spec.arch}] {which} rope theta {got} != {want}")
    if any(t != "default" for t in rope_types):
        raise ValueError(f"[{spec.arch}] unexpected rope scaling {rope}")


def hf_param_name(spec: TinySpec, gguf_name: str) -> str:
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    if gguf_name in fixed:
        return fixed[gguf_name]
    _, il, kind, _ = gguf_name.split(".")
    per_layer = {
        "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
        "attn_k_norm": "self_attn.k_norm", "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm" if spec.arch == "gemma3" else "post_attention_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    return f"model.layers.{il}.{per_layer[kind]}.weight"


def check_weights_round_trip(spec: TinySpec, gguf_path: Path, model: torch.nn.Module) -> None:
    """Every GGUF tensor (dequantized) must equal the converter convention applied to transformers' param."""
    params = dict(model.named_parameters())
    for tensor in GGUFReader(str(gguf_path)).tensors:
        stored = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        hf = params[hf_param_name(spec, tensor.name)].detach().numpy()
        converted = to_gguf_convention(spec, tensor.name, hf)
        if converted.shape != stored.shape or not np.allclose(converted, stored, rtol=1e-6, atol=1e-7):
            raise ValueError(f"[{spec.arch}] {tensor.name}: transformers weight does not round-trip")


def run_forward(model: torch.nn.Module, tokens: list[int]) -> dict[str, torch.Tensor]:
    """Logits for every position plus the residual stream at each layer boundary (batch dim dropped)."""
    captured: dict[str, list[torch.Tensor]] = {"embedding": [], "layers": []}

    def grab(key):
        return lambda _module, _inputs, output: captured[key].append(
            (output[0] if isinstance(output, tuple) else output)[0])

    hooks = [model.model.embed_tokens.register_forward_hook(grab("embedding"))]
    hooks += [layer.register_forward_hook(grab("layers")) for layer in model.model.layers]
    try:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tokens]), use_cache=False).logits[0]
            output_norm = model.model.norm(captured["layers"][-1])
    finally:
        for hook in hooks:
            hook.remove()
    return {"logits": logits, "embedding": captured["embedding"][0], "layers": captured["layers"],
            "output_norm": output_norm}


def check_causality(spec: TinySpec, model: torch.nn.Module, tokens: list[int], logits: torch.Tensor) -> None:
    """Running on a prefix must reproduce the first rows of the full-sequence logits."""
    for k in (1, spec.sliding_window or 3, len(tokens) // 2, len(tokens) - 1):
        prefix = run_forward(model, tokens[:k])["logits"]
        diff = (prefix - logits[:k]).abs().max().item()
        if diff > 1e-5:
            raise ValueError(f"[{spec.arch}] prefix {k} logits differ by {diff}")


def check_window_matters(spec: TinySpec, gguf_path: Path, tokens: list[int], logits: torch.Tensor) -> None:
    """The sliding window must change the result, else the fixture would not test it."""
    unwindowed = load_reference_model(spec, gguf_path, sliding_window=len(tokens) + 1)
    full = run_forward(unwindowed, tokens)["logits"]
    window = spec.sliding_window
    same_rows = (full[:window] - logits[:window]).abs().max().item()
    later_rows = (full[window:] - logits[window:]).abs().max().item()
    print(f"[{spec.arch}] no-window vs window: rows < window differ {same_rows:.2e}, later rows {later_rows:.2e}")
    if same_rows > 1e-5 or later_rows < 1e-2:
        raise ValueError(f"[{spec.arch}] sliding window does not behave as expected")



# ---------------------------------------------------------------- numpy cross-check (llama.cpp semantics)
# A float64 forward that reads the GGUF directly and follows the conventions documented in the
# fixtures README (what llama.cpp does). Agreement with transformers proves those conventions.

def np_rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def np_rope(x: np.ndarray, theta: float, mode: str) -> np.ndarray:
    """x: [T, heads, D]. NORM rotates pairs (2i, 2i+1); NEOX rotates pairs (i, i + D/2)."""
    n_tokens, _, dim = x.shape
    angles = np.arange(n_tokens)[:, None] * theta ** (-np.arange(0, dim, 2) / dim)[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    first, second = (np.s_[..., 0::2], np.s_[..., 1::2]) if mode == "norm" else (
        np.s_[..., : dim // 2], np.s_[..., dim // 2:])
    out = np.empty_like(x)
    out[first] = x[first] * cos - x[second] * sin
    out[second] = x[first] * sin + x[second] * cos
    return out


def np_attention(q, k, v, scale: float, window: int | None) -> np.ndarray:
    """q: [T, H, D], k/v: [T, KV, D]; query i sees key j iff j <= i and (no window or i - j < window)."""
    n_tokens, n_head, dim = q.shape
    group = n_head // k.shape[1]
    i, j = np.meshgrid(np.arange(n_tokens), np.arange(n_tokens), indexing="ij")
    hidden = (j > i) | ((i - j) >= window if window is not None else False)
    out = np.empty_like(q)
    for head in range(n_head):
        scores = q[:, head] @ k[:, head // group].T * scale
        scores[hidden] = -np.inf
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        out[:, head] = (probs / probs.sum(-1, keepdims=True)) @ v[:, head // group]
    return out.reshape(n_tokens, n_head * dim)


def np_forward(config: dict, tensors: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    gemma, eps, n_tokens = config["arch"] == "gemma3", config["rms_eps"], len(tokens)
    x = tensors["token_embd.weight"][tokens] * config["embedding_scale"]
    for il in range(config["n_layer"]):
        w = {k[len(f"blk.{il}."):]: v for k, v in tensors.items() if k.startswith(f"blk.{il}.")}
        h = np_rms_norm(x, w["attn_norm.weight"], eps)
        q = (h @ w["attn_q.weight"].T).reshape(n_tokens, config["n_head"], -1)
        k = (h @ w["attn_k.weight"].T).reshape(n_tokens, config["n_head_kv"], -1)
        v = (h @ w["attn_v.weight"].T).reshape(n_tokens, config["n_head_kv"], -1)
        local = gemma and il not in config["full_attention_layers"]
        if gemma:
            q, k = np_rms_norm(q, w["attn_q_norm.weight"], eps), np_rms_norm(k, w["attn_k_norm.weight"], eps)
        theta = config["rope_theta_local"] if local else config["rope_theta"]
        q, k = np_rope(q, theta, config["rope_mode"]), np_rope(k, theta, config["rope_mode"])
        window = config["sliding_window"] if local else None
        attn = np_attention(q, k, v, config["attention_scale"], window) @ w["attn_output.weight"].T
        x = x + (np_rms_norm(attn, w["post_attention_norm.weight"], eps) if gemma else attn)
        h = np_rms_norm(x, w["ffn_norm.weight"], eps)
        gate, up = h @ w["ffn_gate.weight"].T, h @ w["ffn_up.weight"].T
        if gemma:
            act = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)))
        else:
            act = gate / (1 + np.exp(-gate))
        ffn = (act * up) @ w["ffn_down.weight"].T
        x = x + (np_rms_norm(ffn, w["post_ffw_norm.weight"], eps) if gemma else ffn)
    out_weight = tensors["token_embd.weight" if config["tied_embeddings"] else "output.weight"]
    return np_rms_norm(x, tensors["output_norm.weight"], eps) @ out_weight.T


def check_numpy_agrees(spec: TinySpec, gguf_path: Path, tokens: list[int], logits: torch.Tensor) -> None:
    tensors = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64)
               for t in GGUFReader(str(gguf_path)).tensors}
    diff = np.abs(np_forward(decoder_config(spec), tensors, tokens) - logits.double().numpy()).max()
    print(f"[{spec.arch}] numpy llama.cpp-semantics forward vs transformers: max |diff| {diff:.2e}")
    if diff > 1e-4:
        raise ValueError(f"[{spec.arch}] numpy reference disagrees with transformers by {diff}")

# ---------------------------------------------------------------- fixture JSON

def decoder_config(spec: TinySpec) -> dict[str, object]:
    """The numbers and conventions a decoder must use (what llama.cpp derives from this GGUF)."""
    config: dict[str, object] = {
        "arch": spec.arch, "n_vocab": spec.n_vocab, "n_embd": spec.n_embd, "n_layer": spec.n_layer,
        "n_head": spec.n_head, "n_head_kv": spec.n_head_kv, "head_dim": spec.head_dim, "n_ff": spec.n_ff,
        "context_length": spec.context_length, "rms_eps": spec.rms_eps, "rope_theta": spec.rope_theta,
        "attention_scale": 1.0 / math.sqrt(spec.head_dim),
    }
    if spec.arch == "llama":
        config.update({"rope_mode": "norm", "activation": "silu", "norm_weight": "x_normed * w",
                       "tied_embeddings": False, "embedding_scale": 1.0})
    else:
        full_layers = [il for il in range(spec.n_layer) if il % spec.swa_pattern == spec.swa_pattern - 1]
        config.update({
            "rope_mode": "neox", "activation": "gelu_tanh", "tied_embeddings": True,
            "norm_weight": "x_normed * w_gguf (GGUF already stores 1 + w_hf)",
            "embedding_scale": math.sqrt(spec.n_embd), "qk_norm": True, "post_norms": True,
            "sliding_window": spec.sliding_window, "rope_theta_local": spec.rope_theta_local,
            "swa_pattern": spec.swa_pattern, "full_attention_layers": full_layers,
            "attn_logit_softcap": None, "final_logit_softcap": None,
        })
    return config


def round_sig(values: torch.Tensor, digits: int = 7) -> list:
    if values.dim() > 1:
        return [round_sig(row, digits) for row in values]
    return [float(f"{v:.{digits}g}") for v in values.tolist()]


def fixture_tokens(spec: TinySpec) -> list[int]:
    rng = np.random.default_rng(spec.seed + 1)
    tokens = rng.integers(0, spec.n_vocab, size=spec.n_tokens).tolist()
    if spec.arch == "gemma3":
        tokens[0] = 2  # <bos>, as llama.cpp adds for gemma (add_bos_token = true)
    return tokens


def generate(spec: TinySpec, out_dir: Path) -> None:
    gguf_path = out_dir / f"tiny-{spec.arch}.gguf"
    stored_types = write_gguf(spec, gguf_path)
    model = load_reference_model(spec, gguf_path)
    check_config(spec, model.config)
    check_weights_round_trip(spec, gguf_path, model)
    tokens = fixture_tokens(spec)
    result = run_forward(model, tokens)
    check_causality(spec, model, tokens, result["logits"])
    if spec.sliding_window is not None:
        check_window_matters(spec, gguf_path, tokens, result["logits"])
    check_numpy_agrees(spec, gguf_path, tokens, result["logits"])
    fixture = {
        "gguf": gguf_path.name,
        "generator": "scripts/gen_tiny_fixtures.py",
        "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, fp32 CPU, eager attention",
        "config": decoder_config(spec),
        "tensor_types": stored_types,
        "tokens": tokens,
        "logits": round_sig(result["logits"]),
        "embedding_last": round_sig(result["embedding"][-1]),
        "hidden_last": [round_sig(h[-1]) for h in result["layers"]],
        "output_norm_last": round_sig(result["output_norm"][-1]),
    }
    json_path = out_dir / f"tiny-{spec.arch}.json"
    json_path.write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
    logits = result["logits"]
    print(f"[{spec.arch}] wrote {gguf_path} ({gguf_path.stat().st_size} B) and {json_path} "
          f"({json_path.stat().st_size} B); logits std {logits.std():.3f}, max |x| {logits.abs().max():.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for spec in (LLAMA, GEMMA3):
        generate(spec, args.out)


if __name__ == "__main__":
    main()
