"""Every slime flag the docs name exists in slime's own argument parser (the vendored
``slime/utils/arguments.py``): Megatron's parser drops unknown flags silently, so a wrong name
in a launch script copied from our docs is never reported by slime.

Scanned: whole pages whose title names slime (docs/slime.md), the README's slime sections
(headings that name slime) and, in README.md, docs/*.md and
CONTRIBUTING.md, every other line that names slime (but table rows about our own commands). ``--sglang-*`` flags come from SGLang's own
``ServerArgs`` with slime's prefix (SGLang is not installed here): they count when slime's code
reads the attribute (``args.sglang_...``)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from support.slime_vendor import slime

REPO = Path(__file__).resolve().parents[2]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def slime_flags() -> set[str]:
    """Every option string of slime's own parser (its flags and its SGLang router flags)."""
    s = slime()
    from slime.backends.sglang_utils.arguments import add_sglang_arguments

    parser = argparse.ArgumentParser(allow_abbrev=False)
    s.arguments.get_slime_extra_args_provider()(parser)
    add_sglang_arguments(parser)
    return {o for a in parser._actions for o in a.option_strings}


def slime_reads(attr: str) -> bool:
    """Whether slime's code reads ``args.<attr>`` / ``getattr(args, "<attr>")`` (SGLang's own
    flags, prefixed by slime)."""
    used = re.compile(rf"""(\.|["']){attr}\b""")
    for folder in ("slime", "examples"):
        for path in (slime().src / folder).rglob("*.py"):
            if used.search(path.read_text()):
                return True
    return False


def slime_context(text: str, whole_sections: bool) -> list[tuple[int, str]]:
    """(line number, line) of the text that speaks of slime."""
    out, in_section = [], False
    title = text.split("\n", 1)[0]
    whole_page = title.startswith("# ") and "slime" in title.lower()
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith(("## ", "### ")):  # a section ("# " lines in code blocks are not)
            in_section = "slime" in line.lower()
        if line.startswith("|") and not (in_section or whole_page):
            continue  # a table of our own commands that compares with slime
        if whole_page or (whole_sections and in_section) or "slime" in line.lower():
            out.append((n, line))
    return out


def named_flags(paths: list[Path]) -> list[tuple[str, int, str]]:
    found = []
    for path in paths:
        readme = path.name == "README.md"
        for n, line in slime_context(path.read_text(), whole_sections=readme):
            for flag in FLAG.findall(line):
                found.append((f"{path.relative_to(REPO)}:{n}", n, flag))
    return found


def unknown(found: list[tuple[str, int, str]], flags: set[str]) -> list[str]:
    bad = []
    for where, _, flag in found:
        if flag in flags:
            continue
        if flag.startswith("--sglang-") and slime_reads(flag[2:].replace("-", "_")):
            continue
        bad.append(f"{where}: {flag}")
    return bad


def doc_paths() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]


def test_every_slime_flag_in_the_docs_exists_in_slimes_parser():
    flags = slime_flags()
    found = named_flags(doc_paths())
    names = {f for _, _, f in found}
    # the launch script (docs/slime.md) is scanned (a scanner that sees nothing proves nothing)
    assert {"--custom-generate-function-path", "--custom-config-path"} <= names
    assert unknown(found, flags) == []


@pytest.mark.parametrize(
    "line",
    [
        "  --advantage-estimator grpo --rewards-normalization \\",  # only --disable-... exists
        "  --rollout-interaction-env-path my_envs/calc.py \\",  # a YAML key, not a flag
        "point slime's `--rollout-interaction-env-path` at it",
        "slime: `--sglang-no-such-parser`",
    ],
)
def test_the_check_catches_names_slime_does_not_have(tmp_path, line):
    """Names slime does not have (and a made-up SGLang one) are caught, in a slime
    section of a README and on a line naming slime elsewhere."""
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## With slime\n\n```\npython train.py ... \\\n{line}\n```\n")
    other = tmp_path / "notes.md"
    other.write_text(f"Under slime: {line}\n")
    page = tmp_path / "slime.md"
    page.write_text(f"# With slime\n\n## Launch\n\n```\npython train.py ... \\\n{line}\n```\n")
    for path in (readme, other, page):
        found = [
            (str(path), n, flag)
            for n, text in slime_context(path.read_text(), path.name == "README.md")
            for flag in FLAG.findall(text)
        ]
        assert unknown(found, slime_flags()), path
