"""The grader's pytest plugin: runs *inside the grading sandbox*, in the test process.

Not imported by the package at run time: the grader copies it into the sandbox under a random
name and pytest loads it before any repository code. It reports each test over an inherited,
HMAC-chained descriptor and enforces the new-module rule. Stdlib + pytest only, Python 3.6
compatible. What it does and its limits: docs/modules/grading.md.
"""

import hashlib
import hmac
import json
import os
import pkgutil
import sys

CHANNEL_FD = 198
KEY_FD = 199
TEST_PATTERNS = ("test_*.py", "*_test.py")
_RANK = {"PASSED": 0, "XFAIL": 1, "SKIPPED": 2, "XPASS": 3, "FAILED": 4, "ERROR": 5}


# ---- the new-module rule (shared by the root-side script and the in-run check) ------------------


def _module_name(filename):
    """The importable module name of a file name (``x.py``, ``x.cpython-311-....so``), or None."""
    try:
        import importlib.machinery

        suffixes = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)
    except Exception:
        suffixes = [".py", ".pyc", ".so"]
    for suffix in suffixes:
        if filename.endswith(suffix) and len(filename) > len(suffix):
            name = filename[: -len(suffix)]
            return name if name.isidentifier() else None
    return None


def _basedir(path):
    """The directory pytest's default ("prepend") import mode puts on ``sys.path`` for a module
    in ``path``: the first ancestor that is not a package."""
    while os.path.isfile(os.path.join(path, "__init__.py")):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def path_roots(workdir, path=None, skip=()):
    """The entries of ``path`` (default: this interpreter's ``sys.path``, as pytest's
    configuration left it: ini ``pythonpath``, conftest directories, ``PYTHONPATH``, editable
    installs) that lie inside the repository."""
    workdir = os.path.abspath(workdir)
    if workdir == os.sep:
        return []  # a repository at / would hold the standard library itself
    out = []
    for entry in sys.path if path is None else path:
        full = os.path.abspath(entry or ".")
        if full in skip or not (full == workdir or full.startswith(workdir + os.sep)):
            continue
        if full not in out:
            out.append(full)
    return out


def import_roots(workdir, test_files, extra=()):
    """Directories of the repository that can come before the standard library on ``sys.path``:
    the repository itself, what pytest inserts for the test files and their ``conftest.py``
    files, and ``extra`` (the in-repository entries of the real ``sys.path``: path_roots)."""
    workdir = os.path.abspath(workdir)
    roots = [workdir, *extra]
    for rel in test_files:
        d = os.path.dirname(os.path.join(workdir, rel))
        roots.append(_basedir(d))
        while d.startswith(workdir):
            if os.path.isfile(os.path.join(d, "conftest.py")):
                roots.append(_basedir(d))
            if d == workdir:
                break
            d = os.path.dirname(d)
    out = []
    for r in roots:
        if r not in out:
            out.append(r)
    return out


def installed_names(workdir, skip=()):
    """Top-level modules this interpreter finds outside the repository: built-ins, the standard
    library and every installed distribution."""
    names = set(sys.builtin_module_names)
    names.update(getattr(sys, "stdlib_module_names", ()))
    inside = os.path.abspath(workdir) + os.sep
    for entry in sys.path:
        full = os.path.abspath(entry or ".")
        if (full + os.sep).startswith(inside) or full in skip or not os.path.isdir(full):
            continue
        try:
            names.update(m[1] for m in pkgutil.iter_modules([full]))
        except Exception:
            continue
    return names


def _matches_test_pattern(name):
    import fnmatch

    return any(fnmatch.fnmatch(name, p) for p in TEST_PATTERNS)


def _module_at(root, name, new):
    """The file that makes ``name`` importable from ``root`` and is not new, if any."""
    candidates = [os.path.join(root, name, "__init__.py"), os.path.join(root, name + ".py")]
    try:
        candidates += [os.path.join(root, f) for f in os.listdir(root) if _module_name(f) == name]
    except OSError:
        return None
    for c in candidates:
        if os.path.isfile(c) and c not in new:
            return c
    return None


def offending_new_files(workdir, new_files, test_files, names=None, extra_roots=()):
    """``[(path, reason)]`` for the new files (repository-relative) the grader must not run: a
    module matching pytest's test discovery patterns, or a module / package whose top-level name,
    new at an import root (:func:`import_roots`, with ``extra_roots``), collides with the
    standard library, an installed distribution or a module at another import root."""
    workdir = os.path.abspath(workdir)
    new_abs = {os.path.join(workdir, f) for f in new_files}
    roots = import_roots(workdir, test_files, extra_roots)
    if names is None:
        names = installed_names(workdir)
    out = []
    for rel in new_files:
        path = os.path.join(workdir, rel)
        if not os.path.lexists(path):
            continue
        if _matches_test_pattern(os.path.basename(rel)):
            out.append((rel, "new test module"))
            continue
        for root in roots:
            if not path.startswith(root + os.sep):
                continue
            parts = os.path.relpath(path, root).split(os.sep)
            if len(parts) == 1:
                name = _module_name(parts[0])
            elif len(parts) == 2 and _module_name(parts[1]) == "__init__":
                name = parts[0] if parts[0].isidentifier() else None
            else:
                name = None
            if not name:
                continue
            if name in names:
                out.append((rel, f"shadows the installed or standard module {name!r}"))
                break
            other = [r for r in roots if r != root and _module_at(r, name, new_abs)]
            if other:
                out.append((rel, f"shadows the repository module {name!r} in {other[0]}"))
                break
    return out


def _remove(workdir, rel):
    path = os.path.join(workdir, rel)
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil

            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def _read_list(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    return [p.decode("utf-8", "surrogateescape") for p in data.split(b"\0") if p.strip(b"\n")]


def check_new_main(argv):
    """``check-new WORKDIR NEW_LIST TEST_FILES...``: delete and print the offending new files."""
    workdir, new_list, test_files = argv[0], argv[1], argv[2:]
    for rel, why in offending_new_files(workdir, _read_list(new_list), test_files):
        _remove(workdir, rel)
        clean = rel.replace("\t", " ").replace("\n", " ")
        sys.stdout.write(f"{clean}\t{why}\n")
    return 0


# ---- the in-run recorder ------------------------------------------------------------------------


class _Recorder:
    def __init__(self, fd, key, config):
        self.fd = fd
        self.key = key
        self.config = config
        self.mac = b""
        self.seq = 0
        self.pytest_config = None  # the outermost Config (pytester may create more)
        self.phases = {}  # nodeid -> {when: (outcome, wasxfail)}
        self.made = {}  # (nodeid, when) -> outcome as created
        self.tests = 0
        self.exitstatus = None
        self.late_check = None  # (new files, installed names, plugin dir) for sessionstart

    def emit(self, kind, **fields):
        body = dict(fields, k=kind, n=self.seq)
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        mac = hmac.new(self.key, self.mac + text.encode("utf-8"), hashlib.sha256).hexdigest()
        self.mac = mac.encode("ascii")
        line = text[:-1] + ',"m":"' + mac + '"}\n'
        data = line.encode("utf-8")
        while data:
            written = os.write(self.fd, data)
            data = data[written:]
        self.seq += 1

    def ours(self, config):
        return config is not None and config is self.pytest_config


_REC = None  # the active recorder (None: not loaded by the grader, or inactive)


def _hookimpl(**opts):
    """``pytest.hookimpl`` when loaded as a plugin; nothing in script mode (no pytest import)."""
    if __name__ == "__main__":
        return lambda f: f
    import pytest

    return pytest.hookimpl(**opts)


def _activate(config):
    """Start recording (called once, at import, in the sandbox copy of this file only)."""
    global _REC
    try:
        key = b""
        while True:
            chunk = os.read(KEY_FD, 256)
            if not chunk:
                break
            key += chunk
        os.close(KEY_FD)
        import fcntl

        fd = fcntl.fcntl(CHANNEL_FD, fcntl.F_DUPFD_CLOEXEC, 300)
        os.close(CHANNEL_FD)
    except OSError:
        return  # not started by the grader (e.g. a pytest subprocess of the tests): stay inert
    if os.environ.get("PYTEST_PLUGINS") == __name__:
        del os.environ["PYTEST_PLUGINS"]  # in-process pytester runs must not load us again
    _REC = _Recorder(fd, key.strip(), config)
    workdir = config["workdir"]
    if getattr(sys.flags, "safe_path", False) and workdir not in sys.path:
        sys.path.append(workdir)  # importable, but after the stdlib and site-packages
    here = os.path.dirname(os.path.abspath(__file__))
    new = [p for p in _read_list(config["new_list"]) if p]
    names = installed_names(workdir, skip=(here,))
    removed = []
    for rel, why in offending_new_files(workdir, new, config["test_files"], names):
        _remove(workdir, rel)
        removed.append([rel, why])
    _REC.late_check = (new, names, here)  # again once pytest has configured sys.path
    pytest_version = getattr(sys.modules.get("pytest"), "__version__", None)
    _REC.emit(
        "start",
        python=sys.version.split()[0],
        pytest=pytest_version,
        safe_path=bool(getattr(sys.flags, "safe_path", False)),
        removed=removed,
    )


def pytest_configure(config):
    if _REC is not None and _REC.pytest_config is None:
        _REC.pytest_config = config


def _late_check():
    """The new-module rule again, with the import roots of the real ``sys.path``: pytest's ini
    ``pythonpath`` and the initial conftests' directories are on it only once the initial
    conftests are loaded (and a conftest may add more), after this plugin was imported. A new
    ``src/pdb.py`` under ``pythonpath = src`` is removed before pytest imports ``pdb``."""
    if _REC is None or _REC.late_check is None:
        return
    new, names, here = _REC.late_check
    workdir = _REC.config["workdir"]
    left = [p for p in new if os.path.lexists(os.path.join(workdir, p))]
    extra = path_roots(workdir, skip=(here,))
    removed = []
    for rel, why in offending_new_files(workdir, left, _REC.config["test_files"], names, extra):
        _remove(workdir, rel)
        removed.append([rel, why])
    if removed:
        _REC.emit("removed", removed=removed)


@_hookimpl(hookwrapper=True)
def pytest_load_initial_conftests(early_config, parser, args):
    yield  # pytest has put the ini ``pythonpath`` on sys.path and loaded the initial conftests
    if _REC is not None and _REC.pytest_config is None:
        _late_check()


@_hookimpl(trylast=True)
def pytest_sessionstart(session):
    if _REC is not None and _REC.ours(session.config):
        _late_check()
        _REC.late_check = None


def _rel(nodeid):
    try:
        return _REC.pytest_config.cwd_relative_nodeid(nodeid)  # type: ignore[union-attr]
    except Exception:
        return nodeid


def pytest_collectreport(report):
    if _REC is None or not report.failed:
        return
    text = str(getattr(report, "longrepr", ""))[-400:]
    _REC.emit("collect_error", id=_rel(report.nodeid), text=text)


def pytest_collection_finish(session):
    if _REC is None or not _REC.ours(session.config):
        return
    _REC.emit("collected", ids=[_rel(item.nodeid) for item in session.items])


@_hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_makereport(item, call):
    # The innermost wrapper we can be (trylast): the report as pytest made it, before wrappers
    # registered later (outer ones) change it.
    outcome = yield
    if _REC is None:
        return
    try:
        report = outcome.get_result()
        _REC.made[(report.nodeid, report.when)] = report.outcome
    except Exception:
        pass


def _status(phases):
    """A test's outcome from its phase reports, as ``pytest -rA`` would list it (the worst)."""
    worst = None
    for when in ("setup", "call", "teardown"):
        if when not in phases:
            continue
        outcome, wasxfail = phases[when]
        status = None
        if outcome == "failed":
            status = "FAILED" if when == "call" else "ERROR"
        elif when == "call" and outcome == "skipped":
            status = "XFAIL" if wasxfail else "SKIPPED"
        elif when == "call":
            status = "XPASS" if wasxfail else "PASSED"
        elif when == "setup" and outcome == "skipped":
            status = "XFAIL" if wasxfail else "SKIPPED"
        if status and (worst is None or _RANK[status] > _RANK[worst]):
            worst = status
    return worst or "ERROR"


def pytest_runtest_logreport(report):
    if _REC is None:
        return
    nodeid, when = report.nodeid, report.when
    phases = _REC.phases.setdefault(nodeid, {})
    phases[when] = (report.outcome, hasattr(report, "wasxfail"))
    if when != "teardown":
        return
    rewritten = [
        w
        for w, (outcome, _) in sorted(phases.items())
        if (nodeid, w) in _REC.made and _REC.made[(nodeid, w)] != outcome
    ]
    _REC.emit("test", id=_rel(nodeid), s=_status(phases), rw=rewritten)
    _REC.tests += 1
    del _REC.phases[nodeid]


def pytest_sessionfinish(session, exitstatus):
    if _REC is not None and _REC.ours(session.config):
        _REC.exitstatus = int(exitstatus)


@_hookimpl(trylast=True)
def pytest_unconfigure(config):
    if _REC is None or not _REC.ours(config):
        return
    _REC.emit("final", exitstatus=_REC.exitstatus, tests=_REC.tests, records=_REC.seq + 1)


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "check-new":
    sys.exit(check_new_main(sys.argv[2:]))
