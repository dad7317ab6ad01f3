"""zsnli.config: ZSNLI_* environment parsing, validation, path resolution."""

from __future__ import annotations

import pytest

from zsnli.config import Settings, SettingsError


def test_defaults():
    s = Settings.from_env({})
    assert s.model_dir == "./model" and s.token_budget is None and s.max_labels == 256
    assert s.queue_capacity_pairs >= 2 * s.max_labels
    assert not s.skip_manifest_check and s.device is None and s.dtype is None
    assert any(line.startswith("ZSNLI_TOKEN_BUDGET=") for line in s.describe())


def test_from_env_parses_types():
    s = Settings.from_env({
        "ZSNLI_MODEL_DIR": "/m", "ZSNLI_TOKEN_BUDGET": "4096", "ZSNLI_MAX_BATCH_WAIT_MS": "2.5",
        "ZSNLI_SKIP_MANIFEST_CHECK": "true", "ZSNLI_DEVICE": "cuda:1", "ZSNLI_DTYPE": "bf16",
        "ZSNLI_TORCH_THREADS": "4", "ZSNLI_EXIT_ON_STARTUP_ERROR": "0", "UNRELATED": "x",
    })
    assert (s.model_dir, s.token_budget, s.max_batch_wait_ms) == ("/m", 4096, 2.5)
    assert s.skip_manifest_check is True and s.exit_on_startup_error is False
    assert (s.device, s.dtype, s.torch_threads) == ("cuda:1", "bf16", 4)
    assert Settings.from_env({"ZSNLI_TOKEN_BUDGET": "100"}, token_budget=200).token_budget == 200
    assert Settings.from_env({"ZSNLI_TOKEN_BUDGET": ""}).token_budget is None


@pytest.mark.parametrize(
    "env",
    [
        {"ZSNLI_TOKEN_BUDGET": "lots"},
        {"ZSNLI_TOKEN_BUDGET": "0"},
        {"ZSNLI_MAX_LABELS": "0"},
        {"ZSNLI_SKIP_MANIFEST_CHECK": "maybe"},
        {"ZSNLI_REQUEST_TIMEOUT_S": "nan"},
        {"ZSNLI_MAX_BATCH_WAIT_MS": "-1"},
        {"ZSNLI_MAX_LABELS": "256", "ZSNLI_QUEUE_CAPACITY_PAIRS": "100"},
    ],
)
def test_bad_values_raise_one_line(env):
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    assert "\n" not in str(info.value) and "ZSNLI_" in str(info.value)


def test_manifest_and_calibration_paths(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    s = Settings(model_dir=str(model))
    assert s.resolved_manifest_path() == tmp_path / "training_manifest.json"
    assert s.resolved_calibration_path() == tmp_path / "calibration.json"
    (model / "calibration.json").write_text("{}")
    assert s.resolved_calibration_path() == model / "calibration.json"
    explicit = Settings(model_dir=str(model), manifest_path="/x/m.json")
    assert str(explicit.resolved_manifest_path()) == "/x/m.json"


def test_unknown_settings_warn_with_the_closest_name():
    from zsnli.config import unknown_settings

    lines = unknown_settings({"ZSNLI_BACKEN": "onnx-int8", "ZSNLI_FOO": "1", "ZSNLI_BACKEND": "torch",
                              "ZSNLI_BENCH_DOCS": "4", "ZSNLI_PORT": "1", "PATH": "/bin"})
    assert lines == ["unknown setting ZSNLI_BACKEN ignored (did you mean ZSNLI_BACKEND?)",
                     "unknown setting ZSNLI_FOO ignored"]
