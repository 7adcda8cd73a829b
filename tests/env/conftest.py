"""Fixtures for the native-loop tests: the real Qwen3 tokenizer, a second real HF tokenizer with a
Llama-3-style chat template (written here, over the same offline vocabulary plus Llama-3's header
tokens), and real CPU policy servers over HTTP with the real SGLang client."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from coding_agent_rl.env.encoding import ChatEncoder
from coding_agent_rl.model.sglang import SGLangClient
from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.policy.server import PolicyServer
from coding_agent_rl.tokenizer import qwen3_tokenizer_dir

# Llama-3-style: <|begin_of_text|>, one header per turn, <|eot_id|> closes a turn (no newline
# after it), tool results in an "ipython" turn, tool calls as JSON in <tool_call> tags.
LLAMA3_STYLE_TEMPLATE = """
{%- macro text(content) -%}
{%- if content is string -%}{{ content }}{%- elif content is none -%}{%- else -%}
{%- for part in content -%}{%- if part.text is defined -%}{{ part.text }}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- set sys = messages[0].content if messages and messages[0].role == 'system' else none -%}
{%- if sys is not none or tools -%}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' -}}
{%- if sys is not none -%}{{ text(sys) }}{%- endif -%}
{%- if tools -%}
{{- '\\n\\nTools (answer with <tool_call>{"name": ..., "arguments": {...}}</tool_call>):' -}}
{%- for tool in tools -%}{{ '\\n' + (tool | tojson) }}{%- endfor -%}
{%- endif -%}
{{- '<|eot_id|>' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'assistant' -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' + (text(message.content) | trim) -}}
{%- for call in (message.tool_calls or []) -%}
{%- set fn = call.function if call.function is defined else call -%}
{{- '<tool_call>{"name": "' + fn.name + '", "arguments": ' + (fn.arguments | tojson) + '}</tool_call>' -}}
{%- endfor -%}
{{- '<|eot_id|>' -}}
{%- elif message.role == 'tool' -%}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + text(message.content) + '<|eot_id|>' -}}
{%- else -%}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + text(message.content) + '<|eot_id|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}
"""
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


@pytest.fixture(scope="session")
def encoder(tokenizer) -> ChatEncoder:
    return ChatEncoder(tokenizer)


@pytest.fixture(scope="session")
def llama3_style_dir(tmp_path_factory) -> pathlib.Path:
    """A real HF tokenizer directory: the Qwen vocabulary plus Llama-3's header tokens (added
    as special tokens) and the Llama-3-style template above."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    tok.add_special_tokens({"additional_special_tokens": LLAMA3_SPECIALS})
    tok.bos_token, tok.eos_token = "<|begin_of_text|>", "<|eot_id|>"
    tok.chat_template = LLAMA3_STYLE_TEMPLATE
    out = tmp_path_factory.mktemp("llama3-style-tokenizer")
    tok.save_pretrained(str(out))
    return out


@pytest.fixture(scope="session")
def llama3_tokenizer(llama3_style_dir) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(llama3_style_dir))


@pytest.fixture
async def scripted_engine(tokenizer) -> AsyncIterator[Callable[..., Any]]:
    """``start(script, tool_parser="qwen25") -> (SGLangClient, PolicyServer)``: the scripted CPU
    policy behind a real /generate server, reached with the real client."""
    started: list[Any] = []

    async def start(script: dict, tool_parser: str = "qwen25", policy: Any = None):
        server = PolicyServer(policy or ScriptedPolicy(script), tokenizer, tool_parser)
        url = await server.start()
        client = SGLangClient(url, connect_retries=0)
        started.append((server, client))
        return client, server

    yield start
    for server, client in started:
        await client.close()
        await server.stop()


@pytest.fixture(scope="session")
def rows(example_images: None, example_rows: dict[str, Any]) -> dict[str, Any]:
    """The example tasks by short name (``slugify``, ``pager``, ...), their images built."""
    return example_rows


@pytest.fixture
async def fresh_env_generate() -> AsyncIterator[None]:
    """coding_agent_rl.generate_native's per-process runtime, emptied around a test and stopped
    after it (its clients are bound to the test's event loop)."""
    from coding_agent_rl import generate_native

    def clear() -> None:
        generate_native._runtime = generate_native._runtime_lock = generate_native._writer = None

    clear()
    yield
    if generate_native._runtime is not None:
        await generate_native._runtime.stop()
    clear()


@pytest.fixture
async def openai_endpoint(tokenizer) -> AsyncIterator[Callable[..., Any]]:
    """``start(script) -> base URL`` of an OpenAI-compatible server: our adapter (sessions
    admitted on first use) in front of the scripted CPU policy."""
    from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
    from coding_agent_rl.model.render import Renderer

    started: list[Any] = []

    async def start(script: dict) -> str:
        policy = PolicyServer(ScriptedPolicy(script), tokenizer, "qwen25")
        adapter = AdapterServer(
            AdapterConfig(
                sglang_url=await policy.start(), renderer=Renderer(tokenizer), auto_open=True
            )
        )
        started.extend([policy, adapter])
        return await adapter.start()

    yield start
    for server in reversed(started):
        await server.stop()
