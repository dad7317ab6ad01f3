"""zsnli.runtime.onnx_model (OnnxNliModel, serving it) and zsnli.runtime.onnx_export (fp32 / dynamic int8 export, the weights-keyed cache)."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import WINDOW, build_bert_nli, make_settings, running_app

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from zsnli.runtime import onnx_export  # noqa: E402
from zsnli.serving.app import create_app
from zsnli.serving.startup import StartupRefused  # noqa: E402
from zsnli.config import Settings, SettingsError  # noqa: E402
from zsnli.runtime.onnx_export import OnnxUnavailableError, cache_path  # noqa: E402
from zsnli.runtime.model import NliModel, NliRuntime  # noqa: E402
from zsnli.runtime.onnx_model import OnnxNliModel  # noqa: E402

LONG = " ".join(["the market fell and the bank cut its profit forecast for the year"] * 30)
PREMISES = [
    "the team won the match after a late goal",
    "",
    LONG,
    "science",
    "the government won the election and the minister said the economy is good",
]
HYPOTHESES = [
    "This text is about sport.",
    "This text is about business.",
    "This text is about business.",
    "This text is about science.",
    "politics",
]


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module", params=["bert", "deberta"])
def pair(request, bert_dir, deberta_dir, bert_model, deberta_model, cache_dir):
    """(torch NliModel, its model dir, onnx-fp32 model, onnx-int8 model) for each tiny architecture."""
    model_dir, torch_model = (bert_dir, bert_model) if request.param == "bert" else (deberta_dir, deberta_model)
    fp32 = OnnxNliModel.load(model_dir, variant="fp32", threads=1, cache_dir=cache_dir)
    int8 = OnnxNliModel.load(model_dir, variant="int8", threads=1, cache_dir=cache_dir)
    return torch_model, model_dir, fp32, int8


# --------------------------------------------------------------------- numbers


def test_fp32_matches_torch_on_one_padded_batch(pair):
    torch_model, _, fp32, _ = pair
    encoded = torch_model.encode(PREMISES, HYPOTHESES)
    lengths = [len(e) for e in encoded]
    assert lengths[2] == torch_model.max_length == WINDOW  # the long premise was truncated
    assert len(set(lengths)) >= 4  # varied lengths: padding inside the batch
    assert fp32.encode(PREMISES, HYPOTHESES) == encoded  # same tokenisation
    expected = torch_model.logits(encoded)
    got = fp32.logits(encoded)
    assert got.shape == (len(PREMISES), 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
    # one pair alone (batch 1, another padded width) and the offline path
    np.testing.assert_allclose(fp32.logits(encoded[3:4]), expected[3:4], atol=1e-4, rtol=0)
    np.testing.assert_allclose(fp32.predict_logits(PREMISES, HYPOTHESES, token_budget=128), expected,
                               atol=1e-4, rtol=0)
    assert fp32.logits([]).shape == (0, 3)


def test_int8_is_quantised_close_and_finite(pair):
    torch_model, _, fp32, int8 = pair
    encoded = torch_model.encode(PREMISES, HYPOTHESES)
    a, b = fp32.logits(encoded), int8.logits(encoded)
    assert b.shape == a.shape and b.dtype == np.float32 and np.all(np.isfinite(b))
    diff = np.abs(a - b).max()
    assert 0 < diff < 0.25, diff  # it did change (quantised), but not by much
    import onnx

    ops = {node.op_type for node in onnx.load(int8.onnx_path).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul"}, ops


def test_model_attributes(pair, cache_dir):
    torch_model, model_dir, fp32, int8 = pair
    assert torch_model.backend == "torch" and torch_model.config is torch_model.model.config
    for m, variant, dtype in ((fp32, "fp32", "float32"), (int8, "int8", "int8-dynamic")):
        assert (m.backend, m.variant, m.dtype, m.device) == (f"onnx-{variant}", variant, dtype, "cpu")
        # the same interface as the torch runtime, not a subclass of it
        assert isinstance(m, NliRuntime) and not isinstance(m, NliModel) and not hasattr(m, "model")
        assert m.describe() == {**torch_model.describe(), "backend": f"onnx-{variant}", "dtype": dtype,
                                "onnx_sha256": m.onnx_sha256}
        assert (m.entail_idx, m.contra_idx, m.max_length) == (torch_model.entail_idx, torch_model.contra_idx,
                                                              torch_model.max_length)
        assert m.onnx_path == str(cache_path(model_dir, variant, cache_dir))
        assert m.onnx_sha256 == _sha256(m.onnx_path)
        # no busy-waiting ORT threads (they starve the embedding and tokeniser threads)
        assert m.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert fp32.onnx_sha256 != int8.onnx_sha256


# --------------------------------------------------------------------- cache


def _spy(monkeypatch, fail: bool = False):
    calls = []
    real = onnx_export.export_onnx

    def spy(model_dir, out_path, quantize):
        calls.append((str(model_dir), str(out_path), quantize))
        if fail:
            raise AssertionError("export_onnx must not run on a cache hit")
        return real(model_dir, out_path, quantize)

    monkeypatch.setattr(onnx_export, "export_onnx", spy)
    return calls


def test_cache_hit_does_not_export(tmp_path, bert_dir, monkeypatch):
    calls = _spy(monkeypatch)
    first = OnnxNliModel.load(bert_dir, variant="int8", threads=1, cache_dir=tmp_path)
    assert len(calls) == 1 and calls[0][2] is True
    path = cache_path(bert_dir, "int8", tmp_path)
    assert first.onnx_path == str(path)
    assert path.parent.name == onnx_export.weights_key(bert_dir) and len(path.parent.name) == 16
    before = os.stat(path)
    calls_after_hit = _spy(monkeypatch, fail=True)
    second = OnnxNliModel.load(bert_dir, variant="int8", threads=1, cache_dir=tmp_path)
    after = os.stat(path)
    assert calls_after_hit == []
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert second.onnx_sha256 == first.onnx_sha256
    assert sorted(p.name for p in path.parent.iterdir()) == ["int8.onnx", "int8.onnx.sha256"]  # no temp files
    assert onnx_export.digest_path(path).read_text().strip() == first.onnx_sha256


def test_cache_dir_from_env(tmp_path, bert_dir, monkeypatch):
    monkeypatch.setenv("ZSNLI_ONNX_CACHE_DIR", str(tmp_path / "env-cache"))
    assert cache_path(bert_dir, "fp32").parent.parent == tmp_path / "env-cache"
    monkeypatch.delenv("ZSNLI_ONNX_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_path(bert_dir, "fp32").parent.parent == tmp_path / "home" / ".cache" / "zsnli" / "onnx"
    with pytest.raises(ValueError, match="fp16"):
        cache_path(bert_dir, "fp16")


def test_changed_weights_get_a_new_cache_entry(tmp_path, bert_dir, monkeypatch):
    other = build_bert_nli(tmp_path / "other", seed=123)
    assert (other / "model.safetensors").read_bytes() != (bert_dir / "model.safetensors").read_bytes()
    assert cache_path(other, "fp32", tmp_path).parent != cache_path(bert_dir, "fp32", tmp_path).parent
    a = OnnxNliModel.load(bert_dir, variant="fp32", threads=1, cache_dir=tmp_path)
    calls = _spy(monkeypatch)
    b = OnnxNliModel.load(other, variant="fp32", threads=1, cache_dir=tmp_path)
    assert len(calls) == 1 and a.onnx_path != b.onnx_path and a.onnx_sha256 != b.onnx_sha256
    enc = a.encode(PREMISES, HYPOTHESES)
    assert np.abs(a.logits(enc) - b.logits(enc)).max() > 1e-3  # really the other weights


def test_config_or_library_change_gets_a_new_cache_entry(tmp_path, bert_dir, monkeypatch):
    import json
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(bert_dir, copy)
    before = cache_path(copy, "int8", tmp_path)
    assert cache_path(bert_dir, "int8", tmp_path) == before  # same files, same key
    cfg = json.loads((copy / "config.json").read_text())
    cfg["id2label"] = {str(k): v for k, v in reversed(list(cfg["id2label"].items()))}
    (copy / "config.json").write_text(json.dumps(cfg))
    assert cache_path(copy, "int8", tmp_path) != before
    monkeypatch.setattr(onnx_export, "_library_versions", lambda: "torch=9.9,onnxruntime=9.9,onnx=9.9")
    assert cache_path(bert_dir, "int8", tmp_path) != before
    monkeypatch.setattr(onnx_export, "EXPORT_FORMAT", "v-next")
    assert cache_path(bert_dir, "int8", tmp_path).parent.name != before.parent.name


def test_crash_mid_export_leaves_nothing_that_loads(tmp_path, bert_dir, monkeypatch):
    path = cache_path(bert_dir, "int8", tmp_path)

    def crash(src, dst):
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(onnx_export.os, "replace", crash)
        with pytest.raises(OSError, match="disk full"):
            OnnxNliModel.load(bert_dir, variant="int8", threads=1, cache_dir=tmp_path)
    assert not path.exists()
    assert list(path.parent.iterdir()) == []  # the staged file and the work directory were removed
    ok = OnnxNliModel.load(bert_dir, variant="int8", threads=1, cache_dir=tmp_path)
    assert ok.onnx_sha256 == _sha256(path)


def test_stale_temp_files_do_not_break_loading(tmp_path, bert_dir, bert_model):
    path = cache_path(bert_dir, "fp32", tmp_path)
    path.parent.mkdir(parents=True)
    # what a killed export leaves: a half-written staged file and a work directory
    (path.parent / ".tmp-fp32.onnx.abc123").write_bytes(b"\x08\x07half an onnx file")
    (path.parent / ".tmp-dead").mkdir()
    (path.parent / ".tmp-dead" / "fp32.onnx").write_bytes(b"garbage")
    (path.parent / ".tmp-running").mkdir()  # a concurrent export's work directory: young, kept
    old = time.time() - 2 * onnx_export.STALE_TEMP_S
    for name in (".tmp-fp32.onnx.abc123", ".tmp-dead"):
        os.utime(path.parent / name, (old, old))
    model = OnnxNliModel.load(bert_dir, variant="fp32", threads=1, cache_dir=tmp_path)
    assert model.onnx_path == str(path) and path.is_file()
    enc = bert_model.encode(PREMISES, HYPOTHESES)
    np.testing.assert_allclose(model.logits(enc), bert_model.logits(enc), atol=1e-4, rtol=0)
    # the killed export's leftovers are gone; the young one is left to its owner
    assert sorted(p.name for p in path.parent.glob(".tmp-*")) == [".tmp-running"]


def test_unparsable_cached_file_is_exported_again(tmp_path, bert_dir, bert_model):
    path = cache_path(bert_dir, "fp32", tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an onnx model")
    m = OnnxNliModel.load(bert_dir, variant="fp32", threads=1, cache_dir=tmp_path)
    assert m.onnx_sha256 == _sha256(path) == onnx_export.digest_path(path).read_text().strip()
    enc = m.encode(PREMISES, HYPOTHESES)
    np.testing.assert_allclose(m.logits(enc), bert_model.logits(enc), atol=1e-4)


def test_damaged_but_parsable_cached_file_is_never_served(tmp_path, bert_dir, bert_model, caplog):
    """A cached graph whose weights were changed (still valid ONNX) no longer matches the digest
    recorded at export: it is exported again instead of being served."""
    first = OnnxNliModel.load(bert_dir, variant="fp32", threads=1, cache_dir=tmp_path)
    path = Path(first.onnx_path)
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 4096] = bytes(4096)  # zero a slice of some weight tensor
    path.write_bytes(bytes(data))
    assert _sha256(path) != first.onnx_sha256
    with caplog.at_level(logging.WARNING, logger="zsnli.runtime.onnx_export"):
        again = OnnxNliModel.load(bert_dir, variant="fp32", threads=1, cache_dir=tmp_path)
    assert "exporting it again" in caplog.text
    assert again.onnx_sha256 == first.onnx_sha256 == _sha256(path)
    enc = again.encode(PREMISES, HYPOTHESES)
    np.testing.assert_allclose(again.logits(enc), bert_model.logits(enc), atol=1e-4)


def test_unwritable_cache_dir_names_the_setting(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for bad in (blocker, blocker / "sub"):
        with pytest.raises(OSError, match="ZSNLI_ONNX_CACHE_DIR"):
            onnx_export.ensure_cache_dir(bad)
    assert onnx_export.ensure_cache_dir(tmp_path / "new" / "dir").is_dir()


def test_int8_export_leaves_the_root_logger_alone(tmp_path, bert_dir, monkeypatch):
    """onnxruntime's quantiser warns via logging.warning(), which would install a root handler
    (every later log line printed twice)."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    onnx_export.export_onnx(bert_dir, tmp_path / "int8.onnx", quantize=True)
    assert root.handlers == []


def test_missing_safetensors_is_a_clear_error(tmp_path, bert_dir):
    model_dir = tmp_path / "model"
    shutil.copytree(bert_dir, model_dir)
    (model_dir / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        OnnxNliModel.load(model_dir, variant="fp32", cache_dir=tmp_path / "cache")


# --------------------------------------------------------------------- settings


def test_settings_backend():
    assert Settings.from_env({}).backend == "torch" and Settings.from_env({}).onnx_cache_dir is None
    s = Settings.from_env({"ZSNLI_BACKEND": "onnx-int8", "ZSNLI_ONNX_CACHE_DIR": "/c", "ZSNLI_DEVICE": "cpu"})
    assert (s.backend, s.onnx_cache_dir, s.device) == ("onnx-int8", "/c", "cpu")
    assert Settings.from_env({"ZSNLI_ONNX_CACHE_DIR": ""}).onnx_cache_dir is None
    assert any(line.startswith("ZSNLI_BACKEND=") for line in s.describe())
    assert Settings(backend="torch", device="cuda").with_().device == "cuda"
    with pytest.raises(SettingsError, match="torch, onnx-fp32, onnx-int8") as info:
        Settings.from_env({"ZSNLI_BACKEND": "onnx"})
    assert "ZSNLI_BACKEND" in str(info.value)
    for bad in ({"ZSNLI_BACKEND": "onnx-int8", "ZSNLI_DEVICE": "cuda"},
                {"ZSNLI_BACKEND": "onnx-fp32", "ZSNLI_DEVICE": "cuda:0"}):
        with pytest.raises(SettingsError, match="CPU only"):
            Settings.from_env(bad)
    with pytest.raises(SettingsError, match="ZSNLI_DTYPE"):
        Settings.from_env({"ZSNLI_BACKEND": "onnx-int8", "ZSNLI_DTYPE": "bf16"})


# --------------------------------------------------------------------- server

@pytest.mark.anyio
async def test_server_with_onnx_int8(tmp_path, bert_dir, caplog):
    caplog.set_level("INFO", logger="zsnli")
    settings = make_settings(bert_dir, backend="onnx-int8", onnx_cache_dir=str(tmp_path), torch_threads=1,
                             log_level="info")
    app = create_app(settings)  # the default loader
    async with running_app(app) as client:
        health = (await client.get("/health")).json()
        path = cache_path(bert_dir, "int8", tmp_path)
        assert health["backend"] == "onnx-int8" and health["dtype"] == "int8-dynamic" and health["device"] == "cpu"
        assert health["onnx_sha256"] == _sha256(path)
        assert health["architecture"] == "BertForSequenceClassification"
        model = app.state.classifier.state.model
        assert isinstance(model, OnnxNliModel) and model.session.get_session_options().intra_op_num_threads == 1
        r = await client.post("/classify", json={"id": "x", "text": LONG, "labels": HYPOTHESES})
        assert r.status_code == 200, r.text
        p = np.array(r.json()["probabilities"])
        assert p.shape == (5,) and np.all((p >= 0) & (p <= 1)) and abs(p.sum() - 1) < 1e-6
        assert p[1] == p[2]  # duplicate labels
        r = await client.post("/classify", json={"text": "a", "labels": ["b", "c"], "multi_label": True})
        assert r.status_code == 200 and len(r.json()["probabilities"]) == 2
    ready = [rec.getMessage() for rec in caplog.records if "ready in" in rec.getMessage()]
    assert ready and "backend=onnx-int8" in ready[0] and health["onnx_sha256"] in ready[0]


@pytest.mark.anyio
async def test_server_reports_torch_backend(bert_dir, make_app):
    async with running_app(make_app(bert_dir)) as client:
        health = (await client.get("/health")).json()
    assert health["backend"] == "torch" and "onnx_sha256" not in health


@pytest.mark.anyio
async def test_missing_onnxruntime_refuses_to_start(bert_dir, monkeypatch):
    real = onnx_export.importlib.util.find_spec
    monkeypatch.setattr(onnx_export.importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(OnnxUnavailableError, match=r"pip install 'zsnli\[onnx\]'"):
        onnx_export.require_onnx()
    app = create_app(make_settings(bert_dir, backend="onnx-fp32"))
    with pytest.raises(StartupRefused, match=r"onnxruntime: pip install 'zsnli\[onnx\]'"):
        async with running_app(app):
            pass
