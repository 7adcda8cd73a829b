"""The rendered page, checked with html.parser: structure, self-containment, escaping, payloads."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.dom import Node, parse
from support.report_fixture import PWN

from coding_agent_rl import cli
from coding_agent_rl.report import load_run, render_report
from coding_agent_rl.report.payload import mask_spans, script_json


def _page(path: Path) -> tuple[str, Node]:
    html = path.read_text(encoding="utf-8")
    root, errors = parse(html)
    assert errors == [], errors
    return html, root


def _payload(root: Node, key: str) -> dict[str, Any]:
    return json.loads(root.by_id(f"d-{key}").text())


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_page_is_self_contained(report: Path) -> None:
    html, root = _page(report)
    for node in root.iter():
        assert node.tag not in ("link", "iframe", "img", "object", "embed"), node.tag
        for attr in ("src", "href", "action", "srcset"):
            value = node.attrs.get(attr)
            assert value is None or value.startswith("#"), f"<{node.tag} {attr}={value}>"
    styles = "".join(n.text() for n in root.find_all("style"))
    assert "url(" not in styles and "@import" not in styles
    assert not re.search(r"https?://", html), "the page must not reference any URL"
    assert len(root.find_all("style")) == 1
    assert next(n for n in root.find_all("script") if "type" not in n.attrs).text().strip()


def test_summary_and_table(report: Path, run_dir: Path) -> None:
    _, root = _page(report)
    results = _jsonl(run_dir / "results.jsonl")
    assert root.by_id("solved").text() == "1"
    assert root.by_id("total").text() == str(len(results)) == "4"
    assert root.by_id("mean-reward").text() == "0.25"
    assert root.by_id("fail-infra").text().startswith("1")
    assert root.by_id("fail-model").text().startswith("1")
    assert root.by_id("timing-chart").tag == "svg"
    bars = root.by_id("timing-chart").find_all("rect", cls="p50")
    assert [b.attrs["class"].split()[1] for b in bars] == [
        "ph-sandbox_s",
        "ph-install_s",
        "ph-agent_s",
        "ph-diff_s",
        "ph-grade_s",
    ]
    # agent dominates the fixture's timings: its p50 bar is the widest
    widths = [float(b.attrs["width"]) for b in bars]
    assert max(widths) == widths[2] > 0

    rows = root.find_all("tr", cls="rollout")
    assert [r.attrs["data-outcome"] for r in rows] == ["solved", "model", "infra", "unsolved"]
    for row, result in zip(rows, results, strict=True):
        cells = [c for c in row.children if isinstance(c, Node)]
        assert cells[1].text() == result["instance_id"]
        assert cells[5].text() == f"{result['f2p_passed']}/{result['f2p_total']}"
        assert cells[7].text() == str(result["num_segments"])
        reason = result["abort_reason"] or result.get("fail_reason")
        if reason:
            assert reason in cells[11].text()
    assert root.find("option", value="infra").text() == "infra failure (1)"
    assert root.by_id("row-count").text() == "4 of 4 rollouts"


def test_detail_payload_matches_samples(report: Path, run_dir: Path, tokenizer: Any) -> None:
    _, root = _page(report)
    samples = _jsonl(run_dir / "samples.jsonl")
    first = _payload(root, "r0")
    assert [s["seg"] for s in first["samples"]] == ["subagent", "wipe", "final"]
    assert first["detail"] is True
    by_rollout = [s for s in samples if s["rollout_id"] == "run1-0000"]
    for got, want in zip(first["samples"], by_rollout, strict=True):
        assert got["t"] == want["tokens"]
        assert got["p"] == len(want["tokens"]) - want["response_length"]
        mask = [0] * want["response_length"]
        for start, length in got["m"]:  # spans are absolute positions in tokens
            for i in range(start - got["p"], start - got["p"] + length):
                mask[i] = 1
        assert mask == want["loss_mask"]
        trained_lps = [
            lp for lp, m in zip(want["rollout_log_probs"], want["loss_mask"], strict=True) if m
        ]
        assert got["lp"] == pytest.approx(trained_lps, abs=1e-4)
        assert got["nt"] == sum(want["loss_mask"]) > 0
    infra = _payload(root, "r2")
    assert infra["samples"][0]["remove"] is True
    assert infra["samples"][0]["abort"] == "sandbox create timed out after 120 s"
    assert infra["diff"] is None
    last = _payload(root, "r3")
    assert last["tests"][0][1] == "FAILED"  # failures first
    assert ["apply_method", "git-apply"] in last["facts"]  # fields the run adds are shown too

    vocab = json.loads(root.by_id("vocab").text())
    special = set(json.loads(root.by_id("special").text()))
    ids = {t for s in samples for t in s["tokens"]}
    assert set(map(int, vocab)) == ids
    for i in list(ids)[:200]:
        assert vocab[str(i)] == tokenizer.decode([i], skip_special_tokens=False)
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert im_start in special
    assert "decoded with 'qwen3'" in root.by_id("tokenizer-note").text()


def test_html_in_run_data_stays_text(report: Path) -> None:
    html, root = _page(report)
    # The diff's <script> travels only inside JSON, with "<" escaped: no tag can form.
    assert "<script>document.title" not in html
    assert html.count("<script") == html.count("</script") == 3 + 4 + 1
    assert "\\u003cscript\\u003edocument.title" in html
    scripts = root.find_all("script")
    assert len(scripts) == 3 + 4 + 1  # meta, vocab, special; one per rollout; the code
    assert PWN in _payload(root, "r0")["diff"]["text"]
    assert root.find("title").text() == "coding-agent-rl · run1"


def test_hostile_strings_in_results_are_escaped(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    results = _jsonl(copy / "results.jsonl")
    evil = '<img src=x onerror="document.title=1">'
    results[0]["instance_id"] = evil
    results[1]["abort_reason"] = "</td></tr><script>document.title=2</script>"
    results[1]["tests"] = {"t<b>x</b>": "FAILED"}
    (copy / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    summary = json.loads((copy / "summary.json").read_text())
    summary["run_id"] = "<b>run</b>"
    (copy / "summary.json").write_text(json.dumps(summary))
    _, root = _page(render_report(copy, tmp_path / "r.html", tokenizer=None))
    assert not root.find_all("img")
    assert not [b for b in root.find_all("b") if b.text() == "run"]
    assert len(root.find_all("script")) == 8
    rows = root.find_all("tr", cls="rollout")
    assert rows[0].find("td", cls="inst").text() == evil
    assert "<script>document.title=2</script>" in rows[1].find("td", cls="outcome").text()
    assert root.find("div", cls="run-id").text() == "<b>run</b>"
    assert _payload(root, "r1")["tests"] == [["t<b>x</b>", "FAILED"]]


def test_max_rollouts_embeds_detail_for_the_first_n(run_dir: Path, tmp_path: Path) -> None:
    _, root = _page(render_report(run_dir, tmp_path / "r.html", tokenizer=None, max_rollouts=2))
    assert len(root.find_all("tr", cls="rollout")) == 4  # the table lists every rollout
    assert _payload(root, "r1")["samples"][0]["t"]
    late = _payload(root, "r3")
    assert late["detail"] is False and late["diff"] is None
    assert late["samples"][0]["t"] is None and late["samples"][0]["nt"] > 0
    assert "first 2 rollouts" in root.find("p", cls="note").text()


def test_tokenizer_that_cannot_load_falls_back_to_ids(run_dir: Path, tmp_path: Path) -> None:
    _, root = _page(render_report(run_dir, tmp_path / "r.html", tokenizer=str(tmp_path / "none")))
    note = root.by_id("tokenizer-note")
    assert "failed to load" in note.text() and "showing ids" in note.text()
    assert "fallback" in note.classes
    assert json.loads(root.by_id("vocab").text()) == {}
    assert json.loads(root.by_id("page-meta").text())["decoded"] is False


def test_missing_loader_module_falls_back_to_ids_stand_in(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stand-in: the tokenizer module made unimportable (it exists in this checkout)."""
    from coding_agent_rl.report import tokens

    def no_module(spec: str) -> Any:
        raise ModuleNotFoundError("No module named 'coding_agent_rl.tokenizer'")

    monkeypatch.setattr(tokens, "_load", no_module)
    _, root = _page(render_report(run_dir, tmp_path / "r.html", tokenizer="qwen3"))
    assert "loader unavailable" in root.by_id("tokenizer-note").text()


def test_partial_run_directory_still_renders(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "summary.json").unlink()
    with (copy / "results.jsonl").open("a") as f:
        f.write('{"rollout_id": "run1-0004", "instance_id": "cut')  # killed mid-write
    (copy / "rollouts" / "demo__webkit-1.s0" / "diff.patch").unlink()
    run = load_run(copy)
    assert len(run.rollouts) == 4
    assert any("line 5: not JSON" in w for w in run.warnings)
    _, root = _page(render_report(copy, tmp_path / "r.html", tokenizer=None))
    warnings = root.by_id("warnings").text()
    assert "summary.json is missing" in warnings and "line 5" in warnings
    assert root.by_id("solved").text() == "1" and root.by_id("total").text() == "4"
    assert root.by_id("fail-infra").text().startswith("1")
    assert _payload(root, "r0")["diff"]["error"] == "missing"


def test_samples_without_results_line_get_a_row(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    results = _jsonl(copy / "results.jsonl")
    (copy / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results[:2]))
    run = load_run(copy)
    assert [r.result.get("_synthesised", False) for r in run.rollouts] == [False, False, True, True]
    assert run.rollouts[2].result["instance_id"] == "demo__strings-2"
    assert run.rollouts[2].result["abort_reason"] == "sandbox create timed out after 120 s"


def test_artifact_paths_cannot_leave_the_run_dir(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (tmp_path / "secret.txt").write_text("do not embed")
    results = _jsonl(copy / "results.jsonl")
    results[0]["artifacts"]["agent_log"] = "../secret.txt"
    (copy / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    html, root = _page(render_report(copy, tmp_path / "r.html", tokenizer=None))
    assert "do not embed" not in html
    assert "leaves the run directory" in _payload(root, "r0")["agent_log"]["error"]


def test_large_artifacts_keep_head_and_tail(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    log = copy / "rollouts" / "demo__webkit-1.s0" / "agent.log"
    log.write_text("HEAD\n" + "x" * 1_000_000 + "\nTAIL\n")
    _, root = _page(render_report(copy, tmp_path / "r.html", tokenizer=None))
    art = _payload(root, "r0")["agent_log"]
    assert art["text"].startswith("HEAD") and art["text"].endswith("TAIL\n")
    assert art["omitted"] > 700_000 and "bytes omitted" in art["text"]


def test_token_payload_is_compact(tmp_path: Path) -> None:
    """A 30k-token sample costs about its ids' digits: the mask and logprobs are run-length."""
    n_prompt, n_resp = 10_000, 20_000
    tokens = [(i * 7919) % 151_000 for i in range(n_prompt + n_resp)]
    mask = [1 if (i // 500) % 2 == 0 else 0 for i in range(n_resp)]
    sample = {
        "tokens": tokens, "response_length": n_resp, "loss_mask": mask,
        "rollout_log_probs": [-0.123456 if m else 0.0 for m in mask], "reward": 1.0,
        "status": "completed", "rollout_id": "big", "group_index": 0, "index": 0,
        "metadata": {"instance_id": "big", "segment": "final"},
    }  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    (run / "results.jsonl").write_text(
        json.dumps({"rollout_id": "big", "instance_id": "big", "reward": 1.0}) + "\n"
    )
    out = render_report(run, tmp_path / "r.html", tokenizer=None)
    ids_bytes = len(",".join(map(str, tokens)))
    trained = sum(mask)
    # ids + one short logprob per trained token + the page itself (~40 KB)
    assert out.stat().st_size < ids_bytes + trained * 8 + 60_000
    payload = _payload(_page(out)[1], "r0")["samples"][0]
    assert len(payload["m"]) == 20 and payload["nt"] == trained


def test_mask_spans_and_script_json() -> None:
    assert mask_spans([0, 1, 1, 0, 1], 10) == ([[11, 2], [14, 1]], [1, 2, 4])
    assert mask_spans([], 3) == ([], [])
    tricky = {"a": "</script><!-- \u2028 & >", "n": float("nan")}
    text = script_json(tricky)
    assert "<" not in text and ">" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": tricky["a"], "n": None}


def test_cli_view(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    assert cli.main(["view", str(copy), "--tokenizer", str(tmp_path / "nope")]) == 0
    assert (copy / "report.html").is_file()  # default output path
    assert "wrote" in capsys.readouterr().out
    out = tmp_path / "deep" / "x.html"
    assert cli.main(["view", str(copy), "-o", str(out), "--max-rollouts", "1"]) == 0
    assert out.is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["view", str(empty)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert cli.main(["view", str(tmp_path / "absent")]) == 2
    assert cli.main(["view", str(copy), "--max-rollouts", "-1"]) == 2
