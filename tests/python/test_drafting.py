"""Drafting is on by default and never changes a greedy reply: 20 prompts (code edits, prose,
lists, multilingual, a json_schema request, a forced tool call) on every API, each answered with
drafting on and with the request's `"draft": false`, token for token the same text. The usage
extension reports what drafting did, and /metrics counts it."""

import inspect
import json
import textwrap

import pytest

from test_tools import ANTHROPIC_TOOLS, CHAT_TOOLS, RESPONSES_TOOLS

OFF = {"draft": False}
MAX_TOKENS = 96


def _code(fn) -> str:
    return textwrap.dedent(inspect.getsource(fn))


def _edit(fn, old: str, new: str) -> str:
    return (f"Rename `{old}` to `{new}` in this function. Reply with the whole function only.\n\n"
            f"```python\n{_code(fn)}```")


def _stdlib():
    import base64
    import calendar
    import colorsys
    import fnmatch
    import shlex
    import textwrap as tw
    return [
        _edit(colorsys.rgb_to_hsv, "maxc", "highest"),
        _edit(fnmatch.filter, "names", "candidates"),
        _edit(calendar.isleap, "year", "y"),
        _edit(tw.dedent, "margin", "common_margin"),
        _edit(shlex.join, "split_command", "argv"),
        _edit(base64.b64encode, "altchars", "alternative_chars"),
    ]


PROMPTS = _stdlib() + [
    "Write a short paragraph about the history of the printing press.",
    "Tell me a story about a cat who learns to sail.",
    "Explain what a hash table is to a beginner.",
    "Describe a sunrise over the mountains.",
    "List ten fruits, one per line.",
    "List the planets of the solar system in order, numbered.",
    "Give five tips for writing clean code as a bulleted list.",
    "Traduis en français : The weather is nice today and we are going to the beach.",
    "Schreibe zwei Sätze über Berlin.",
    "日本の首都について一文で説明してください。",
    "Repeat the word 'echo' twenty times, separated by spaces.",
    "Count from 1 to 30, separated by commas.",
]
assert len(PROMPTS) == 18  # + a json_schema request + a forced tool call = 20

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer"},
                   "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 20},
                               "maxItems": 4}},
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}
SCHEMA_PROMPT = "Invent a person and describe them as JSON with a name, an age and hobbies."
TOOL_PROMPT = "What is the weather in Paris and in Tokyo right now?"


def _draft_usage(usage) -> dict | None:
    return (usage.model_dump() if hasattr(usage, "model_dump") else usage).get("draft")


class Totals:
    def __init__(self):
        self.drafted = 0
        self.accepted = 0

    def add(self, usage):
        d = _draft_usage(usage)
        assert d is not None, f"drafting on reports usage.draft: {usage}"
        assert d["source"] == "lookup" and 0 <= d["accepted_tokens"] <= d["drafted_tokens"]
        self.drafted += d["drafted_tokens"]
        self.accepted += d["accepted_tokens"]


def _both(call, totals: Totals):
    """The reply with drafting on and with it off; the off reply reports no drafting."""
    on = call({})
    off = call(OFF)
    totals.add(on.usage)
    assert _draft_usage(off.usage) is None
    return on, off


def _chat(server, prompt, extra, **kw):
    return server.openai().chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": prompt}], temperature=0,
        max_tokens=MAX_TOKENS, extra_body=extra, **kw)


@pytest.fixture(scope="module")
def totals():
    t = Totals()
    yield t
    # code edits copy their prompt: most drafted tokens are kept
    assert t.accepted > 500 and t.accepted > 0.5 * t.drafted, vars(t)


@pytest.mark.parametrize("i", range(len(PROMPTS)))
def test_chat(qwen, totals, i):
    on, off = _both(lambda extra: _chat(qwen, PROMPTS[i], extra), totals)
    assert on.choices[0].message.content == off.choices[0].message.content
    assert on.choices[0].finish_reason == off.choices[0].finish_reason
    assert on.usage.completion_tokens == off.usage.completion_tokens


@pytest.mark.parametrize("i", range(len(PROMPTS)))
def test_completions(qwen, totals, i):
    prompt = f"<|im_start|>user\n{PROMPTS[i]}<|im_end|>\n<|im_start|>assistant\n"
    on, off = _both(lambda extra: qwen.openai().completions.create(
        model=qwen.model, prompt=prompt, temperature=0, max_tokens=MAX_TOKENS,
        extra_body=extra), totals)
    assert on.choices[0].text == off.choices[0].text
    assert on.usage.completion_tokens == off.usage.completion_tokens


@pytest.mark.parametrize("i", range(len(PROMPTS)))
def test_responses(qwen, totals, i):
    on, off = _both(lambda extra: qwen.openai().responses.create(
        model=qwen.model, input=PROMPTS[i], temperature=0, max_output_tokens=MAX_TOKENS,
        extra_body=extra), totals)
    assert on.output_text == off.output_text
    assert on.usage.output_tokens == off.usage.output_tokens


@pytest.mark.parametrize("i", range(len(PROMPTS)))
def test_messages(qwen, totals, i):
    on, off = _both(lambda extra: qwen.anthropic().messages.create(
        model=qwen.model, max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": PROMPTS[i]}], extra_body={"temperature": 0, **extra}),
        totals)
    assert [b.model_dump() for b in on.content] == [b.model_dump() for b in off.content]
    assert on.usage.output_tokens == off.usage.output_tokens


@pytest.mark.constrained
def test_json_schema_on_every_api(qwen, totals):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    on, off = _both(lambda extra: _chat(qwen, SCHEMA_PROMPT, extra, response_format=fmt), totals)
    assert on.choices[0].message.content == off.choices[0].message.content
    json.loads(on.choices[0].message.content)
    text_fmt = {"format": {"type": "json_schema", "name": "person", "schema": SCHEMA}}
    on, off = _both(lambda extra: qwen.openai().responses.create(
        model=qwen.model, input=SCHEMA_PROMPT, temperature=0, max_output_tokens=MAX_TOKENS,
        text=text_fmt, extra_body=extra), totals)
    assert on.output_text == off.output_text


@pytest.mark.constrained
def test_forced_tool_call_on_every_api(qwen, totals):
    on, off = _both(lambda extra: _chat(qwen, TOOL_PROMPT, extra, tools=CHAT_TOOLS,
                                        tool_choice="required"), totals)
    calls = lambda r: [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls]
    assert calls(on) == calls(off) and calls(on)
    on, off = _both(lambda extra: qwen.anthropic().messages.create(
        model=qwen.model, max_tokens=MAX_TOKENS, tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any"}, messages=[{"role": "user", "content": TOOL_PROMPT}],
        extra_body={"temperature": 0, **extra}), totals)
    uses = lambda r: [(b.name, b.input) for b in r.content if b.type == "tool_use"]
    assert uses(on) == uses(off) and uses(on)
    on, off = _both(lambda extra: qwen.openai().responses.create(
        model=qwen.model, input=TOOL_PROMPT, temperature=0, max_output_tokens=MAX_TOKENS,
        tools=RESPONSES_TOOLS, tool_choice="required", extra_body=extra), totals)
    items = lambda r: [(o.name, o.arguments) for o in r.output if o.type == "function_call"]
    assert items(on) == items(off) and items(on)


def test_metrics_count_drafting(qwen):
    _chat(qwen, PROMPTS[0], {})
    body = qwen.http().get("/metrics").text
    values = {line.split()[0]: float(line.split()[1]) for line in body.splitlines()
              if line and not line.startswith("#")}
    assert values["ishizuki:spec_decode_num_accepted_tokens_total"] > 0
    assert (values["ishizuki:spec_decode_num_draft_tokens_total"]
            >= values["ishizuki:spec_decode_num_accepted_tokens_total"])
    assert values["ishizuki:decode_steps_total"] > 0
    assert values["ishizuki:draft_model_active"] == 0
