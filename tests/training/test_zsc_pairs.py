"""zsnli.training.zsc_nli's pair options of issue 30 (negated hypotheses, hard negatives) and
zsnli.training.hard_negatives (the nearest-wrong-class table and its file)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from zsnli.training.hard_negatives import hard_negative_table, nearest_other_classes
from zsnli.training.nli_data import DataError
from zsnli.training.zsc_nli import (
    ZscSet, build_zsc_pairs, negate_hypothesis, negated_hypotheses, read_zsc_set, set_pairs, zsc_sources,
)

ZSC = Path(__file__).resolve().parents[1] / "data" / "tiny_zsc"


@pytest.mark.parametrize("hypothesis, negated", [
    ("The traveller is asking about flights.", "The traveller is not asking about flights."),
    ("These posts are about sport.", "These posts are not about sport."),
    ("The text expresses disgust.", "The text does not express disgust."),
    ("The user wants to book a table.", "The user does not want to book a table."),
    ("The claim argues against the motion.", "The claim does not argue against the motion."),
    ("This clause limits the provider's liability.", "This clause does not limit the provider's liability."),
    ("This request is not polite.", None),
    ("The text expresses no particular emotion.", None),
    ("This post is neither offensive nor hateful.", None),
    ("It isn't spam.", None),
    ("Sport.", None),
])
def test_negate_hypothesis(hypothesis, negated):
    assert negate_hypothesis(hypothesis) == negated


def test_negated_hypotheses_per_set():
    topic = read_zsc_set(ZSC / "tiny_topic.jsonl")
    assert negated_hypotheses(topic) == ("This text is not about sport.", "This text is not about cooking.",
                                         "This text is not about the weather.")
    assert negated_hypotheses(read_zsc_set(ZSC / "tiny_polite.jsonl")) is None  # holds its own negation
    mixed = ZscSet("m", "emotion", ("a", "b"), ("The text expresses joy.", "The text expresses no emotion."),
                   ("x",), (0,))
    assert negated_hypotheses(mixed) is None


def _issue20_pairs(zset, seed):
    """The pairs as issue 20's recipe drew them (one randrange per text)."""
    rng, out = random.Random(seed), []
    for text, gold in zip(zset.texts, zset.labels):
        other = rng.randrange(len(zset.hypotheses) - 1)
        other += other >= gold
        out += [(text, zset.hypotheses[gold], "entailment"), (text, zset.hypotheses[other], "not_entailment")]
    return out


def test_default_shares_draw_the_issue20_pairs():
    topic = read_zsc_set(ZSC / "tiny_topic.jsonl")
    rows = set_pairs(topic, random.Random(3), nearest=[0] * len(topic.texts))  # shares 0: nearest unused
    assert [(r["premise"], r["hypothesis"], r["label"]) for r in rows] == _issue20_pairs(topic, 3)


def test_negated_share_one_gives_negated_pairs_with_swapped_labels():
    topic = read_zsc_set(ZSC / "tiny_topic.jsonl")
    negated = negated_hypotheses(topic)
    rows = set_pairs(topic, random.Random(0), negated_share=1.0)
    for i, (text, gold) in enumerate(zip(topic.texts, topic.labels)):
        pos, neg = rows[2 * i], rows[2 * i + 1]
        assert pos == {"premise": text, "hypothesis": negated[gold], "label": "contradiction"}
        assert neg["label"] == "entailment" and neg["hypothesis"] in negated
        assert neg["hypothesis"] != negated[gold]
    polite = read_zsc_set(ZSC / "tiny_polite.jsonl")
    assert {r["label"] for r in set_pairs(polite, random.Random(0), negated_share=1.0)} == {"entailment",
                                                                                            "contradiction"}
    assert all(r["hypothesis"] in polite.hypotheses for r in set_pairs(polite, random.Random(0), negated_share=1.0))


def test_hard_share_one_takes_the_nearest_class():
    topic = read_zsc_set(ZSC / "tiny_topic.jsonl")
    nearest = [(g + 2) % 3 for g in topic.labels]
    rows = set_pairs(topic, random.Random(0), nearest=nearest, hard_share=1.0)
    assert [r["hypothesis"] for r in rows[1::2]] == [topic.hypotheses[c] for c in nearest]
    with pytest.raises(DataError, match="2 nearest classes for 12 texts"):
        set_pairs(topic, random.Random(0), nearest=[1, 2], hard_share=1.0)


def test_build_counts_negated_pairs_and_records_the_shares():
    rows, counts = build_zsc_pairs(zsc_sources(ZSC), n_nli=1000, ratio=1.0, seed=0, negated_share=1.0)
    assert counts["negated_share"] == 1.0 and counts["hard_negative_share"] == 0.0
    assert counts["sets"]["zsc-train:tiny_topic"]["negated_pairs"] == 24  # every topic text, two pairs each
    assert counts["sets"]["zsc-train:tiny_polite"]["negated_pairs"] == 0
    assert counts["labels"] == {"contradiction": 12 + 8, "entailment": 12 + 8}
    _, plain = build_zsc_pairs(zsc_sources(ZSC), n_nli=1000, ratio=1.0, seed=0)
    assert "negated_share" not in plain and "negated_pairs" not in plain["sets"]["zsc-train:tiny_topic"]


class FakeEncoder:
    """Unit vectors from a fixed table; counts the texts it was asked to embed."""

    digest = "fake-1"

    def __init__(self, vectors):
        self.vectors, self.calls = vectors, 0

    def encode(self, texts, batch_size=64):
        self.calls += len(texts)
        return np.array([self.vectors(t) for t in texts], dtype=np.float32)


def _topic_vectors(text):
    # sport ~ (1,0,0), cooking ~ (0,1,0), weather ~ (0,0,1); every text leans toward "cooking" second
    axis = {"sport": 0, "cooking": 1, "weather": 2}
    v = np.array([0.0, 0.3, 0.1])
    for word, i in axis.items():
        if word in text.lower():
            v[i] += 1.0
    return v / np.linalg.norm(v)


def test_nearest_other_class_is_the_closest_wrong_hypothesis():
    zset = ZscSet("t", "topic", ("sport", "cooking", "weather"),
                  ("about sport", "about cooking", "about the weather"),
                  ("sport news", "cooking tips", "weather today"), (0, 1, 2))
    assert nearest_other_classes(zset, FakeEncoder(_topic_vectors)) == [1, 2, 1]


def test_hard_negative_table_is_written_once_and_read_back(tmp_path):
    sources = zsc_sources(ZSC)
    path = tmp_path / "run" / "hard_negatives.json"
    enc = FakeEncoder(_topic_vectors)
    table = hard_negative_table(sources, enc, path)
    topic = read_zsc_set(ZSC / "tiny_topic.jsonl")
    assert set(table) == {"zsc-train:tiny_topic"}  # the binary set has no choice to make
    assert len(table["zsc-train:tiny_topic"]) == len(topic.texts)
    assert all(c != g for c, g in zip(table["zsc-train:tiny_topic"], topic.labels))
    assert enc.calls == len(topic.texts) + 3
    again = FakeEncoder(_topic_vectors)
    assert hard_negative_table(sources, again, path) == table and again.calls == 0
    other = FakeEncoder(_topic_vectors)
    other.digest = "fake-2"  # another encoder: recomputed, file rewritten
    hard_negative_table(sources, other, path)
    assert other.calls > 0 and json.loads(path.read_text())["encoder_sha256"] == "fake-2"


def test_a_stopped_table_keeps_the_sets_it_embedded(tmp_path):
    for name in ("a_topic", "b_topic"):
        (tmp_path / f"{name}.jsonl").write_text("".join(
            json.dumps({"text": f"{name} {w} text", "label": w, "label_index": i}) + "\n"
            for i, w in enumerate(("sport", "cooking", "weather"))))
        (tmp_path / f"{name}.labels.json").write_text(json.dumps({
            "dataset": name, "classes": ["sport", "cooking", "weather"], "task_kind": "topic",
            "hypotheses": ["about sport", "about cooking", "about the weather"], "source": {"licence": "test"}}))
    sources = zsc_sources(tmp_path)
    path = tmp_path / "hard_negatives.json"

    class StopsAtB(FakeEncoder):
        def encode(self, texts, batch_size=64):
            if any(t.startswith("b_topic") for t in texts):
                raise KeyboardInterrupt
            return super().encode(texts, batch_size)

    with pytest.raises(KeyboardInterrupt):
        hard_negative_table(sources, StopsAtB(_topic_vectors), path)
    assert set(json.loads(path.read_text())["sets"]) == {"zsc-train:a_topic"}
    enc = FakeEncoder(_topic_vectors)
    table = hard_negative_table(sources, enc, path)
    assert set(table) == {"zsc-train:a_topic", "zsc-train:b_topic"} and enc.calls == 3 + 3  # b only


def test_the_trainer_data_names_the_encoder_of_its_hard_negatives(tmp_path, bert_dir, monkeypatch):
    from zsnli.runtime import embedding
    from zsnli.runtime.embedding import embedding_digest
    from zsnli.training import trainer as training
    from zsnli.training.presets import get_preset

    root = Path(__file__).resolve().parents[2]
    called = []
    # the hard negatives come from all-MiniLM-L6-v2 as published (the PyPI package, absent in CI): a local
    # encoder stands in for it, and the served model/embedding is not read
    monkeypatch.setattr(embedding, "pretrained_encoder_dir", lambda: called.append(1) or str(bert_dir))
    preset = get_preset("tiny", str(root / "tests" / "data" / "tiny_nli"), str(bert_dir)).with_overrides(
        zsc_sources=zsc_sources(ZSC), zsc_ratio=1.0, zsc_hard_negative_share=1.0, zsc_negated_share=0.5)
    data = training._load_data(preset, tmp_path)
    zsc = data.counts["zsc_train"]
    assert called and zsc["hard_negative_encoder"] == {"dir": str(bert_dir), "sha256": embedding_digest(bert_dir)}
    assert zsc["hard_negative_sets"] == ["zsc-train:tiny_topic"]
    table = json.loads((tmp_path / training.HARD_NEGATIVES_FILE).read_text())
    nearest = table["sets"]["zsc-train:tiny_topic"]["nearest"]
    topic = read_zsc_set(ZSC / "tiny_topic.jsonl")
    negatives = {r["premise"]: r["hypothesis"] for r in data.train
                 if r["premise"] in topic.texts and r["label"] == "not_entailment"}
    for text, c in zip(topic.texts, nearest):  # share 1: every plain negative is the nearest class
        if text in negatives:
            assert negatives[text] == topic.hypotheses[c]
    (tmp_path / "plain").mkdir()
    plain = training._load_data(preset.with_overrides(zsc_hard_negative_share=0.0, zsc_negated_share=0.0),
                                tmp_path / "plain")
    assert "hard_negative_encoder" not in plain.counts["zsc_train"]


# --------------------------------------------------------------------------- the zsc-train reader's refusals

_SPOILED_SET = {  # spoil tiny_topic in a copy -> what the DataError names (the zsc-dev reader refuses the same)
    "labels a list": (lambda d: (d / "tiny_topic.labels.json").write_text("[1]"),
                      "tiny_topic.labels.json: must be a JSON object with classes and hypotheses, not a list"),
    "labels a string": (lambda d: (d / "tiny_topic.labels.json").write_text('"str"'),
                        "tiny_topic.labels.json: must be a JSON object"),
    "classes a string": (lambda d: (d / "tiny_topic.labels.json").write_text(
        '{"classes": "ab", "hypotheses": ["a", "b"]}'), "tiny_topic.labels.json: classes must be a list of strings"),
    "task_kind a list": (lambda d: (d / "tiny_topic.labels.json").write_text(
        '{"classes": ["a", "b"], "hypotheses": ["a", "b"], "task_kind": ["topic"]}'),
        "tiny_topic.labels.json: task_kind must be a string, not a list"),
    "label_index a boolean": (lambda d: (d / "tiny_topic.jsonl").write_text('{"text": "x", "label_index": true}\n'),
                              "tiny_topic.jsonl:1: label_index must be an integer"),
    "label not the class": (lambda d: (d / "tiny_topic.jsonl").write_text(
        '{"text": "x", "label_index": 0, "label": "nonsense"}\n'), "tiny_topic.jsonl:1: label \"nonsense\""),
    "rows not UTF-8": (lambda d: (d / "tiny_topic.jsonl").write_bytes(b'{"text": "\xe9", "label_index": 0}\n'),
                       "tiny_topic.jsonl: not UTF-8 text (byte 0xe9 on line 1 (byte 11 of the line))"),
    # a UTF-16 file was "not UTF-8 text (byte 0xff at offset 0)" here, but named with its iconv command by every
    # other JSONL reader (`zsnli.harness.cli.encoding_problem`); without a byte-order mark it even decoded as UTF-8
    "rows UTF-16": (lambda d: (d / "tiny_topic.jsonl").write_text('{"text": "x", "label_index": 0}\n',
                                                                  encoding="utf-16"),
                    "tiny_topic.jsonl is UTF-16 (its byte-order mark says so): JSONL is UTF-8; convert it, e.g. iconv"),
    "rows UTF-16 without a mark": (lambda d: (d / "tiny_topic.jsonl").write_text(
        '{"text": "x", "label_index": 0}\n', encoding="utf-16-le"), "tiny_topic.jsonl holds NUL bytes in its first line"),
}


@pytest.mark.parametrize("case", sorted(_SPOILED_SET))
def test_the_zsc_train_reader_refuses_what_the_zsc_dev_reader_refuses(tmp_path, case):
    """The zsc-train reader read the same layout as zsc-dev's with fewer checks: a labels file that is no object
    raised AttributeError, ``"classes": "ab"`` was split into a and b, ``label_index: true`` was class 1, a row's
    ``label`` was never compared, and a non-UTF-8 file's error did not name it. Each is one `DataError` naming
    the file now (`zsnli.harness.zsc_layout`, zsc-dev's rules)."""
    import shutil

    data = tmp_path / "zsc"
    shutil.copytree(ZSC, data)
    spoil, needle = _SPOILED_SET[case]
    spoil(data)
    with pytest.raises(DataError) as caught:
        read_zsc_set(data / "tiny_topic.jsonl")
    assert needle in str(caught.value) and str(data) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("spoil, needle", [
    (lambda d: ((d / "tiny_topic.jsonl").unlink(), (d / "tiny_topic.jsonl").mkdir()), "tiny_topic.jsonl is a directory"),
    (lambda d: (d / "y.jsonl").symlink_to(d / "gone.jsonl"), "y.jsonl is a symbolic link to nothing"),
    (lambda d: (d / "extra.jsonl").write_text('{"text": "x", "label_index": 0}\n'),
     "extra.jsonl has no extra.labels.json beside it"),
    (lambda d: (d / "tiny_topic.jsonl").unlink(), "tiny_topic.labels.json has no tiny_topic.jsonl beside it"),
])
def test_a_zsc_train_folder_with_a_broken_file_is_refused_not_skipped(tmp_path, spoil, needle):
    """``zsc_sources`` kept only the ``.jsonl`` files with a labels file beside it: a directory, a link to nothing
    or a file without its other half was left out of training silently; it is refused, as zsc-dev's lister does."""
    import shutil

    data = tmp_path / "zsc"
    shutil.copytree(ZSC, data)
    assert [s.name for s in zsc_sources(data)] == ["zsc-train:tiny_polite", "zsc-train:tiny_topic"]
    spoil(data)
    with pytest.raises(DataError, match=re.escape(needle)):
        zsc_sources(data)


def test_an_excluded_file_that_is_not_utf8_is_named(tmp_path):
    from zsnli.training.zsc_nli import texts_of

    bad = tmp_path / "dev.jsonl"
    bad.write_bytes(b'{"text": "a"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=re.escape(f"{bad}: not UTF-8 text (byte 0xe9 on line 2 (byte 14 of the line))")):
        texts_of([tmp_path])
    bad.write_text('{"text": "a"}\nnot json\n', encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{bad}:2: not JSON")):
        texts_of([bad])


def test_zsc_rows_skip_a_utf8_byte_order_mark_and_crlf_line_ends(tmp_path):
    """The zsc reader took a UTF-8 BOM as part of the first row ("Unexpected UTF-8 BOM"), which every other JSONL
    reader skips (`zsnli.harness.cli.encoding_problem` calls the BOM fine)."""
    from zsnli.harness.zsc_layout import ZscLayoutError, read_rows

    path = tmp_path / "news.jsonl"
    path.write_bytes('\ufeff{"text": "a", "label_index": 0}\r\n{"text": "b", "label_index": 1}\r\n'.encode())
    assert read_rows(path, ("x", "y")) == [("a", 0), ("b", 1)]
    path.write_bytes(b'{"text": "a", "label_index": 0}\r\n{"text": "b\r\n')
    with pytest.raises(ZscLayoutError, match=re.escape(f"{path}:2: not JSON (Unterminated string (column 10))")):
        read_rows(path, ("x", "y"))
