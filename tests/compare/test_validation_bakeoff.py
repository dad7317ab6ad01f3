"""The bake-off on small arms, and the real server behind every gate.

Arms: a fake server by --url, the real serve.sh on a tiny random NLI model
by --model-dir, the transformers pipeline on the same tiny model, and the
embedding baseline (the real all-MiniLM-L6-v2, on a handful of documents).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from zsnli.manifest import hash_model_dir
from zsnli.compare.cli import main
from zsnli.compare.receipts import verify
from zsnli.compare.render import render_html
from zsnli.harness.server import ServerProcess

from test_validation_selfcheck import FAKE_SERVER, write_examples

REPO = Path(__file__).resolve().parents[2]
SERVE_SH = f"bash {REPO / 'serve.sh'}"


@pytest.fixture()
def tiny_project(tmp_path: Path, bert_dir: Path) -> Path:
    """A project root whose model/ is the tiny random BERT NLI model, with manifest and calibration."""
    root = tmp_path / "project"
    shutil.copytree(bert_dir, root / "model")
    (root / "training_manifest.json").write_text(json.dumps({"files": hash_model_dir(root / "model")}))
    (root / "data_sources.json").write_text("[]")
    (root / "calibration.json").write_text(json.dumps({"chosen": {"rule": "entailment", "temperature": 1.0}}))
    write_examples(root / "examples.jsonl")
    return root


@pytest.fixture()
def fake_script(tmp_path: Path) -> Path:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER, encoding="utf-8")
    return script


@pytest.mark.skipif(not (REPO / "serve.sh").exists(), reason="serve.sh not in this checkout")
def test_every_gate_passes_on_the_real_server_with_a_tiny_model(tiny_project, tmp_path, capsys):
    report_path = tmp_path / "selfcheck.json"
    code = main(["--root", str(tiny_project), "--examples", str(tiny_project / "examples.jsonl"), "--serve-cmd",
                 SERVE_SH, "--concurrency", "8", "--warmups", "4", "--docs", "40", "--no-progress",
                 "--startup-timeout", "120", "--report", str(report_path)])
    out = capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert code == 0, out
    assert [g["verdict"] for g in report["gates"]] == ["PASS"] * 6
    assert report["health"]["status"] == "ok"
    assert any("the model/ of training_manifest.json" in line for line in report["gates"][1]["details"])
    assert "Metrics per dataset" in out


@pytest.mark.skipif(not (REPO / "serve.sh").exists(), reason="serve.sh not in this checkout")
def test_compare_two_tiny_arms_and_both_baselines(tiny_project, fake_script, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_MODE", "good")
    monkeypatch.delenv("ZSNLI_RECEIPT_KEY", raising=False)  # no key: an unsigned receipt
    report_path = tmp_path / "compare.json"
    with ServerProcess(f"{sys.executable} {fake_script}") as fake:
        fake.wait_healthy(60)
        code = main(["compare", "--root", str(tiny_project), "--examples", str(tiny_project / "examples.jsonl"),
                     "--url", f"fake={fake.url}", "--model-dir", f"tiny={tiny_project / 'model'}",
                     "--baseline", "pipeline", "--baseline", "embedding", "--serve-cmd", SERVE_SH,
                     "--concurrency", "4", "--warmups", "2", "--min-slice-n", "5", "--target-accuracy", "0.9",
                     "--target-accuracy", "0.6", "--no-progress", "--report", str(report_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads(report_path.read_text())
    names = [a["name"] for a in report["arms"]]
    assert names == ["fake", "tiny", "pipeline", "embedding"]
    assert all(a["error"] is None for a in report["arms"]), [a["error"] for a in report["arms"]]
    # a suite built from the flags: every document scored, nothing fitted
    assert report["protocol"]["settings"]["protocol"] == "all"
    assert report["protocol"]["n_test_rows"] == report["examples"]["n"]
    # leaderboard: every arm, ranked by the one ranking rule (macro-F1, then ECE, ...), with timing columns
    lb = report["leaderboard"]
    assert sorted(r["arm"] for r in lb) == sorted(names)
    keys = [(-round(r["macro_f1"], 4), round(r["ece"], 4)) for r in lb]
    assert keys == sorted(keys)
    assert all(r["p50_ms"] > 0 and r["docs_per_s"] > 0 for r in lb)
    # the servers at --concurrency, the in-process baselines one document at a time
    assert [a["timing"]["concurrency"] for a in report["arms"]] == [4, 4, 1, 1]
    # tables printed
    for title in ("Ranking", "Winner", "Escalation", "Worst slices", "receipt sha256"):
        assert title in out
    # escalation: one entry per target; slices: filtered and ranked
    for arm in report["arms"]:
        assert [e["target"] for e in arm["escalation"]] == [0.9, 0.6]
        acc = arm["scores"]["pooled_accuracy"]
        scores = [s["rank_score"] for s in arm["slices"]]
        assert scores == sorted(scores, reverse=True)
        assert all(s["n"] >= 5 and s["high"] < acc for s in arm["slices"])
    # the served tiny model and the pipeline on the same model: same rule (entailment logit, T = 1), same argmax
    tiny = next(a for a in report["arms"] if a["name"] == "tiny")
    pipe = next(a for a in report["arms"] if a["name"] == "pipeline")
    assert tiny["identity"]["model_sha256"] == pipe["identity"]["model_sha256"]
    for ds, card in tiny["scores"]["per_dataset"].items():
        assert card["accuracy"] == pytest.approx(pipe["scores"]["per_dataset"][ds]["accuracy"])
    assert tiny["identity"]["manifest_sha256"]
    # HTML: one file (the one renderer) with a reliability diagram per arm
    html = (tmp_path / "compare.html").read_text()
    assert html == render_html(report)
    assert html.count("aria-label='reliability diagram of ") == 2 * 4  # the Reliability section and each arm's view
    assert report["receipt"]["sha256"] in html
    # the receipt: every arm's identity (model hashes), unsigned without a key, valid for the file as written
    assert report["receipt"]["arms"]["tiny"] == tiny["identity"] and report["receipt"]["signature"] is None
    assert verify(report, allow_unsigned=True) == [] and verify(report) != []  # unsigned: by the flag only


def test_compare_reports_a_failing_arm_and_exits_nonzero(tiny_project, tmp_path, capsys):
    """Nothing listens at the URL: that arm fails at once (no start-up wait), the other still runs and
    the report holds both; the failure line is rendered, not printed as raw rich markup."""
    import time

    from zsnli.harness.server import free_port

    report_path = tmp_path / "bad.json"
    t0 = time.monotonic()
    code = main(["compare", "--root", str(tiny_project), "--examples", str(tiny_project / "examples.jsonl"),
                 "--url", f"dead=http://127.0.0.1:{free_port()}", "--baseline", "embedding", "--max-per-dataset", "3",
                 "--startup-timeout", "120", "--no-progress", "--report", str(report_path)])
    report = json.loads(report_path.read_text())
    assert code == 1
    assert report["arms"][0]["error"] and "connection refused" in report["arms"][0]["error"]
    assert time.monotonic() - t0 < 60  # not the 120 s start-up timeout
    assert report["arms"][1]["error"] is None
    assert report["examples"]["n"] == 6
    assert report["leaderboard"][-1]["arm"] == "dead"
    out = capsys.readouterr().out
    assert "failed" in out and "[red]" not in out and "[/red]" not in out and "\x1b[" not in out


def test_compare_writes_no_report_when_no_arm_ran(tiny_project, tmp_path, capsys):
    report_path = tmp_path / "none.json"
    code = main(["compare", "--root", str(tiny_project), "--examples", str(tiny_project / "examples.jsonl"),
                 "--url", f"http://127.0.0.1:{_free_port()}", "--no-progress", "--report", str(report_path)])
    assert code == 1
    assert not report_path.exists() and not report_path.with_suffix(".html").exists()
    out = capsys.readouterr().out
    assert "no arm ran" in out
    # the failure is one line (rich used to fold it at 150 columns, mid-sentence)
    failed = [line for line in out.splitlines() if "failed:" in line]
    assert len(failed) == 1 and failed[0].rstrip().endswith("(no --url)"), out


@pytest.mark.parametrize("args, needle", [
    (["--model-dir", "{tmp}/no-such-model"], "/no-such-model: no such directory"),
    (["--url", "localhost:8000"], "--url: 'localhost:8000' lacks a scheme: write http://localhost:8000"),
    (["--baseline", "pipeline", "--pipeline-model", "{tmp}/nope"], "/nope: no such directory"),
    (["--url", "a=http://127.0.0.1:1", "--url", "a=http://127.0.0.1:2"], "two arms are named a"),
    (["--url", "http://127.0.0.1:1", "--target-accuracy", "1.5"], "--target-accuracy"),
    (["--url", "http://127.0.0.1:1", "--concurrency", "0"], "--concurrency"),
    (["--url", "http://127.0.0.1:1", "--examples", "{tmp}/missing.jsonl"], "/missing.jsonl: no such file"),
    # --serve-cmd '' / '   ' was IndexError ("failed: IndexError" for a --model-dir arm), '"x' a shlex traceback
    (["--model-dir", "{tmp}", "--serve-cmd", ""], "--serve-cmd: '' is empty: give the command that starts a server"),
    (["--model-dir", "{tmp}", "--serve-cmd", "   "], "--serve-cmd: '   ' is empty"),
    (["--model-dir", "{tmp}", "--serve-cmd", '"unbalanced'], "--serve-cmd: '\"unbalanced' is not a command line "
                                                            "(No closing quotation)"),
])
def test_compare_usage_mistakes_are_one_line_exit_2(tiny_project, tmp_path, capsys, args, needle):
    """Checked before any arm runs: nothing is started, one line on stderr, exit 2."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    with pytest.raises(SystemExit) as info:
        main(["compare", "--root", str(tiny_project), "--examples", str(tiny_project / "examples.jsonl"), *args])
    assert info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("validate.py compare: error:"), captured.err
    assert captured.out == ""


def _free_port() -> int:
    from zsnli.harness.server import free_port

    return free_port()
