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
