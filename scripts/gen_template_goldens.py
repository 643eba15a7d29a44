#!/usr/bin/env python3
"""Generates crates/text/tests/data/template_goldens.json: chat templates, conversations and the
exact strings transformers' `apply_chat_template(..., tokenize=False)` renders for them.

Templates: SmolLM2's, read from the real GGUF's `tokenizer.chat_template`, plus widely used
templates written out below (Llama-3.1 with tools, Qwen2.5, Qwen3, Gemma-3) and one that
exercises the remaining Jinja2/HF features (loop controls, Python string methods, Python-style
printing of None/bools/dicts/floats, every `tojson` option, `{% generation %}`, raise_exception).
Each case stores its template's name, messages, add_generation_prompt, extra variables, and either
`expected` (the rendered text) or `error` (the message of the exception the template raised).

Run: python3 scripts/gen_template_goldens.py  (needs transformers 5.x, jinja2, gguf-py; reads
$ISHIZUKI_TEST_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf, default /work/cache/models)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import jinja2
import transformers
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates/text/tests/data/template_goldens.json"
MODELS = Path(os.environ.get("ISHIZUKI_TEST_MODELS", "/work/cache/models"))
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

LLAMA3_1 = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

QWEN2_5 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

QWEN3 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

GEMMA3 = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
"""

# Not a real model's template: covers what the others do not, with indented tags so that
# trim_blocks/lstrip_blocks decide the whitespace.
FEATURES = r"""{# exercises HF/Jinja2 features beyond plain ChatML #}
{% set ns = namespace(count=0) %}
{% for message in messages %}
    {% if message.role == 'system' %}
        {% continue %}
    {% endif %}
    {% if message.role not in ['user', 'assistant'] %}
        {{ raise_exception('Unknown role: ' + message.role) }}
    {% endif %}
    {% if message.content.strip() == 'STOP' %}
        {% break %}
    {% endif %}
    {% set ns.count = ns.count + 1 %}
<{{ message.role.upper() }} n={{ loop.index }}/{{ loop.length }}>{{ message.content.strip() }}
    {% if message.content.startswith('#') and not message.content.endswith('!') %}
heading={{ message.content.lstrip('#').strip().title() }} words={{ message.content.split() | length }}
    {% endif %}
    {% for word in message.content.split()[:3] %}[{{ word.replace('"', "'") }}]{% endfor %}

    {% for key, value in message.items() %}
        {% if key in ['role', 'content'] %}{% continue %}{% endif %}
{{ key }}={{ value }};
    {% endfor %}
    {% if message.get('meta') is mapping %}
json={{ message.meta | tojson }}
sorted={{ message.meta | tojson(sort_keys=true) }}
indent={{ message.meta | tojson(indent=2) }}
tight={{ message.meta | tojson(separators=[',', ':']) }}
ascii={{ message.meta | tojson(ensure_ascii=true) }}
    {% endif %}
{% endfor %}
count={{ ns.count }} none={{ none }} t={{ true }} f={{ false }} half={{ 0.5 }} tiny={{ 0.00001 }}
list={{ [1, 'a', none, true, 2.0] }} str={{ none | string }}|{{ 1 | string }} default={{ missing | default('dflt') }}
roles={{ messages | map(attribute='role') | join(',') }} first={{ (messages | first).role }} last={{ (messages | last).role }}
{% generation %}gen:{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{% endgeneration %}

{% if add_generation_prompt %}
<ASSISTANT>
{% endif %}
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city — “quoted” & <escaped>",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "noop", "description": "Does nothing", "parameters": {"type": "object", "properties": {}}},
    },
]


def u(content):
    return {"role": "user", "content": content}


def a(content):
    return {"role": "assistant", "content": content}


def s(content):
    return {"role": "system", "content": content}


def case(name, template, messages, add_generation_prompt, extra=None):
    return {
        "name": name,
        "template": template,
        "messages": messages,
        "add_generation_prompt": add_generation_prompt,
        "extra": extra,
    }


def smollm2_cases():
    return [
        case("smollm2_single_user", "smollm2", [u("Name three colors.")], True),
        case("smollm2_system_user", "smollm2", [s("You are terse."), u("Hi")], True),
        case("smollm2_multi_turn_no_prompt", "smollm2", [u("Hi"), a("Hello! How can I help?"), u("Tell me a joke.")], False),
        case("smollm2_system_multi_turn", "smollm2", [s("Be kind."), u("a"), a("b"), u("c"), a("d")], False),
        case("smollm2_assistant_last_with_prompt", "smollm2", [u("Q?"), a("A.")], True),
        case("smollm2_unicode", "smollm2", [u("日本語で答えて 🍣 — café naïve עברית"), a("はい 😀")], True),
        case("smollm2_empty_content", "smollm2", [u(""), a(""), u("")], True),
        case(
            "smollm2_special_characters",
            "smollm2",
            [u("<|im_start|>x<|im_end|> {{ not_a_var }} {% raw %} \\n \\ \t tab & <b>html</b>")],
            True,
        ),
        case("smollm2_quotes_newlines", "smollm2", [u('He said "hi"\n\'ok\'\r\nline3\n\n'), a("  spaced  ")], True),
        case(
            "smollm2_long_conversation",
            "smollm2",
            [s("sys")] + [m for i in range(6) for m in (u(f"question {i}"), a(f"answer {i}"))] + [u("last")],
            True,
        ),
        case(
            "smollm2_extra_keys_and_nulls",
            "smollm2",
            [{"role": "user", "content": "hi", "name": "bob", "tool_calls": None}],
            False,
        ),
    ]


def tool_call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def llama_cases():
    date = {"date_string": "26 Jul 2024"}
    weather_call = {"role": "assistant", "tool_calls": [tool_call("get_weather", {"city": "Zürich", "days": 2})]}
    return [
        case("llama3_plain", "llama3_1", [s("  Be helpful.  "), u("Hi\n")], True, date),
        case("llama3_tools_in_user", "llama3_1", [s("sys"), u("Weather in Zürich?")], True, {**date, "tools": TOOLS}),
        case(
            "llama3_tools_in_system",
            "llama3_1",
            [u("Weather?"), weather_call, {"role": "tool", "content": {"temp": 21.5, "sky": "clear"}}],
            True,
            {**date, "tools": TOOLS, "tools_in_user_message": False},
        ),
        case(
            "llama3_ipython_text",
            "llama3_1",
            [u("x"), weather_call, {"role": "ipython", "content": "21 degrees"}, a("It is 21.")],
            False,
            date,
        ),
        case(
            "llama3_two_tool_calls_raise",
            "llama3_1",
            [u("x"), {"role": "assistant", "tool_calls": [tool_call("a", {}), tool_call("b", {})]}],
            False,
            date,
        ),
        case("llama3_tools_without_user_raise", "llama3_1", [s("only system")], True, {**date, "tools": TOOLS}),
    ]


def qwen_cases():
    calls = {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [tool_call("get_weather", {"city": "Paris"}), tool_call("noop", {})],
    }
    tool_turns = [
        u("Weather in Paris?"),
        calls,
        {"role": "tool", "content": '{"temp": 18}'},
        {"role": "tool", "content": "ok"},
        a("18 degrees."),
    ]
    return [
        case("qwen2_5_default_system", "qwen2_5", [u("Hello"), a("Hi!"), u("Bye")], True),
        case("qwen2_5_system", "qwen2_5", [s("Custom system."), u("Hello")], False),
        case("qwen2_5_tools", "qwen2_5", tool_turns, True, {"tools": TOOLS}),
        case("qwen3_no_tools", "qwen3", [u("Hi"), a("<think>\nhmm\n</think>\n\nHello!")], True),
        case(
            "qwen3_reasoning_content",
            "qwen3",
            [s("sys"), u("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "add them"}],
            False,
        ),
        case(
            "qwen3_reasoning_alias",
            "qwen3",
            [u("q"), {"role": "assistant", "content": "a", "reasoning": "because"}],
            False,
        ),
        case("qwen3_tools_thinking_off", "qwen3", tool_turns, True, {"tools": TOOLS, "enable_thinking": False}),
        case(
            "qwen3_tool_response_user",
            "qwen3",
            [u("first"), a("ok"), u("<tool_response>x</tool_response>"), a("<think>r</think>done")],
            False,
        ),
    ]


def gemma_cases():
    multimodal = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe this. "}]}
    return [
        case("gemma3_system", "gemma3", [s("Answer briefly."), u("Hi "), a(" Hello "), u("Bye")], True),
        case("gemma3_multimodal_list", "gemma3", [multimodal], True),
        case("gemma3_roles_raise", "gemma3", [u("a"), u("b")], True),
    ]


def feature_cases():
    meta = {"z": 1, "a": [True, None, 2.5], "ü": "naïve \"q\"", "nested": {"k": []}}
    return [
        case(
            "features_all",
            "features",
            [
                s("ignored"),
                u('# hello "big" world  '),
                {"role": "assistant", "content": "plain reply!", "name": "bot", "meta": meta, "score": 0.1},
                u("STOP"),
                u("never rendered"),
            ],
            True,
        ),
        case("features_no_prompt", "features", [u("one two three four"), a("#shout!")], False),
        case("features_unknown_role_raise", "features", [u("x"), {"role": "robot", "content": "beep"}], False),
    ]


# One-line templates for single behaviours, each rendered against SNIPPET_MESSAGES.
SNIPPETS = [
    "{{ 'a' ~ 'b' }}|{{ 3 / 2 }}|{{ 4 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -1 % 3 }}|{{ 2 ** 10 }}|{{ 0.1 + 0.2 }}",
    "{{ 1 == 1.0 }}|{{ 'a' in 'abc' }}|{{ true and 'x' }}|{{ none or 'y' }}|{{ 'x' if none else 'z' }}",
    "{{ messages[-1].role }}|{{ messages[1:] | length }}|{{ messages[::-1][0].role }}|{{ (messages | last).content | length }}",
    "{{ 'a,b'.split(',') }}|{{ 'a b  c'.split() }}|{{ 'x\ny'.splitlines() }}|{{ '-'.join(['a', 'b']) }}",
    "{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'ab'.upper() }}|{{ 'AB'.lower() }}|{{ 'hello world'.title() }}|{{ 'abc'.capitalize() }}",
    "{{ 'abc'.startswith('a') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abc'.find('c') }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'abc'.count('b') }}",
    "{{ '{} and {}'.format('x', 1) }}|{{ 'abc'[1:] }}|{{ 'abc'[-1] }}|{{ 'abc' | reverse }}|{{ 'x' * 3 }}",
    "{{ [3, 1, 2] | sort }}|{{ [1, 1, 2] | unique | list }}|{{ [1, 2] | min }}|{{ [1, 2] | max }}|{{ [1, 2.5] | sum }}|{{ range(3) | list }}",
    "{{ {'b': 1, 'a': 2} }}|{{ {'b': 1, 'a': 2} | tojson }}|{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}|{{ dict(x=1) | tojson }}",
    "{% for k, v in {'b': 1, 'a': [none]}.items() %}{{ k }}={{ v }};{% endfor %}|{{ {'a': 1}.get('a') }}|{{ {'a': 1}.get('z', 'd') }}",
    "{{ none | tojson }}|{{ 'é\t' | tojson }}|{{ [1, 'x'] | tojson }}|{{ 1.0 | tojson }}|{{ true | tojson }}|{{ 'x' | tojson(indent=2) }}",
    "{{ '3' | int + 1 }}|{{ 3 | float }}|{{ 2.7 | int }}|{{ 10 | string | length }}|{{ 'x' | default('d') }}|{{ '' | default('d', true) }}",
    "{{ messages | rejectattr('role', 'eq', 'system') | map(attribute='role') | list }}|{{ messages | selectattr('content') | list | length }}",
    "{% macro m(a, b='d') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}|{% filter upper %}up{% endfilter %}|{% raw %}{{ x }}{% endraw %}",
    "{% for m in messages %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{% if loop.previtem is defined %}<{{ loop.previtem.role }}{% endif %};{% endfor %}",
    "{% for i in range(10) %}{% if i is even %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{{ missing is defined }}|{{ none is none }}|{{ 'x' is string }}|{{ {} is mapping }}|{{ [1] is sequence }}|{{ 1 is number }}|{{ false is false }}|{{ 1 is true }}",
    "{% set ns = namespace(a=[]) %}{% set ns.a = ns.a + [1] %}{{ ns.a }}|{% set x = [1, 2] + [3] %}{{ x }}|{{ x | length }}",
    "  {% if true %}\n    kept indent\n  {% endif %}\n{%- if true %} dash {% endif -%}\n\nend {{- ' tight ' -}} x",
    "{{ messages[1].content | length }}|{{ messages[1].content[0] }}|{{ messages[1].content.upper() }}",
    "{{ nothing.here }}",
    "{{ messages[0].content.no_such_method() }}",
    "{{ '  multi\n  line' | indent(2) }}|{{ 'a  b' | wordcount if false else 'w' }}|{{ 'x y' | replace(' ', '_') }}|{{ 'Ab' | lower }}",
]

SNIPPET_MESSAGES = [s("You are a bot."), u("Grüße, ñandú 🦆!"), a("Hi")]


def snippet_cases():
    return [case(f"snippet_{i:02}", f"snippet_{i:02}", SNIPPET_MESSAGES, True) for i in range(len(SNIPPETS))]


def render(tokenizer, templates, c):
    template = templates[c["template"]]
    extra = dict(c["extra"] or {})
    tools = extra.pop("tools", None)
    try:
        text = tokenizer.apply_chat_template(
            c["messages"],
            chat_template=template["source"],
            tools=tools,
            tokenize=False,
            add_generation_prompt=c["add_generation_prompt"],
            bos_token=template["bos_token"],
            eos_token=template["eos_token"],
            **extra,
        )
        return {"expected": text}
    except jinja2.exceptions.TemplateError as err:
        # raise_exception raises the base class; its subclasses are engine errors (undefined, type)
        key = "error" if type(err) is jinja2.exceptions.TemplateError else "engine_error"
        return {key: str(err)}


def main():
    tokenizer = AutoTokenizer.from_pretrained(str(MODELS), gguf_file=SMOLLM2_GGUF)
    templates = {
        "smollm2": {"source": tokenizer.chat_template, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
        "llama3_1": {"source": LLAMA3_1, "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "qwen2_5": {"source": QWEN2_5, "bos_token": "", "eos_token": "<|im_end|>"},
        "qwen3": {"source": QWEN3, "bos_token": "", "eos_token": "<|im_end|>"},
        "gemma3": {"source": GEMMA3, "bos_token": "<bos>", "eos_token": "<eos>"},
        "features": {"source": FEATURES, "bos_token": "<s>", "eos_token": "</s>"},
    }
    for i, source in enumerate(SNIPPETS):
        templates[f"snippet_{i:02}"] = {"source": source, "bos_token": "<s>", "eos_token": "</s>"}
    cases = smollm2_cases() + llama_cases() + qwen_cases() + gemma_cases() + feature_cases() + snippet_cases()
    for c in cases:
        c.update(render(tokenizer, templates, c))
    golden = {
        "generator": "scripts/gen_template_goldens.py",
        "transformers_version": transformers.__version__,
        "jinja2_version": jinja2.__version__,
        "templates": templates,
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum("error" in c for c in cases)
    print(f"wrote {len(cases)} cases ({errors} raising) over {len(templates)} templates to {OUT}")


if __name__ == "__main__":
    main()
