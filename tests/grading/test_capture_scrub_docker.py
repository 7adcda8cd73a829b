"""Agent-side git handling in real Docker: scrubbing the future out of history, and capturing
the agent's diff without running anything the agent put into its repository config."""

from __future__ import annotations

import pytest

from coding_agent_rl.grading.diff import DiffCaptureError, capture_diff
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.scrub import scrub_git
from coding_agent_rl.grading.workspace import prepare_workspace
from coding_agent_rl.sandbox import create_sandbox

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]

# A history that hides the fix in every place agents have looked for it.
FUTURE = r"""set -e
cd /testbed
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=d@d GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=d@d
git checkout -q -b fix
sed -i 's/\[^a-z0-9\]"/[^a-z0-9]+"/' textkit/slug.py
git commit -qam "Fix: collapse runs of separators"
fix=$(git rev-parse HEAD)
git tag v2.0 && git tag -a v2.0-annotated -m release
git notes add -m "see $fix" HEAD~1
git update-ref refs/remotes/origin/fix "$fix"
git update-ref refs/pull/7/head "$fix"
git update-ref refs/replace/deadbeef "$fix" 2>/dev/null || true
git checkout -q main
echo stash-me >> README.md && git stash -q
echo "the answer is [^a-z0-9]+" | git hash-object -w --stdin > /tmp/dangling
git branch -q -D fix
git pack-refs --all
echo "$fix"
"""


async def test_scrub_removes_future_commits_refs_and_objects(example_rows):
    row = example_rows["slugify"]
    async with create_sandbox("docker", image=row.image, network="none") as sb:
        r = await sb.exec(FUTURE)
        assert r.ok, r.stderr
        fix = r.stdout.split()[-1]
        dangling = (await sb.exec("cat /tmp/dangling")).stdout.strip()
        before = await sb.exec("cd /testbed && git log --all --oneline | wc -l")
        assert int(before.stdout) >= 3

        base = await prepare_workspace(sb, row, agent=True)
        r = await sb.exec(
            "cd /testbed && git log --all --format=%H && echo REFS && git for-each-ref && echo STASH"
            " && git stash list && echo REFLOG && git reflog && echo OBJ"
            " && git cat-file --batch-all-objects --batch-check='%(objectname)'"
        )
        assert r.ok, r.stderr
        log, rest = r.stdout.split("REFS\n")
        assert log.split() == [base]
        refs, rest = rest.split("STASH\n")
        assert refs.split()[-1] == "refs/heads/main" and len(refs.strip().splitlines()) == 1
        stash, rest = rest.split("REFLOG\n")
        reflog, objects = rest.split("OBJ\n")
        assert stash.strip() == "" and reflog.strip() == ""
        assert fix not in objects and dangling not in objects
        assert (await sb.exec(f"cd /testbed && git cat-file -e {fix}")).exit_code != 0
        status = await sb.exec("cd /testbed && git status --porcelain && git symbolic-ref HEAD")
        assert status.stdout.strip() == "refs/heads/main"  # clean tree, on a branch


async def test_scrub_to_an_older_base_commit(example_rows):
    row = example_rows["pager"]
    async with create_sandbox("docker", image=row.image, network="none") as sb:
        r = await sb.exec(
            "cd /testbed && old=$(git rev-parse HEAD) && echo x > later.txt && git add later.txt"
            " && git -c user.name=a -c user.email=a@a commit -qm later && echo $old"
        )
        old = r.stdout.strip()
        assert await scrub_git(sb, "/testbed", old) == old
        r = await sb.exec("cd /testbed && git log --all --format=%H; ls later.txt")
        assert r.stdout.split() == [old] and r.exit_code != 0


AGENT_WORK = r"""set -e
cd /testbed
sed -i 's/\[^a-z0-9\]"/[^a-z0-9]+"/' textkit/slug.py
mkdir -p textkit/data && printf '\x00\x01\xfe\xff binary' > textkit/data/blob.bin
echo "notes" > NOTES.md && git add NOTES.md
git -c user.name=a -c user.email=a@a commit -qm "agent commit"
echo "staged but later reverted" > staged.txt && git add staged.txt && rm staged.txt
mkdir -p .harness && echo "agent log" > .harness/log.txt
echo "problem" > PROBLEM_STATEMENT.md
git config core.fsmonitor 'touch /tmp/ran-fsmonitor-$(id -u); false'
git config filter.evil.clean 'touch /tmp/ran-filter-$(id -u); cat'
git config diff.external 'touch /tmp/ran-diff-$(id -u)'
echo '* filter=evil diff=evil' > .gitattributes
"""


async def test_capture_diff_includes_new_binary_and_committed_files_and_nothing_else(example_rows):
    row = example_rows["slugify"]
    async with create_sandbox("docker", image=row.image, network="none") as sb:
        base = await prepare_workspace(sb, row, agent=True)
        await sb.exec("useradd -m agent && chown -R agent /testbed", check=True)
        await sb.exec(AGENT_WORK, user="agent", check=True)
        index_before = (await sb.exec("sha256sum /testbed/.git/index")).stdout

        captured = await capture_diff(sb, "/testbed", base_commit=base)

        assert set(captured.files) == {
            ".gitattributes",
            "NOTES.md",
            "textkit/data/blob.bin",
            "textkit/slug.py",
        }
        assert "GIT binary patch" in captured.text and captured.truncated_reason is None
        assert captured.size == len(captured.data)
        assert (await sb.exec("sha256sum /testbed/.git/index")).stdout == index_before
        ran = await sb.exec("ls /tmp | grep ran- || true")
        assert ran.stdout.strip() == ""  # nothing from the agent's git config ran as root

        small = await capture_diff(sb, "/testbed", base_commit=base, max_bytes=100)
        assert small.text == "" and "over the 100-byte cap" in small.truncated_reason

    result = await grade(row, captured.text)  # the captured diff round-trips through grading
    assert result.reward == 1.0 and result.apply_method == "git apply"


async def test_capture_without_a_repository_is_an_error(example_rows):
    row = example_rows["editor"]
    async with create_sandbox("docker", image=row.image, network="none") as sb:
        await sb.exec("rm -rf /testbed/.git", check=True)
        with pytest.raises(DiffCaptureError):
            await capture_diff(sb, "/testbed")


# An agent that is root in its sandbox puts its own `wc` / `base64` / `git` first on PATH: the
# capture's output is then whatever it prints. Each must end as the model's DiffCaptureError.
FORGED_TOOLS = {
    "size": ("wc", "echo lots"),  # the size line is not a number
    "names": ("base64", 'echo "@@not-base64@@"'),  # the names are not base64
    "empty size": ("wc", "true"),  # no size at all
}


def _parse_without_checks(stdout: str) -> int:
    """How the capture read its output before it treated it as agent input (the defence off)."""
    import base64

    rest = stdout.partition("CAR-DIFF ")[2]
    size_s, _, rest = rest.partition("\n")
    names_b64 = rest.partition("CAR-DIFF-DATA\n")[0]
    base64.b64decode(names_b64)
    return int(size_s)


class _Recording:
    """The sandbox, keeping the stdout of its last exec (what the capture parsed)."""

    def __init__(self, sb):
        self.sb, self.stdout = sb, ""
        self.output_cap = sb.output_cap

    async def exec(self, *args, **kwargs):
        r = await self.sb.exec(*args, **kwargs)
        self.stdout = r.stdout
        return r


@pytest.mark.parametrize("forgery", sorted(FORGED_TOOLS))
async def test_forged_capture_output_is_the_models_failure(example_rows, forgery):
    tool, body = FORGED_TOOLS[forgery]
    row = example_rows["slugify"]
    async with create_sandbox("docker", image=row.image, network="none") as sb:
        base = await prepare_workspace(sb, row, agent=True)
        await sb.exec("echo change >> /testbed/README.md", check=True)
        ok = await capture_diff(sb, "/testbed", base_commit=base)  # control: the real tools
        assert ok.files == ("README.md",)
        await sb.exec(
            f"printf '#!/bin/sh\\n{body}\\n' > /usr/local/bin/{tool}"
            f" && chmod +x /usr/local/bin/{tool}",
            check=True,
        )
        recording = _Recording(sb)
        with pytest.raises(DiffCaptureError, match="malformed"):
            await capture_diff(recording, "/testbed", base_commit=base)
    # Defence off: the same output breaks the unchecked parser with a ValueError, which the
    # pipeline would charge to the infrastructure (and drop the sample from training).
    with pytest.raises(ValueError):
        _parse_without_checks(recording.stdout)
