"""Structured output: response_format json_schema (chat) and text.format json_schema (responses)
sampled at temperature 0.7; every reply must validate against its schema."""

import json

import jsonschema
import pytest

pytestmark = pytest.mark.constrained

SCHEMAS = {
    "flat-object": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "unbounded-string": {
        "type": "object",
        "properties": {"color": {"type": "string"}},
        "required": ["color"],
        "additionalProperties": False,
    },
    "array-of-enums": {
        "type": "object",
        "properties": {
            "colors": {"type": "array", "items": {"enum": ["red", "green", "blue", "yellow"]},
                       "minItems": 1, "maxItems": 3},
        },
        "required": ["colors"],
        "additionalProperties": False,
    },
    "nested-objects": {
        "type": "object",
        "properties": {
            "person": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 24},
                    "address": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string", "maxLength": 24},
                            "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                        },
                        "required": ["city", "zip"],
                        "additionalProperties": False,
                    },
                },
                "required": ["name", "address"],
                "additionalProperties": False,
            },
        },
        "required": ["person"],
        "additionalProperties": False,
    },
    "top-level-array": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 5},
    "mixed-types": {
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "level": {"enum": ["low", "high"]},
            "note": {"type": ["string", "null"], "maxLength": 40},
        },
        "required": ["ok", "score", "level", "note"],
        "additionalProperties": False,
    },
}
PROMPT = "Reply with JSON only. Describe a person who lives in Paris and their favourite colors."
SEEDS = [1, 2]


def _valid(text: str, schema: dict):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        pytest.fail(f"not JSON ({e}): {text!r}")
    jsonschema.validate(value, schema)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_chat_json_schema(qwen, name, seed):
    schema = SCHEMAS[name]
    reply = qwen.openai().chat.completions.create(
        model=qwen.model, messages=[{"role": "user", "content": PROMPT}], temperature=0.7,
        seed=seed, max_tokens=160,
        response_format={"type": "json_schema",
                         "json_schema": {"name": name.replace("-", "_"), "schema": schema, "strict": True}})
    assert reply.choices[0].finish_reason == "stop", reply.choices[0]
    _valid(reply.choices[0].message.content, schema)


@pytest.mark.parametrize("name", ["flat-object", "nested-objects", "top-level-array"])
def test_responses_json_schema(qwen, name):
    schema = SCHEMAS[name]
    reply = qwen.openai().responses.create(
        model=qwen.model, input=PROMPT, temperature=0.7, max_output_tokens=160, extra_body={"seed": 3},
        text={"format": {"type": "json_schema", "name": name.replace("-", "_"), "schema": schema,
                         "strict": True}})
    assert reply.status == "completed", reply
    _valid(reply.output_text, schema)


def test_chat_json_schema_streamed(qwen):
    schema = SCHEMAS["nested-objects"]
    chunks = qwen.openai().chat.completions.create(
        model=qwen.model, messages=[{"role": "user", "content": PROMPT}], temperature=0.7, seed=5,
        max_tokens=160, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "nested", "schema": schema}})
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    _valid(text, schema)


def test_chat_json_object(qwen):
    reply = qwen.openai().chat.completions.create(
        model=qwen.model, messages=[{"role": "user", "content": PROMPT}], temperature=0.7, seed=7,
        max_tokens=160, response_format={"type": "json_object"})
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)
