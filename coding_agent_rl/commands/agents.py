"""``coding-agent-rl agents list | fetch [NAME...] | table``: the agent CLIs, their host cache and
what each offers (the capability table in docs/agents.md)."""

from __future__ import annotations

import argparse
import time

from coding_agent_rl.harness import HARNESSES, pyvenv
from coding_agent_rl.harness.base import BaseHarness
from coding_agent_rl.harness.cache import (
    FetchError,
    NpmPackage,
    cached_tarball,
    fetch,
    override_tarball,
    size_of,
    unpack_dir,
    unpacked,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="known agent CLIs, pinned versions, cache state")
    f = sub.add_parser("fetch", help="download (npm pack), verify and unpack into the cache")
    f.add_argument("names", nargs="*", metavar="NAME", help="harness names (default: all)")
    sub.add_parser("table", help="what each CLI offers and how it is mapped (Markdown)")


def _harness_classes(names: list[str]) -> list[type[BaseHarness]]:
    from coding_agent_rl.errors import UserError

    known = HARNESSES.names()
    bad = [n for n in names if n not in known]
    if bad:
        raise UserError(f"unknown agent(s) {', '.join(bad)}; known: {', '.join(known)}")
    return [HARNESSES.load(n) for n in names or known]


def _state(pkg: NpmPackage) -> str:
    try:
        override = override_tarball(pkg)
    except FetchError as e:
        return f"error: {e}"
    tarball = override or cached_tarball(pkg)
    if not tarball.exists():
        return "not fetched"
    ready = (unpack_dir(pkg, tarball) / ".complete").exists()
    origin = f"{pkg.tarball_env}={override}" if override else str(tarball)
    return f"{'ready' if ready else 'fetched'} ({origin})"


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.errors import UserError

    if args.action == "table":
        from coding_agent_rl.harness.capabilities import markdown

        rows = {c.name: c.capabilities for c in _harness_classes([]) if c.capabilities}
        print(markdown(rows), end="")
        return 0
    if args.action == "list":
        for cls in _harness_classes([]):
            for pkg in cls.packages():
                print(f"{cls.name:12} {pkg.spec:48} {_state(pkg)}")
            if cls.python is not None:
                print(f"{cls.name:12} {cls.python.spec:48} {pyvenv.state(cls.python)}")
        return 0
    failed = 0
    for cls in _harness_classes(args.names):
        for pkg in cls.packages():
            t0 = time.monotonic()
            try:
                fetch(pkg)
                t1 = time.monotonic()
                files = unpacked(pkg)
            except FetchError as e:
                print(f"{cls.name}: FAILED: {e}")
                failed += 1
                continue
            size = sum(size_of(p) for p in files.values()) >> 20
            print(
                f"{cls.name}: {pkg.spec} ready ({size} MB unpacked; fetch {t1 - t0:.1f}s, "
                f"verify+unpack {time.monotonic() - t1:.1f}s) in "
                f"{next(iter(files.values())).parent}"
            )
        if cls.python is not None:
            t0 = time.monotonic()
            try:
                folder = pyvenv.build(cls.python)
            except FetchError as e:
                print(f"{cls.name}: FAILED: {e}")
                failed += 1
                continue
            print(
                f"{cls.name}: {cls.python.spec} ready ({size_of(folder) >> 20} MB; fetch, install "
                f"and compile {time.monotonic() - t0:.1f}s) in {folder}"
            )
    if failed:
        raise UserError(f"{failed} agent(s) could not be fetched")
    return 0
