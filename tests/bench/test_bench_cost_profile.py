"""``python -m zsnli.bench.cost_profile`` (issue 50): where a document's time goes, per scoring (no timing is checked)."""

from __future__ import annotations

import json

import pytest

from zsnli.bench import cost_profile as cp


def test_stage_table_splits_each_forward_into_useful_work_and_padding():
    totals = {"tokenise": 0.4, "postprocess": 0.1, "forward:nli": 6.0, "padded:nli": 1000.0, "real:nli": 750.0,
              "forward:embedding_text": 2.0, "padded:embedding_text": 100.0, "real:embedding_text": 100.0}
    t = cp.stage_table(totals, docs=10, wall_s=5.0, latencies_s=[1.0, 3.0])
    per = t["per_doc_s"]
    assert per["NLI forward"] == pytest.approx(0.6 * 0.75) and per["padding waste"] == pytest.approx(0.6 * 0.25)
    assert per["embedding forward (texts)"] == pytest.approx(0.2) and per["embedding forward (labels)"] == 0
    assert per["tokenise"] == pytest.approx(0.04) and per["postprocess"] == pytest.approx(0.01)
    own = sum(v for k, v in per.items() if k != "queue")
    assert per["queue"] == pytest.approx(2.0 - own) and t["docs_per_s"] == 2.0 and t["mean_latency_s"] == 2.0


def test_even_sample_takes_each_dataset_alike():
    docs = [{"dataset": d, "i": i} for d in "abc" for i in range(10)]
    got = cp.even_sample(docs, 6)
    assert [d["dataset"] for d in got] == ["a", "a", "b", "b", "c", "c"]


def test_profile_runs_every_scoring_on_the_service_and_the_fast_path_computes_no_pair(tmp_path, bert_dir,
                                                                                       deberta_dir):
    from conftest import cached_loader, make_settings, write_calibration

    from zsnli.runtime.embedding import embedding_digest

    digest = embedding_digest(bert_dir)
    calib = write_calibration(tmp_path / "calibration.json", rule="entailment", temperature=1.0,
                              embedding_weight=2.0, embedding_sha256=digest, cascade={"min_labels": 3, "keep": 2})
    doc = json.loads(calib.read_text())
    doc["embedding_scoring"] = {"temperature": 1.0, "k_exponent": 0.0, "embedding_sha256": digest}
    calib.write_text(json.dumps(doc))
    settings = make_settings(deberta_dir, calibration_path=str(calib), embedding_dir=str(bert_dir))
    docs = [{"text": f"the match number {i} was won", "labels": ["sport", "music", "food"][: 2 + i % 2]}
            for i in range(6)]
    result = cp.profile(settings, docs, ["pipeline", "served", "embedding"], concurrency=3, loader=cached_loader)
    assert set(result) == {"pipeline", "served", "embedding"}
    assert result["pipeline"]["per_doc_s"]["NLI forward"] > 0
    assert result["pipeline"]["per_doc_s"]["embedding forward (texts)"] == 0
    assert result["embedding"]["per_doc_s"]["NLI forward"] == 0
    assert result["embedding"]["per_doc_s"]["embedding forward (texts)"] > 0
    lines = cp.render(result, "test CPU")
    assert lines[0].startswith("| stage (ms per document) | pipeline | served | embedding |")
    assert any(x.startswith("bound: shipped default / plain NLI <=") for x in lines)
    assert all(x in "\n".join(lines) for x in cp.STAGES)


def test_a_missing_model_dir_is_one_line(tmp_path, capsys):
    """(Every wrong model folder of every bench command: tests/bench/test_bench_args.py.)"""
    with pytest.raises(SystemExit) as exc:
        cp.main(["--model-dir", str(tmp_path / "nope")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and f"--model-dir {tmp_path / 'nope'}: no such directory" in err[0]
