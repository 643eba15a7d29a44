"""Requests shaped like the coding agents': Claude Code (Anthropic beta messages) and Codex
(OpenAI Responses), through the official SDKs unchanged."""

import json
import secrets

import pytest

from checks import anthropic_event_order, responses_event_order

CLAUDE_CODE_BETAS = "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
CLAUDE_CODE_TOOLS = [
    {
        "name": "Bash",
        "description": "Executes a given bash command in a persistent shell session.",
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to execute"},
                "timeout": {"type": "number", "description": "Optional timeout in milliseconds"},
                "description": {"type": "string"},
            },
            "required": ["command"],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
    },
    {
        "name": "Read",
        "description": "Reads a file from the local filesystem.",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}, "limit": {"type": "number"}},
            "required": ["file_path"],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
    },
    # a server tool: no input_schema
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
]


def _claude_code_request(model: str, max_tokens: int) -> dict:
    nonce = secrets.token_hex(8)
    return dict(
        model=model,
        max_tokens=max_tokens,
        system=[
            {"type": "text",
             "text": f"x-anthropic-billing-header: cc_version=2.0.31.a1b; cc_entrypoint=cli; nonce={nonce}"},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "You are an interactive CLI tool that helps users with software "
             "engineering tasks. Be concise.", "cache_control": {"type": "ephemeral"}},
        ],
        messages=[
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nThis is a reminder that your todo list "
                 "is currently empty.\n</system-reminder>"},
                {"type": "text", "text": "Which files are in the current directory?",
                 "cache_control": {"type": "ephemeral"}},
            ]},
            {"role": "system", "content": "The working directory is /home/user/project."},
        ],
        tools=CLAUDE_CODE_TOOLS,
        thinking={"type": "enabled", "budget_tokens": max(1024, max_tokens - 1)},
        metadata={"user_id": f"user_{secrets.token_hex(32)}_account__session_{secrets.token_hex(8)}"},
    )


def _claude_code_client(server):
    return server.anthropic(default_headers={
        "anthropic-beta": CLAUDE_CODE_BETAS,
        "anthropic-dangerous-direct-browser-access": "true",
        "x-app": "cli",
        "user-agent": "claude-cli/2.0.31 (external, cli)",
    })


def test_claude_code_shaped_request(qwen):
    client = _claude_code_client(qwen)
    # the SDK's beta messages post to /v1/messages?beta=true
    request = _claude_code_request(qwen.model, 48)
    reply = client.beta.messages.create(**request, betas=CLAUDE_CODE_BETAS.split(","),
                                        extra_body={"temperature": 0})
    assert reply.role == "assistant" and reply.content
    assert reply.stop_reason in {"end_turn", "max_tokens", "tool_use"}
    for block in reply.content:
        assert block.type in {"text", "thinking", "tool_use"}
        if block.type == "tool_use":
            assert block.name in {"Bash", "Read"} and isinstance(block.input, dict)
    counted = client.beta.messages.count_tokens(
        **{k: v for k, v in request.items() if k not in ("max_tokens", "metadata")},
        betas=CLAUDE_CODE_BETAS.split(","))
    u = reply.usage
    assert counted.input_tokens == u.input_tokens + u.cache_read_input_tokens


def test_claude_code_billing_nonce_keeps_the_prefix_cached(qwen):
    """The nonce changes on every request; a new nonce must reuse as much of the cached prompt as
    repeating the request exactly does (the engine always runs a few last tokens again)."""
    client = _claude_code_client(qwen)
    first, second = _claude_code_request(qwen.model, 2), _claude_code_request(qwen.model, 2)
    assert first["system"][0] != second["system"][0]
    usages = [client.beta.messages.create(**r, extra_body={"temperature": 0}).usage
              for r in (first, second, second)]
    total = usages[1].input_tokens + usages[1].cache_read_input_tokens
    assert usages[1].cache_read_input_tokens == usages[2].cache_read_input_tokens, usages
    # the last few tokens (the CPU backend's 17 batch-invariant rows) always run again
    assert usages[1].cache_read_input_tokens >= total - 32, usages


def test_claude_code_stream_with_its_max_tokens(qwen):
    """Claude Code asks for 32000 tokens whatever the context: the server generates what fits.
    The stream is read for a while and then dropped, as a user pressing Esc does."""
    client = _claude_code_client(qwen)
    request = _claude_code_request(qwen.model, 32000)
    events = qwen.sse("/v1/messages", {**request, "stream": True, "temperature": 0},
                      params={"beta": "true"}, stop_after=40,
                      headers={"anthropic-beta": CLAUDE_CODE_BETAS, "anthropic-version": "2023-06-01"})
    assert events[0][0] == "message_start"
    if events[-1][0] == "message_stop":
        anthropic_event_order(events)
    else:
        assert all(n in {"ping", "content_block_start", "content_block_delta", "content_block_stop"}
                   for n, _ in events[1:]), events
    # the dropped stream was cancelled: the engine serves the next request
    after = client.messages.create(model=qwen.model, max_tokens=4,
                                   messages=[{"role": "user", "content": "Hi"}],
                                   extra_body={"temperature": 0})
    assert after.content


CODEX_TOOLS = [
    {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}},
                "workdir": {"type": "string"},
                "timeout_ms": {"type": "number"},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    {"type": "web_search"},
]


def _codex_input():
    return [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n  <cwd>/home/user/project</cwd>\n"
             "  <approval_policy>on-request</approval_policy>\n</environment_context>"}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "List the files here."}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Run ls."}],
         "encrypted_content": "gAAAAABo" + secrets.token_hex(16)},
        {"type": "function_call", "name": "shell", "call_id": "call_1",
         "arguments": json.dumps({"command": ["ls"], "workdir": "/home/user/project"})},
        {"type": "function_call_output", "call_id": "call_1", "output": "README.md\nsrc\nCargo.toml\n"},
    ]


@pytest.mark.parametrize("effort", ["low", "medium"])
def test_codex_shaped_request(qwen, effort):
    client = qwen.openai(default_headers={"originator": "codex_cli_rs", "version": "0.50.0"})
    stream = client.responses.create(
        model=qwen.model,
        instructions="You are Codex, a coding agent. Be concise.",
        input=_codex_input(),
        tools=CODEX_TOOLS,
        tool_choice="auto",
        parallel_tool_calls=False,
        reasoning={"effort": effort, "summary": "auto"},
        store=False,
        stream=True,
        include=["reasoning.encrypted_content"],
        prompt_cache_key=secrets.token_hex(8),
        # Codex sends no limit; one keeps the test short
        max_output_tokens=32,
        temperature=0,
    )
    events = [(e.type, e.model_dump(mode="json")) for e in stream]
    final = responses_event_order(events)
    assert final["status"] in {"completed", "incomplete"}
    assert final["store"] is False
    for item in final["output"]:
        assert item["type"] in {"message", "reasoning", "function_call"}
        if item["type"] == "function_call":
            assert item["name"] == "shell" and isinstance(json.loads(item["arguments"]), dict)
    # store=False: nothing to chain on
    r = qwen.post("/v1/responses", {"model": qwen.model, "input": "again",
                                    "previous_response_id": final["id"]})
    assert r.status_code == 400, r.text
