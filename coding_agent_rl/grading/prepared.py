"""A grading sandbox brought to its base state before the agent's diff exists.

:class:`GradingSandbox` creates and prepares it in the background (image, ``pre_commands``, test
user, hidden test patch, blinded test files, the plugin and the run's key) and hands it to
``grade(..., sandbox=...)``; leaving its ``async with`` destroys it on every path. Usage and the
bundle that carries the staged files: docs/modules/grading.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import logging
import posixpath
import shlex
import tarfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.grading import channel, compare_rewrite
from coding_agent_rl.grading.canaries import Blinding, Canary, CanaryPlan, plan_canaries
from coding_agent_rl.grading.canaries_legacy import legacy_plan
from coding_agent_rl.grading.defences import Defences, result_method
from coding_agent_rl.grading.git import save_git_meta
from coding_agent_rl.grading.gold_equality import gold_dunders, gold_py_sources, own_pairs
from coding_agent_rl.grading.gold_store import fresh_for
from coding_agent_rl.grading.runner import TEST_UID, TestRunner
from coding_agent_rl.grading.workspace import (
    GIT,
    SNAPSHOT_ENV,
    list_script,
    parse_base,
    parse_list,
    prepare_script,
    restore_script,
    run_checked,
)
from coding_agent_rl.patches.files import patch_paths
from coding_agent_rl.sandbox import BACKENDS, Sandbox, create_sandbox
from coding_agent_rl.sandbox.base import NetworkUnsupported
from coding_agent_rl.sandbox.capped_read import EMIT, emit_command, parse_emitted
from coding_agent_rl.sandbox.task import task_options

q = shlex.quote
log = logging.getLogger(__name__)
AGENT_DIFF = "{dir}/agent.diff"  # where grade.py writes the applied diff (the helper reads it)
VIEW_BUDGET = 3 * 1024 * 1024  # test-file bytes read back for canary derivation, all files
GOLD_BUDGET = 4 * 1024 * 1024  # base bytes of the gold patch's source files, all files


def grading_network(backend: str) -> str:
    """``"none"``, or why a grading sandbox of ``backend`` keeps its network (for the record)."""
    try:
        BACKENDS.load(backend).network_options("none")
    except NetworkUnsupported as e:
        return f"on ({e})"
    return "none"


def grading_sandbox(
    backend: str, options: dict[str, Any] | None, row: TaskRow, *, template: bool = False
) -> Sandbox:
    """A not-yet-started grading sandbox for ``row`` (``template``: one made to be
    snapshotted, ``Sandbox.template_options``)."""
    opts = sandbox_options_for(backend, options, row)
    if template:
        opts = BACKENDS.load(backend).template_options(opts)
    return create_sandbox(backend, image=row.image, **opts)


def sandbox_options_for(
    backend: str, options: dict[str, Any] | None, row: TaskRow | None = None
) -> dict[str, Any]:
    """``options`` with the network off (where the backend can: :func:`grading_network`) and,
    given the ``row``, its resource limits and its workdir on the capped disk."""
    opts = dict(options or {})
    with contextlib.suppress(NetworkUnsupported):  # the rollout record says so
        # whatever network the agent's sandboxes were given
        opts.update(BACKENDS.load(backend).network_options("none"))
    if row is not None:
        opts = task_options(backend, opts, resources=row.resources, writable=[row.workdir])
    return opts


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A grading sandbox at the task's base, before the agent's diff went in."""

    sb: Sandbox
    runner: TestRunner
    base: str  # the snapshot commit (the same id as in the agent sandbox)
    before: frozenset[str]  # paths that differ from HEAD before the diff is applied
    test_diff: str | None  # where the hidden test patch was uploaded
    method: str = "log"  # defences.result_method
    module: str = ""  # the plugin's module name in this sandbox
    key: bytes = b""
    canaries: tuple[Canary, ...] = ()
    staged: tuple[str, ...] = ()  # test files replaced by their canary-bearing copies
    blinding: Blinding = dataclasses.field(default_factory=Blinding)  # blinded -> task's names
    compare: str = ""  # the comparison helper's module name ("": strict_compare off)
    compare_notes: tuple[str, ...] = ()  # staged test files left with native comparisons, why

    @property
    def before_file(self) -> str:
        """``before`` in the sandbox, NUL-separated (see :func:`list_script`)."""
        return f"{self.runner.dir}/before.z"

    @property
    def plugin_file(self) -> str:
        return f"{self.runner.plugin_dir}/{self.module}.py"

    @property
    def new_list(self) -> str:
        return f"{self.runner.dir}/new.z"

    def unpack_script(self) -> str:
        """Unpack the bundle (idempotent): plugin, key, staged test files, the task's scripts."""
        b = q(f"{self.runner.dir}/bundle.tar")
        return f"if [ -f {b} ]; then tar -xf {b} -C / && rm -f {b}; fi\n"

    def reset_script(self, row: TaskRow, sneaked: list[str]) -> str:
        """Put ``sneaked`` and the test files back to the base, apply the test patch, put the
        canary-bearing test files in place, hand the tree to the test user."""
        wd, base, runner = row.workdir, self.base, self.runner
        script = self.unpack_script() + f"cd {q(wd)}\n"
        script += restore_script(base, sneaked + list(row.test_files))
        if row.test_patch:
            assert self.test_diff is not None
            undo = restore_script(base, patch_paths(row.test_patch))
            script += _TEST_PATCH.format(git=GIT, tp=q(self.test_diff), undo=undo or ":")
        for path in self.staged:
            script += f"cp -- {q(f'{runner.dir}/staged/{path}')} {q(path)}\n"
        if runner.as_user:  # files the test patch created belong to root; hand them over too
            script += f"chown -R {TEST_UID}:{TEST_UID} {q(wd)}\n"
        return script


# The hidden tests must apply to the base as they are: git apply, else patch (no --3way).
_TEST_PATCH = """if ! {git} apply --whitespace=nowarn {tp} > {tp}.log 2>&1; then
  {undo}
  if ! patch --batch --fuzz=5 -p1 --forward --no-backup-if-mismatch -i {tp} >> {tp}.log 2>&1; then
    echo "test_patch does not apply:" >&2; tail -c 1500 {tp}.log >&2; exit 1
  fi
fi
"""


def _view_script(row: TaskRow, runner: TestRunner, test_diff: str | None) -> str:
    """Print each test file as the hidden tests leave it (base + test patch), for canaries, and
    the base text of the source files the gold patch changes (for the grader's equality)."""
    v = f"{runner.dir}/view"
    files = list(row.test_files)
    gold = gold_py_sources(row.patch or "", row.test_files)
    script = f"rm -rf {q(v)}; mkdir -p {q(v)}; chmod 700 {q(v)}\n"  # root-only, as test.diff
    for f in files:
        target = q(f"{v}/{f}")
        script += (
            f"if {GIT} cat-file -e {q('HEAD:' + f)} 2>/dev/null; then "
            f"mkdir -p {q(posixpath.dirname(f'{v}/{f}'))} && {GIT} show {q('HEAD:' + f)} > {target}; fi\n"
        )
    if test_diff:
        includes = " ".join(q(f"--include={f}") for f in files)
        script += (
            f"( cd {q(v)} && {GIT} apply --whitespace=nowarn {includes} {q(test_diff)} ) "
            ">/dev/null 2>&1 || echo CAR-VIEW-FAILED\n"
        )
    per_file = max(4096, VIEW_BUDGET // max(1, len(files)))
    per_gold = max(4096, GOLD_BUDGET // max(1, len(gold)))
    g = f"{runner.dir}/gold-base"
    script += f"rm -rf {q(g)}; mkdir -p {q(g)}; chmod 700 {q(g)}\n"
    for i, f in enumerate(gold):
        script += f"{GIT} show {q('HEAD:' + f)} > {q(f'{g}/{i}')} 2>/dev/null || true\n"
    return "".join(
        [script, EMIT]
        + [emit_command(f"CAR-VIEW:{i}", f"{v}/{f}", per_file, "head") for i, f in enumerate(files)]
        + [emit_command(f"CAR-GOLD:{i}", f"{g}/{i}", per_gold, "head") for i in range(len(gold))]
    )


def _read_view(stdout: str, row: TaskRow) -> dict[str, str]:
    if "CAR-VIEW-FAILED" in stdout.splitlines():
        return {}
    per_file = max(4096, VIEW_BUDGET // max(1, len(row.test_files)))
    out = {}
    for i, f in enumerate(row.test_files):
        got = parse_emitted(stdout, f"CAR-VIEW:{i}", per_file, "head")
        if got.exists and not got.truncated:
            out[f] = got.data.decode("utf-8", "surrogateescape")
    return out


def _gold_own(stdout: str, row: TaskRow) -> dict[str, list[str]]:
    """The dunders the gold patch writes (:func:`gold_dunders`), from the base text printed."""
    gold = gold_py_sources(row.patch or "", row.test_files)
    per_gold = max(4096, GOLD_BUDGET // max(1, len(gold)))
    out = {}
    for i, f in enumerate(gold):
        got = parse_emitted(stdout, f"CAR-GOLD:{i}", per_gold, "head")
        if got.exists and not got.truncated:
            out[f] = got.data.decode("utf-8", "surrogateescape")
    return gold_dunders(row.patch or "", out)


def protocol_files(row: TaskRow, runner: TestRunner) -> dict[str, tuple[bytes, int]]:
    """The task's own grading scripts (slime's ``f2p_script``, SWE-bench-Pro's run and parser
    scripts): in the bundle, so that nothing of the grader's is written after the diff went in
    (a diff that fills the disk would make that write an infra failure)."""
    files: dict[str, tuple[bytes, int]] = {}
    if row.grader == "eval_cmd" and not row.eval_cmd:
        files[f"{runner.dir}/out/f2p_script.py"] = ((row.eval_script or "").encode(), 0o644)
    if row.log_parser == "swepro":
        files[f"{runner.dir}/run_script.sh"] = ((row.swepro_run_script or "").encode(), 0o755)
        files[f"{runner.dir}/parser.py"] = ((row.swepro_parser_script or "").encode(), 0o644)
    return files


def _bundle(members: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, (data, mode) in members.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclasses.dataclass(frozen=True)
class GradingSetup:
    """What a grading sandbox's set-up left and printed; the same for every sandbox of a task,
    so a snapshot's copies share it (nothing secret: the key and canaries come after)."""

    runner_dir: str
    as_user: bool
    base: str
    before: frozenset[str]
    test_diff: str | None
    method: str
    view: dict[str, str] | None  # the hidden test files as the tests leave them (canaries)
    gold_own: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # gold's dunders


async def grading_setup(
    sb: Sandbox, row: TaskRow, defences: Defences | None = None
) -> GradingSetup:
    """Upload the test patch; one exec (pre_commands, snapshot, test user, the base list, the
    hidden test files)."""
    defences = defences or Defences()
    runner = TestRunner(sb, row.workdir)
    method = result_method(row, defences)
    want_view = method == "plugin" and (
        (defences.canaries and bool(row.fail_to_pass)) or defences.strict_compare
    )
    test_diff = None
    if row.test_patch:
        test_diff = f"{runner.dir}/test.diff"
        # root-only: the hidden tests' own text would tell the originals from their copies
        await sb.write_file(test_diff, row.test_patch.encode(), mode=0o600)
    r = await run_checked(
        sb,
        prepare_script(row)
        + runner.setup_script()
        + f"cd {q(row.workdir)}\n"
        + (_view_script(row, runner, test_diff) + f"cd {q(row.workdir)}\n" if want_view else "")
        + list_script("HEAD", save=f"{runner.dir}/before.z")
        + save_git_meta(f"{runner.dir}/git-meta"),
        "preparing the grading sandbox",
        env=SNAPSHOT_ENV,
    )
    runner.parse_setup(r.stdout)
    return GradingSetup(
        runner_dir=runner.dir,
        as_user=runner.as_user,
        base=parse_base(r.stdout),
        before=frozenset(parse_list(r.stdout)),
        test_diff=test_diff,
        method=method,
        view=_read_view(r.stdout.partition("CAR-LIST\n")[0], row) if want_view else None,
        gold_own=_gold_own(r.stdout.partition("CAR-LIST\n")[0], row) if want_view else {},
    )


async def prepare_grading(sb: Sandbox, row: TaskRow, defences: Defences | None = None) -> Prepared:
    """:func:`grading_setup`, then :func:`finish_grading`."""
    return await finish_grading(sb, row, await grading_setup(sb, row, defences), defences)


async def finish_grading(
    sb: Sandbox, row: TaskRow, setup: GradingSetup, defences: Defences | None = None
) -> Prepared:
    """This sandbox's own secrets on top of ``setup`` (made here or in the snapshot it was
    copied from): the plugin's name, the run's key and the canaries, in one uploaded bundle."""
    defences = defences or Defences()
    runner = TestRunner(sb, row.workdir, scratch=setup.runner_dir)
    runner.as_user = setup.as_user
    method = setup.method
    prepared = Prepared(
        sb,
        runner,
        setup.base,
        setup.before,
        setup.test_diff,
        method=method,
        module=channel.new_module_name(),
        key=channel.new_key() if method == "plugin" else b"",
    )
    plugin = channel.plugin_source(row.workdir, row.test_files, prepared.new_list)
    members = {prepared.plugin_file: (plugin.encode(), 0o644)}
    if method == "plugin":
        members[runner.key_path] = (prepared.key, 0o600)
    members.update(protocol_files(row, runner))
    if setup.view is not None:
        # on the loop's thread: CPython 3.11's ast.parse is not safe in concurrent threads
        # ("AST constructor recursion depth mismatch")
        prepared = _stage_tests(row, runner, defences, setup, members, prepared)
    bundle = _bundle(members)
    await sb.write_file(f"{runner.dir}/bundle.tar", bundle, mode=0o600)
    return prepared


def _stage_tests(
    row: TaskRow,
    runner: TestRunner,
    defences: Defences,
    setup: GradingSetup,
    members: dict[str, tuple[bytes, int]],
    prepared: Prepared,
) -> Prepared:
    """The hidden test files blinded, with canaries, their comparisons rewritten; added to
    ``members``."""
    view = setup.view or {}
    plan = CanaryPlan([], {})
    if defences.canaries and row.fail_to_pass:
        plan = legacy_plan(view, row.fail_to_pass, row.pass_to_pass)
    if defences.canaries and row.fail_to_pass and defences.blinding:
        try:
            plan = plan_canaries(
                view,
                row.fail_to_pass,
                row.pass_to_pass,
                copies=defences.canary_copies,
                opposite=defences.opposite_copies,
                fresh=fresh_for(row, view) if defences.gold_canaries else None,
            )
        except Exception as e:  # the task's own files; keep the previous canaries then
            log.exception("blinding %s failed", row.instance_id)
            plan.blinding.not_blinded.append(f"blinding failed: {type(e).__name__}: {e}")
    files = dict(plan.files)
    compare, notes = "", list[str]()
    if defences.strict_compare:
        compare, notes = _strict_compare(row, runner, setup, files, members)
    for path, text in files.items():
        data = text.encode("utf-8", "surrogateescape")
        members[f"{runner.dir}/staged/{path}"] = (data, 0o600)
    prepared = dataclasses.replace(
        prepared,
        canaries=tuple(plan.canaries),
        staged=tuple(files),
        blinding=plan.blinding,
        compare=compare,
        compare_notes=tuple(notes),
    )
    return prepared


def _strict_compare(
    row: TaskRow,
    runner: TestRunner,
    setup: GradingSetup,
    files: dict[str, str],
    members: dict[str, tuple[bytes, int]],
) -> tuple[str, list[str]]:
    """Rewrite the staged test files' comparisons (``files``, canary-bearing or else as the
    hidden tests leave them) to the comparison helper, staged under a random name; the
    dunders the gold patch writes are consulted as the diff has them."""
    alias = compare_rewrite.new_alias()
    notes = []
    for path, text in {**(setup.view or {}), **files}.items():
        got = compare_rewrite.rewrite(text, alias)
        if got.error:
            notes.append(f"{path}: {got.error}"[:300])
        if got.operands:
            files[path] = got.text
    exempt = sorted({*row.test_files, *patch_paths(row.test_patch or "")})
    own = setup.gold_own
    notes += [
        f"gold writes {', '.join(names)} ({path}): the diff's own is consulted"
        for path, names in own.items()
    ]
    source = compare_rewrite.helper_source(
        row.workdir, AGENT_DIFF.format(dir=runner.dir), exempt, own=own_pairs(own)
    )
    members[f"{runner.plugin_dir}/{alias}.py"] = (source.encode(), 0o644)
    return alias, notes


# A started sandbox already set up for the row (a copy of the task's snapshot) and its set-up.
SetupSource = Callable[[], Awaitable[tuple[Sandbox, GradingSetup]]]


class GradingSandbox:
    """One clean grading sandbox for ``row``, prepared ahead; it grades exactly one diff.
    ``source``: where a set-up sandbox comes from (default: created and set up here)."""

    def __init__(
        self,
        row: TaskRow,
        *,
        backend: str = "docker",
        sandbox_options: dict[str, Any] | None = None,
        defences: Defences | None = None,
        source: SetupSource | None = None,
    ):
        self.row = row
        self.backend = backend
        self.sandbox_options = dict(sandbox_options or {})
        self.defences = defences or Defences()
        self.source = source
        self.sandbox: Sandbox | None = None
        if source is None:
            self.sandbox = grading_sandbox(backend, sandbox_options, row)
        self.used = False
        self.ready_at: float | None = None  # time.monotonic() when the preparation finished
        self.prepare_s: float | None = None  # how long it took (creation included)
        self._task: asyncio.Future[Prepared] | None = None

    def start(self) -> GradingSandbox:
        """Begin creating and preparing the sandbox in the background (once)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._prepare())
        return self

    async def _prepare(self) -> Prepared:
        t0 = time.monotonic()
        if self.source is not None:
            self.sandbox, setup = await self.source()
            prepared = await finish_grading(self.sandbox, self.row, setup, self.defences)
        else:
            assert self.sandbox is not None
            await self.sandbox.__aenter__()
            prepared = await prepare_grading(self.sandbox, self.row, self.defences)
        self.ready_at = time.monotonic()
        self.prepare_s = self.ready_at - t0
        return prepared

    async def ready(self) -> Prepared:
        """The prepared sandbox (starting it if needed); raises what the preparation raised."""
        self.start()
        assert self._task is not None
        return await self._task

    async def close(self) -> None:
        """Destroy the sandbox; idempotent and safe under cancellation."""
        await asyncio.shield(self._close())

    async def _close(self) -> None:
        if self._task is not None:
            self._task.cancel()  # a no-op once it is done
            await asyncio.wait([self._task])
            if not self._task.cancelled():
                self._task.exception()  # retrieved: a failure was reported (or is moot)
        if self.sandbox is not None:
            await self.sandbox.close()

    async def __aenter__(self) -> GradingSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
