"""zsnli.batch.predictor without Ray: the per-actor scorer, its per-row errors and output schema;
and that neither the server nor the batch CLI's parsing imports Ray."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest
from conftest import make_settings

from zsnli.batch.predictor import ColumnSpec, Predictor, output_schema, row_document


def test_row_document_reasons():
    spec = ColumnSpec(template="About {}.")
    assert row_document(None, ["a"], spec) == "text is missing"
    assert row_document(3, ["a"], spec) == "text must be a string, got int"
    assert row_document("t", [], spec) == "labels is empty"
    assert row_document("t", "a", spec) == "labels must be a list of strings"
    assert row_document("t", ["a", 1], spec) == "labels must be a list of strings"
    assert row_document("t", ("a",), spec) == {"text": "t", "labels": ["a"], "multi_label": False,
                                               "hypothesis_template": "About {}."}


def test_predictor_scores_a_batch_and_keeps_unscorable_rows(bert_dir):
    spec = ColumnSpec(id_col="key", labels=("sport", "business"), template="This text is about {}.")
    pred = Predictor(make_settings(bert_dir), spec)
    batch = pa.table({"key": pa.array([10, 11, 12], pa.int64()),
                      "text": ["The team won the match.", None, "Shares fell on the market."]})
    out = pred(batch)
    assert out.schema == output_schema("key", pa.int64())
    rows = out.to_pylist()
    assert [r["key"] for r in rows] == [10, 11, 12]
    assert rows[1]["error"] == "text is missing" and rows[1]["probabilities"] is None
    for r in (rows[0], rows[2]):
        assert r["error"] is None and abs(sum(r["probabilities"]) - 1) < 1e-9
        assert r["top_probability"] == max(r["probabilities"]) and r["top_label"] in spec.labels
        assert r["model_sha256"] == pred.model_sha256 and r["calibration_sha256"] is None  # uncalibrated
    long_label = Predictor(make_settings(bert_dir), ColumnSpec(labels=("sport", "sport " * 100)))
    (row,) = long_label(pa.table({"id": ["a"], "text": ["The team won."]})).to_pylist()
    assert row["probabilities"] is None and row["error"].startswith("label_too_long: ")


@pytest.mark.parametrize("module", ["zsnli.serving.app", "zsnli.serve", "zsnli.batch.cli"])
def test_importing_does_not_import_ray(module):
    code = f"import sys, {module}; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
