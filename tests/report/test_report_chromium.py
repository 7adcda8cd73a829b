"""The report in a real browser: headless Chromium runs the page's JS, dumps the DOM, screenshots.

Needs Debian's ``chromium`` (``scripts/setup-env.sh`` installs it). Without it these tests skip
loudly, and fail under CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.dom import Node, parse
from support.png_pixels import decode_png
from support.report_fixture import PWN

from coding_agent_rl.report import render_report

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
WINDOW = (1400, 1000)
SHOT = (1400, 1600)  # tall enough to show the first sample's token stream


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        reason = "no chromium on PATH (scripts/setup-env.sh installs Debian's chromium)"
        if IN_CI:
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(f"SKIPPED (no browser): {reason}")
    return exe


def _browse(exe: str, url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        f"--user-data-dir={tmp / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}", *extra, url,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _dom(exe: str, page: Path, tmp: Path, fragment: str = "") -> Node:
    proc = _browse(exe, page.as_uri() + fragment, tmp, "--dump-dom", "--virtual-time-budget=2000")
    root, _ = parse(proc.stdout)
    html = root.find("html")
    assert html.attrs.get("data-ready") == "1", "the page's script did not run to its end"
    return root


def _rollout_tokens(run_dir: Path, rollout_id: str) -> list[dict[str, Any]]:
    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    return [s for s in map(json.loads, lines) if s["rollout_id"] == rollout_id]


def test_rows_only_until_expanded(chromium: str, report: Path, tmp_path: Path) -> None:
    root = _dom(chromium, report, tmp_path)
    assert len(root.find_all("tr", cls="rollout")) == 4
    assert root.find_all("tr", cls="detail") == []  # lazy: no detail DOM before a click
    assert root.find_all("span", cls="tok") == []
    assert root.by_id("solved").text() == "1"


def test_expanded_rollout_shows_tokens_diff_tests(
    chromium: str, report: Path, run_dir: Path, tmp_path: Path
) -> None:
    root = _dom(chromium, report, tmp_path, "#expand-first")
    assert root.find("title").text() == "coding-agent-rl · run1"  # the diff's script did not run
    detail = root.find("tr", cls="detail")
    assert "hidden" not in detail.attrs
    segs = [n.text() for n in detail.find_all("span", cls="seg")]
    assert segs == ["subagent", "wipe", "final"]

    samples = _rollout_tokens(run_dir, "run1-0000")
    tokens = [n for n in detail.find_all("span", cls="tok") if n.parent.tag == "div"]
    trained = [n for n in tokens if "trained" in n.classes]
    context = [n for n in tokens if "context" in n.classes]
    # every sample is open and short enough to show in full: one span per token
    assert len(tokens) == sum(len(s["tokens"]) for s in samples)
    assert len(trained) == sum(sum(s["loss_mask"]) for s in samples)
    assert len(context) == len(tokens) - len(trained)
    assert "".join(n.text() for n in trained[:3]).startswith("<think>")
    assert any("special" in n.classes for n in context)  # <|im_start|> in the prompt

    diff = detail.find("div", cls="diff")
    lines = [n for n in diff.find_all("div")]
    assert sum("d-add" in n.classes for n in lines) == 5
    assert sum("d-del" in n.classes for n in lines) == 2
    assert any(PWN in n.text() for n in lines if "d-add" in n.classes)
    assert not [s for s in root.find_all("script") if "PWNED" in s.text() and "type" not in s.attrs]

    tests = detail.find("div", cls="tests")
    assert len(tests.find_all("span", cls="PASSED")) == 7
    tip = root.by_id("tip")
    assert "hidden" not in tip.attrs
    first = samples[0]
    at = len(first["tokens"]) - first["response_length"] + first["loss_mask"].index(1)
    assert f"#{at}  id {first['tokens'][at]}" in tip.text()
    assert "trained" in tip.text() and "logprob" in tip.text()


def test_deep_link_filters_and_sorts(chromium: str, report: Path, tmp_path: Path) -> None:
    root = _dom(chromium, report, tmp_path, "#outcome=infra")
    rows = root.find_all("tr", cls="rollout")
    visible = [r.attrs["data-outcome"] for r in rows if "hidden" not in r.attrs]
    assert visible == ["infra"]
    assert root.by_id("row-count").text() == "1 of 4 rollouts"

    root = _dom(chromium, report, tmp_path, "#sort=-time")
    order = [r.attrs["data-key"] for r in root.find_all("tr", cls="rollout")]
    assert order == ["r2", "r1", "r0", "r3"]  # 120.1 s, 64.4 s, 42.0 s, 15.8 s


def test_ids_fallback_in_browser(chromium: str, run_dir: Path, tmp_path: Path) -> None:
    page = render_report(run_dir, tmp_path / "ids.html", tokenizer=str(tmp_path / "missing"))
    root = _dom(chromium, page, tmp_path, "#expand-first")
    tokens = root.find("tr", cls="detail").find_all("span", cls="tok")
    assert tokens and all("ids" in n.classes and n.text().isdigit() for n in tokens)
    assert "showing ids" in root.by_id("tokenizer-note").text()


def test_screenshot_is_a_real_page(chromium: str, report: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    _browse(
        chromium, report.as_uri() + "#expand-first", tmp_path,
        f"--screenshot={png}", f"--window-size={SHOT[0]},{SHOT[1]}",
    )  # fmt: skip
    assert png.stat().st_size > 40_000
    pixels = decode_png(png)[:, :, :3]
    assert pixels.shape[:2] == (SHOT[1], SHOT[0])
    flat = pixels.reshape(-1, 3).astype(np.int64)
    packed = flat[:, 0] << 16 | flat[:, 1] << 8 | flat[:, 2]
    colours, counts = np.unique(packed, return_counts=True)
    assert len(colours) > 200, "a rendered report has text, bars and badges in many colours"
    assert counts.max() / len(packed) < 0.8, "mostly one colour: a blank page"
    # the summary's dark header band spans the top of the page
    top = pixels[5:40, 50:1350].reshape(-1, 3).astype(np.int64)
    assert (top.sum(axis=1) < 150).mean() > 0.8
    # the trained-token green appears (loss-mask colouring rendered)
    green = np.array([0xD3, 0xF4, 0xDD])
    assert (np.abs(flat - green).sum(axis=1) < 6).sum() > 200
    if os.environ.get("REPORT_SCREENSHOT_DIR"):  # keep it for a look (README picture, review)
        shutil.copy(png, Path(os.environ["REPORT_SCREENSHOT_DIR"]) / "report.png")
