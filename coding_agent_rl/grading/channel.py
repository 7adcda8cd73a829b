"""The host side of the grader plugin's result channel (the plugin is ``pytest_plugin.py``).

Per grading run the host picks a random plugin module name and a random key. The key reaches the
plugin through a descriptor the root-side runner opens on a root-only file (never argv or the
environment); the plugin's records come back through a root-owned file it appends to by an
inherited descriptor. :func:`read_records` verifies every line: the HMAC chain (each MAC covers
the previous MAC and the line's own body), consecutive sequence numbers, and the record count the
``final`` record states. A line that fails is *evidence*: only code running in the test process
could have written it. A missing ``final`` record is not evidence by itself (the process may have
been killed): the caller settles that with a control run. A verified line that is not a record
our plugin writes (not an object, a field of the wrong type) is evidence too, never an exception.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import pathlib
import re
import secrets
from typing import Any

SOURCE = pathlib.Path(__file__).with_name("pytest_plugin.py")
CHANNEL_FD = 198  # must match pytest_plugin.CHANNEL_FD
KEY_FD = 199  # must match pytest_plugin.KEY_FD
_MAC_SUFFIX = re.compile(rb',"m":"([0-9a-f]{64})"\}$')


def new_key() -> bytes:
    return secrets.token_hex(32).encode()


def new_module_name() -> str:
    return f"car_grader_{secrets.token_hex(6)}"


def plugin_source(workdir: str, test_files: tuple[str, ...], new_list: str) -> str:
    """The sandbox copy of the plugin: its source plus the call that activates it."""
    config = {"workdir": workdir, "test_files": list(test_files), "new_list": new_list}
    return SOURCE.read_text() + f"\n_activate({config!r})\n"


@dataclasses.dataclass
class Records:
    """What the plugin reported, after verification."""

    start: dict[str, Any] | None = None
    collected: list[str] | None = None
    collect_errors: list[str] = dataclasses.field(default_factory=list)
    tests: dict[str, str] = dataclasses.field(default_factory=dict)  # node id -> status
    rewritten: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    final: dict[str, Any] | None = None
    forged: list[str] = dataclasses.field(default_factory=list)  # evidence of tampering
    missing: list[str] = dataclasses.field(default_factory=list)  # gaps (not evidence alone)

    late_removed: list[list[str]] = dataclasses.field(default_factory=list)

    @property
    def removed(self) -> list[tuple[str, str]]:
        """New files the plugin itself removed before the tests ran (path, reason): at start,
        and once pytest had configured ``sys.path`` (the ``removed`` record)."""
        early = (self.start or {}).get("removed") or []
        return [(str(x[0]), str(x[1])) for x in [*early, *self.late_removed]]


def _worst(old: str | None, new: str) -> str:
    from coding_agent_rl.datasets.logparse import _RANK

    return new if old is None or _RANK.get(new, 5) > _RANK.get(old, 5) else old


def read_records(data: bytes, key: bytes) -> Records:
    """Verify and decode the channel's lines (see the module docstring)."""
    out = Records()
    mac = b""
    expected_seq = 0
    for i, line in enumerate(data.split(b"\n")):
        if not line.strip():
            continue
        m = _MAC_SUFFIX.search(line)
        body = line[: m.start()] + b"}" if m else b""
        want = hmac.new(key, mac + body, hashlib.sha256).hexdigest().encode() if m else b""
        if not m or not hmac.compare_digest(want, m.group(1)):
            out.forged.append(f"line {i + 1} of the result channel fails verification")
            continue
        mac = m.group(1)
        try:
            record = json.loads(body)
        except (ValueError, RecursionError):
            out.forged.append(f"line {i + 1} of the result channel is not JSON")
            continue
        problem = malformed(record)
        if problem:
            out.forged.append(f"line {i + 1} of the result channel is malformed: {problem}")
            continue
        if record["n"] != expected_seq:
            out.missing.append(f"records {expected_seq}..{record['n']} missing")
        expected_seq = record["n"] + 1
        _apply(out, record)
    if out.final is not None and out.final.get("records") != expected_seq:
        out.missing.append(f"final record counts {out.final.get('records')}, read {expected_seq}")
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _strs(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(v, str) for v in x)


# Per kind: field -> (check, what it must be). Fields not listed are not read.
_FIELDS: dict[str, dict[str, tuple[Any, str]]] = {
    "start": {
        "removed": (
            lambda x: (
                x is None or (isinstance(x, list) and all(_strs(v) and len(v) == 2 for v in x))
            ),
            "a list of [path, reason]",
        )
    },
    "removed": {
        "removed": (
            lambda x: isinstance(x, list) and all(_strs(v) and len(v) == 2 for v in x),
            "a list of [path, reason]",
        )
    },
    "collected": {"ids": (lambda x: x is None or _strs(x), "a list of strings")},
    "collect_error": {"id": (lambda x: isinstance(x, str), "a string")},
    "test": {
        "id": (lambda x: isinstance(x, str), "a string"),
        "s": (lambda x: isinstance(x, str), "a string"),
        "rw": (lambda x: x is None or _strs(x), "a list of strings"),
    },
    "final": {
        "exitstatus": (lambda x: x is None or _is_int(x), "an integer"),
        "records": (lambda x: x is None or _is_int(x), "an integer"),
    },
}


def malformed(record: Any) -> str | None:
    """Why ``record`` is not a record the plugin writes (None when it is)."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not an object"
    if not _is_int(record.get("n")) or record["n"] < 0:
        return "its sequence number is not a non-negative integer"
    for name, (check, what) in _FIELDS.get(str(record.get("k")), {}).items():
        if not check(record.get(name)):
            return f"{name!r} is not {what}"
    return None


def _apply(out: Records, record: dict[str, Any]) -> None:
    kind = record.get("k")
    if kind == "start":
        out.start = record
    elif kind == "collected":
        out.collected = [str(x) for x in record.get("ids") or []]
    elif kind == "collect_error":
        out.collect_errors.append(str(record.get("id")))
    elif kind == "test":
        test_id = str(record.get("id"))
        out.tests[test_id] = _worst(out.tests.get(test_id), str(record.get("s")))
        if record.get("rw"):
            out.rewritten[test_id] = [str(w) for w in record["rw"]]
    elif kind == "removed":
        out.late_removed += record.get("removed") or []
    elif kind == "final":
        out.final = record


def exit_status_problem(records: Records, exit_code: int) -> str | None:
    """Why pytest's real exit status does not fit the records (None when it does).

    pytest exits 0 when every collected test passed (or was skipped / xfailed), 1 when some
    failed, 2 when interrupted (collection errors), 5 when nothing was collected.
    """
    final = records.final or {}
    recorded = final.get("exitstatus")
    if recorded != exit_code:
        return f"pytest exited {exit_code} but its session ended with status {recorded}"
    bad = any(s in ("FAILED", "ERROR") for s in records.tests.values()) or records.collect_errors
    if exit_code == 0 and bad:
        return "pytest exited 0 although tests failed"
    if exit_code == 1 and not bad:
        return "pytest exited 1 although no test failed"
    if exit_code == 5 and records.tests:
        return "pytest reported no tests although tests ran"
    return None
