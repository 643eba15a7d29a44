"""Streaming equals non-streaming at temperature 0 on every generating endpoint; stream events in
each protocol's order."""

import pytest

from checks import anthropic_event_order, responses_event_order

QUESTION = "Name three colors."
# (max tokens, stop): one reply cut by the length limit, one by a stop sequence
ENDINGS = [pytest.param(4, None, id="length"), pytest.param(40, ["."], id="stop")]


@pytest.mark.parametrize("max_tokens,stop", ENDINGS)
def test_chat_stream_equals_whole(smol, max_tokens, stop):
    client = smol.openai()
    args = dict(model=smol.model, messages=[{"role": "user", "content": QUESTION}],
                temperature=0, max_tokens=max_tokens, stop=stop)
    whole = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(
        **args, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == whole.choices[0].message.content
    assert finishes == [whole.choices[0].finish_reason]
    assert whole.choices[0].finish_reason == ("length" if stop is None else "stop")
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.completion_tokens == whole.usage.completion_tokens
    if stop is None:
        assert whole.usage.completion_tokens == max_tokens


@pytest.mark.parametrize("max_tokens,stop", ENDINGS)
def test_completions_stream_equals_whole(smol, max_tokens, stop):
    client = smol.openai()
    args = dict(model=smol.model, prompt="The largest planet in the solar system is",
                temperature=0, max_tokens=max_tokens, stop=stop)
    whole = client.completions.create(**args)
    chunks = list(client.completions.create(**args, stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == whole.choices[0].text
    assert finishes == [whole.choices[0].finish_reason]
    assert whole.choices[0].finish_reason == ("length" if stop is None else "stop")


@pytest.mark.parametrize("max_tokens,stop", ENDINGS)
def test_messages_stream_equals_whole(smol, max_tokens, stop):
    client = smol.anthropic()
    args = dict(model=smol.model, max_tokens=max_tokens,
                messages=[{"role": "user", "content": QUESTION}],
                extra_body={"temperature": 0})
    if stop:
        args["stop_sequences"] = stop
    whole = client.messages.create(**args)
    with client.messages.stream(**args) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "".join(b.text for b in whole.content if b.type == "text")
    assert final.stop_reason == whole.stop_reason
    assert whole.stop_reason == ("max_tokens" if stop is None else "stop_sequence")
    if stop:
        assert whole.stop_sequence == "." and final.stop_sequence == "."
    assert final.usage.output_tokens == whole.usage.output_tokens


@pytest.mark.parametrize("max_tokens,stop", ENDINGS)
def test_messages_event_order(smol, max_tokens, stop):
    body = {"model": smol.model, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": QUESTION}]}
    if stop:
        body["stop_sequences"] = stop
    events = smol.sse("/v1/messages", body)
    blocks = anthropic_event_order(events)
    assert [b["type"] for b in blocks] == ["text"]
    start = events[0][1]["message"]
    assert start["role"] == "assistant" and start["content"] == []
    assert start["usage"]["input_tokens"] + start["usage"]["cache_read_input_tokens"] > 0


@pytest.mark.parametrize("max_tokens,stop", ENDINGS)
def test_responses_stream_equals_whole(smol, max_tokens, stop):
    client = smol.openai()
    args = dict(model=smol.model, input=QUESTION, temperature=0, max_output_tokens=max_tokens,
                store=False)
    if stop:
        # Responses has no stop field: a short instruction and a natural end instead
        args.update(input="Say hello.", max_output_tokens=max_tokens)
    whole = client.responses.create(**args)
    events = list(client.responses.create(**args, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == whole.output_text == final.output_text
    assert final.status == whole.status
    assert (final.incomplete_details is None) == (whole.incomplete_details is None)
    assert final.usage.output_tokens == whole.usage.output_tokens
    if stop is None:
        assert whole.status == "incomplete"
        assert whole.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize("max_tokens", [12, 200])
def test_responses_event_order(smol, max_tokens):
    body = {"model": smol.model, "input": "Say hello.", "temperature": 0, "stream": True,
            "max_output_tokens": max_tokens, "store": False}
    events = smol.sse("/v1/responses", body)
    final = responses_event_order(events)
    assert final["status"] in {"completed", "incomplete"}
    expected = "response.completed" if final["status"] == "completed" else "response.incomplete"
    assert events[-1][1]["type"] == expected
    text = "".join(d["delta"] for _, d in events if d["type"] == "response.output_text.delta")
    assert final["output"][0]["content"][0]["text"] == text
