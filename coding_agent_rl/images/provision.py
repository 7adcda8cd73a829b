"""Provide every row's container image, by the user's choice (``coding-agent-rl images build``).

Built from a Dockerfile (a build context), used as the engine has it, pulled (``--pull``), or
built from the repository (``--repo-source``, repo.py); a per-image failure is one summary line
and the others go on. Details: docs/modules/images.md.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import pathlib
import subprocess
import sys
from collections.abc import Callable

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.images.common import BASE_IMAGE, ImageBuildError
from coding_agent_rl.images.dataset import SOURCE_LABEL, build_image
from coding_agent_rl.images.docker_build import cancel_all, reset


@dataclasses.dataclass
class ImageReport:
    """What happened to one image (shared by ``rows``)."""

    image: str
    rows: list[str]
    source: str = ""  # used | pulled | built | missing | failed
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.source in ("used", "pulled", "built")

    def line(self) -> str:
        n = f"{len(self.rows)} row{'s' * (len(self.rows) != 1)}"
        return f"{self.source:<7} {self.image} ({n}){': ' + self.detail if self.detail else ''}"


def image_origin(image: str) -> str:
    """How ``image`` got into the engine: ``built`` (by coding-agent-rl), ``pulled`` (from a
    registry), ``used`` (present, neither), or ``missing``."""
    r = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{json .}}", image], capture_output=True, text=True
    )
    if r.returncode != 0:
        return "missing"
    info = json.loads(r.stdout)
    if ((info.get("Config") or {}).get("Labels") or {}).get(SOURCE_LABEL):
        return "built"
    return "pulled" if info.get("RepoDigests") else "used"


def pull(image: str, progress: Callable[[str], None] | None = None) -> None:
    """``docker pull image`` through the engine; raises ImageBuildError with one line."""
    import docker

    repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    client = docker.from_env(timeout=600)
    try:
        last = ""
        for event in client.api.pull(repo, tag=tag or "latest", stream=True, decode=True):
            if "error" in event:
                raise ImageBuildError(f"cannot pull {image}: {event['error'].splitlines()[0]}")
            status = f"{event.get('id', '')} {event.get('status', '')}".strip()
            if progress and status != last and "Downloading" not in status:
                progress(f"pull {image}: {status}")
                last = status
    except docker.errors.APIError as e:
        why = (e.explanation or str(e)).splitlines()[0]
        raise ImageBuildError(f"cannot pull {image}: {why}") from None
    finally:
        client.close()


def _group(rows: list[TaskRow]) -> dict[str, list[TaskRow]]:
    groups: dict[str, list[TaskRow]] = {}
    for row in rows:
        groups.setdefault(row.image, []).append(row)
    return groups


def _provide(
    image: str,
    rows: list[TaskRow],
    *,
    pull_missing: bool,
    repo_source: str | None,
    rebuild: bool,
    base_image: str,
    progress: Callable[[str], None],
    log_dir: pathlib.Path | None,
) -> ImageReport:
    from coding_agent_rl.images.repo import build_repo_image, buildable, image_key, slug

    report = ImageReport(image, [r.instance_id for r in rows])
    first = rows[0]
    if first.build is not None:
        if any(r.build != first.build for r in rows):
            raise ImageBuildError("rows name this image with different build contexts")
        log_path = log_dir / f"{slug(image)}.log" if log_dir else None
        built = build_image(image, first.build, rebuild=rebuild, log_path=log_path, nocache=rebuild)
        report.source, report.detail = "built", "" if built else "up to date"
        return report
    origin = image_origin(image)
    ours = origin == "built"
    if origin != "missing" and not rebuild and not (ours and repo_source):
        report.source = origin
        return report
    errors = []
    if pull_missing and not ours:
        try:
            pull(image, progress)
            report.source = "pulled"
            return report
        except ImageBuildError as e:
            errors.append(str(e))
    if repo_source:
        why = buildable(first)
        if why is None and any(image_key(r) != image_key(first) for r in rows):
            why = "rows sharing it differ in repo, base_commit, workdir or recipe"
        if why is None:
            built, report.detail = build_repo_image(
                image, first, repo_source, base_image=base_image, rebuild=rebuild, log_dir=log_dir
            )
            report.source = "built"
            return report
        errors.append(f"cannot build from the repository: {why}")
    if origin != "missing":  # ours, out of date, and no way to rebuild: still usable
        report.source, report.detail = "built", "; ".join(errors)
        return report
    report.source = "missing" if not errors else "failed"
    report.detail = "; ".join(errors) or "not in the engine: pass --pull or --repo-source TEMPLATE"
    return report


def provide_images(
    rows: list[TaskRow],
    *,
    pull_missing: bool = False,
    repo_source: str | None = None,
    rebuild: bool = False,
    concurrency: int = 2,
    base_image: str = BASE_IMAGE,
    progress: Callable[[str], None] | None = None,
    log_dir: pathlib.Path | None = None,
) -> list[ImageReport]:
    """One report per distinct image of ``rows`` (in row order); never raises for one image.
    ``log_dir``: where each build's log goes (default: the cache's ``build-logs``). An
    interrupt (Ctrl-C) stops every build in flight and removes what they made."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    groups = _group(rows)

    def one(item: tuple[str, list[TaskRow]]) -> ImageReport:
        image, group = item
        try:
            return _provide(
                image,
                group,
                pull_missing=pull_missing,
                repo_source=repo_source,
                rebuild=rebuild,
                base_image=base_image,
                progress=say,
                log_dir=log_dir,
            )
        except Exception as e:  # one image's failure is one summary line
            lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()] or [repr(e)]
            detail = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
            return ImageReport(image, [r.instance_id for r in group], "failed", detail[:2000])

    reset()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency))
    try:
        return list(pool.map(one, groups.items()))
    except BaseException:  # Ctrl-C: the running builds stop, their threads clean up
        cancel_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
