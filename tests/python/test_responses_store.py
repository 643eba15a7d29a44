"""`previous_response_id`: chaining on stored responses, unknown ids, store=False."""

import openai
import pytest


def test_previous_response_id_across_two_turns(smol):
    client = smol.openai()
    first = client.responses.create(model=smol.model, input="My name is Ada. Reply with OK.",
                                    temperature=0, max_output_tokens=8)
    assert first.id.startswith("resp_") and first.store is True
    second = client.responses.create(model=smol.model, previous_response_id=first.id,
                                     input="What is my name?", temperature=0, max_output_tokens=8)
    assert second.previous_response_id == first.id
    # the second prompt holds the first turn (its input and its output) before the new input
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0
    # a third turn chains on the second
    third = client.responses.create(model=smol.model, previous_response_id=second.id,
                                    input="Thanks.", temperature=0, max_output_tokens=4)
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens


def test_stream_is_stored_too(smol):
    client = smol.openai()
    events = list(client.responses.create(model=smol.model, input="Say hi.", temperature=0,
                                          max_output_tokens=6, stream=True))
    rid = events[-1].response.id
    chained = client.responses.create(model=smol.model, previous_response_id=rid, input="Again.",
                                      temperature=0, max_output_tokens=4)
    assert chained.usage.input_tokens > events[-1].response.usage.input_tokens


def test_unknown_previous_response_id(smol):
    bogus = "resp_0123456789abcdef00000000"
    with pytest.raises(openai.BadRequestError) as e:
        smol.openai().responses.create(model=smol.model, previous_response_id=bogus, input="Hi",
                                       max_output_tokens=4)
    assert e.value.status_code == 400
    err = e.value.body
    assert bogus in err["message"]
    assert err["param"] == "previous_response_id"


def test_store_false_stores_nothing(smol):
    client = smol.openai()
    first = client.responses.create(model=smol.model, input="Hi", store=False, temperature=0,
                                    max_output_tokens=4)
    assert first.store is False
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=smol.model, previous_response_id=first.id, input="Again",
                                max_output_tokens=4)
    assert first.id in e.value.body["message"]
