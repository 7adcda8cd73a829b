"""Whether the image's Python satisfies what the repository and its lock ask for."""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet


def mismatch(requires: list[tuple[str, str]], python: str) -> str | None:
    """One line naming the first ``requires-python`` (with its file) that ``python`` (X.Y) does
    not satisfy, or None."""
    for spec, source in requires:
        text = spec.replace("^", ">=").strip()  # poetry's ^3.8
        try:
            ok = SpecifierSet(text).contains(f"{python}.0", prereleases=True) or SpecifierSet(
                text
            ).contains(python, prereleases=True)
        except InvalidSpecifier:
            continue
        if not ok:
            return (
                f"{source} requires Python {spec}, but the base image has Python {python} "
                "(the only one obtainable offline)"
            )
    return None
