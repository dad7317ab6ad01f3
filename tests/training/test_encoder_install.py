"""``train.py install-encoder`` (zsnli.training.encoder_install): a trained sentence encoder becomes the served
``model/embedding``; the training manifest's table of that directory names its lineage and every byte, and the
encoder's training sets are declared in data_sources.json."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import build_bert_nli
import pytest

from zsnli.manifest import ManifestError, check_model_dir, hash_model_dir, write_json
from zsnli.runtime.embedding import EMBEDDING_MODEL_ID, SentenceEncoder, embedding_digest, encoder_id
from zsnli.training import encoder as enc
from zsnli.training.usage import UsageError
from zsnli.training.encoder_install import install_encoder
from zsnli.training.manifest_writer import ENCODER_MANIFEST_NAME, pretrained_artifacts, trained_embedding
from zsnli.training.presets import sentence_encoder
from zsnli.training.zsc_nli import zsc_sources

ROOT = Path(__file__).resolve().parents[2]
ZSC = ROOT / "tests" / "data" / "tiny_zsc"


def _shipped_copy(tiny_run, root: Path, encoder_base: Path) -> Path:
    """A model dir beside its manifests, with a reused (untrained) encoder in embedding/ as shipped before."""
    out = root / "out"
    shutil.copytree(tiny_run["out"], out)
    shutil.copytree(encoder_base, out / "model" / "embedding")
    manifest = json.loads((out / "training_manifest.json").read_text())
    manifest["pretrained_artifacts"] = pretrained_artifacts(out / "model")
    write_json(out / "training_manifest.json", manifest)
    assert all(c.status == "ok" for c in check_model_dir(out / "model", manifest))
    return out


def test_install_encoder_ships_the_run_with_its_lineage_and_data(tiny_run, tmp_path):
    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    preset = sentence_encoder(str(base)).with_overrides(
        zsc_sources=zsc_sources(ZSC), max_steps=4, batch_size=8, max_length=48, lr=1e-3, logging_steps=1,
        eval_steps=4, mixed_precision="no", warmup_ratio=0.0)
    run = enc.train_encoder(preset, tmp_path / "run", interpolate_alpha=0.5)

    table = install_encoder(tmp_path / "run", out / "model", out)
    served = out / "model" / "embedding"
    assert sorted(p.name for p in served.iterdir()) == sorted([*run["files"], ENCODER_MANIFEST_NAME])
    assert table["sha256"] == embedding_digest(served) == run["embedding_sha256"] == SentenceEncoder(served).digest
    manifest = json.loads((out / "training_manifest.json").read_text())
    assert "embedding" not in manifest["pretrained_artifacts"] and manifest["embedding"] == table
    assert table["base_model"]["weights_sha256"] == run["base_model"]["weights_sha256"]
    assert table["interpolation"]["alpha"] == 0.5 and table["training"]["steps"] == 4
    assert table["data_sources"] == ["zsc-train:tiny_polite", "zsc-train:tiny_topic"]
    assert table["files"] == hash_model_dir(served)
    checks = check_model_dir(out / "model", manifest)
    assert checks and all(c.status == "ok" for c in checks)
    assert {c.name for c in checks} >= {"embedding/model.safetensors", f"embedding/{ENCODER_MANIFEST_NAME}"}
    # reports name it as trained here (the bake-off's embedding arm), the published encoder by its hub id
    assert encoder_id(served) == f"{base}, fine-tuned by zsnli" and encoder_id(base) == EMBEDDING_MODEL_ID
    from zsnli.compare.arms.baselines import EmbeddingBaseline

    assert EmbeddingBaseline(served).identity()["model"] == encoder_id(served)
    # a later cross-encoder run's manifest describes the directory the same way (build_manifest's tables)
    assert trained_embedding(out / "model") == table and pretrained_artifacts(out / "model") == {}

    sources = {s["name"]: s for s in json.loads((out / "data_sources.json").read_text())["sources"]}
    polite = sources["sentence-encoder:zsc-train:tiny_polite"]
    assert polite["role"] == "train" and len(polite["sha256"]) == 64 and polite["model"].startswith("model/embedding")

    (served / "model.safetensors").write_bytes(b"changed")
    bad = [c for c in check_model_dir(out / "model", manifest) if c.status != "ok"]
    assert [(c.name, c.status) for c in bad] == [("embedding/model.safetensors", "mismatch")]


def test_install_encoder_refuses_a_run_that_differs_from_its_manifest_and_changes_nothing(tiny_run, tmp_path):
    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    before = hash_model_dir(out / "model" / "embedding")
    preset = sentence_encoder(str(base)).with_overrides(
        zsc_sources=zsc_sources(ZSC), max_steps=2, batch_size=8, max_length=48, logging_steps=1, mixed_precision="no")
    enc.train_encoder(preset, tmp_path / "run")
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    done = subprocess.run([sys.executable, str(ROOT / "train.py"), "install-encoder", str(tmp_path / "run"),
                           "--model-dir", str(out / "model")], capture_output=True, text=True, timeout=120)
    # a bad run is a user mistake, refused as install-base refuses one: one line, exit 2
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "config.json differs from what encoder_manifest.json lists" in done.stderr
    assert hash_model_dir(out / "model" / "embedding") == before
    missing = subprocess.run([sys.executable, str(ROOT / "train.py"), "install-encoder", str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "give the --output-dir of a finished train.py encoder run" in missing.stderr
    assert "none: no such directory" in missing.stderr  # not "no model/config.json" for a path that is not there


def test_every_refusal_of_install_encoder_is_one_line_exit_2_as_install_base_s(tiny_run, tmp_path, capsys):
    """A bad run (or a served model that is not its manifest's) is refused before anything changes: exit 2 and one
    line, as `train.py install-base` refuses a run; install-encoder said the same things with exit 1."""
    from zsnli.train_cli import main

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    before = _state(out)
    run_manifest = run / ENCODER_MANIFEST_NAME
    good_manifest, good_config = run_manifest.read_bytes(), (run / "model" / "config.json").read_bytes()
    no_data = json.loads(good_manifest)
    del no_data["data"]
    served_config = out / "model" / "config.json"
    good_served = served_config.read_bytes()
    cases = {
        "config.json differs from what encoder_manifest.json lists":
            lambda: (run / "model" / "config.json").write_text("{}"),
        "encoder_manifest.json": lambda: run_manifest.write_text("{not json"),
        "not a train.py encoder manifest": lambda: write_json(run_manifest, no_data),
        "config.json differs from what training_manifest.json lists": lambda: served_config.write_text("{}"),
    }
    for why, spoil in cases.items():
        spoil()
        capsys.readouterr()
        assert main(["install-encoder", str(run), "--model-dir", str(out / "model")]) == 2, why
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err and "Traceback" not in err, (why, err)
        run_manifest.write_bytes(good_manifest)
        (run / "model" / "config.json").write_bytes(good_config)
        served_config.write_bytes(good_served)
        assert _state(out) == before and not list(out.glob(".model.embedding.*")), why


@pytest.mark.parametrize("give", ["output-dir", "model-dir"])
def test_a_cross_encoder_run_is_named_as_install_bases_not_called_incomplete(tmp_path, give, monkeypatch):
    """`install-encoder` given a train.py train run said only "no model/config.json" (or "no encoder_manifest.json"):
    it names what the folder is and the command that ships it, as install-base names an encoder run."""
    from zsnli.training.encoder_install import check_run_folder
    from zsnli.training.usage import UsageError

    (tmp_path / "nli" / "model").mkdir(parents=True)  # as train.py train writes it: manifests beside model/
    (tmp_path / "nli" / "model" / "config.json").write_text("{}")
    (tmp_path / "nli" / "training_manifest.json").write_text("{}")
    run = tmp_path / "nli" if give == "output-dir" else tmp_path / "nli" / "model"
    with pytest.raises(UsageError) as refused:
        check_run_folder(run)
    with pytest.raises(UsageError, match=r"^\.: a train.py train run \(its training_manifest.json in "):
        monkeypatch.chdir(run)  # `.`: its parent is looked at as well
        check_run_folder(".")
    assert str(refused.value) == (f"{run}: a train.py train run (its training_manifest.json in {tmp_path / 'nli'}), an "
                                  "NLI cross-encoder, not a sentence encoder run: ship it with train.py install-base "
                                  f"{tmp_path / 'nli' / 'model'}; give the --output-dir of a finished train.py encoder "
                                  "run")


def test_install_encoder_checks_everything_before_changing_anything(tiny_run, tmp_path):
    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    manifest_before = (out / "training_manifest.json").read_text()
    embedding_before = hash_model_dir(out / "model" / "embedding")
    preset = sentence_encoder(str(base)).with_overrides(
        zsc_sources=zsc_sources(ZSC), max_steps=2, batch_size=8, max_length=48, logging_steps=1, mixed_precision="no")
    enc.train_encoder(preset, tmp_path / "run")

    def unchanged():
        assert (out / "training_manifest.json").read_text() == manifest_before
        assert hash_model_dir(out / "model" / "embedding") == embedding_before
        assert sorted(p.name for p in (out / "model").iterdir() if p.name.startswith(".")) == []

    # the model directory is not the one training_manifest.json describes
    (out / "model" / "config.json").write_text("{}")
    with pytest.raises(UsageError, match="config.json differs from what training_manifest.json lists"):
        install_encoder(tmp_path / "run", out / "model", out)
    unchanged()
    shutil.copy2(tiny_run["out"] / "model" / "config.json", out / "model" / "config.json")
    # a run manifest without its data (files otherwise as listed)
    run_manifest = json.loads((tmp_path / "run" / ENCODER_MANIFEST_NAME).read_text())
    del run_manifest["data"]
    write_json(tmp_path / "run" / ENCODER_MANIFEST_NAME, run_manifest)
    with pytest.raises(UsageError, match="not a train.py encoder manifest"):
        install_encoder(tmp_path / "run", out / "model", out)
    unchanged()


def test_a_second_install_replaces_the_first_ones_data_sources(tiny_run, tmp_path):
    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    common = dict(max_steps=2, batch_size=8, max_length=48, logging_steps=1, mixed_precision="no")
    both = sentence_encoder(str(base)).with_overrides(zsc_sources=zsc_sources(ZSC), **common)
    enc.train_encoder(both, tmp_path / "both")
    install_encoder(tmp_path / "both", out / "model", out)
    topic_only = sentence_encoder(str(base)).with_overrides(zsc_sources=zsc_sources(ZSC, names=["tiny_topic"]), **common)
    enc.train_encoder(topic_only, tmp_path / "topic")
    install_encoder(tmp_path / "topic", out / "model", out)
    names = [s["name"] for s in json.loads((out / "data_sources.json").read_text())["sources"]]
    assert [n for n in names if n.startswith("sentence-encoder:")] == ["sentence-encoder:zsc-train:tiny_topic"]
    assert all(c.status == "ok" for c in check_model_dir(out / "model", json.loads((out / "training_manifest.json").read_text())))
    # a run's own model/ (its manifest beside it, as train.py encoder writes it) is named as trained too
    assert encoder_id(tmp_path / "topic" / "model") == f"{base}, fine-tuned by zsnli"


def _trained_run(tmp_path, base):
    preset = sentence_encoder(str(base)).with_overrides(
        zsc_sources=zsc_sources(ZSC), max_steps=2, batch_size=8, max_length=48, logging_steps=1, mixed_precision="no")
    enc.train_encoder(preset, tmp_path / "run")
    return tmp_path / "run"


def _verify(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "verify", "--model-dir", str(out / "model"),
                           "--manifest", str(out / "training_manifest.json")], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("dies_after", [0, 1, 3])
def test_a_killed_install_leaves_the_model_dir_as_it_was_and_a_rerun_finishes(tiny_run, tmp_path, monkeypatch,
                                                                               dies_after):
    """Issue 48: an install that dies while copying (after ``dies_after`` files) leaves nothing in the model
    directory: every file still matches the manifest, ``train.py verify`` passes, and a rerun installs."""
    from zsnli.training import encoder_install

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    real, copied = shutil.copyfile, []

    def dying_copy(src, dst, *a, **k):
        if len(copied) >= dies_after:
            Path(dst).write_bytes(b"half")  # a partial file, then the process is gone
            raise SystemExit(137)
        copied.append(src)
        return real(src, dst, *a, **k)

    monkeypatch.setattr(encoder_install.shutil, "copyfile", dying_copy)
    with pytest.raises(SystemExit):
        install_encoder(run, out / "model", out)
    monkeypatch.setattr(encoder_install.shutil, "copyfile", real)
    manifest = json.loads((out / "training_manifest.json").read_text())
    assert all(c.status == "ok" for c in check_model_dir(out / "model", manifest))
    assert _verify(out).returncode == 0
    table = install_encoder(run, out / "model", out)
    assert table["sha256"] and _verify(out).returncode == 0
    staged, old = encoder_install.staging_dirs(out / "model")
    assert not staged.exists() and not old.exists()


def test_a_rerun_rolls_back_a_swap_killed_between_its_renames_and_clears_old_leftovers(tiny_run, tmp_path):
    from zsnli.training import encoder_install

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    staged, old = encoder_install.staging_dirs(out / "model")
    (out / "model" / "embedding").rename(old)  # killed after the first rename
    shutil.copytree(run / "model", out / "model" / ".embedding.new")  # what an install before issue 48 left
    install_encoder(run, out / "model", out)
    assert _verify(out).returncode == 0 and not old.exists() and not (out / "model" / ".embedding.new").exists()


@pytest.mark.parametrize("how", ["linked file", "linked folder", "listed outside", "listed absolute"])
def test_install_copies_only_listed_regular_files_inside_the_run(tiny_run, tmp_path, how):
    """Issue 48: a symbolic link in the run (to a file or a folder outside it) or a manifest name that escapes the
    run is refused, and nothing is installed."""
    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    before = hash_model_dir(out / "model" / "embedding")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the run's")
    manifest_path = run / ENCODER_MANIFEST_NAME
    run_manifest = json.loads(manifest_path.read_text())
    if how == "linked file":
        (run / "model" / "extra.txt").symlink_to(outside / "secret.txt")
    elif how == "linked folder":
        (run / "model" / "extra").symlink_to(outside, target_is_directory=True)
    else:
        name = "../../outside/secret.txt" if how == "listed outside" else str(outside / "secret.txt")
        run_manifest["files"][name] = {"sha256": "0" * 64, "bytes": 13}
        write_json(manifest_path, run_manifest)
    with pytest.raises(UsageError, match="symbolic link|not a path inside|not listed"):
        install_encoder(run, out / "model", out)
    assert hash_model_dir(out / "model" / "embedding") == before
    done = subprocess.run([sys.executable, str(ROOT / "train.py"), "install-encoder", str(run), "--model-dir",
                           str(out / "model")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def _stop_at_the_write(path: Path, monkeypatch, error: BaseException, kill: bool) -> None:
    """Replacing ``path`` (the last step of an atomic JSON write) fails with ``error``; with ``kill``, nothing of the
    install runs after it (no rollback in process), as when the process is killed there."""
    import os

    from zsnli.training import encoder_install

    real = os.replace

    def replace(src, dst, *rest, **kw):
        if Path(dst) == path:
            raise error
        return real(src, dst, *rest, **kw)

    monkeypatch.setattr(os, "replace", replace)
    if kill:
        monkeypatch.setattr(encoder_install, "_roll_back", lambda *a: None, raising=False)


def _refused_next_run(run: Path, out: Path) -> None:
    """A next install of a run whose files differ from its manifest: refused, after it recovered what a kill left."""
    config = run / "model" / "config.json"
    good = config.read_bytes()
    config.write_text("{}")
    with pytest.raises(UsageError, match="config.json differs"):
        install_encoder(run, out / "model", out)
    config.write_bytes(good)


def _state(out: Path) -> tuple[dict, bytes, bytes]:
    return (hash_model_dir(out / "model" / "embedding"), (out / "training_manifest.json").read_bytes(),
            (out / "data_sources.json").read_bytes())


def _served_ok(out: Path) -> bool:
    from zsnli.train_cli import main

    clean = not list(out.glob(".model.embedding.*"))
    return clean and main(["verify", "--model-dir", str(out / "model"), "--manifest",
                           str(out / "training_manifest.json")]) == 0


def _install_killed_at(name: str, tiny_run, tmp_path, monkeypatch):
    """A shipped copy and a trained encoder run; the install is killed at the write of ``name`` (beside model/).
    Returns ``(run, out, state before the install)``."""
    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    before = _state(out)
    _stop_at_the_write(out / name, monkeypatch, KeyboardInterrupt(), kill=True)
    with pytest.raises(KeyboardInterrupt):
        install_encoder(run, out / "model", out)
    return run, out, before


def test_a_kill_before_the_manifest_write_leaves_the_old_encoder_restorable_and_the_next_run_restores_it(
        tiny_run, tmp_path, monkeypatch):
    """Killed at the manifest write: data_sources.json already declares the new sets (it is written first), and the
    old encoder and the old data_sources.json wait beside model/; the next run, though refused, puts both back."""
    from zsnli.training.encoder_install import SOURCES_BEFORE

    run, out, before = _install_killed_at("training_manifest.json", tiny_run, tmp_path, monkeypatch)
    aside = out / ".model.embedding.old"
    assert aside.is_dir() and {k: v for k, v in hash_model_dir(aside).items() if k != SOURCES_BEFORE} == before[0]
    assert (aside / SOURCES_BEFORE).read_bytes() == before[2] != (out / "data_sources.json").read_bytes()
    assert _state(out)[1] == before[1]  # not committed: the manifest is the old one
    monkeypatch.undo()
    _refused_next_run(run, out)
    assert _state(out) == before and _served_ok(out)


def test_a_first_install_killed_before_the_manifest_write_is_cleared_by_the_next_run(tiny_run, tmp_path,
                                                                                     monkeypatch):
    out = tmp_path / "out"
    shutil.copytree(tiny_run["out"], out)
    assert not (out / "model" / "embedding").exists() and _served_ok(out)
    manifest = (out / "training_manifest.json").read_bytes()
    run = _trained_run(tmp_path, build_bert_nli(tmp_path / "encoder_base", dropout=0.0))
    _stop_at_the_write(out / "training_manifest.json", monkeypatch, KeyboardInterrupt(), kill=True)
    with pytest.raises(KeyboardInterrupt):
        install_encoder(run, out / "model", out)
    assert (out / "model" / "embedding").is_dir() and (out / "training_manifest.json").read_bytes() == manifest
    monkeypatch.undo()
    _refused_next_run(run, out)  # the unlisted encoder was cleared even though this run is refused
    assert not (out / "model" / "embedding").exists() and _served_ok(out)
    install_encoder(run, out / "model", out)
    assert _served_ok(out)


def test_a_failed_manifest_write_restores_the_old_encoder_at_once(tiny_run, tmp_path, monkeypatch, capsys):
    from zsnli.train_cli import main

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    before = _state(out)
    full = OSError(28, "No space left on device", str(out / "training_manifest.json"))
    _stop_at_the_write(out / "training_manifest.json", monkeypatch, full, kill=False)
    capsys.readouterr()  # what training printed
    assert main(["install-encoder", str(run), "--model-dir", str(out / "model")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert _state(out) == before
    monkeypatch.undo()
    assert _served_ok(out)


def _encoder_names(out: Path) -> list[str]:
    names = [s["name"] for s in json.loads((out / "data_sources.json").read_text())["sources"]]
    return [n for n in names if n.startswith("sentence-encoder:")]


def test_a_kill_at_the_data_sources_write_is_rolled_back_by_the_next_run(tiny_run, tmp_path, monkeypatch):
    """data_sources.json is written before the manifest: a kill there is before the commit, so the old encoder and
    its sources come back (before, the manifest was written first and the next run kept a half-declared install)."""
    run, out, before = _install_killed_at("data_sources.json", tiny_run, tmp_path, monkeypatch)
    assert _state(out)[1:] == before[1:]
    monkeypatch.undo()
    _refused_next_run(run, out)
    assert _state(out) == before and _served_ok(out)


def _kill_after_the_commit(out: Path, run: Path, monkeypatch) -> None:
    """An install killed after its manifest write, before the old encoder is deleted."""
    from zsnli.training import encoder_install

    real = shutil.rmtree

    def dying_rmtree(path, *a, **k):
        if Path(path) == out / ".model.embedding.old":
            raise KeyboardInterrupt
        return real(path, *a, **k)

    monkeypatch.setattr(encoder_install.shutil, "rmtree", dying_rmtree)
    with pytest.raises(KeyboardInterrupt):
        install_encoder(run, out / "model", out)
    monkeypatch.undo()


def test_a_kill_after_the_manifest_write_leaves_both_documents_committed_and_the_next_run_finishes(
        tiny_run, tmp_path, monkeypatch, capsys):
    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    _kill_after_the_commit(out, run, monkeypatch)
    # the commit covered both documents: the manifest pins the new encoder and data_sources.json declares its sets
    assert _encoder_names(out) == ["sentence-encoder:zsc-train:tiny_polite", "sentence-encoder:zsc-train:tiny_topic"]
    capsys.readouterr()
    from zsnli.train_cli import main

    assert main(["verify", "--model-dir", str(out / "model"), "--manifest", str(out / "training_manifest.json")]) == 1
    printed = capsys.readouterr().out
    assert "OK        data_sources.json (sentence-encoder:* entries)" in printed
    assert (f"INTERRUPTED an install of {out / 'model' / 'embedding'} was interrupted (.model.embedding.old beside "
            "it): rerun train.py install-encoder to finish or roll it back") in printed
    _refused_next_run(run, out)  # the new encoder stays (its manifest was written)
    assert hash_model_dir(out / "model" / "embedding") == hash_model_dir(run / "model") | {
        ENCODER_MANIFEST_NAME: hash_model_dir(out / "model" / "embedding")[ENCODER_MANIFEST_NAME]}
    assert _served_ok(out)


def test_verify_counts_files_only_and_still_prints_the_install_and_sources_lines(tiny_run, tmp_path, monkeypatch,
                                                                               capsys):
    """The "n/m files" of `train.py verify` counted the INTERRUPTED-install line and the data sources line as files
    (FAIL: 10/12 files match, with 10 files, all of them matching)."""
    from zsnli.train_cli import main

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    sources_before = (out / "data_sources.json").read_bytes()
    _kill_after_the_commit(out, run, monkeypatch)  # leaves .model.embedding.old: an INTERRUPTED line
    (out / "data_sources.json").write_bytes(sources_before)  # lacks the encoder's sets: a MISMATCH line
    manifest = json.loads((out / "training_manifest.json").read_text())
    n_files = len(manifest["files"]) + len(manifest["embedding"]["files"])
    capsys.readouterr()
    assert main(["verify", "--model-dir", str(out / "model"), "--manifest", str(out / "training_manifest.json")]) == 1
    *lines, summary = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("INTERRUPTED an install of") for line in lines)
    assert "MISMATCH  data_sources.json (sentence-encoder:* entries)" in lines
    assert "OK        data_sources.json (declares every source of the manifest)" in lines  # the run's own sources
    assert len(lines) == n_files + 3
    assert summary.startswith(f"FAIL: {n_files}/{n_files} files match ") and "; 2 of 3 other checks failed" in summary


def test_data_sources_that_lag_behind_a_committed_encoder_fail_verify_and_are_declared_by_the_next_run(
        tiny_run, tmp_path, monkeypatch, capsys):
    """What an install that wrote the manifest before data_sources.json left when killed between the two: verify
    fails on it (it passed), and the next install, even a refused one, declares the installed encoder's sets."""
    from zsnli.train_cli import main

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    sources_before = (out / "data_sources.json").read_bytes()
    _kill_after_the_commit(out, run, monkeypatch)
    (out / "data_sources.json").write_bytes(sources_before)  # the old run's sets, as that order left them
    capsys.readouterr()
    assert main(["verify", "--model-dir", str(out / "model"), "--manifest", str(out / "training_manifest.json")]) == 1
    assert "MISMATCH  data_sources.json (sentence-encoder:* entries)" in capsys.readouterr().out
    _refused_next_run(run, out)
    assert _encoder_names(out) == ["sentence-encoder:zsc-train:tiny_polite", "sentence-encoder:zsc-train:tiny_topic"]
    assert _served_ok(out)
    shutil.rmtree(out / ".model.embedding.old", ignore_errors=True)
    (out / "data_sources.json").write_bytes(sources_before)  # no leftover at all: verify still says it
    assert main(["verify", "--model-dir", str(out / "model"), "--manifest", str(out / "training_manifest.json")]) == 1


@pytest.mark.parametrize("text,why", [
    ("not json", "not readable JSON"), ("[]", "not a data sources document (a JSON list"),
    ('{"sources": {"a": 1}}', "not a data sources document (its 'sources' is not a list")])
def test_a_data_sources_json_that_is_no_sources_document_is_refused_before_anything_changes(tiny_run, tmp_path,
                                                                                          text, why, capsys):
    from zsnli.train_cli import main

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    (out / "data_sources.json").write_text(text)
    before = _state(out)
    with pytest.raises(UsageError, match="data_sources.json: " + re.escape(why)):
        install_encoder(run, out / "model", out)
    assert _state(out) == before and not list(out.glob(".model.embedding.*"))
    capsys.readouterr()
    assert main(["install-encoder", str(run), "--model-dir", str(out / "model")]) == 2  # a sentence, exit 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err and "attribute" not in err, err
    assert _state(out) == before


def _killed_between_the_renames(out: Path) -> Path:
    """model/embedding set aside as an install does before it renames the new one in (then the process is gone)."""
    old = out / ".model.embedding.old"
    (out / "model" / "embedding").rename(old)
    return old


def test_the_server_and_verify_name_an_interrupted_install(tiny_run, tmp_path, capsys):
    """The small model's refusal for a missing embedding/ said only "embedding/config.json (missing)"."""
    from conftest import make_settings
    from zsnli.serving.startup import preflight
    from zsnli.train_cli import main

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    _killed_between_the_renames(out)
    line = (f"an install of {out / 'model' / 'embedding'} was interrupted (.model.embedding.old beside it): rerun "
            "train.py install-encoder to finish or roll it back")
    with pytest.raises(ManifestError) as refused:
        preflight(make_settings(out / "model"))
    assert "embedding/config.json (missing)" in str(refused.value) and line in str(refused.value)
    assert "\n" not in str(refused.value)
    capsys.readouterr()
    assert main(["verify", "--model-dir", str(out / "model")]) == 1
    assert f"INTERRUPTED {line}" in capsys.readouterr().out


@pytest.mark.parametrize("give", ["a path that is not there", "the run's model/ folder",
                                  "a model dir that is not there"])
def test_a_refused_install_encoder_first_rolls_back_a_killed_one(tiny_run, tmp_path, capsys, give):
    from zsnli.train_cli import main

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    before = _state(out)
    old = _killed_between_the_renames(out)
    stale = [out / ".training_manifest.json.k1l2m3n4.zsnli-write.tmp",
             out / ".data_sources.json.a1b2c3d4.zsnli-write.tmp",
             out / ".data_sources.json.x9y8z7w6.tmp"]  # the last: the pattern of writes before this one
    other = out / ".calibration.json.a1b2c3d4.zsnli-write.tmp"  # not a document install-encoder writes
    for path in stale + [other]:
        path.write_text("{half")
    argv = {"a path that is not there": [str(tmp_path / "nowhere")],
            "the run's model/ folder": [str(run / "model")],
            "a model dir that is not there": [str(run), "--manifest-dir", str(out), "--model-dir",
                                              str(tmp_path / "none")]}[give]
    if give != "a model dir that is not there":
        argv += ["--model-dir", str(out / "model")]
    capsys.readouterr()
    assert main(["install-encoder", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    if give == "the run's model/ folder":
        assert f"is the model/ folder of the encoder run {run}: give {run}" in captured.err
    if give == "a model dir that is not there":  # --model-dir does not exist: nothing is recovered
        assert old.is_dir() and all(p.exists() for p in stale)
        return
    assert "rolled back an interrupted install" in captured.out
    assert not old.exists() and _state(out) == before and _served_ok(out)
    assert not any(p.exists() for p in stale) and other.exists()


@pytest.mark.parametrize("where", ["missing", "empty", "file"])
def test_a_manifest_dir_given_without_a_manifest_is_named_as_given(tiny_run, tmp_path, capsys, where):
    from zsnli.train_cli import main

    base = build_bert_nli(tmp_path / "encoder_base", dropout=0.0)
    out = _shipped_copy(tiny_run, tmp_path, base)
    run = _trained_run(tmp_path, base)
    given = tmp_path / "manifests"
    if where == "empty":
        given.mkdir()
    if where == "file":  # a file where a folder goes was called "no such directory"
        given = out / "training_manifest.json"
    capsys.readouterr()
    assert main(["install-encoder", str(run), "--model-dir", str(out / "model"), "--manifest-dir", str(given)]) == 2
    err = capsys.readouterr().err
    what = {"missing": "no such directory", "empty": "no training_manifest.json in it",
            "file": "a file, not a directory"}[where]
    assert f"--manifest-dir {given}: {what}" in err and "give --manifest-dir" not in err, err


def test_the_served_encoder_or_a_copy_of_an_installed_one_is_no_run(tiny_run, tmp_path, capsys):
    """`install-encoder model/embedding` said "model/embedding: no model/config.json" though it holds one: it is the
    served encoder, not a run (as install-base refuses `model`); a copy of an installed encoder is named so too."""
    from zsnli.train_cli import main

    out = _shipped_copy(tiny_run, tmp_path, build_bert_nli(tmp_path / "encoder_base", dropout=0.0))
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "model" / "embedding", copy)  # config.json beside its own encoder_manifest.json
    (out / "model" / "sub").mkdir()
    before = _state(out)
    for given, why in ((out / "model" / "embedding", "is the served sentence encoder, not an encoder run"),
                       (out / "model", "is the served model directory, not an encoder run"),
                       (out / "model" / "sub", f"lies inside the served model directory {out / 'model'}"),
                       (copy, "is an installed sentence encoder (its encoder_manifest.json beside its config.json)")):
        capsys.readouterr()
        assert main(["install-encoder", str(given), "--model-dir", str(out / "model")]) == 2, given
        err = capsys.readouterr().err
        assert err == f"train.py install-encoder: error: {given} {why}" + err.split(why, 1)[1], err
        assert err.count("\n") == 1 and "give the --output-dir of a finished train.py encoder run" in err, err
        assert "no model/config.json" not in err and _state(out) == before


def test_only_a_calibration_pinning_another_encoder_is_called_stale(tiny_run, tmp_path, capsys):
    """Reinstalling the encoder calibration.json already pins printed "calibration.json pins the old encoder:
    re-choose the scoring"; each calibration a server reads is named only when it pins another digest."""
    from zsnli.train_cli import main

    out = _shipped_copy(tiny_run, tmp_path, build_bert_nli(tmp_path / "encoder_base", dropout=0.0))
    run = _trained_run(tmp_path, tmp_path / "encoder_base")
    new = embedding_digest(run / "model")
    (out / "model" / "base").mkdir()
    write_json(out / "model" / "base" / "calibration.json", {"chosen": {"embedding_sha256": "0" * 64}})
    write_json(out / "calibration.json", {"chosen": {"embedding_sha256": new}})
    argv = ["install-encoder", str(run), "--model-dir", str(out / "model")]
    capsys.readouterr()
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith(f"{out / 'model' / 'embedding'} is now ") and lines[0].endswith(f"sha256 {new})"), lines
    assert lines[1:] == [f"{out / 'model' / 'base' / 'calibration.json'} pins another encoder (000000000000): the "
                         "server refuses it until the scoring is re-chosen on this one: python train.py select "
                         f"--model-dir {out / 'model' / 'base'}"], lines
    (out / "model" / "base" / "calibration.json").unlink()
    assert main(argv) == 0  # the same encoder again: every calibration pins it
    assert "pins" not in capsys.readouterr().out


@pytest.mark.parametrize("entry", ['"x"', '["0"]', "{}", '{"sha256": 1}'])
def test_a_malformed_files_entry_of_the_run_manifest_is_one_line_exit_2(tmp_path, capsys, entry):
    """An ``encoder_manifest.json`` whose ``files`` entry is not an object with a string sha256 raised AttributeError
    in ``zsnli.manifest._check_table``; the manifest reader refuses it: one line naming the file and the entry."""
    from zsnli.train_cli import main

    run, out = tmp_path / "run", tmp_path / "out"
    (run / "model").mkdir(parents=True)
    (out / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}", encoding="utf-8")
    (run / ENCODER_MANIFEST_NAME).write_text(
        '{"artifact": "sentence-encoder", "files": {"config.json": %s}}' % entry, encoding="utf-8")
    (out / "model" / "config.json").write_text("{}", encoding="utf-8")
    write_json(out / "training_manifest.json", {"files": {}})
    write_json(out / "data_sources.json", {"sources": []})
    capsys.readouterr()
    assert main(["install-encoder", str(run), "--model-dir", str(out / "model")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run / ENCODER_MANIFEST_NAME}: files.config.json" in err, err
    assert sorted(p.name for p in (out / "model").iterdir()) == ["config.json"]  # nothing installed
