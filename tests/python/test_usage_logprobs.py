"""Token accounting (usage, count_tokens) and /v1/completions echo + logprobs as lm-eval uses it."""

import json
import math

import pytest


def _reference(fixtures):
    return json.loads((fixtures / "ref-smollm2-135m.json").read_text())


def test_count_tokens_matches_message_usage(smol):
    client = smol.anthropic()
    request = dict(
        model=smol.model,
        system=[{"type": "text", "text": "You answer in one word."}],
        messages=[{"role": "user", "content": "Which color is the sky?"},
                  {"role": "assistant", "content": "Blue."},
                  {"role": "user", "content": [{"type": "text", "text": "And grass?"}]}],
    )
    counted = client.messages.count_tokens(**request).input_tokens
    for _ in range(2):  # the second time the prompt comes from the prefix cache
        reply = client.messages.create(**request, max_tokens=4, extra_body={"temperature": 0})
        u = reply.usage
        assert counted == u.input_tokens + u.cache_read_input_tokens, (counted, u)
    assert u.cache_read_input_tokens > 0, "the repeated prompt was not served from the cache"


def test_chat_prompt_tokens_is_the_prompt_length(smol, fixtures):
    chats = [c for c in _reference(fixtures)["cases"] if c["kind"] == "chat"]
    assert chats
    client = smol.openai()
    for case in chats:
        reply = client.chat.completions.create(
            model=smol.model, messages=case["messages"], temperature=0, max_tokens=1)
        assert reply.usage.prompt_tokens == len(case["prompt_ids"])
        # the rendered text through /v1/completions (special tokens parsed) is the same prompt
        echoed = client.completions.create(
            model=smol.model, prompt=case["rendered"], max_tokens=1, echo=True, logprobs=0,
            temperature=0)
        assert echoed.usage.prompt_tokens == len(case["prompt_ids"])
        assert len(echoed.choices[0].logprobs.tokens) == len(case["prompt_ids"]) + 1


def test_lm_eval_loglikelihood_batch(smol, fixtures):
    """lm-eval `local-completions` scoring: token-id prompts, echo, logprobs 1, max_tokens 1."""
    cases = [c for c in _reference(fixtures)["cases"] if c["kind"] == "completion"][:3]
    prompts = [c["prompt_ids"] for c in cases]
    r = smol.post("/v1/completions", {"model": smol.model, "prompt": prompts, "max_tokens": 1,
                                     "logprobs": 1, "echo": True, "temperature": 0, "seed": 1234})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["choices"]) == len(prompts)
    assert sorted(c["index"] for c in body["choices"]) == list(range(len(prompts)))
    for choice in body["choices"]:
        ids = prompts[choice["index"]]
        lp = choice["logprobs"]
        n = len(ids) + 1
        assert len(lp["tokens"]) == n
        assert len(lp["token_logprobs"]) == n
        assert len(lp["top_logprobs"]) == n
        assert len(lp["text_offset"]) == n
        assert lp["token_logprobs"][0] is None
        assert all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"][1:])
        for top in lp["top_logprobs"][1:]:
            assert isinstance(top, dict) and 1 <= len(top) <= 2
        assert lp["text_offset"] == sorted(lp["text_offset"])
        assert lp["text_offset"][0] == 0
        # the echoed text is the prompt's text followed by the generated token
        assert choice["text"].startswith("".join(lp["tokens"][:-1]))
    assert body["usage"]["prompt_tokens"] == sum(len(p) for p in prompts)
    assert body["usage"]["completion_tokens"] == len(prompts)


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_fixture_passage_perplexity(smol, fixtures, max_tokens):
    passage = _reference(fixtures)["passages"][0]
    ids = passage["ids"]
    r = smol.post("/v1/completions", {"model": smol.model, "prompt": ids, "max_tokens": max_tokens,
                                     "logprobs": 0, "echo": True, "temperature": 0})
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    assert len(lp) == len(ids) + max_tokens
    assert lp[0] is None
    nll = -sum(lp[1:len(ids)]) / (len(ids) - 1)
    ppl = math.exp(nll)
    assert abs(ppl - passage["ppl"]) <= 0.02 * passage["ppl"], (ppl, passage["ppl"])


def test_chat_logprobs(smol):
    reply = smol.openai().chat.completions.create(
        model=smol.model, messages=[{"role": "user", "content": "Name three colors."}],
        temperature=0, max_tokens=6, logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens == 6
    assert "".join(t.token for t in content) == reply.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert t.logprob == pytest.approx(max(x.logprob for x in t.top_logprobs), abs=1e-5)
