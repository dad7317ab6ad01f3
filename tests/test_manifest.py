"""zsnli.manifest: verifying model bytes (the writers are tests/training/test_manifest_writer.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zsnli.manifest import ManifestError, check_model_dir, load_manifest, verify_model_dir

ROOT = Path(__file__).resolve().parents[1]


def test_verify_fails_on_a_flipped_byte(tiny_run, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(tiny_run["out"], out)
    cmd = [sys.executable, str(ROOT / "train.py"), "verify", "--model-dir", str(out / "model")]
    ok = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    weights = out / "model" / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    weights.write_bytes(bytes(blob))
    bad = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1
    assert "MISMATCH  model.safetensors" in bad.stdout
    statuses = {c.name: c.status for c in check_model_dir(out / "model", load_manifest(out / "training_manifest.json"))}
    assert statuses["model.safetensors"] == "mismatch" and statuses["config.json"] == "ok"
    with pytest.raises(ManifestError):
        verify_model_dir(out / "model", out / "training_manifest.json")


@pytest.mark.parametrize("spoil, line", [
    (lambda f: f.unlink(), "MISSING   data_sources.json (declares every source of the manifest)"),
    (lambda f: f.write_text("{}"), "MISMATCH  data_sources.json (declares every source of the manifest): not a "
                                   "sources document"),
    (lambda f: f.write_text(json.dumps({"sources": [s for s in json.loads(f.read_text())["sources"]
                                                    if s["name"] != "tiny:train"]})),
     "MISMATCH  data_sources.json (declares every source of the manifest): tiny:train is not declared"),
])
def test_verify_fails_when_data_sources_does_not_declare_what_the_manifest_trained_from(tiny_run, tmp_path, capsys,
                                                                                       spoil, line):
    """A deleted or emptied data_sources.json passed verify (OK 10/10; a new-user pass): what a model was trained
    from is half of what verify vouches for."""
    from zsnli.train_cli import main

    out = tmp_path / "copy"
    shutil.copytree(tiny_run["out"], out)
    assert main(["verify", "--model-dir", str(out / "model")]) == 0
    assert "OK        data_sources.json (declares every source of the manifest)" in capsys.readouterr().out
    spoil(out / "data_sources.json")
    assert main(["verify", "--model-dir", str(out / "model")]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert line in printed and printed[-1].startswith("FAIL: ")


def test_verify_takes_an_encoder_directory_with_its_own_manifest(tmp_path):
    """Issue 49: ``train.py verify --model-dir DIR [--manifest DIR/encoder_manifest.json]`` on a sentence encoder's
    directory checks its files against its own manifest (which cannot list itself): OK, and a changed byte fails."""
    import json

    from zsnli.manifest import ENCODER_ARTIFACT, ENCODER_MANIFEST_NAME, hash_model_dir

    enc = tmp_path / "embedding"
    enc.mkdir()
    (enc / "config.json").write_text("{}", encoding="utf-8")
    (enc / "model.safetensors").write_bytes(b"\x00" * 64)
    (enc / ENCODER_MANIFEST_NAME).write_text(json.dumps({"artifact": ENCODER_ARTIFACT, "files": hash_model_dir(enc)}),
                                             encoding="utf-8")
    for extra in ([], ["--manifest", str(enc / ENCODER_MANIFEST_NAME)]):
        ok = subprocess.run([sys.executable, str(ROOT / "train.py"), "verify", "--model-dir", str(enc), *extra],
                            capture_output=True, text=True, cwd=ROOT)
        assert ok.returncode == 0 and "OK: 2/2 files match" in ok.stdout and "python train.py verify" in ok.stdout, \
            ok.stdout + ok.stderr
    (enc / "model.safetensors").write_bytes(b"\x01" * 64)
    bad = subprocess.run([sys.executable, str(ROOT / "train.py"), "verify", "--model-dir", str(enc)],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1 and "MISMATCH  model.safetensors" in bad.stdout


# --------------------------------------------------------------------------- write_json: atomic

_WRITE_UNDER_A_FILE_SIZE_LIMIT = """
import errno, resource, sys
from zsnli.manifest import write_json
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    write_json(sys.argv[1], {"files": {f"f{i}": {"sha256": "0" * 64} for i in range(1000)}})
except OSError as exc:
    print("cut short" if exc.errno == errno.EFBIG else exc)
"""


def test_a_write_cut_short_leaves_the_old_manifest_whole(tmp_path):
    # write_json truncated the file and wrote it in place: a process stopped mid-write (here the file-size limit
    # stops the write at 4 KiB, as a full disk would) left a truncated training_manifest.json.
    import json

    from zsnli.manifest import write_json

    path = tmp_path / "training_manifest.json"
    write_json(path, {"files": {}, "old": True})
    before = path.read_bytes()
    out = subprocess.run([sys.executable, "-c", _WRITE_UNDER_A_FILE_SIZE_LIMIT, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.startswith("cut short"), out.stdout + out.stderr  # EFBIG: the write was stopped
    assert path.read_bytes() == before and json.loads(before)["old"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["training_manifest.json"]  # no temporary file left


def test_a_failed_serialisation_leaves_the_old_file_and_no_temporary(tmp_path):
    import json

    from zsnli.manifest import write_json

    path = tmp_path / "calibration.json"
    write_json(path, {"chosen": {"rule": "entailment"}}, mode=0o600)
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write_json(path, {"chosen": {"rule": "entailment"}, "later": object()})
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json"]
    write_json(path, {"new": 1})
    assert path.read_text() == json.dumps({"new": 1}, indent=2) + "\n" and (path.stat().st_mode & 0o777) == 0o644
    write_json(path, {"new": 2}, mode=0o600)
    assert (path.stat().st_mode & 0o777) == 0o600 and json.loads(path.read_text()) == {"new": 2}


_KILLED_AT_THE_RENAME = """
import os, sys
from zsnli.manifest import write_json
os.replace = lambda *a, **k: os._exit(137)  # the process dies after the temporary is written, before the rename
write_json(sys.argv[1], {"new": True})
"""


def test_a_killed_write_leaves_a_temporary_of_the_fixed_pattern_that_git_ignores_and_recovery_finds(tmp_path):
    """A write killed before its rename leaves its temporary file; its name has one fixed pattern
    (``.<name>.<random>.zsnli-write.tmp``), which .gitignore covers and `stale_writes` lists, so an install's
    recovery removes it (before, ``.<name>.<random>.tmp`` stayed in the checkout)."""
    from zsnli.manifest import WRITE_TEMP_SUFFIX, stale_writes, write_json

    path = tmp_path / "training_manifest.json"
    write_json(path, {"old": True})
    done = subprocess.run([sys.executable, "-c", _KILLED_AT_THE_RENAME, str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 137, done.stderr
    left = [p for p in tmp_path.iterdir() if p != path]
    assert len(left) == 1 and left[0].name.startswith(".training_manifest.json.")
    assert left[0].name.endswith(WRITE_TEMP_SUFFIX) and stale_writes(path) == left
    assert stale_writes(tmp_path / "data_sources.json") == []  # another document's temporaries are not its own
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", left[0].name], cwd=ROOT)
    assert ignored.returncode == 0, f"{left[0].name} is not ignored by .gitignore"
    earlier = tmp_path / ".training_manifest.json.k3j_x9a2.tmp"  # what a write killed before this pattern left
    earlier.write_text("{half")
    assert stale_writes(path) == sorted([left[0], earlier])


# --------------------------------------------------------------------------- malformed tables: one line, exit 2

_GOOD = {"sha256": "0" * 64, "bytes": 2}
_MALFORMED = {  # the manifest's tables -> the entry the refusal names
    "a string": ({"files": {"config.json": "x"}}, "files.config.json is a string"),
    "a list": ({"files": {"config.json": ["0" * 64]}}, "files.config.json is a list"),
    "a number": ({"files": {"config.json": 7}}, "files.config.json is a number"),
    "no sha256": ({"files": {"config.json": {"bytes": 2}}}, "files.config.json has no sha256"),
    "sha256 not a string": ({"files": {"config.json": {"sha256": 12}}}, "files.config.json.sha256 is a number"),
    "bytes a boolean": ({"files": {"config.json": {"sha256": "0", "bytes": True}}}, "files.config.json.bytes"),
    "bytes negative": ({"files": {"config.json": {"sha256": "0", "bytes": -1}}}, "files.config.json.bytes"),
    "embedding a list": ({"files": {}, "embedding": []}, "embedding is a list"),
    "embedding file a string": ({"files": {}, "embedding": {"files": {"a": "b"}}}, "embedding.files.a is a string"),
    "embedding files a list": ({"files": {}, "embedding": {"files": []}}, "embedding.files is a list"),
    "artifact a string": ({"files": {}, "pretrained_artifacts": {"embedding": "x"}},
                          "pretrained_artifacts.embedding is a string"),
    "artifact dir a number": ({"files": {}, "pretrained_artifacts": {"embedding": {"dir": 1, "files": {}}}},
                              "pretrained_artifacts.embedding.dir is a number"),
    "artifact file a list": ({"files": {}, "pretrained_artifacts": {"e": {"files": {"x": []}}}},
                             "pretrained_artifacts.e.files.x is a list"),
    "variants a list": ({"files": {}, "variants": ["base"]}, "variants is a list"),
    "variant a string": ({"files": {}, "variants": {"base": "x"}}, "variants.base is a string"),
}


@pytest.mark.parametrize("case", sorted(_MALFORMED))
def test_a_malformed_manifest_table_is_one_line_naming_the_file_and_the_entry(tmp_path, capsys, case):
    """``train.py verify --manifest m.json`` with a files entry that is not an object (any shape: a string, a list,
    a missing key, a wrong type) raised AttributeError in ``_check_table``; `load_manifest` now refuses it as
    `ManifestError`, and verify says so in one line naming the file and the entry, exit 2."""
    from zsnli.train_cli import main

    doc, entry = _MALFORMED[case]
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ManifestError, match=re.escape(f"{path}: {entry}")):
        load_manifest(path)
    capsys.readouterr()
    assert main(["verify", "--manifest", str(path), "--model-dir", str(model)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--manifest" in err and str(path) in err and entry in err, err


def test_a_well_formed_manifest_passes_the_shape_check(tmp_path):
    """The shape check refuses no manifest as the writers make it (sha256 and bytes; bytes may be left out)."""
    path = tmp_path / "m.json"
    doc = {"files": {"config.json": _GOOD, "vocab.txt": {"sha256": "1" * 64}}, "embedding": {"files": {"a": _GOOD}},
           "pretrained_artifacts": {"embedding": {"dir": "embedding", "files": {"b": _GOOD}}},
           "variants": {"base": {"dir": "base"}}, "teacher": None}
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert load_manifest(path) == doc
    assert load_manifest(ROOT / "training_manifest.json")["files"]


def test_the_shipped_records_agree_on_the_calibration_holdout():
    """data_sources.json said 4000 rows (the preset's asked-for size), the manifest 4001 (the rows held out: whole
    premise groups); the writer now records the second in both (a new-user pass)."""
    sources = json.loads((ROOT / "data_sources.json").read_text())
    holdout = next(s for s in sources["sources"] if s["name"] == "calibration-holdout")
    counts = json.loads((ROOT / "training_manifest.json").read_text())["data"]["counts"]
    assert holdout["rows"] == counts["holdout_rows"]
