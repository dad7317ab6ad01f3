"""zsnli.bench.read_routes (python -m zsnli.bench.read_routes): argument checks, the bake-off body, and one
short run against a spawned tiny-model server (structure only: the p95 target is the benchmark's, not a test's).
"""

from __future__ import annotations

import json

import pytest

from bench_support import refused
from zsnli.bench import read_routes


@pytest.mark.parametrize("argv, option", [
    (["--bakeoffs", "0"], "--bakeoffs"), (["--readers", "0"], "--readers"), (["--seconds", "0"], "--seconds"),
    (["--arms", "gpt"], "--arms"), (["--time-budget", "x"], "--time-budget"),
])
def test_refuses_bad_arguments(capsys, argv, option):
    assert option in refused(capsys, lambda: read_routes._parser().parse_args(argv))


def test_unknown_dataset_is_one_line_exit_2(capsys):
    assert read_routes.main(["--dataset", "no_such_set"]) == 2
    assert "no_such_set" in capsys.readouterr().err


def test_read_paths_cover_pages_list_answer_badge_key_health_metrics():
    paths = read_routes.read_paths("bo_x")
    assert set(paths) == {"/bakeoffs", "/v1/bakeoffs", "/v1/bakeoffs/bo_x", "/bakeoffs/bo_x",
                          "/bakeoffs/bo_x/badge.svg", "/v1/receipts/public-key", "/health", "/metrics"}


def test_one_short_run_on_the_tiny_model(bert_dir, tmp_path, capsys):
    out = tmp_path / "report.json"
    code = read_routes.main(["--model-dir", str(bert_dir), "--dataset", "subjectivity", "--arms", "majority",
                             "tfidf_logreg", "served", "--seconds", "0.5", "--readers", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code in (0, 1), printed
    report = json.loads(out.read_text())
    assert report["busy"]["bakeoffs"] == [200, 200] and report["busy"]["failed"] == 0
    assert report["idle"]["all reads"]["n"] > 0 and report["busy"]["all reads"]["n"] > 0
    assert "/bakeoffs/{id}/badge.svg" in report["busy"]
    assert "read routes p95 while 2 bake-offs run:" in printed.splitlines()[-1]
