"""zsnli.training.presets: base model ids, overriding the base model, the files a preset reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from zsnli.runtime.embedding import pretrained_encoder_dir
from zsnli.training.presets import get_preset


def test_base_model_id_is_a_preset_field():
    minilm = get_preset("minilm-cpu", "/data")
    assert minilm.base_model_id == "sentence-transformers/all-MiniLM-L6-v2"
    # all-MiniLM-L6-v2 as published, not the served model/embedding (fine-tuned from it since issue 42)
    assert minilm.base_model == pretrained_encoder_dir() and minilm.base_model_note
    assert Path(minilm.base_model).name != "embedding"
    assert minilm.hyperparameters()["base_model"] == minilm.base_model_id
    deberta = get_preset("deberta-v3-base")
    assert deberta.base_model_id == deberta.base_model == "microsoft/deberta-v3-base"
    tiny = get_preset("tiny", "/data", "/models/base")
    assert tiny.base_model_id == tiny.hyperparameters()["base_model"] == "/models/base"


def test_base_model_override_drops_the_pinned_revision():
    """The preset's revision belongs to its own base model, not to the replacement."""
    preset = get_preset("deberta-v3-base", base_model="/models/other")
    assert (preset.base_model, preset.base_model_id, preset.base_revision) == ("/models/other", "/models/other", None)
    assert preset.base_model_note is None


def test_required_files_by_role():
    preset = get_preset("tiny", "/data", "/m")
    assert preset.required_files(("train",)) == [Path("/data/train.jsonl")]
    assert preset.required_files() == [Path("/data/train.jsonl"), Path("/data/validation.jsonl")]
    assert get_preset("deberta-v3-base").required_files() == []  # hub sources
    minilm = get_preset("minilm-cpu", "/d")
    assert Path("/d/lingnli/train.jsonl.gz") in minilm.required_files(("train",))
    assert len(minilm.required_files(("validation", "test"))) == 18


def test_unknown_preset_and_tiny_without_base():
    with pytest.raises(KeyError):
        get_preset("nope")
    with pytest.raises(KeyError, match="--base-model"):
        get_preset("tiny", "/data")


def test_the_tiny_preset_calls_only_the_repositorys_fixture_a_test_fixture(tmp_path, monkeypatch):
    """`--preset tiny --data-dir DIR` recorded a user's own NLI files in data_sources.json with the licence "test
    fixture"; they are named as what they are (the folder given), and only tests/data/tiny_nli keeps that label."""
    import shutil

    from zsnli.training.manifest_writer import data_sources_doc

    fixture = Path(__file__).resolve().parents[1] / "data" / "tiny_nli"
    own = tmp_path / "my-nli"
    shutil.copytree(fixture, own)  # the same bytes: still the user's folder, not the repository's fixture
    for data_dir, want in ((fixture, "test fixture"), (own, f"not stated (your own data: the --data-dir {own})")):
        doc = data_sources_doc(get_preset("tiny", str(data_dir), "/models/base"))
        tiny = {s["name"]: s for s in doc["sources"] if s["name"].startswith("tiny:")}
        assert sorted(tiny) == ["tiny:train", "tiny:validation"]
        for entry in tiny.values():
            assert entry["licence"] == want and Path(entry["path"]).parent == data_dir, entry
    monkeypatch.chdir(fixture.parents[2])  # the checkout: the fixture as the docs spell it, relative
    assert get_preset("tiny", "tests/data/tiny_nli", "/models/base").train_sources[0].licence == "test fixture"
