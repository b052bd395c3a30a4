"""Jinja features that Hugging Face chat templates use, rendered by us and by transformers'
apply_chat_template(chat_template=...) on the same messages: our renderer must be exact for
any model folder, not only the two npm tokenizers."""
from __future__ import annotations

import json
import shutil

import pytest

from conversations import MUL_TOOL, WEATHER_TOOL
from models import tokenizer_dir

MESSAGES = [
    {"role": "system", "content": "  You are helpful.  "},
    {"role": "user", "content": "Hello <b>world</b> & \"friends\""},
    {"role": "assistant", "content": "Hi!", "tool_calls": [
        {"type": "function", "function": {"name": "multiply", "arguments": {"a": 2, "b": 3.5, "c": [True, None]}}}]},
    {"role": "tool", "content": "7.0"},
    {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nDone: 7."},
]

TEMPLATES = {
    "tojson_default": "{% for t in tools %}{{ t | tojson }}\n{% endfor %}",
    "tojson_indent": "{{ tools[0] | tojson(indent=4) }}",
    "tojson_message": "{% for m in messages %}{{ m | tojson }}|{% endfor %}",
    "tojson_sorted_compact": "{{ tools | tojson(sort_keys=true, separators=(',', ':')) }}",
    "python_printing": "{{ messages[2].tool_calls[0].function.arguments }}|{{ none }}|{{ true }}|{{ [1, 'x'] }}|"
                       "{{ 2.5 }}|{{ 10 / 4 }}|{{ 7 // 2 }}|{{ 1e20 }}",
    "string_methods": "{% for m in messages %}{{ m.content.strip() | upper }}/{{ m.content.lstrip().startswith('You') }}/"
                      "{{ m.content.split(' ') | length }}/{{ m.content.replace('o', '0') }}/"
                      "{{ m.content.endswith('.') }}/{{ m.content.rstrip('.') }}/{{ m.content.title() }}\n{% endfor %}",
    "think_split": "{% for m in messages if m.role == 'assistant' %}"
                   "[{{ m.content.split('</think>')[-1].lstrip('\\n') }}]"
                   "[{{ m.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]{% endfor %}",
    "namespace_and_reverse": "{% set ns = namespace(last=-1, n=0) %}{% for m in messages[::-1] %}"
                             "{% if ns.last < 0 and m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}"
                             "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.last }} {{ ns.n }}",
    "loop_controls": "{% for m in messages %}{% if m.role == 'tool' %}{% break %}{% endif %}"
                     "{% if m.role == 'system' %}{% continue %}{% endif %}{{ loop.index }}:{{ m.role }} {% endfor %}",
    "loop_attributes": "{% for m in messages %}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}"
                       "{% if loop.previtem is defined %}<{{ loop.previtem.role }}{% endif %}"
                       "{% if loop.nextitem is defined %}>{{ loop.nextitem.role }}{% endif %} {% endfor %}",
    "filters": "{{ messages | selectattr('role', 'equalto', 'assistant') | list | length }} "
               "{{ messages | map(attribute='role') | join(',') }} {{ messages | last | attr('role') }} "
               "{{ messages[0].content | trim }} {{ (messages | first).role }} {{ tools | map(attribute='function') "
               "| map(attribute='name') | list }} {{ messages[9] | default('none-here') }}",
    "dict_methods": "{% for k, v in tools[0].function.parameters.properties.items() %}{{ k }}={{ v.type }};{% endfor %}"
                    "{{ tools[0].function.get('missing', 'dflt') }} {{ tools[0].function.keys() | list }}",
    "tests": "{% for m in messages %}{{ m.content is string }}{{ m.tool_calls is defined }}"
             "{{ m.tool_calls is iterable }}{{ m is mapping }}{{ m.missing is none }} {% endfor %}",
    "raise_exception": "{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant', 'tool'] %}"
                       "{{ raise_exception('bad role') }}{% endif %}{% endfor %}ok",
    "whitespace_control": "{%- for m in messages %}\n    {%- if m.role == 'user' %}\n        {{- 'U:' + m.content }}\n"
                          "    {% elif m.role == 'assistant' -%}\n  A:{{ m.content }}\n    {% endif %}\n{%- endfor %}\n",
    "trim_lstrip_blocks": "{% for m in messages %}\n  {% if m.role %}\n{{ m.role }}\n  {% endif %}\n{% endfor %}\n",
    "string_ops": "{{ 'ab' * 3 }} {{ 'x' ~ 1 ~ none }} {{ '%s-%s' | format('a', 'b') }} {{ 'abc'[1:] }} "
                  "{{ 'a,b'.split(',') }} {{ messages | length is divisibleby 5 }} {{ range(3) | list }}",
    "generation_prompt_and_tokens": "{{ bos_token if bos_token is defined else 'nobos' }}|{{ eos_token }}|"
                                    "{{ add_generation_prompt }}|{{ tools is none }}",
    "set_block_and_macro": "{% macro render(m) %}[{{ m.role }}]{% endmacro %}{% set out %}{% for m in messages %}"
                           "{{ render(m) }}{% endfor %}{% endset %}{{ out | trim }}",
    "string_filter": "{{ none | string }} {{ true | string }} {{ [1, 'a', none] | string }} {{ 'x' | string }} "
                     "{{ 3 | string }} {{ 2.50 | string }} {{ {'k': false} | string }} {{ ('a' ~ 1 | string) }}",
    "dict_builtin": "{% set d = dict(a=1, b='x') %}{{ d | tojson }} {{ d.a }}",
    "unicode": "{{ messages[1].content | length }} {{ 'Zürich 🙂' | upper }} {{ 'Zürich 🙂' | tojson }}",
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One tokenizer folder per template: Qwen3's tokenizer.json, the template as chat_template."""
    base = json.loads((tokenizer_dir("qwen3") / "tokenizer_config.json").read_text())
    out = {}
    for name, template in TEMPLATES.items():
        folder = tmp_path_factory.mktemp(name)
        shutil.copyfile(tokenizer_dir("qwen3") / "tokenizer.json", folder / "tokenizer.json")
        (folder / "tokenizer_config.json").write_text(json.dumps({**base, "chat_template": template}))
        out[name] = folder
    return out


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_feature_matches_transformers(probe, folders, hf_tokenizers, name):
    hf = hf_tokenizers["qwen3"]
    tools = [WEATHER_TOOL, MUL_TOOL]
    for gen in (False, True):
        expected = hf.apply_chat_template(MESSAGES, tools=tools, chat_template=TEMPLATES[name], tokenize=False,
                                          add_generation_prompt=gen)
        ours = probe.ok(op="render", dir=str(folders[name]), messages=MESSAGES, tools=tools,
                        add_generation_prompt=gen)
        assert ours["text"] == expected


def test_raise_exception_reaches_the_caller(probe, tmp_path):
    shutil.copyfile(tokenizer_dir("qwen3") / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with "
                          "a user message') }}{% endif %}"}))
    answer = probe.ask(op="render", dir=str(tmp_path), messages=[{"role": "assistant", "content": "x"}])
    assert answer["error"] == "chat_template raised an exception: Conversations must start with a user message"
