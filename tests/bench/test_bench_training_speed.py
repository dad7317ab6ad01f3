"""zsnli.bench.training_speed: argument checks, batch cutting and one short measurement on a tiny model (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import build_bert_nli
from zsnli.bench import training_speed as ts

ROOT = Path(__file__).resolve().parents[2]
NLI = ROOT / "tests" / "data" / "tiny_nli" / "train.jsonl"
ZSC = ROOT / "tests" / "data" / "tiny_zsc"


def test_grouped_batches_are_full_disjoint_and_sorted_within_mega_batches():
    lengths = [5, 9, 1, 7, 3, 8, 2, 6, 4, 10]
    batches = ts.grouped_batches(lengths, 3, seed=0)
    flat = [i for b in batches for i in b]
    assert all(len(b) == 3 for b in batches) and len(flat) == len(set(flat)) == 9
    assert [lengths[i] for i in flat] == sorted((lengths[i] for i in flat), reverse=True)


@pytest.mark.parametrize("argv, fault", [
    (["--nli-file", "nope.jsonl"], "nope.jsonl: not found"),
    (["--nli-file", str(NLI), "--steps", "0"], "--steps: expected an integer >= 1"),
    (["--nli-file", str(NLI), "--precisions", "fp8"], "--precisions fp8"),
])
def test_argument_mistakes_are_one_line_exit_2(argv, fault, capsys):
    with pytest.raises(SystemExit) as exc:
        ts.main(["--model-dir", str(ROOT / "model" / "embedding"), *argv])  # a model directory: the flags after it fail
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fault in err[0]


def test_a_short_measurement_reports_every_figure(tmp_path):
    base = build_bert_nli(tmp_path / "base")
    out = tmp_path / "r.json"
    assert ts.main(["--model-dir", str(base), "--nli-file", str(NLI), "--zsc-dir", str(ZSC), "--steps", "2",
                    "--warmup", "1", "--batch-size", "4", "--precisions", "fp32,bf16", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["precisions"]) == {"fp32", "bf16"}
    for fig in report["precisions"].values():
        assert fig["pairs_per_s"] > 0 and fig["ceiling_pairs_per_s"] > 0 and 0 < fig["padding_efficiency"] <= 1
    assert report["precisions"]["fp32"]["vs_fp32"] == 1.0
    assert report["real_tokens_per_pair"] > 0 and "model" in report["cpu"]
