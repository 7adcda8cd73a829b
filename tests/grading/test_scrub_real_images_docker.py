"""The agent-side workspace preparation on repositories shaped like real image sets', in Docker.

Three images of one small upstream repository whose history goes on past the task's base (the
fix, its test, a tag, a release branch), each built the way a public image set builds them:

- ``swebench``: SWE-bench's setup: single-branch clone, ``reset --hard`` to the base, remote
  removed leaving a dangling ``refs/remotes/origin/HEAD``, an empty commit on top, packed refs
  (the old scrub died here: ``git fsck`` exit 2 under ``set -e``);
- ``full``: a full clone as older sets (SWE-Gym) ship it: remote kept, tags, ``FETCH_HEAD``, a
  stash, thousands of unreachable objects (``fsck | head`` died of SIGPIPE), a dangling commit
  holding the fix, a submodule whose own repository holds a future commit;
- ``shallow``: a shallow clone with another branch at the fix.

Attack: a search for the future with the git commands agents use (tests/support/upstream.py).
With the scrub turned off it finds the fix in every image; with it on, nothing, and the
independent leak check (grading/leaks.py) agrees.
"""

from __future__ import annotations

import shutil

import pytest
from support.upstream import FIX_MARK, git, make_upstream, search_future

from coding_agent_rl.datasets.buildspec import BuildSpec
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.grading.leaks import find_future
from coding_agent_rl.grading.scrub import scrub_git
from coding_agent_rl.grading.workspace import WorkspaceError, prepare_agent_workspace
from coding_agent_rl.images.dataset import build_image
from coding_agent_rl.sandbox import create_sandbox

pytestmark = pytest.mark.docker

IDENTITY = (
    "export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@b GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@b"
)
STYLES = {
    "swebench": r"""git clone -q -o origin --single-branch file:///src/upstream /testbed
cd /testbed && git reset -q --hard {base} && git remote remove origin
git symbolic-ref refs/remotes/origin/HEAD refs/remotes/origin/main
git commit -q --allow-empty -m "SWE-bench setup"
git pack-refs --all
""",
    "full": r"""git clone -q file:///src/upstream /testbed && cd /testbed
git -c protocol.file.allow=always clone -q file:///src/lib /tmp/lib-src
git reset -q --hard {base}
git -c protocol.file.allow=always submodule add -q file:///src/lib vendor/lib
git -C vendor/lib reset -q --hard HEAD~1
git add vendor/lib && git commit -qm "Vendor lib"
git fetch -q origin && git pack-refs --all
mkdir junk && for i in $(seq 3000); do echo "junk $i" > junk/$i; done && git add junk
git reset -q && rm -rf junk
git checkout -q -b scratch && echo "{mark}" > leak.txt && git add leak.txt
git commit -qm "scratch {mark}" && git checkout -q - && git branch -q -D scratch
echo stash >> README.md && git stash -q
""",
    "shallow": r"""git clone -q --depth 3 --no-single-branch file:///src/upstream /testbed
cd /testbed && git checkout -q {base}
""",
}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, tuple[str, dict[str, str]]]:
    from coding_agent_rl.images.common import BASE_IMAGE, image_exists

    if not image_exists(BASE_IMAGE):
        pytest.fail(f"{BASE_IMAGE} is missing: run `coding-agent-rl images base` first")
    root = tmp_path_factory.mktemp("upstreams")
    up = make_upstream(root)
    lib = root / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    (lib / "lib.py").write_text("X = 1\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-qm", "lib 1", date="2024-01-05T00:00:00Z")
    (lib / "lib.py").write_text(f"X = 2  # {FIX_MARK}\n")
    git(lib, "commit", "-qam", f"lib 2 {FIX_MARK}", date="2024-03-05T00:00:00Z")
    out = {}
    for style, script in STYLES.items():
        ctx = root / f"ctx-{style}"
        shutil.copytree(up["path"], ctx / "upstream")
        shutil.copytree(lib, ctx / "lib")
        body = script.format(base=up["base"], mark=FIX_MARK)
        (ctx / "setup.sh").write_text(f"set -euxo pipefail\n{IDENTITY}\n{body}rm -rf /src\n")
        (ctx / "Dockerfile").write_text(
            f"FROM {BASE_IMAGE}\nCOPY upstream/ /src/upstream/\nCOPY lib/ /src/lib/\n"
            "COPY setup.sh /src/setup.sh\nRUN bash /src/setup.sh\nWORKDIR /testbed\n"
        )
        image = f"coding-agent-rl/test-scrub-{style}:latest"
        build_image(image, BuildSpec(context=ctx, dockerfile=ctx / "Dockerfile"))
        out[style] = (image, up)
    return out


def row_for(image: str, up: dict[str, str], style: str) -> TaskRow:
    # The full clone's base is the image's HEAD (the vendoring commit on top of the upstream base).
    base = None if style == "full" else up["base"]
    return TaskRow(
        instance_id=f"scrub-{style}", image=image, workdir="/testbed",
        problem_statement="p", base_commit=base,
    )  # fmt: skip


@pytest.mark.parametrize("style", list(STYLES))
async def test_search_finds_the_fix_without_the_scrub(images, style, monkeypatch):
    import coding_agent_rl.grading.scrub as scrub

    image, up = images[style]
    monkeypatch.setattr(
        scrub, "scrub_script", lambda wd, base=None: f"cd {wd} && git rev-parse HEAD\n"
    )
    async with create_sandbox("docker", image=image, network="none") as sb:
        await prepare_agent_workspace(sb, row_for(image, up, style))
        r = await sb.exec(search_future(up["fix"]))
        assert "SEARCHED" in r.stdout and "FOUND" in r.stdout, r.stdout + r.stderr
        assert await find_future(sb, "/testbed")  # the leak check sees it too


@pytest.mark.parametrize("style", list(STYLES))
async def test_scrub_leaves_nothing_after_the_base(images, style):
    image, up = images[style]
    row = row_for(image, up, style)
    async with create_sandbox("docker", image=image, network="none") as sb:
        base = await prepare_agent_workspace(sb, row)
        if row.base_commit:
            assert base == up["base"]
        r = await sb.exec(search_future(up["fix"]))
        assert r.stdout.strip().splitlines()[-1] == "SEARCHED", r.stderr
        assert "FOUND" not in r.stdout, r.stdout
        assert await find_future(sb, "/testbed") == []
        r = await sb.exec("cd /testbed && git status --porcelain && git symbolic-ref HEAD")
        # A clean tree but for the problem statement written next to it, on a branch.
        assert r.stdout.splitlines() == ["?? PROBLEM_STATEMENT.md", "refs/heads/main"], r
        if style == "full":  # the submodule is at the recorded commit, its future gone
            sub = await sb.exec("cd /testbed/vendor/lib && git log --all --format=%s && cat lib.py")
            assert sub.stdout.split() == ["lib", "1", "X", "=", "1"], sub.stdout


async def test_failures_name_the_command_the_row_and_the_missing_base(images):
    image, _ = images["swebench"]
    missing = "0123456789abcdef0123456789abcdef01234567"
    row = TaskRow(
        instance_id="scrub-missing-base", image=image, workdir="/testbed",
        problem_statement="p", base_commit=missing,
    )  # fmt: skip
    async with create_sandbox("docker", image=image, network="none") as sb:
        with pytest.raises(WorkspaceError) as info:
            await prepare_agent_workspace(sb, row)
        msg = str(info.value)
        assert f"base_commit {missing} of row scrub-missing-base is not in the repository" in msg
        assert "images build --dataset FILE --repo-source TEMPLATE" in msg
        with pytest.raises(WorkspaceError) as info:
            await scrub_git(sb, "/testbed", "v-does-not-exist")
        msg = str(info.value)
        assert "git scrub: /testbed: v-does-not-exist is not a commit" in msg
        assert "command failed (exit 3)" in msg  # the failing command, not the script's stdout
