"""Documented ranges: every numeric ZSNLI_* setting and calibration value is checked before listening;
HOST/PORT and ZSNLI_DTYPE are refused in one line (exit 3); no scoring overflow escapes as a generic 500."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields

import numpy as np
import pytest
from conftest import cached_loader, make_settings, running_app
from test_faults import _free_port, _server

from zsnli.serving.app import create_app
from zsnli.config import DTYPES, RANGES, Settings, SettingsError, listen_address
from zsnli.runtime.precision import DTYPE_ALIASES
from zsnli.request_scoring import RequestScoring
from zsnli.scoring import VALUE_RANGES, ScoringConfig, ScoringConfigError, label_probabilities
from zsnli.serving.startup import StartupRefused

# ----------------------------------------------------------------- settings


def test_every_numeric_setting_has_a_range_that_holds_its_default():
    numeric = {f.name for f in fields(Settings)
               if f.type in ("int", "float", "int | None", "float | None") and f.name not in ("exit_on_startup_error",)}
    assert numeric == set(RANGES)
    for name, (low, high) in RANGES.items():
        default = getattr(Settings(), name)
        assert default is None or low <= default <= high, name


@pytest.mark.parametrize("name", sorted(RANGES))
def test_each_bound_is_inclusive_and_one_step_outside_is_refused(name):
    low, high = RANGES[name]
    env = Settings.env_name(name)
    step = 1 if isinstance(Settings.__dataclass_fields__[name].default, int) or name in ("token_budget", "torch_threads") \
        else 0.001
    # queue_capacity_pairs must hold 2 x max_labels; keep the other side consistent
    base = {"ZSNLI_MAX_LABELS": "1", "ZSNLI_QUEUE_CAPACITY_PAIRS": str(10 ** 8)}
    base.pop(env, None)
    for ok in (low, high):
        text = str(int(ok)) if step == 1 else repr(float(ok))
        if name == "max_labels":
            base["ZSNLI_QUEUE_CAPACITY_PAIRS"] = str(2 * int(ok))
        assert getattr(Settings.from_env({**base, env: text}), name) == ok
    for bad in (low - step, high + step):
        text = str(int(bad)) if step == 1 else repr(float(bad))
        with pytest.raises(SettingsError) as info:
            Settings.from_env({**base, env: text})
        assert str(info.value).startswith(f"{env} must be in [") and "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["x", "float64", "int8", "torch.uint8"])
def test_bad_dtype_is_refused_by_settings(value):
    with pytest.raises(SettingsError, match="ZSNLI_DTYPE must be one of"):
        Settings.from_env({"ZSNLI_DTYPE": value})


@pytest.mark.parametrize("value", ["bf16", "BFloat16", "torch.float16", "fp32", "half"])
def test_dtype_aliases_are_accepted(value):
    assert Settings.from_env({"ZSNLI_DTYPE": value}).dtype == value


def test_dtype_names_match_the_models():
    assert set(DTYPES) == set(DTYPE_ALIASES)


@pytest.mark.parametrize("env,message", [
    ({"PORT": "notaport"}, "PORT must be an integer in [1, 65535], got 'notaport'"),
    ({"PORT": "0"}, "PORT must be an integer"),
    ({"PORT": "70000"}, "PORT must be an integer"),
    ({"PORT": "-1"}, "PORT must be an integer"),
    ({"HOST": "local host"}, "HOST must be an IP address (IPv6 as ::1 or [::1]) or a host name, without a port"),
])
def test_bad_listen_address_is_one_line(env, message):
    with pytest.raises(SettingsError) as info:
        listen_address(env)
    assert message in str(info.value)


def test_listen_address_defaults():
    assert listen_address({}) == ("0.0.0.0", 8000)
    assert listen_address({"HOST": "127.0.0.1", "PORT": " 9000 "}) == ("127.0.0.1", 9000)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env,needle", [
    ({"PORT": "notaport"}, "PORT must be an integer in [1, 65535]"),
    ({"ZSNLI_DTYPE": "float64"}, "ZSNLI_DTYPE must be one of"),
    ({"ZSNLI_READ_TIMEOUT_S": "0"}, "ZSNLI_READ_TIMEOUT_S must be in [0.1, 3600]"),
])
def test_server_refuses_before_listening_with_exit_3(bert_dir, env, needle):
    proc = _server(bert_dir, _free_port(), **env)
    out, _ = proc.communicate(timeout=100)
    assert proc.returncode == 3, out
    lines = [line for line in out.splitlines() if line.strip() and "Writing model shards" not in line]
    assert lines == [f"refusing to start: {lines[0].split(': ', 1)[1]}"] and needle in lines[0], out
    assert "Traceback" not in out


# ----------------------------------------------------------------- calibration values


@pytest.mark.parametrize("key,value", [
    ("k_exponent", 2000), ("k_exponent", -2000), ("temperature", 5e-324), ("temperature", 1e4),
    ("temperature", 0), ("temperature", -1.0), ("embedding_weight", -1.0), ("embedding_weight", 1e6),
    ("k_exponent", 4.001),
])
def test_out_of_range_scoring_values_are_refused(key, value):
    chosen = {"rule": "entailment", "temperature": 1.0, "k_exponent": 0.0, key: value}
    if key == "embedding_weight":
        chosen["embedding_sha256"] = "x"
    with pytest.raises(ScoringConfigError) as info:
        ScoringConfig.from_dict(chosen)
    low, high = VALUE_RANGES[key]
    assert f"{key} must be in [{low:g}, {high:g}]" in str(info.value)


@pytest.mark.parametrize("key", sorted(VALUE_RANGES))
def test_scoring_bounds_are_inclusive(key):
    for bound in VALUE_RANGES[key]:
        extra = {"embedding_sha256": "x"} if key == "embedding_weight" else {}
        assert getattr(ScoringConfig.from_dict({key: bound, **extra}), key) == bound


def test_extreme_in_range_config_gives_finite_probabilities_at_4096_labels():
    # the corners of the ranges at the largest K ZSNLI_MAX_LABELS allows, with float32-extreme scores
    rng = np.random.default_rng(0)
    for t in VALUE_RANGES["temperature"]:
        for b in VALUE_RANGES["k_exponent"]:
            cfg = ScoringConfig(temperature=t, k_exponent=b, embedding_weight=1000.0, embedding_sha256="x")
            scores = rng.uniform(-3.4e38, 3.4e38, size=4096)
            p = label_probabilities(scores, cfg, -scores, rng.uniform(-1, 1, 4096))
            assert np.all(np.isfinite(p)) and abs(p.sum() - 1) < 1e-9


def test_temperature_overflow_is_a_value_error_not_an_arithmetic_error():
    cfg = ScoringConfig()
    object.__setattr__(cfg, "k_exponent", 2000.0)  # as if the range check had been bypassed
    with pytest.raises(ValueError, match="out of range"):
        cfg.temperature_for(3)
    object.__setattr__(cfg, "k_exponent", -2000.0)
    with pytest.raises(ValueError):
        label_probabilities(np.array([1.0, 2.0, 3.0]), cfg)


@pytest.mark.anyio
@pytest.mark.parametrize("key,value", [("k_exponent", 2000), ("temperature", 5e-324), ("k_exponent", -2000)])
async def test_out_of_range_calibration_refuses_to_start(tmp_path, bert_dir, key, value):
    model_dir = tmp_path / "model"
    shutil.copytree(bert_dir, model_dir)
    chosen = {"rule": "entailment", "temperature": 1.0, "k_exponent": 0.0, key: value}
    (tmp_path / "calibration.json").write_text(json.dumps({"chosen": chosen}))
    app = create_app(make_settings(model_dir), loader=cached_loader)
    with pytest.raises(StartupRefused, match=f"{key} must be in"):
        async with running_app(app):
            pass


@pytest.mark.anyio
async def test_scoring_overflow_is_non_finite_never_internal(bert_dir, make_app):
    app = make_app(bert_dir)
    async with running_app(app) as client:
        st = app.state.classifier.state
        bad = ScoringConfig()
        object.__setattr__(bad, "k_exponent", 2000.0)  # bypass the range check to reach the arithmetic
        st.scoring = RequestScoring(bad)
        r = await client.post("/classify", json={"text": "x", "labels": ["a", "b", "c"]})
        assert r.status_code == 500 and r.json()["error_type"] == "non_finite", r.text



@pytest.mark.anyio
@pytest.mark.parametrize("exc", [OverflowError("math range error"), ZeroDivisionError("float division by zero"),
                                 FloatingPointError("overflow encountered"), ValueError("bad scores")])
async def test_any_arithmetic_error_in_scoring_is_non_finite(bert_dir, make_app, monkeypatch, exc):
    def broken(*args, **kwargs):
        raise exc

    monkeypatch.setattr(RequestScoring, "probabilities", broken)
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json={"text": "x", "labels": ["a", "b"]})
        assert r.status_code == 500, r.text
        assert r.json()["error_type"] == "non_finite" and type(exc).__name__ in r.json()["error"]


def test_configuration_page_states_every_range():
    from pathlib import Path

    from zsnli.config import range_text

    readme = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = {line.split(" | ")[0][3:-1]: line for line in readme.splitlines() if line.startswith("| `ZSNLI_")}
    for name in RANGES:
        env = Settings.env_name(name)
        assert f"range {range_text(name)}" in rows[env], env
    for key, (low, high) in VALUE_RANGES.items():
        assert f"{key} [{low:g}, {high:g}]" in rows["ZSNLI_CALIBRATION_PATH"], key
