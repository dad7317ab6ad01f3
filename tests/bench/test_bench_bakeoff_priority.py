"""zsnli.bench.bakeoff_priority (python -m zsnli.bench.bakeoff_priority): argument checks, the bake-off
body it sends, and one short run against a spawned tiny-model server (structure only; no timing asserted).
"""

from __future__ import annotations

import json

import pytest

from bench_support import refused
from zsnli.bench import bakeoff_priority
from zsnli.harness.examples import DEV_EXAMPLES, load_examples


@pytest.mark.parametrize("argv, option", [
    (["--clients", "0"], "--clients"), (["--seconds", "0"], "--seconds"), (["--priority", "-1"], "--priority"),
    (["--priority", "x"], "--priority"),
])
def test_refuses_bad_arguments(capsys, argv, option):
    assert option in refused(capsys, lambda: bakeoff_priority._parser().parse_args(argv))


def test_unknown_dataset_is_one_line_exit_2(capsys):
    assert bakeoff_priority.main(["--dataset", "no_such_set"]) == 2
    assert "no_such_set" in capsys.readouterr().err


def test_bakeoff_request_names_labels_and_keeps_descriptions():
    rows = [e for e in load_examples(bakeoff_priority.ROOT / DEV_EXAMPLES).examples if e.dataset == "spam"]
    body = bakeoff_priority.bakeoff_request(rows, "spam")
    assert list(body["labels"]) == [f"label{j}" for j in range(len(rows[0].labels))]
    assert list(body["labels"].values()) == list(rows[0].labels)
    assert [x["expected"] for x in body["examples"]] == [f"label{e.label}" for e in rows]


def test_one_short_run_on_the_tiny_model(bert_dir, tmp_path, monkeypatch, capsys):
    # the tiny BERT doubles as the sentence encoder; its 64 positions fit the short subjectivity texts
    monkeypatch.setenv("ZSNLI_EMBEDDING_DIR", str(bert_dir))
    out = tmp_path / "report.json"
    code = bakeoff_priority.main(["--model-dir", str(bert_dir), "--dataset", "subjectivity", "--clients", "1",
                                  "--seconds", "0.5", "--priority", "1", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    run = json.loads(out.read_text())["runs"]["priority=1"]
    assert run["alone"]["requests"] > 0 and run["during_bakeoff"]["requests"] > 0
    arms = run["during_bakeoff"]["bakeoff_arms"]
    assert set(arms.values()) == {"scored"}, arms
    assert "bake-off priority 1: /classify p95 alone" in capsys.readouterr().out
