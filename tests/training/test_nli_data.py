"""zsnli.training.nli_data: label mapping, source loading, dedupe and the premise-grouped hold-out."""

from __future__ import annotations

import json
import random

import pytest

from zsnli.training import nli_data
from zsnli.training.nli_data import DataError, Source, dedupe, hold_out_by_premise, normalise_label

LABELS = ("entailment", "neutral", "contradiction")


@pytest.mark.parametrize(
    "raw, expected",
    [(0, "entailment"), (1, "neutral"), (2, "contradiction"), (-1, None), ("-", None), ("", None),
     ("Entailment", "entailment"), ("CONTRADICTION", "contradiction"), ("neutral", "neutral"), ("2", "contradiction")],
)
def test_label_mapping(raw, expected):
    assert normalise_label(raw) == expected


@pytest.mark.parametrize("raw", [3, "maybe", None, True, 1.5])
def test_label_mapping_rejects_unknown(raw):
    with pytest.raises(DataError):
        normalise_label(raw)


def test_hub_rows_drop_no_gold_label(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [{"premise": "p", "hypothesis": "h1", "label": 0}, {"premise": "p", "hypothesis": "h2", "label": -1},
            {"premise": "p", "hypothesis": "h3", "label": 2}, {"premise": " ", "hypothesis": "h4", "label": 1}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept, counts = nli_data.load_source(Source(name="x", kind="local", role="train", path=str(path)))
    assert [r["label"] for r in kept] == ["entailment", "contradiction"]
    assert counts == {"read": 4, "dropped_no_gold_label": 1, "dropped_empty_text": 1, "kept": 2}


def test_dedupe_keeps_first_occurrence():
    rows = [{"premise": "a", "hypothesis": "b", "label": "neutral"},
            {"premise": "a", "hypothesis": "b", "label": "entailment"},
            {"premise": "a", "hypothesis": "c", "label": "neutral"}]
    kept, removed = dedupe(rows)
    assert removed == 1
    assert kept == [rows[0], rows[2]]


def test_holdout_is_disjoint_by_premise():
    rng = random.Random(0)
    rows = [{"premise": f"p{rng.randrange(50)}", "hypothesis": f"h{i}", "label": LABELS[i % 3]} for i in range(400)]
    train, held = hold_out_by_premise(rows, 60, seed=3)
    assert len(held) >= 60
    assert len(train) + len(held) == len(rows)
    assert not {r["premise"] for r in train} & {r["premise"] for r in held}
    again_train, again_held = hold_out_by_premise(rows, 60, seed=3)
    assert again_held == held and again_train == train
    with pytest.raises(DataError):
        hold_out_by_premise(rows, 401, seed=0)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_bad_line_of_an_nli_file_is_named_by_its_line(tmp_path, suffix):
    """`read_jsonl` said "cannot read F: Expecting ... line 1 column 9": the line of the file was not named."""
    import gzip

    good = json.dumps({"premise": "p", "hypothesis": "h", "label": 0})
    data = ("\ufeff" + good + "\r\n\n" + good + "\r\n" + '{"premise": "p", "hypothesis": "broken\r\n').encode()
    path = tmp_path / f"nli{suffix}"
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    with pytest.raises(DataError) as refused:
        nli_data.read_jsonl(path)
    assert str(refused.value) == f"{path}:4: not JSON (Unterminated string (column 32))"
    path.write_bytes((good + "\n" + good).encode() if suffix == ".jsonl" else gzip.compress((good + "\n").encode()))
    assert nli_data.read_jsonl(path)[0] == json.loads(good)  # a BOM-less file, with and without a last newline


@pytest.mark.parametrize("line, says", [('{"premise": "p", "hypothesis": "h", "label": "maybe"}',
                                         "unrecognised NLI label: 'maybe'"),
                                        ('["p", "h", 0]', "a row must be a JSON object, not list")])
def test_a_row_no_rule_reads_is_named_by_file_and_line(tmp_path, line, says):
    """"unrecognised NLI label: 'maybe'" named neither the file nor the line (a new-user pass)."""
    good = json.dumps({"premise": "p", "hypothesis": "h", "label": 0})
    path = tmp_path / "train.jsonl"
    path.write_text(f"{good}\n\n{line}\n")
    with pytest.raises(DataError) as refused:
        nli_data.load_source(Source(name="x:train", kind="local", path=str(path), role="train", licence="test"))
    assert str(refused.value) == f"{path}:3: {says}"
