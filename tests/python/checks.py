"""Checks shared by the test files: stream event order for Anthropic and Responses, tool calls."""

from __future__ import annotations

import json


def anthropic_event_order(events: list[tuple[str | None, dict]]) -> list[dict]:
    """Asserts message_start, then per block start/delta.../stop with consecutive indices, then
    message_delta and message_stop last. Returns the blocks rebuilt from the deltas."""
    names = [n for n, _ in events]
    assert names[0] == "message_start", names
    assert names[-1] == "message_stop", names
    assert names[-2] == "message_delta", names
    assert names.count("message_start") == 1 and names.count("message_stop") == 1, names
    assert names.count("message_delta") == 1, names
    blocks: list[dict] = []
    open_index = None
    for name, data in events[1:-2]:
        assert data["type"] == name, (name, data)
        if name == "ping":
            continue
        if name == "content_block_start":
            assert open_index is None, f"block {data['index']} started inside block {open_index}"
            assert data["index"] == len(blocks), (data, len(blocks))
            open_index = data["index"]
            block = dict(data["content_block"])
            block["_json"] = ""
            blocks.append(block)
        elif name == "content_block_delta":
            assert data["index"] == open_index, (data, open_index)
            delta, block = data["delta"], blocks[open_index]
            kind = delta["type"]
            if kind == "text_delta":
                assert block["type"] == "text", (block, delta)
                block["text"] += delta["text"]
            elif kind == "thinking_delta":
                assert block["type"] == "thinking", (block, delta)
                block["thinking"] += delta["thinking"]
            elif kind == "signature_delta":
                assert block["type"] == "thinking", (block, delta)
            elif kind == "input_json_delta":
                assert block["type"] == "tool_use", (block, delta)
                block["_json"] += delta["partial_json"]
            else:
                raise AssertionError(f"unknown delta {delta}")
        elif name == "content_block_stop":
            assert data["index"] == open_index, (data, open_index)
            open_index = None
        else:
            raise AssertionError(f"unexpected event {name} between message_start and message_delta")
    assert open_index is None, "a block was never stopped"
    for block in blocks:
        raw = block.pop("_json")
        if block["type"] == "tool_use":
            block["input"] = json.loads(raw) if raw else {}
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] in {"end_turn", "max_tokens", "stop_sequence", "tool_use"}
    assert isinstance(delta["usage"]["output_tokens"], int)
    return blocks


TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
DELTAS = {
    "response.output_text.delta",
    "response.reasoning_text.delta",
    "response.function_call_arguments.delta",
    "response.output_text.done",
    "response.reasoning_text.done",
    "response.function_call_arguments.done",
    "response.content_part.added",
    "response.content_part.done",
}


def responses_event_order(events: list[tuple[str | None, dict]]) -> dict:
    """Asserts response.created first, each output item added before its deltas and done after
    them, items in output order, sequence numbers increasing, and one terminal event last.
    Returns the final response object."""
    types = [d["type"] for _, d in events]
    for name, data in events:
        assert name == data["type"], (name, data)
    assert types[0] == "response.created", types
    assert types[-1] in TERMINAL, types
    assert sum(t in TERMINAL for t in types) == 1, types
    seqs = [d["sequence_number"] for _, d in events]
    assert all(b > a for a, b in zip(seqs, seqs[1:])), seqs
    state: dict[int, str] = {}  # output_index -> "open" | "done"
    for _, d in events[1:-1]:
        t = d["type"]
        if t == "response.in_progress":
            continue
        if t == "response.output_item.added":
            i = d["output_index"]
            assert i == len(state), (d, state)
            assert all(s == "done" for s in state.values()), f"item {i} added while one is open"
            state[i] = "open"
        elif t == "response.output_item.done":
            i = d["output_index"]
            assert state.get(i) == "open", (d, state)
            state[i] = "done"
        elif t in DELTAS:
            assert state.get(d["output_index"]) == "open", (d, state)
        else:
            raise AssertionError(f"unexpected event {t}")
    assert all(s == "done" for s in state.values()), state
    final = events[-1][1]["response"]
    assert len(final["output"]) == len(state), (final["output"], state)
    return final


def assert_call(name: str, arguments: str, tools: set[str]) -> dict:
    """A tool call's name is one of `tools` and its arguments are a JSON object."""
    assert name in tools, (name, tools)
    args = json.loads(arguments)
    assert isinstance(args, dict), arguments
    return args
