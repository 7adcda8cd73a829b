"""Token ids -> display text for the report, with a fallback to bare ids.

The page ships one table ``{id: text}`` for the ids the run actually uses, so each token is
decoded once here, never in the browser. Each id is decoded on its own: a character split over
several byte-level tokens shows as U+FFFD in each piece (the hover still names the id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any


@dataclasses.dataclass
class TokenTable:
    spec: str | None
    texts: dict[int, str]  # empty when not decoded
    special: set[int]  # added / control tokens (<|im_start|>, <tool_call>, <think>, ...)
    decoded: bool
    note: str  # one line for the page: what was used, or why tokens are shown as ids


def _load(spec: str) -> Any:
    from coding_agent_rl.tokenizer import load_tokenizer

    return load_tokenizer(spec)


def build_token_table(spec: str | None, ids: Iterable[int]) -> TokenTable:
    """Decode every distinct id in ``ids`` with the tokenizer ``spec`` (see ``load_tokenizer``).

    Never raises: when no spec is given, the loader is missing or the spec cannot load, the
    table is empty and ``note`` says why (the page then shows token ids).
    """
    if not spec:
        return TokenTable(None, {}, set(), False, "no tokenizer given (--tokenizer); showing ids")
    try:
        tok = _load(spec)
    except ImportError as e:
        return TokenTable(
            spec, {}, set(), False, f"tokenizer loader unavailable ({e}); showing ids"
        )
    except Exception as e:  # any loader failure degrades the view, it must not stop the report
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        return TokenTable(
            spec, {}, set(), False, f"tokenizer {spec!r} failed to load ({reason}); showing ids"
        )

    added = getattr(tok, "added_tokens_decoder", None) or {}
    special = {int(i) for i in added} | {int(i) for i in getattr(tok, "all_special_ids", [])}
    texts: dict[int, str] = {}
    bad = 0
    for i in sorted(set(ids)):
        try:
            text = tok.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        except Exception:
            text = ""
        if text:
            texts[i] = text
        else:  # outside the vocabulary (fast tokenizers decode it to ""): shown as the id
            bad += 1
    note = f"tokens decoded with {spec!r} ({len(texts):,} distinct ids)"
    if bad:
        note += f"; {bad} id(s) outside the vocabulary shown as ids"
    return TokenTable(spec, texts, special & set(texts), True, note)
