"""ZSNLI_MODEL_VARIANT (issue 56): the small model in model/, the base-size one in model/base with its own
manifest and calibration, pinned by the top-level manifest; /health and /info say which one is served, and
train.py verify covers model/base."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import CONTENT_FREE_CALIBRATION, running_app, write_calibration

BASE_CALIBRATION = dict(rule="entailment", temperature=2.5, k_exponent=0.0)


@pytest.fixture
def layout(tmp_path, bert_dir, deberta_dir):
    """``tmp/model`` (bert, the small model) holding ``base/`` (deberta, its own manifest and calibration);
    the top-level training_manifest.json hashes the small model and pins the base's manifest."""
    from zsnli.manifest import hash_model_dir, model_dir_digest, variant_pin

    model = tmp_path / "model"
    shutil.copytree(bert_dir, model)
    base = model / "base"
    shutil.copytree(deberta_dir, base)
    (base / "training_manifest.json").write_text(json.dumps({"files": hash_model_dir(base)}))
    write_calibration(base / "calibration.json", **BASE_CALIBRATION)
    calibration = json.loads((base / "calibration.json").read_text())
    calibration["model_sha256"] = model_dir_digest(hash_model_dir(base))
    (base / "calibration.json").write_text(json.dumps(calibration))
    top = {"files": hash_model_dir(model), "variants": {"base": variant_pin(model)}}
    (tmp_path / "training_manifest.json").write_text(json.dumps(top))
    write_calibration(tmp_path / "calibration.json", **CONTENT_FREE_CALIBRATION)
    return model


def _record_model(calibration, model_dir, digest: str | None = "actual"):
    """Set calibration.json's ``model_sha256`` to ``model_dir``'s digest (``digest`` "actual"), or to ``digest``."""
    from zsnli.manifest import hash_model_dir, model_dir_digest

    doc = json.loads(calibration.read_text())
    doc["model_sha256"] = model_dir_digest(hash_model_dir(model_dir)) if digest == "actual" else digest
    calibration.write_text(json.dumps(doc))


def _settings(model, **kw):
    from conftest import make_settings

    return make_settings(model, **kw)


def test_the_small_models_files_leave_the_base_folder_and_metadata_out(layout):
    from zsnli.manifest import hash_model_dir

    assert not any(name.startswith("base/") for name in hash_model_dir(layout))
    assert "training_manifest.json" not in hash_model_dir(layout / "base")
    assert "calibration.json" not in hash_model_dir(layout / "base")
    assert "config.json" in hash_model_dir(layout / "base")


@pytest.mark.parametrize("variant, device, expected", [
    ("small", None, "small"), ("small", "cuda", "small"), ("auto", None, "small"), ("auto", "cpu", "small"),
    ("auto", "cuda", "base"), ("auto", "cuda:1", "base"), ("base", None, "base"), ("base", "cpu", "base"),
    ("BASE", None, "base"),
])
def test_the_variant_resolves_to_the_small_or_the_base_folder(layout, variant, device, expected, monkeypatch):
    import torch

    from zsnli.config import Settings
    from zsnli.serving.startup import resolve_variant

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the default device here is the CPU
    settings, served = resolve_variant(Settings(model_dir=str(layout), model_variant=variant, device=device))
    assert served == expected
    assert settings.model_dir == str(layout / "base" if expected == "base" else layout)
    if expected == "base":  # the sentence encoder stays the top model folder's, the manifest is the base's own
        assert settings.manifest_path is None
        assert settings.resolved_manifest_path() == layout / "base" / "training_manifest.json"
        assert settings.resolved_calibration_path() == layout / "base" / "calibration.json"


def test_auto_serves_the_small_model_on_cuda_when_there_is_no_base_folder(tmp_path, bert_dir):
    from zsnli.config import Settings
    from zsnli.serving.startup import resolve_variant

    shutil.copytree(bert_dir, tmp_path / "model")
    settings, served = resolve_variant(Settings(model_dir=str(tmp_path / "model"), device="cuda"))
    assert served == "small" and settings.model_dir == str(tmp_path / "model")


def test_the_base_model_is_verified_and_scored_with_its_own_files(layout):
    from zsnli.manifest import hash_model_dir, model_dir_digest
    from zsnli.serving.startup import preflight

    pre = preflight(_settings(layout, model_variant="base"))
    assert pre.variant == "base" and pre.verified and pre.calibrated
    assert pre.model_sha256 == model_dir_digest(hash_model_dir(layout / "base"))
    assert pre.scoring.default.temperature == BASE_CALIBRATION["temperature"]
    small = preflight(_settings(layout, model_variant="small"))
    assert small.variant == "small" and small.verified
    assert small.scoring.default.temperature == CONTENT_FREE_CALIBRATION["temperature"]
    assert not any(name.startswith("base/") for name in small.files)


def test_a_base_folder_that_the_manifest_does_not_pin_is_refused(layout):
    from zsnli.manifest import ManifestError
    from zsnli.serving.startup import preflight

    own = layout / "base" / "training_manifest.json"
    own.write_text(own.read_text() + " ")
    with pytest.raises(ManifestError, match="pins"):
        preflight(_settings(layout, model_variant="base"))
    top = layout.parent / "training_manifest.json"
    undeclared = json.loads(top.read_text())
    del undeclared["variants"]
    top.write_text(json.dumps(undeclared))
    with pytest.raises(ManifestError, match="declares no 'base' variant"):
        preflight(_settings(layout, model_variant="base"))
    assert preflight(_settings(layout, model_variant="small")).verified  # the small model is untouched


def test_a_changed_base_weight_is_refused_at_start(layout):
    from zsnli.manifest import ManifestError
    from zsnli.serving.startup import preflight

    weights = next(p for p in (layout / "base").iterdir() if p.suffix == ".safetensors")
    weights.write_bytes(weights.read_bytes() + b"\0")
    with pytest.raises(ManifestError):
        preflight(_settings(layout, model_variant="base"))


def test_asking_for_a_base_model_that_is_not_there_is_one_line(tmp_path, bert_dir):
    from zsnli.config import Settings, SettingsError
    from zsnli.serving.startup import resolve_variant

    shutil.copytree(bert_dir, tmp_path / "model")
    with pytest.raises(SettingsError, match=r"ZSNLI_MODEL_VARIANT=base: no base model in .*base") as err:
        resolve_variant(Settings(model_dir=str(tmp_path / "model"), model_variant="base"))
    assert "\n" not in str(err.value)
    with pytest.raises(SettingsError, match="ZSNLI_MODEL_VARIANT must be one of auto, small, base"):
        Settings.from_env({"ZSNLI_MODEL_VARIANT": "large"})
    with pytest.raises(SettingsError, match="not a hub model"):
        resolve_variant(Settings(model_id="org/name", model_variant="base"))


@pytest.mark.anyio
@pytest.mark.parametrize("variant", ["small", "base"])
async def test_health_and_info_say_which_model_is_served(layout, make_app, variant):
    app = make_app(layout, model_variant=variant)
    async with running_app(app) as client:
        health = (await client.get("/health")).json()
        info = (await client.get("/info")).json()
        answer = await client.post("/classify", json={"text": "the match ended two all", "labels": ["sport", "food"]})
    assert health["variant"] == info["variant"] == variant
    assert health["model"] == ("base" if variant == "base" else "model")
    assert answer.status_code == 200 and abs(sum(answer.json()["probabilities"]) - 1) < 1e-6


def test_train_verify_covers_the_base_folder(layout, capsys):
    from zsnli.train_cli import main

    manifest = str(layout.parent / "training_manifest.json")
    assert main(["verify", "--model-dir", str(layout), "--manifest", manifest]) == 0
    out = capsys.readouterr().out
    assert "OK        base/training_manifest.json" in out and "OK        base/config.json" in out
    # the pin's directory digest is printed but is no file: the count is the top table, the base's own manifest
    # and the files it lists (it was counted as one more file)
    top, own = (json.loads(p.read_text()) for p in (layout.parent / "training_manifest.json",
                                                   layout / "base" / "training_manifest.json"))
    n_files = len(top["files"]) + 1 + len(own["files"])
    *lines, summary = out.strip().splitlines()
    assert "OK        base/ (model_sha256)" in lines and len(lines) == n_files + 1
    assert summary.startswith(f"OK: {n_files}/{n_files} files match ")
    weights = next(p for p in (layout / "base").iterdir() if p.suffix == ".safetensors")
    weights.write_bytes(weights.read_bytes() + b"\0")
    assert main(["verify", "--model-dir", str(layout), "--manifest", manifest]) == 1
    assert f"MISMATCH  base/{weights.name}" in capsys.readouterr().out
    shutil.rmtree(layout / "base")
    assert main(["verify", "--model-dir", str(layout), "--manifest", manifest]) == 1
    assert "MISSING   base/training_manifest.json" in capsys.readouterr().out


def test_the_base_model_is_never_scored_with_the_small_models_calibration(layout):
    # A base folder without its own calibration.json found the small model's beside it by the default lookup
    # (model/calibration.json) and served with it, calibrated: true.
    from zsnli.scoring import ScoringConfigError
    from zsnli.serving.startup import preflight

    write_calibration(layout / "calibration.json", **CONTENT_FREE_CALIBRATION)  # the small model's, inside model/
    (layout / "base" / "calibration.json").unlink()
    with pytest.raises(ScoringConfigError, match=r"base has no calibration.json"):
        preflight(_settings(layout, model_variant="base"))
    explicit = write_calibration(layout.parent / "base-calibration.json", **BASE_CALIBRATION)
    _record_model(explicit, layout / "base")
    pre = preflight(_settings(layout, model_variant="base", calibration_path=str(explicit)))
    assert pre.calibrated and pre.scoring.default.temperature == BASE_CALIBRATION["temperature"]


def test_train_verify_finds_the_manifest_a_variant_folder_carries(layout, capsys):
    from zsnli.train_cli import main

    assert main(["verify", "--model-dir", str(layout / "base")]) == 0
    assert f"files match {layout / 'base' / 'training_manifest.json'}" in capsys.readouterr().out


def test_an_in_process_refusal_is_one_line(layout, capsys, monkeypatch):
    # `zsnli classify --model-dir` printed the service's "ERROR ... refusing to start" log line above its own.
    from zsnli.cli import main

    shutil.rmtree(layout / "base")
    monkeypatch.setenv("ZSNLI_MODEL_VARIANT", "base")
    assert main(["classify", "a text", "--labels", "a,b", "--model-dir", str(layout)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("zsnli: error: cannot serve --model-dir") and "no base model" in err


def test_select_and_the_server_take_the_same_sentence_encoder_for_the_base_folder(layout, bert_dir):
    # train.py select --model-dir <root>/base took the checkout's model/embedding (default_embedding_dir found no
    # base/embedding), while the server took <root>/embedding: the base's calibration pinned another encoder.
    from zsnli.config import Settings
    from zsnli.runtime.embedding import REPO_MODEL_DIR, default_embedding_dir
    from zsnli.serving.startup import resolve_variant, resolved_embedding_dir

    shutil.copytree(bert_dir, layout / "embedding")
    served, variant = resolve_variant(Settings(model_dir=str(layout), model_variant="base"))
    assert variant == "base"
    assert resolved_embedding_dir(served) == default_embedding_dir(layout / "base") == layout / "embedding"
    assert default_embedding_dir(layout) == layout / "embedding"  # the small model: its own, as before
    assert default_embedding_dir(layout.parent / "elsewhere") == REPO_MODEL_DIR / "embedding"
    explicit = resolve_variant(Settings(model_dir=str(layout), model_variant="base", embedding_dir=str(bert_dir)))[0]
    assert resolved_embedding_dir(explicit) == bert_dir  # ZSNLI_EMBEDDING_DIR still wins


# --------------------------------------------------------------------------- the pin, wherever the base is asked for

def _refusal(settings):
    """The one-line reason preflight refuses ``settings`` with (the test fails when it serves)."""
    from zsnli.serving.startup import STARTUP_ERRORS, preflight

    with pytest.raises(STARTUP_ERRORS) as err:
        preflight(settings)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_the_base_is_never_served_without_a_top_level_manifest_that_pins_it(layout):
    # The tester: with training_manifest.json gone, ZSNLI_MODEL_VARIANT=base served verified: true (resolve_variant
    # skipped the pin when the top manifest was not a file, then cleared manifest_path, and the base's own matched).
    from zsnli.serving.startup import preflight

    (layout.parent / "training_manifest.json").unlink()
    reason = _refusal(_settings(layout, model_variant="base"))
    assert f"no training manifest at {layout.parent / 'training_manifest.json'} pins the base model" in reason
    assert "unpinned" in reason
    small = preflight(_settings(layout, model_variant="small"))  # the small model: served unverified, as before
    assert small.variant == "small" and not small.verified


@pytest.mark.parametrize("variant", ["small", "base"])
@pytest.mark.parametrize("where, state", [("/nonexistent/training_manifest.json", "does not exist"),
                                          ("a folder", "is not a file")])
def test_a_manifest_path_that_is_not_a_file_is_refused_for_every_variant(layout, variant, where, state):
    # ZSNLI_MANIFEST_PATH=/nonexistent (or a folder) served the base: the pin was skipped for a path not a file.
    where = str(layout.parent) if where == "a folder" else where
    reason = _refusal(_settings(layout, model_variant=variant, manifest_path=where))
    assert reason.startswith(f"ZSNLI_MANIFEST_PATH={where} {state}: refusing to serve unverified")


@pytest.mark.parametrize("variant", ["small", "base"])
def test_skipping_the_manifest_check_serves_every_variant_unverified(layout, variant, caplog):
    from zsnli.serving.startup import preflight

    (layout.parent / "training_manifest.json").unlink()
    with caplog.at_level("WARNING", logger="zsnli"):
        pre = preflight(_settings(layout, model_variant=variant, skip_manifest_check=True,
                                  manifest_path="/nonexistent"))
    assert pre.variant == variant and not pre.verified and "SKIPPED" in caplog.text


@pytest.mark.parametrize("field, value", [("model_sha256", "0" * 64), ("model_sha256", None),
                                          ("training_manifest_sha256", "0" * 64), ("dir", "other")])
def test_every_field_of_the_pin_is_checked(layout, capsys, field, value):
    # variants.base.model_sha256 = 000... served, and train.py verify said OK: only the manifest's sha256 was read.
    from zsnli.train_cli import main

    top = layout.parent / "training_manifest.json"
    doc = json.loads(top.read_text())
    doc["variants"]["base"][field] = value
    top.write_text(json.dumps(doc))
    reason = _refusal(_settings(layout, model_variant="base"))
    assert "the training manifest" in reason and ("pins" in reason or "names dir" in reason)
    for model_dir in (layout, layout / "base"):
        capsys.readouterr()
        assert main(["verify", "--model-dir", str(model_dir)]) == 1
        assert "MISMATCH  base/" in capsys.readouterr().out


@pytest.mark.parametrize("field", ["dir", "training_manifest_sha256", "model_sha256"])
def test_every_field_the_pin_writes_is_required(layout, capsys, field):
    # The tester: with `del variants.base.dir` the base was served verified and train.py verify passed: a field
    # variant_pin writes was checked only when present.
    from zsnli.manifest import PIN_FIELDS, variant_pin
    from zsnli.train_cli import main

    assert tuple(variant_pin(layout)) == PIN_FIELDS  # what is written is what is required
    top = layout.parent / "training_manifest.json"
    doc = json.loads(top.read_text())
    del doc["variants"]["base"][field]
    top.write_text(json.dumps(doc))
    reason = _refusal(_settings(layout, model_variant="base"))
    assert f"the training manifest's 'base' variant has no {field!r}" in reason and "is not pinned" in reason
    for model_dir in (layout, layout / "base"):
        capsys.readouterr()
        assert main(["verify", "--model-dir", str(model_dir)]) == 1
        out = capsys.readouterr().out  # the line said MISMATCH and nothing of why
        assert f"MISMATCH  base/ ({field}): the field is absent from the pin (a pin records dir, " in out, out


@pytest.mark.anyio
async def test_a_model_dir_that_is_a_variant_folder_is_that_variant(layout, make_app):
    # ZSNLI_MODEL_DIR=model/base bypassed the pin and /health said variant small.
    from zsnli.manifest import variant_of
    from zsnli.serving.startup import preflight

    assert variant_of(layout / "base") == (layout, "base") and variant_of(layout) is None
    assert variant_of(f"{layout}/base/.") == (layout, "base")
    for variant in ("auto", "base"):
        pre = preflight(_settings(layout / "base", model_variant=variant))
        assert pre.variant == "base" and pre.verified and pre.calibrated
    async with running_app(make_app(layout / "base")) as client:
        health = (await client.get("/health")).json()
    assert health["variant"] == "base" and health["model"] == "base"
    assert "is the 'base' variant of" in _refusal(_settings(layout / "base", model_variant="small"))
    top = layout.parent / "training_manifest.json"
    doc = json.loads(top.read_text())
    doc["variants"]["base"]["model_sha256"] = "0" * 64
    top.write_text(json.dumps(doc))
    assert "pins model_sha256 000000000000" in _refusal(_settings(layout / "base"))
    top.unlink()
    assert "pins the base model" in _refusal(_settings(layout / "base"))


def test_the_command_line_classifier_and_verify_hold_a_variant_folder_to_its_pin(layout, capsys, monkeypatch):
    from zsnli.cli import main as zsnli_main
    from zsnli.train_cli import main as train_main

    monkeypatch.delenv("ZSNLI_MODEL_VARIANT", raising=False)
    base = layout / "base"
    assert train_main(["verify", "--model-dir", str(base)]) == 0
    assert "OK        base/ (model_sha256)" in capsys.readouterr().out
    (layout.parent / "training_manifest.json").unlink()
    assert zsnli_main(["classify", "a text", "--labels", "a,b", "--model-dir", str(base)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pins the base model" in err
    assert train_main(["verify", "--model-dir", str(base)]) == 1
    assert f"MISSING   {layout.parent / 'training_manifest.json'}" in capsys.readouterr().out


# --------------------------------------------------------------------------- the calibration a variant is served with

@pytest.mark.parametrize("how", ["copied into base/", "ZSNLI_CALIBRATION_PATH"])
def test_the_base_is_refused_a_calibration_that_records_no_model(layout, how):
    # The small model's calibration (model_sha256 null) copied into model/base, or named by ZSNLI_CALIBRATION_PATH,
    # served the base with the small model's scoring, calibrated: true.
    small = layout.parent / "calibration.json"

    def serve_base_with_the_small_calibration():
        if how == "ZSNLI_CALIBRATION_PATH":
            return _refusal(_settings(layout, model_variant="base", calibration_path=str(small)))
        shutil.copyfile(small, layout / "base" / "calibration.json")
        return _refusal(_settings(layout, model_variant="base"))

    reason = serve_base_with_the_small_calibration()
    assert "records no model_sha256" in reason
    assert f"train.py select --model-dir {layout / 'base'} --out {layout / 'base' / 'calibration.json'}" in reason
    _record_model(small, layout)  # fitted for the small model: refused as another model's
    reason = serve_base_with_the_small_calibration()
    assert "was fitted for model" in reason and f"train.py select --model-dir {layout / 'base'}" in reason


def test_the_small_model_serves_an_unpinned_calibration_and_says_so(layout, caplog):
    from zsnli.serving.startup import preflight

    with caplog.at_level("WARNING", logger="zsnli"):
        pre = preflight(_settings(layout, model_variant="small"))
    assert pre.calibrated and "records no model_sha256" in caplog.text and "unpinned" in caplog.text
    _record_model(layout.parent / "calibration.json", layout)
    caplog.clear()
    with caplog.at_level("WARNING", logger="zsnli"):
        assert preflight(_settings(layout, model_variant="small")).calibrated
    assert "unpinned" not in caplog.text
    _record_model(layout.parent / "calibration.json", layout, "not a digest")
    assert "model_sha256 must be a sha256" in _refusal(_settings(layout, model_variant="small"))


def test_base_with_a_hub_id_is_refused_before_the_hub_cache_is_read(tmp_path, monkeypatch):
    # ZSNLI_MODEL_VARIANT=base ZSNLI_MODEL_ID=foo/bar got the hub-cache error, not "not with ZSNLI_MODEL_ID".
    from zsnli.config import Settings, SettingsError
    from zsnli.serving.startup import preflight

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(SettingsError, match="not a hub model: unset ZSNLI_MODEL_ID or ZSNLI_MODEL_VARIANT"):
        Settings.from_env({"ZSNLI_MODEL_VARIANT": "base", "ZSNLI_MODEL_ID": "foo/bar"})
    with pytest.raises(SettingsError, match="not a hub model"):
        preflight(Settings(model_id="foo/bar", model_variant="base"))


def test_verify_counts_files_apart_from_other_checks_and_names_the_manifest_as_given(layout, capsys, monkeypatch):
    """`verify --model-dir model/base` said "n+1/n+1 files match model/base/training_manifest.json", one of them that
    manifest held to the top-level pin; the summary named the manifest absolutely when found beside a relative
    --model-dir; an unpinned base/ was an UNLISTED line with no word of why, counted as "1 other check(s)"."""
    from zsnli.train_cli import main

    monkeypatch.chdir(layout.parent)
    own = json.loads((layout / "base" / "training_manifest.json").read_text())
    n = len(own["files"])
    assert main(["verify", "--model-dir", "model/base"]) == 0
    *lines, summary = capsys.readouterr().out.strip().splitlines()
    assert "OK        base/training_manifest.json" in lines and len(lines) == n + 2
    assert summary == f"OK: {n}/{n} files match model/base/training_manifest.json; 2 other checks passed", summary
    top = json.loads((layout.parent / "training_manifest.json").read_text())
    m = len(top["files"])
    assert main(["verify", "--model-dir", "model"]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary == f"OK: {m + 1 + n}/{m + 1 + n} files match training_manifest.json; 1 other check passed", summary
    del top["variants"]
    (layout.parent / "training_manifest.json").write_text(json.dumps(top))
    assert main(["verify", "--model-dir", "model"]) == 1
    *lines, summary = capsys.readouterr().out.strip().splitlines()
    assert "UNLISTED  base/: a model folder no variants entry of the manifest pins (train.py install-base pins one)" \
        in lines, lines
    assert summary == f"FAIL: {m}/{m} files match training_manifest.json; 1 of 1 other check failed", summary
