"""A server started with --api-key: each protocol's 401 shape, both ways to send the key."""

import anthropic
import httpx
import openai
import pytest

from conftest import API_KEY, error_shape

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
MESSAGES = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}


def _raw(server, path, body, headers):
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        return c.post(path, json=body, headers=headers)


@pytest.mark.parametrize("headers", [
    pytest.param({}, id="none"),
    pytest.param({"Authorization": "Bearer wrong-key"}, id="wrong-bearer"),
    pytest.param({"x-api-key": "wrong-key"}, id="wrong-x-api-key"),
    pytest.param({"Authorization": API_KEY}, id="no-bearer-prefix"),
    pytest.param({"Authorization": f"Bearer {API_KEY}x"}, id="longer"),
])
def test_missing_or_wrong_key_is_401(keyed, headers):
    r = _raw(keyed, "/v1/chat/completions", CHAT, headers)
    assert r.status_code == 401
    assert error_shape("openai", r)["type"] == "authentication_error"
    r = _raw(keyed, "/v1/messages", MESSAGES, headers)
    assert r.status_code == 401
    assert error_shape("anthropic", r)["type"] == "authentication_error"
    with httpx.Client(base_url=keyed.base_url, timeout=60) as c:
        assert c.get("/v1/models", headers=headers).status_code == 401


@pytest.mark.parametrize("headers", [
    pytest.param({"Authorization": f"Bearer {API_KEY}"}, id="bearer"),
    pytest.param({"x-api-key": API_KEY}, id="x-api-key"),
])
def test_right_key_is_200(keyed, headers):
    for path, body in [("/v1/chat/completions", CHAT), ("/v1/messages", MESSAGES),
                       ("/v1/completions", {"prompt": "Hi", "max_tokens": 2})]:
        r = _raw(keyed, path, body, headers)
        assert r.status_code == 200, (path, r.text)


def test_health_needs_no_key(keyed):
    with httpx.Client(base_url=keyed.base_url, timeout=60) as c:
        assert c.get("/health").status_code == 200


def test_sdk_errors(keyed):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{keyed.base_url}/v1", api_key="nope", max_retries=0).chat.completions.create(
            model=keyed.model, **CHAT)
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=keyed.base_url, api_key="nope", max_retries=0).messages.create(
            model=keyed.model, messages=MESSAGES["messages"], max_tokens=2)
    # the SDKs send the key their own way (Bearer / x-api-key)
    ok = keyed.openai().chat.completions.create(model=keyed.model, **CHAT)
    assert ok.choices
    ok = keyed.anthropic().messages.create(model=keyed.model, messages=MESSAGES["messages"], max_tokens=2)
    assert ok.content is not None
