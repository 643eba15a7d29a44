#!/usr/bin/env python3
"""Generates the reference fixtures of one real test model (fixtures/README.md has the format):

  fixtures/ref-<name>.json            greedy cases (completion and chat) and passage perplexity
  fixtures/ref-<name>-passage<i>.txt  each passage's text, cut so that it tokenizes to its `ids`
  fixtures/tok-<name>.json            tokenizer cases

The reference is Hugging Face transformers in fp32 on the CPU, loading the GGUF itself
(`AutoModelForCausalLM.from_pretrained(dir, gguf_file=file, dtype=torch.float32)`: the weights
dequantized by gguf-py, the architecture's own implementation, eager attention) and the tokenizer
transformers builds from the GGUF.

Every model scores the same texts: the completion prompts and passages are read from an existing
ref-*.json (`--texts-from`, default fixtures/ref-smollm2-135m.json) and the tokenizer texts from
the matching tok-*.json, plus EXTRA_TOK_TEXTS below (special tokens, digits, CJK, code). The chat
cases are CHAT_CASES below: one user message, optionally a system message first, as
`ishizuki run --chat -p USER [--system SYS]` sends them (crates/cli/tests/e2e.rs); include one
without a system message so a template's default system prompt is exercised.

Greedy generation stops after --max-new tokens or on an end-of-generation id, taken as llama.cpp
and ishizuki take it: the GGUF's eos id plus the ids of the usual end-of-turn spellings.

Run:
  python3 -m venv /work/venv-ref
  /work/venv-ref/bin/pip install torch transformers gguf accelerate numpy sentencepiece protobuf
  /work/venv-ref/bin/python scripts/gen_real_fixtures.py \\
      ~/.cache/ishizuki-test/ishizuki/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\
      qwen2.5-coder-0.5b
Needs: torch (CPU is enough), transformers 5.x, gguf (gguf-py), accelerate, numpy; about 4 bytes
of memory per parameter (a 0.5B model: ~2.5 GB) and a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "fixtures"

MAX_NEW = 48
PASSAGE_TOKENS = 1024

CHAT_CASES = [
    [{"role": "user", "content": "Name three colors."}],
    [
        {"role": "system", "content": "You are a translator. Answer with the translation only."},
        {"role": "user", "content": "Translate 'good morning' to Spanish."},
    ],
    [
        {"role": "system", "content": "You are a helpful coding assistant."},
        {"role": "user", "content": "Write a Python function that returns the square of a number."},
    ],
    [{"role": "user", "content": "What does the len function do in Python? Answer in one sentence."}],
]

# Added to the shared tokenizer texts: the chat and tool markup, fill-in-the-middle tokens,
# digit runs (split one digit a token by some pre-tokenizers), CJK, and spacing around code.
EXTRA_TOK_TEXTS = [
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call><|im_end|>",
    "<|fim_prefix|>def add(a, b):\n<|fim_suffix|>\n    return c<|fim_middle|>",
    "<|file_sep|>src/main.rs\nfn main() {}\n",
    "1234567890 12 345 6789.01",
    "你好，世界！今天天气很好。",
    "日本語のテキストと English の混在",
    "fn main() {\n\tprintln!(\"{}\", x);\n}\n",
    "    \n\n    x = 1\r\n",
    "x  =  [ 1 ,2 ]  ;",
    "'s 't 're 've 'm 'll 'd 'S 'T",
    "don't I'm we'll THEY'RE",
    "https://example.com/a?b=c&d=e#f",
    "\u00a0non-breaking\u2009thin\u3000ideographic spaces",
]

# llama.cpp's end-of-generation spellings (ishizuki's EOG_SPELLINGS in crates/text).
EOG_SPELLINGS = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
]


def eog_ids(tokenizer, model) -> set[int]:
    ids = set()
    eos = model.generation_config.eos_token_id
    for i in eos if isinstance(eos, list) else [eos]:
        if i is not None:
            ids.add(int(i))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    ids.update(vocab[s] for s in EOG_SPELLINGS if s in vocab)
    return ids


@torch.no_grad()
def greedy(model, prompt_ids: list[int], eog: set[int], max_new: int):
    """Greedy continuation with the KV cache; margins = top-1 minus top-2 logit at each step."""
    # transformers 5.25 renamed past_key_values to cache (the old name still works, deprecated)
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(torch.tensor([prompt_ids]), use_cache=True)
    cache, logits = getattr(out, key), out.logits[0, -1]
    ids, margins = [], []
    for _ in range(max_new):
        top = torch.topk(logits.float(), 2)
        token = int(torch.argmax(logits))
        assert token == int(top.indices[0]), "argmax and top-1 disagree (a tie)"
        ids.append(token)
        margins.append(float(top.values[0] - top.values[1]))
        if token in eog:
            break
        out = model(torch.tensor([[token]]), use_cache=True, **{key: cache})
        cache, logits = getattr(out, key), out.logits[0, -1]
    return ids, margins


@torch.no_grad()
def score_passage(model, ids: list[int]):
    """One window: mean NLL of every token after the first, and the argmax at each position."""
    logits = model(torch.tensor([ids])).logits[0, :-1].float()
    target = torch.tensor(ids[1:])
    nll = torch.nn.functional.cross_entropy(logits, target, reduction="mean")
    return float(nll), [int(i) for i in logits.argmax(-1)]


def passage_ids_and_text(tokenizer, text: str):
    """At most PASSAGE_TOKENS ids of `text` and a prefix of `text` that tokenizes to exactly them."""
    ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    if len(ids) <= PASSAGE_TOKENS:
        return ids, text
    n = PASSAGE_TOKENS
    while n > 0:
        cut = tokenizer.decode(ids[:n], skip_special_tokens=True)
        if text.startswith(cut) and tokenizer(cut, add_special_tokens=True)["input_ids"] == ids[:n]:
            return ids[:n], cut
        n -= 1
    raise RuntimeError("no prefix of the passage tokenizes to a prefix of its ids")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf", type=Path, help="the model's GGUF file")
    ap.add_argument("name", help="fixture name stem, e.g. qwen2.5-coder-0.5b")
    ap.add_argument("--texts-from", type=Path, default=FIXTURES / "ref-smollm2-135m.json")
    ap.add_argument("--out", type=Path, default=FIXTURES)
    ap.add_argument("--max-new", type=int, default=MAX_NEW)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    gguf = args.gguf.resolve()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    eog = eog_ids(tokenizer, model)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; eog ids {sorted(eog)}")

    source = json.loads(args.texts_from.read_text(encoding="utf-8"))
    prompts = [c["prompt"] for c in source["cases"] if c["kind"] == "completion"]
    tok_source = args.texts_from.with_name(args.texts_from.name.replace("ref-", "tok-", 1))
    tok_texts = [c["text"] for c in json.loads(tok_source.read_text(encoding="utf-8"))["cases"]]

    cases = []
    for prompt in prompts:
        prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        out, margins = greedy(model, prompt_ids, eog, args.max_new)
        case = {"kind": "completion", "prompt": prompt, "prompt_ids": prompt_ids}
        text = tokenizer.decode(out, skip_special_tokens=False)
        case.update(output_ids=out, output_text=text, margins=margins)
        cases.append(case)
        print(f"completion {prompt[:40]!r}: {len(out)} tokens {text[:60]!r}")
    for messages in CHAT_CASES:
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        out, margins = greedy(model, prompt_ids, eog, args.max_new)
        text = tokenizer.decode(out, skip_special_tokens=True)
        cases.append(
            {
                "kind": "chat",
                "messages": messages,
                "rendered": rendered,
                "prompt_ids": prompt_ids,
                "output_ids": out,
                "output_text": text,
                "margins": margins,
            }
        )
        print(f"chat {messages[-1]['content'][:40]!r}: {len(out)} tokens {text[:60]!r}")

    passages = []
    for i, p in enumerate(source["passages"]):
        ids, cut = passage_ids_and_text(tokenizer, p["text"])
        mean_nll, top1 = score_passage(model, ids)
        passages.append(
            {"text": p["text"], "ids": ids, "mean_nll": mean_nll, "ppl": math.exp(mean_nll), "top1": top1}
        )
        (args.out / f"ref-{args.name}-passage{i}.txt").write_text(cut, encoding="utf-8")
        print(f"passage {i}: {len(ids)} ids, ppl {math.exp(mean_nll):.4f}")

    ref = {"model": gguf.name, "cases": cases, "passages": passages}
    (args.out / f"ref-{args.name}.json").write_text(json.dumps(ref, ensure_ascii=False), encoding="utf-8")

    tok_cases = []
    for text in tok_texts + [t for t in EXTRA_TOK_TEXTS if t not in tok_texts]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        tok_cases.append({"text": text, "ids": ids})
    tok = {
        "model": gguf.name,
        "add_special_tokens": False,
        "note": "ids from the Hugging Face tokenizer that transformers builds from the GGUF; "
        "special-token text is parsed as special tokens",
        "cases": tok_cases,
    }
    (args.out / f"tok-{args.name}.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    print(f"wrote ref-{args.name}.json ({len(cases)} cases, {len(passages)} passages), "
          f"tok-{args.name}.json ({len(tok_cases)} cases)")


if __name__ == "__main__":
    main()
