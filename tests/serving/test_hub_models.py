"""NLI models people already have: 2-way and 3-way heads of five architectures, and models named by hub id.

Every architecture (BERT, RoBERTa, DeBERTa-v2, ModernBERT, BART) with a 2-way
(entailment / not_entailment) and a 3-way head answers what the transformers
zero-shot pipeline answers for the same model, text, labels and template. A
hub id is served from a local fake hub cache (``huggingface_hub``'s layout),
never the network; not cached and downloads off is one line, exit 3.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import (ARCHITECTURES, NLI_LABELS_2WAY, REPO, build_nli, make_settings, running_app,
                      write_calibration, write_hub_cache)

from zsnli.config import Settings, SettingsError
from zsnli.runtime.hub import HubModelError, resolve_hub_model
from zsnli.manifest import hash_model_dir, model_dir_digest, sha256_file
from zsnli.serving.startup import StartupRefused, preflight

pytestmark = pytest.mark.anyio

#: MNLI's order (contradiction first), so the entailment column is the last one, as in bart-large-mnli.
NLI_LABELS_MNLI = {0: "contradiction", 1: "neutral", 2: "entailment"}
HEADS = {"2way": NLI_LABELS_2WAY, "3way": NLI_LABELS_MNLI}
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TEXTS = ["the team won the match and the player scored a goal", "the bank cut its profit forecast",
         " ".join(["the market and the season"] * 40)]  # the last one is cut to the 64-token window
LABELS = ["sport", "business", "science", "the weather"]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """``{(arch, head): model dir}`` for every architecture and head."""
    root = tmp_path_factory.mktemp("arch")
    return {(arch, head): build_nli(root / f"{arch}-{head}", arch, id2label)
            for arch in ARCHITECTURES for head, id2label in HEADS.items()}


def _pipeline_answer(model_dir: Path, text: str, labels: list[str], template: str, multi_label: bool) -> list[float]:
    """The transformers pipeline's scores, back in the order of ``labels`` (it answers them sorted)."""
    from transformers import pipeline

    pipe = pipeline("zero-shot-classification", model=str(model_dir), device="cpu")
    out = pipe(text, candidate_labels=list(labels), hypothesis_template=template,
               multi_label=multi_label)
    by_label = dict(zip(out["labels"], out["scores"]))
    return [by_label[lb] for lb in labels]


@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("arch", ARCHITECTURES)
async def test_every_architecture_and_head_answers_as_the_pipeline(tiny_models, make_app, arch, head):
    model_dir = tiny_models[(arch, head)]
    template = "This text is about {}."
    async with running_app(make_app(model_dir)) as client:
        health = (await client.get("/health")).json()
        assert health["labels"] == [HEADS[head][i] for i in sorted(HEADS[head])]
        assert health["calibrated"] is False and health["scoring"]["rule"] == "entailment"
        for text in TEXTS:
            for multi in (False, True):
                body = {"text": text, "labels": LABELS, "hypothesis_template": template, "multi_label": multi}
                r = await client.post("/classify", json=body)
                assert r.status_code == 200, r.text
                got = r.json()["probabilities"]
                want = _pipeline_answer(model_dir, text, LABELS, template, multi)
                np.testing.assert_allclose(got, want, atol=2e-5, err_msg=f"{arch} {head} multi_label={multi}")
                assert np.argsort(got).tolist() == np.argsort(want).tolist()


def test_two_way_head_uses_not_entailment_as_the_alternative(tiny_models):
    from zsnli.runtime.model import NliModel

    model = NliModel.load(tiny_models[("bert", "2way")], device="cpu")
    assert (model.entail_idx, model.contra_idx, model.num_labels) == (0, 1, 2)
    assert model.logits(model.encode(["a text"], ["a label"])).shape == (1, 2)


# --------------------------------------------------------------------------- hub ids


@pytest.fixture
def hub_cache(tmp_path, tiny_models, monkeypatch):
    """A hub cache holding ``org/zs-2way`` at `COMMIT` (refs/main too); ``HF_HUB_CACHE`` points at it."""
    cache = tmp_path / "hub"
    write_hub_cache(cache, "org/zs-2way", tiny_models[("deberta", "2way")], COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def _hub_settings(**overrides) -> Settings:
    # model_dir names nothing servable: a hub id must not read it
    return make_settings("/nonexistent/model", model_id="org/zs-2way", **overrides)


async def test_hub_id_is_served_from_the_cache_with_its_files_hashed(hub_cache, tiny_models, make_app):
    from zsnli.serving.app import create_app

    source = tiny_models[("deberta", "2way")]
    app = create_app(_hub_settings(model_revision=COMMIT))
    async with running_app(app) as client:
        health = (await client.get("/health")).json()
        assert health["model"] == "org/zs-2way" and health["model_id"] == "org/zs-2way"
        assert health["revision"] == COMMIT
        assert health["files"] == {p.name: sha256_file(p) for p in sorted(source.iterdir())}
        assert health["model_sha256"] == model_dir_digest(hash_model_dir(source))
        assert health["verified"] is False and health["calibrated"] is False
        assert health["labels"] == ["entailment", "not_entailment"]
        r = await client.post("/classify", json={"text": TEXTS[0], "labels": LABELS[:3]})
        assert r.status_code == 200 and abs(sum(r.json()["probabilities"]) - 1) < 1e-6
    np.testing.assert_allclose(r.json()["probabilities"], _pipeline_answer(source, TEXTS[0], LABELS[:3], "{}", False),
                               atol=2e-5)


async def test_hub_id_without_revision_serves_the_cached_main_and_says_how_to_pin(hub_cache, caplog):
    with caplog.at_level("WARNING", logger="zsnli"):
        pre = preflight(_hub_settings())
    assert pre.revision == COMMIT and pre.model_id == "org/zs-2way"
    assert Path(pre.settings.model_dir) == hub_cache / "models--org--zs-2way" / "snapshots" / COMMIT
    assert f"ZSNLI_MODEL_REVISION={COMMIT}" in caplog.text


async def test_hub_model_verified_only_when_a_training_manifest_matches(hub_cache, tiny_models, tmp_path):
    files = hash_model_dir(tiny_models[("deberta", "2way")])
    manifest = tmp_path / "training_manifest.json"
    manifest.write_text(json.dumps({"files": files, "model_sha256": model_dir_digest(files)}))
    pre = preflight(_hub_settings(model_revision=COMMIT, manifest_path=str(manifest)))
    assert pre.verified and pre.model_sha256 == model_dir_digest(files)
    files["config.json"] = {"sha256": "0" * 64, "bytes": 1}
    manifest.write_text(json.dumps({"files": files}))
    with pytest.raises(Exception, match=r"config.json \(mismatch\)"):
        preflight(_hub_settings(model_revision=COMMIT, manifest_path=str(manifest)))


@pytest.mark.parametrize("revision", [None, "f" * 40])
def test_not_cached_and_downloads_off_says_what_to_do(hub_cache, revision):
    settings = make_settings("/nonexistent", model_id="org/not-cached" if revision is None else "org/zs-2way",
                             model_revision=revision)
    with pytest.raises(HubModelError) as info:
        preflight(settings)
    message = str(info.value)
    assert "\n" not in message and "not in the hub cache" in message and "ZSNLI_ALLOW_DOWNLOAD=1" in message


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_server_refuses_a_model_not_cached_in_one_line_exit_3(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "empty-cache"),
           "ZSNLI_MODEL_ID": "org/nowhere", "ZSNLI_MODEL_REVISION": COMMIT, "PORT": str(_free_port()), "HOST": "127.0.0.1",
           "PYTHON": sys.executable}
    proc = subprocess.run([str(REPO / "serve.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr[-2000:]
    refusals = [line for line in proc.stderr.splitlines() if "refusing to start" in line]
    assert len(refusals) == 1 and "org/nowhere@" + COMMIT in refusals[0], proc.stderr[-2000:]
    assert "ZSNLI_ALLOW_DOWNLOAD=1" in refusals[0] and "Traceback" not in proc.stderr


def test_download_only_when_allowed_and_not_cached(hub_cache, tiny_models, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    calls = []
    real = huggingface_hub.snapshot_download

    def fake(repo_id, **kw):
        calls.append(kw["local_files_only"])
        if not kw["local_files_only"]:  # "download": fill the cache as the hub would
            assert "*.safetensors" in kw["allow_patterns"] and "config.json" in kw["allow_patterns"]
            write_hub_cache(kw["cache_dir"], repo_id, tiny_models[("bert", "2way")], kw["revision"], main=False)
        if repo_id == "org/fresh" and kw["local_files_only"] and len(calls) == 1:
            raise LocalEntryNotFoundError("not cached")
        return real(repo_id, **kw)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    revision = "e" * 40
    hub = resolve_hub_model("org/fresh", revision, allow_download=True)
    assert calls == [True, False] and hub.revision == revision and (hub.path / "model.safetensors").is_file()
    calls.clear()
    assert resolve_hub_model("org/zs-2way", COMMIT, allow_download=True).revision == COMMIT
    assert calls == [True]  # cached: the network is never asked


def test_hub_snapshot_without_safetensors_is_refused(tmp_path, tiny_models, monkeypatch):
    source = tmp_path / "bin-only"
    source.mkdir()
    for p in tiny_models[("bert", "2way")].iterdir():
        (source / ("pytorch_model.bin" if p.suffix == ".safetensors" else p.name)).write_bytes(p.read_bytes())
    write_hub_cache(tmp_path / "hub", "org/old", source, COMMIT)
    with pytest.raises(HubModelError, match="no .*safetensors"):
        resolve_hub_model("org/old", COMMIT, cache_dir=tmp_path / "hub")


@pytest.mark.parametrize("env, fragment", [
    ({"ZSNLI_MODEL_ID": "org/x", "ZSNLI_MODEL_REVISION": "main"}, "40-hex commit"),
    ({"ZSNLI_MODEL_REVISION": COMMIT}, "without ZSNLI_MODEL_ID"),
    ({"ZSNLI_MODEL_ID": "org/x y"}, "hub model id"),
])
def test_bad_hub_settings_are_one_line(env, fragment):
    with pytest.raises(SettingsError, match=fragment) as info:
        Settings.from_env(env)
    assert "\n" not in str(info.value)


def test_calibration_fitted_for_another_model(tmp_path, tiny_models):
    model_dir = tiny_models[("bert", "3way")]
    calib = write_calibration(tmp_path / "calibration.json", rule="entailment", temperature=0.5)
    doc = json.loads(calib.read_text())
    calib.write_text(json.dumps({**doc, "model_sha256": "a" * 64}))
    with pytest.raises(Exception, match="fitted for model aaaaaaaaaaaa"):
        preflight(make_settings(model_dir, calibration_path=str(calib)))
    # found by the default lookup only (the model's parent): not used, served with the pipeline's scoring
    beside = tmp_path / "beside"
    beside.mkdir()
    local = beside / "model"
    shutil.copytree(model_dir, local)
    (beside / "calibration.json").write_text(calib.read_text())
    pre = preflight(make_settings(local))
    assert pre.calibrated is False and pre.scoring.default.temperature == 1.0
    digest = model_dir_digest(hash_model_dir(model_dir))
    (beside / "calibration.json").write_text(json.dumps({**doc, "model_sha256": digest}))
    pre = preflight(make_settings(local))
    assert pre.calibrated is True and pre.scoring.default.temperature == 0.5


async def test_startup_refusal_for_a_hub_model_is_a_startup_refused(hub_cache):
    from zsnli.serving.service import ZeroShotClassifier

    service = ZeroShotClassifier(make_settings("/nonexistent", model_id="org/absent"))
    with pytest.raises(StartupRefused, match="not in the hub cache"):
        await service.start()
    assert service.state.status == "error"


# --------------------------------------------------------------------------- offline, from files a user has


def _documented_recipe() -> str:
    """The bash block of docs/configuration.md between its ``hub-cache-recipe`` markers."""
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    block = text.split("<!-- hub-cache-recipe -->", 1)[1].split("<!-- /hub-cache-recipe -->", 1)[0]
    return block.split("```bash\n", 1)[1].split("```", 1)[0]


def _run_recipe(source: Path, model_id: str, cache: Path, home: Path) -> None:
    """Run the documented recipe as written, with its three settings filled in and without its last line
    (``./serve.sh``, which the tests replace by an app in this process)."""
    lines = _documented_recipe().rstrip("\n").splitlines()
    assert lines[-1].startswith("ZSNLI_MODEL_ID=$MODEL_ID ZSNLI_MODEL_REVISION=$REV ./serve.sh"), lines[-1]
    values = {"SRC": str(source), "MODEL_ID": model_id, "REV": COMMIT}
    script = "\n".join(f"{line.split('=', 1)[0]}={values[line.split('=', 1)[0]]}"
                       if line.split("=", 1)[0] in values else line for line in lines[:-1])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "HF_HUB_CACHE": str(cache)}
    subprocess.run(["bash", "-euc", script], env=env, check=True, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("head", sorted(HEADS))
async def test_the_documented_offline_recipe_serves_a_2way_and_a_3way_model(tiny_models, tmp_path, monkeypatch,
                                                                           make_app, head):
    from zsnli.serving.app import create_app

    source = tiny_models[("deberta", head)]
    cache = tmp_path / "cache"
    _run_recipe(source, f"me/zs-{head}", cache, tmp_path)
    snapshot = cache / f"models--me--zs-{head}" / "snapshots" / COMMIT
    assert (cache / f"models--me--zs-{head}" / "refs" / "main").read_text() == COMMIT
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(p.name for p in source.iterdir())
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    body = {"text": TEXTS[0], "candidate_labels": LABELS, "hypothesis_template": "This text is about {}."}
    want = _pipeline_answer(source, TEXTS[0], LABELS, "This text is about {}.", False)
    for settings in (make_settings("/nonexistent", model_id=f"me/zs-{head}", model_revision=COMMIT),
                     make_settings("/nonexistent", model_id=f"me/zs-{head}"),  # refs/main names the commit
                     make_settings(source)):                                   # the plain path
        async with running_app(create_app(settings)) as client:
            health = (await client.get("/health")).json()
            r = await client.post("/classify", json=body)
        assert health["labels"] == [HEADS[head][i] for i in sorted(HEADS[head])]
        assert health.get("revision") == (COMMIT if settings.model_id else None)
        np.testing.assert_allclose(r.json()["probabilities"], want, atol=2e-5)


async def test_a_hub_models_start_up_log_names_only_what_it_reads(hub_cache, monkeypatch, caplog):
    """Started from the checkout (whose model/, training_manifest.json and calibration.json a hub model
    does not use), the log names none of the checkout's files."""
    from zsnli.serving.service import ZeroShotClassifier

    monkeypatch.chdir(REPO)
    assert (REPO / "training_manifest.json").is_file() and (REPO / "calibration.json").is_file()
    settings = Settings(model_id="org/zs-2way", model_revision=COMMIT, exit_on_startup_error=False,
                        log_level="info").with_()
    service = ZeroShotClassifier(settings)
    with caplog.at_level("INFO", logger="zsnli"):
        await service.start()
        await service.wait_ready(60)
        await service.stop()
    text = caplog.text
    for name in ("training_manifest.json", "calibration.json"):
        assert str(REPO / name) not in text and f"model/../{name}" not in text and f"(manifest:" not in text
    assert "ZSNLI_MODEL_DIR='./model' (not used: ZSNLI_MODEL_ID is set)" in text
    assert "no training manifest in the hub snapshot of org/zs-2way" in text
    assert "uncalibrated" in text and f"serving commit {COMMIT}" in text
