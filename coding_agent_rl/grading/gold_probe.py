"""Run the fresh-input probes of :mod:`.gold_canaries` against the gold code, in a sandbox.

One sandbox per row, at validation time: the task's preparation, the gold and the hidden test
patches applied, each test file replaced by its copy with the probes appended, pytest run twice
on the probes only. Only values both runs recorded alike are kept. Details:
docs/modules/grading.md.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.grading import gold_canaries as gc
from coding_agent_rl.grading.git import GIT, run_checked
from coding_agent_rl.grading.workspace import SNAPSHOT_ENV, prepare_script, q

OUT = "/tmp/car-gold-probe.jsonl"
RUNS = 2


@dataclasses.dataclass
class Derivation:
    variants: list[gc.Variant]
    sources: dict[str, str]  # test file -> its text after the test patch (the store's key)
    skipped: list[str]  # "test id: why it got no fresh canary"

    def record(self) -> dict[str, Any]:
        return {
            "variants": len(self.variants),
            "tests": len({v.source for v in self.variants}),
            "skipped": self.skipped[:20],
        }


def _python(row: TaskRow) -> str:
    """The interpreter the task's pytest runs under: ``X`` of ``X -m pytest`` in ``test_cmd``."""
    words = (row.test_cmd or "").split()
    if "-m" in words and words.index("-m") > 0 and words[words.index("-m") + 1 :][:1] == ["pytest"]:
        return words[words.index("-m") - 1]
    return "python3"


async def derive_row(
    row: TaskRow,
    gold: str,
    *,
    backend: str = "docker",
    sandbox_options: dict[str, Any] | None = None,
    rng: random.Random | None = None,
    timeout: float = 600,
) -> Derivation:
    """The fresh-input variants of ``row``'s fail-to-pass tests, valued by the gold code."""
    from coding_agent_rl.grading.prepared import grading_sandbox

    rng = rng or random.SystemRandom()
    wd = q(row.workdir)
    async with grading_sandbox(backend, sandbox_options, row) as sb:
        await run_checked(sb, prepare_script(row), "preparing the probe sandbox", env=SNAPSHOT_ENV)
        await sb.write_file("/tmp/car-gold.diff", gold.encode(), mode=0o600)
        apply = f"cd {wd}\n{GIT} apply --whitespace=nowarn /tmp/car-gold.diff\n"
        if row.test_patch:
            await sb.write_file("/tmp/car-tests.diff", row.test_patch.encode(), mode=0o600)
            apply += f"{GIT} apply --whitespace=nowarn /tmp/car-tests.diff\n"
        await run_checked(sb, apply, "applying the gold and test patches")
        sources: dict[str, str] = {}
        variants: list[gc.Variant] = []
        skipped: list[str] = []
        names: dict[str, dict[str, str]] = {}
        for path in row.test_files:
            try:
                text = str(await sb.read_file(f"{row.workdir}/{path}"))
                made, why = gc.probes(text, path, row.fail_to_pass, rng)
                probe_text, names[path] = gc.probe_file(text, made)
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as e:
                skipped.append(f"{path}: {type(e).__name__}")
                continue
            sources[path], skipped = text, skipped + why
            variants += made
            await sb.write_file(f"{row.workdir}/{path}", probe_text.encode(), mode=0o644)
        selected = [(p, n) for p, ns in names.items() if ns for n in [" or ".join(ns)]]
        outputs = []
        for _ in range(RUNS if selected else 0):
            script = f"rm -f {OUT}\ncd {wd}\n" + "".join(
                f"{CAR_ENV}={OUT} {q(_python(row))} -m pytest -q -p no:cacheprovider "
                f"{q(p)} -k {q(k)} >/dev/null 2>&1 || true\n"
                for p, k in selected
            )
            script += f"cat {OUT} 2>/dev/null || true\n"
            r = await run_checked(sb, script, "running the gold probes", timeout=timeout)
            outputs.append(r.stdout)
    kept = gc.derive(variants, gc.parse_records(outputs))
    lost = {v.source for v in variants} - {v.source for v in kept}
    skipped += [f"{s}: no deterministic literal value from the gold code" for s in sorted(lost)]
    return Derivation(kept, sources, skipped)


CAR_ENV = gc.PROBE_ENV


async def derive_and_store(
    row: TaskRow,
    gold: str,
    *,
    backend: str,
    sandbox_options: dict[str, Any] | None,
    store: Any = None,
) -> dict[str, Any]:
    """:func:`derive_row`, written to ``store`` (default: the cache root's); what the report
    shows (an exception's one line where the derivation failed: the row stays valid)."""
    from coding_agent_rl.grading.gold_store import default_store, gold_of

    try:
        d = await derive_row(row, gold, backend=backend, sandbox_options=sandbox_options)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    (store or default_store()).put(row.instance_id, gold_of(row), d.sources, d.variants)
    return d.record()
