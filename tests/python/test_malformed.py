"""Malformed requests: each a 4xx in its protocol's error shape; the server keeps serving."""

import pytest

from conftest import error_shape

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"

USER = [{"role": "user", "content": "Hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def chat(**kw):
    return {"messages": USER, "max_tokens": 2, **kw}


def msgs(**kw):
    return {"messages": USER, "max_tokens": 2, **kw}


# (id, path, body (dict, or bytes sent as they are), status, text the message must contain)
CASES = [
    # chat completions
    ("chat-bad-json", CHAT, b'{"messages": [', 400, "invalid request body"),
    ("chat-not-object", CHAT, b"[1, 2]", 400, ""),
    ("chat-empty-body", CHAT, b"", 400, ""),
    ("chat-no-messages", CHAT, {"max_tokens": 2}, 400, "messages"),
    ("chat-messages-string", CHAT, {"messages": "Hi"}, 400, ""),
    ("chat-empty-messages", CHAT, chat(messages=[]), 400, "messages"),
    ("chat-message-not-object", CHAT, chat(messages=[1]), 400, "messages[0]"),
    ("chat-unknown-role", CHAT, chat(messages=[{"role": "wizard", "content": "Hi"}]), 400, "wizard"),
    ("chat-no-role", CHAT, chat(messages=[{"content": "Hi"}]), 400, "role"),
    ("chat-content-number", CHAT, chat(messages=[{"role": "user", "content": 42}]), 400, "messages[0]"),
    ("chat-unknown-part", CHAT, chat(messages=[{"role": "user", "content": [{"type": "widget"}]}]), 400, "messages[0]"),
    ("chat-image", CHAT, chat(messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]), 400, "image_url"),
    ("chat-temperature-string", CHAT, chat(temperature="hot"), 400, ""),
    ("chat-temperature-negative", CHAT, chat(temperature=-1), 400, "temperature"),
    ("chat-temperature-huge", CHAT, chat(temperature=1000), 400, "temperature"),
    ("chat-top-p-above-1", CHAT, chat(top_p=1.5), 400, "top_p"),
    ("chat-top-p-negative", CHAT, chat(top_p=-0.1), 400, "top_p"),
    ("chat-min-p", CHAT, chat(min_p=2), 400, "min_p"),
    ("chat-presence-penalty", CHAT, chat(presence_penalty=5), 400, "presence_penalty"),
    ("chat-frequency-penalty", CHAT, chat(frequency_penalty=-5), 400, "frequency_penalty"),
    ("chat-top-logprobs-21", CHAT, chat(logprobs=True, top_logprobs=21), 400, "top_logprobs"),
    ("chat-max-tokens-negative", CHAT, chat(max_tokens=-1), 400, "max"),
    ("chat-max-completion-tokens-negative", CHAT, chat(max_completion_tokens=-5), 400, "max_completion_tokens"),
    ("chat-max-tokens-absurd", CHAT, chat(max_tokens=10**12), 400, ""),
    ("chat-max-tokens-float", CHAT, chat(max_tokens=2.5), 400, ""),
    ("chat-n-2", CHAT, chat(n=2), 400, "n = 1"),
    ("chat-too-many-stops", CHAT, chat(stop=[f"s{i}" for i in range(17)]), 400, "stop"),
    ("chat-stop-too-long", CHAT, chat(stop=["x" * 300]), 400, "stop"),
    ("chat-stop-number", CHAT, chat(stop=5), 400, ""),
    ("chat-stream-string", CHAT, chat(stream="yes"), 400, ""),
    ("chat-tool-choice-unknown", CHAT, chat(tools=[TOOL], tool_choice="sometimes"), 400, "tool_choice"),
    ("chat-tool-choice-absent-name", CHAT, chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "g"}}), 400, "`g`"),
    ("chat-tool-choice-required-no-tools", CHAT, chat(tool_choice="required"), 400, "tool"),
    ("chat-tool-without-name", CHAT, chat(tools=[{"type": "function", "function": {"parameters": {}}}]), 400, "name"),
    ("chat-tool-parameters-list", CHAT, chat(tools=[{"type": "function", "function": {"name": "f", "parameters": [1]}}]), 400, "`f`"),
    ("chat-too-many-tools", CHAT, chat(tools=[{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]), 400, "tools"),
    ("chat-bad-call-arguments", CHAT, chat(messages=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}], tools=[TOOL]), 400, "messages[1]"),
    ("chat-call-arguments-array", CHAT, chat(messages=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}]}]), 400, "messages[1]"),
    ("chat-tool-calls-not-list", CHAT, chat(messages=[
        {"role": "user", "content": "Hi"}, {"role": "assistant", "tool_calls": {"id": "x"}}]), 400, "messages[1]"),
    ("chat-call-without-name", CHAT, chat(messages=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]}]), 400, "messages[1]"),
    ("chat-response-format-unknown", CHAT, chat(response_format={"type": "xml"}), 400, "xml"),
    ("chat-template-kwargs-string", CHAT, chat(chat_template_kwargs="x"), 400, "chat_template_kwargs"),
    ("chat-top-k-string", CHAT, chat(top_k="many"), 400, ""),
    ("chat-context-exceeded", CHAT, chat(max_tokens=5000), 400, "context"),
    # completions
    ("completions-no-prompt", COMPLETIONS, {"max_tokens": 2}, 400, "prompt"),
    ("completions-prompt-number", COMPLETIONS, {"prompt": 42}, 400, "prompt"),
    ("completions-prompt-empty-list", COMPLETIONS, {"prompt": []}, 400, "prompt"),
    ("completions-prompt-empty-string", COMPLETIONS, {"prompt": ""}, 400, "empty"),
    ("completions-token-outside-vocab", COMPLETIONS, {"prompt": [1, 99999999]}, 400, "vocabulary"),
    ("completions-token-negative", COMPLETIONS, {"prompt": [1, -1]}, 400, "prompt"),
    ("completions-mixed-list", COMPLETIONS, {"prompt": ["a", 1, [2]]}, 400, "prompt"),
    ("completions-logprobs-21", COMPLETIONS, {"prompt": "Hi", "logprobs": 21}, 400, "logprobs"),
    ("completions-suffix", COMPLETIONS, {"prompt": "Hi", "suffix": "end"}, 400, "suffix"),
    ("completions-stream-batch", COMPLETIONS, {"prompt": ["a", "b"], "stream": True}, 400, "one prompt"),
    ("completions-context-exceeded", COMPLETIONS, {"prompt": "Hi", "max_tokens": 4000}, 400, "context"),
    ("completions-n-3", COMPLETIONS, {"prompt": "Hi", "n": 3}, 400, "n = 1"),
    # responses
    ("responses-input-number", RESPONSES, {"input": 42}, 400, "input"),
    ("responses-unknown-role", RESPONSES, {"input": [{"type": "message", "role": "robot", "content": "x"}]}, 400, "robot"),
    ("responses-message-no-role", RESPONSES, {"input": [{"type": "message", "content": "x"}]}, 400, "input[0]"),
    ("responses-bad-call-arguments", RESPONSES, {"input": [
        {"role": "user", "content": "Hi"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{oops"}]}, 400, "input[1]"),
    ("responses-call-no-name", RESPONSES, {"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, 400, "input[0]"),
    ("responses-image", RESPONSES, {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]}, 400, "input_image"),
    ("responses-format-unknown", RESPONSES, {"input": "Hi", "text": {"format": {"type": "yaml"}}}, 400, "yaml"),
    ("responses-max-output-negative", RESPONSES, {"input": "Hi", "max_output_tokens": -1}, 400, "max_output_tokens"),
    ("responses-temperature-huge", RESPONSES, {"input": "Hi", "temperature": 3000}, 400, "temperature"),
    ("responses-no-input", RESPONSES, {"max_output_tokens": 2}, 400, "messages"),
    ("responses-context-exceeded", RESPONSES, {"input": "Hi", "max_output_tokens": 5000}, 400, "context"),
    # anthropic messages
    ("messages-bad-json", MESSAGES, b'{"messages": ', 400, "invalid request body"),
    ("messages-no-max-tokens", MESSAGES, {"messages": USER}, 400, "max_tokens"),
    ("messages-max-tokens-negative", MESSAGES, msgs(max_tokens=-1), 400, "max_tokens"),
    ("messages-no-messages", MESSAGES, {"max_tokens": 2}, 400, "messages"),
    ("messages-empty-messages", MESSAGES, msgs(messages=[]), 400, "messages"),
    ("messages-unknown-block", MESSAGES, msgs(messages=[{"role": "user", "content": [{"type": "widget"}]}]), 400, "widget"),
    ("messages-image", MESSAGES, msgs(messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]), 400, "image"),
    ("messages-role-tool", MESSAGES, msgs(messages=[{"role": "tool", "content": "x"}]), 400, "role"),
    ("messages-content-number", MESSAGES, msgs(messages=[{"role": "user", "content": 7}]), 400, "messages[0]"),
    ("messages-system-number", MESSAGES, msgs(system=42), 400, "system"),
    ("messages-system-image-block", MESSAGES, msgs(system=[{"type": "image"}]), 400, "system"),
    ("messages-tool-use-input-string", MESSAGES, msgs(messages=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": "x"}]}]), 400, "messages[1]"),
    ("messages-tool-result-image", MESSAGES, msgs(messages=[
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}]}]), 400, "messages[0]"),
    ("messages-tool-choice-unknown", MESSAGES, msgs(tool_choice={"type": "maybe"}), 400, "maybe"),
    ("messages-temperature-huge", MESSAGES, msgs(temperature=500), 400, "temperature"),
    ("messages-too-many-stops", MESSAGES, msgs(stop_sequences=[f"s{i}" for i in range(17)]), 400, "stop"),
    ("messages-stream-string", MESSAGES, msgs(stream="yes"), 400, ""),
    ("count-tokens-empty-messages", COUNT, {"messages": []}, 400, "messages"),
    ("count-tokens-bad-json", COUNT, b"{", 400, ""),
]


@pytest.mark.parametrize("path,body,status,needle", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_malformed_request(smol, path, body, status, needle):
    if isinstance(body, dict):
        body = {"model": smol.model, **body}
    r = smol.post(path, body)
    assert r.status_code == status, r.text
    protocol = "anthropic" if path.startswith("/v1/messages") else "openai"
    err = error_shape(protocol, r)
    assert err["type"] == "invalid_request_error", err
    assert needle.lower() in err["message"].lower(), err
    if "context" in needle:
        if protocol == "openai":
            assert err["code"] == "context_length_exceeded", err


def test_count_of_malformed_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("path,protocol", [(CHAT, "openai"), (MESSAGES, "anthropic")])
def test_unknown_model_is_404(smol, path, protocol):
    r = smol.post(path, {"model": "gpt-9-ultra", "messages": USER, "max_tokens": 2})
    assert r.status_code == 404
    err = error_shape(protocol, r)
    assert err["type"] == "not_found_error" and "gpt-9-ultra" in err["message"]


@pytest.mark.parametrize("path,protocol", [(CHAT, "openai"), (MESSAGES, "anthropic")])
def test_body_over_16_mib_is_413(smol, path, protocol):
    big = b'{"messages": [{"role": "user", "content": "' + b"a" * (16 << 20) + b'"}], "max_tokens": 1}'
    r = smol.post(path, big)
    assert r.status_code == 413, r.text[:200]
    err = error_shape(protocol, r)
    assert "larger than" in err["message"]


@pytest.mark.parametrize("path,protocol", [("/v1/nothing", "openai"), ("/v1/messages/nothing", "anthropic")])
def test_unknown_route_is_404(smol, path, protocol):
    r = smol.post(path, {})
    assert r.status_code == 404
    error_shape(protocol, r)


@pytest.mark.parametrize("path,protocol", [(CHAT, "openai"), (MESSAGES, "anthropic")])
def test_wrong_method_is_405_in_shape(smol, path, protocol):
    with smol.http() as c:
        r = c.get(path)
    assert r.status_code == 405
    error_shape(protocol, r)


def test_server_still_serves_after_malformed_requests(smol):
    """Runs after the cases above (pytest keeps file order)."""
    assert smol.alive()
    with smol.http() as c:
        assert c.get("/health").status_code == 200
    reply = smol.openai().chat.completions.create(model=smol.model, messages=USER, max_tokens=3,
                                                  temperature=0)
    assert reply.choices[0].message.content
    reply = smol.anthropic().messages.create(model=smol.model, messages=USER, max_tokens=3)
    assert reply.content
