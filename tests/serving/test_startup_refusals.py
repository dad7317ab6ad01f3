"""Settings that can never work refuse the start with one line, exit 3 (issue 31 item 6, issue 32 item 6): a receipt
key that is not a key, a bake-off store that is not a SQLite file or whose folder cannot be written, and an unknown
``ZSNLI_*`` name that closely resembles a setting (it would leave that setting at its default). Transient faults keep
their 503 + Retry-After (tests/compare/test_bakeoff_store.py)."""

from __future__ import annotations

import sqlite3

import pytest
from test_faults import _free_port, _server

from zsnli.compare.service.settings import SETTING_NAMES, BakeoffSettings, check_paths
from zsnli.config import SettingsError, misspelt_settings, unknown_settings


def _valid_key(path):
    from zsnli.compare.receipts import Signer

    Signer(path).private_key()  # created, mode 0600
    return path


def _sqlite(path):
    sqlite3.connect(path).close()
    return path


def _settings(env):
    return BakeoffSettings.from_env(env)


@pytest.mark.parametrize("var, make, needle", [
    ("ZSNLI_RECEIPT_KEY", lambda d: (d / "key.pem").write_text("not a key") and d / "key.pem",
     "not a readable unencrypted PEM key"),
    ("ZSNLI_RECEIPT_KEY", lambda d: (d / "key.pem").write_bytes(b"\x00\xff" * 40) and d / "key.pem",
     "not a readable unencrypted PEM key"),
    ("ZSNLI_RECEIPT_KEY", lambda d: d, "is a directory"),
    ("ZSNLI_RECEIPT_KEY", lambda d: (d / "f").write_text("x") and d / "f" / "key.pem", "/f is a file, not a folder"),
    ("ZSNLI_BAKEOFF_DB", lambda d: (d / "b.sqlite3").write_text("this is no database, " * 20) and d / "b.sqlite3",
     "is not a SQLite database"),
    ("ZSNLI_BAKEOFF_DB", lambda d: d, "is a directory"),
    ("ZSNLI_BAKEOFF_DB", lambda d: (d / "f").write_text("x") and d / "f" / "sub" / "b.sqlite3",
     "/f is a file, not a folder"),
])
def test_a_path_that_can_never_work_is_one_line_naming_the_variable(tmp_path, var, make, needle):
    path = make(tmp_path)
    env = {"ZSNLI_BAKEOFF_DB": str(tmp_path / "ok.sqlite3"), "ZSNLI_RECEIPT_KEY": str(tmp_path / "ok.pem"), var: str(path)}
    with pytest.raises(SettingsError) as err:
        check_paths(_settings(env), env)
    line = str(err.value)
    assert line.startswith(f"{var}={path} ") and needle in line and "\n" not in line, line


@pytest.mark.parametrize("make, needle", [(lambda d: d / "absent", "not found"),
                                          (lambda d: d, "has no config.json")])
def test_a_challenger_model_that_is_no_model_directory_is_refused(bert_dir, tmp_path, make, needle):
    env = {"ZSNLI_BAKEOFF_DB": str(tmp_path / "b.sqlite3"), "ZSNLI_RECEIPT_KEY": str(tmp_path / "k.pem"),
           "ZSNLI_BAKEOFF_MODELS": f"good={bert_dir},bad={make(tmp_path)}"}
    with pytest.raises(SettingsError) as err:
        check_paths(_settings(env), env)
    assert str(err.value).startswith("ZSNLI_BAKEOFF_MODELS: challenger 'bad' at ") and needle in str(err.value)
    env["ZSNLI_BAKEOFF_MODELS"] = f"good={bert_dir}"
    assert check_paths(_settings(env), env) == []


def test_usable_paths_pass_and_nothing_is_created_for_the_defaults(tmp_path, monkeypatch):
    env = {"ZSNLI_BAKEOFF_DB": str(_sqlite(tmp_path / "b.sqlite3")), "ZSNLI_RECEIPT_KEY": str(_valid_key(tmp_path / "k.pem"))}
    assert check_paths(_settings(env), env) == []
    fresh = {"ZSNLI_BAKEOFF_DB": str(tmp_path / "new" / "b.sqlite3"), "ZSNLI_RECEIPT_KEY": str(tmp_path / "new2" / "k.pem")}
    assert check_paths(_settings(fresh), fresh) == []  # created on first use: the folders can be
    monkeypatch.chdir(tmp_path / "new")
    monkeypatch.delenv("ZSNLI_RUNS_DIR")  # the defaults themselves: runs/ in the working directory
    assert check_paths(_settings({}), {}) == [] and not (tmp_path / "new" / "runs").exists()


def test_an_unusable_default_folder_is_a_warning_not_a_refusal(tmp_path, monkeypatch):
    (tmp_path / "runs").write_text("a file where the default folder would go")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZSNLI_RUNS_DIR")  # the defaults themselves: runs/ in the working directory
    lines = check_paths(_settings({}), {})
    assert len(lines) == 2 and all("bake-offs will answer 503" in line for line in lines), lines
    assert lines[0].startswith("ZSNLI_BAKEOFF_DB (default runs/bakeoff/bakeoffs.sqlite3)")


@pytest.mark.parametrize("env, likely", [
    ({"ZSNLI_MAX_BATCH": "abc"}, "ZSNLI_MAX_BATCH_ITEMS"),
    ({"ZSNLI_MAX_LABEL": "8"}, "ZSNLI_MAX_LABELS"),
    ({"ZSNLI_REQUEST_TIMEOUT": "5"}, "ZSNLI_REQUEST_TIMEOUT_S"),
    ({"ZSNLI_QUEUE_CAPACITY": "100"}, "ZSNLI_QUEUE_CAPACITY_PAIRS"),
    ({"ZSNLI_BAKEOFF_TIME_BUDGET": "30"}, "ZSNLI_BAKEOFF_TIME_BUDGET_S"),
    ({"ZSNLI_BAKEOFF_MAX_EXAMPLE": "30"}, "ZSNLI_BAKEOFF_MAX_EXAMPLES"),
    ({"ZSNLI_RECEIPT_KEYS": "/k.pem"}, "ZSNLI_RECEIPT_KEY"),
])
def test_a_name_that_resembles_a_setting_is_a_refusal_line_naming_it(env, likely):
    lines = misspelt_settings(env, SETTING_NAMES)
    assert len(lines) == 1 and f"did you mean {likely}?" in lines[0] and "\n" not in lines[0], lines
    assert lines[0].startswith(f"unknown setting {next(iter(env))}=")


@pytest.mark.parametrize("name, setting", [
    ("ZSNLI_max_labels", "ZSNLI_MAX_LABELS"), ("ZSNLI_Max_Batch_Items", "ZSNLI_MAX_BATCH_ITEMS"),
    ("zsnli_max_labels", "ZSNLI_MAX_LABELS"), ("ZSNLI_bakeoff_max_labels", "ZSNLI_BAKEOFF_MAX_LABELS"),
    ("ZSNLI_receipt_key", "ZSNLI_RECEIPT_KEY"),
])
def test_a_name_differing_from_a_setting_only_in_case_is_refused(name, setting):
    """``ZSNLI_max_labels=5`` was only warned and ignored (the server reads ZSNLI_MAX_LABELS alone)."""
    lines = misspelt_settings({name: "5"}, SETTING_NAMES)
    assert lines == [f"unknown setting {name}='5': did you mean {setting}? (names are case-sensitive: a misspelt "
                     f"setting would leave {setting} at its default; rename it, or unset it)"]


def test_names_that_resemble_nothing_or_belong_to_other_tools_are_not_refused():
    env = {"ZSNLI_FOO": "1", "ZSNLI_URL": "http://x", "ZSNLI_BENCH_DOCS": "4", "ZSNLI_BATCH_FAULT_KILL_MARKER": "m",
           "ZSNLI_HOST": "h", "ZSNLI_PORT": "1", "ZSNLI_MAX_BATCH_ITEMS": "8", "ZSNLI_BAKEOFF_DB": "x", "PATH": "/bin"}
    assert misspelt_settings(env, SETTING_NAMES) == []
    assert unknown_settings(env) == ["unknown setting ZSNLI_FOO ignored"]  # still a warning


@pytest.mark.timeout(150)
@pytest.mark.parametrize("env, needle", [
    ({"ZSNLI_RECEIPT_KEY": "KEY_GARBAGE"}, "ZSNLI_RECEIPT_KEY="),
    ({"ZSNLI_BAKEOFF_DB": "DB_UNDER_A_FILE"}, "ZSNLI_BAKEOFF_DB="),
    ({"ZSNLI_BAKEOFF_DB": "DB_NOT_SQLITE"}, "is not a SQLite database"),
    ({"ZSNLI_MAX_BATCH": "abc"}, "did you mean ZSNLI_MAX_BATCH_ITEMS?"),
])
def test_the_server_refuses_to_start_with_one_line_exit_3(bert_dir, tmp_path, env, needle):
    (tmp_path / "garbage.pem").write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "not.sqlite3").write_text("no database here " * 20)
    places = {"KEY_GARBAGE": tmp_path / "garbage.pem", "DB_UNDER_A_FILE": tmp_path / "afile" / "b.sqlite3",
              "DB_NOT_SQLITE": tmp_path / "not.sqlite3"}
    env = {k: str(places.get(v, v)) for k, v in env.items()}
    base = {"ZSNLI_BAKEOFF_DB": str(tmp_path / "ok.sqlite3"), "ZSNLI_RECEIPT_KEY": str(tmp_path / "ok.pem")}
    proc = _server(bert_dir, _free_port(), **{**base, **env})
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    lines = [line for line in out.splitlines() if line.strip() and "Writing model shards" not in line]
    assert len(lines) == 1 and lines[0].startswith("refusing to start: ") and needle in lines[0], out
    assert "Traceback" not in out and "Uvicorn running" not in out


@pytest.mark.timeout(150)
@pytest.mark.parametrize("env, needle", [
    ({"ZSNLI_CALIBRATION_PATH": "ABSENT"}, "ZSNLI_CALIBRATION_PATH="),
    ({"ZSNLI_MANIFEST_PATH": "ABSENT"}, "ZSNLI_MANIFEST_PATH="),
    ({"ZSNLI_MODEL_DIR": "NO_ENTAILMENT"}, "entailment"),
])
def test_a_failed_startup_check_is_its_one_line_alone(bert_dir, tmp_path, env, needle):
    """Issue 57, item 10: a refusal of the start-up checks (`zsnli.serving.startup.preflight`) came after uvicorn's
    'Started server process' and 'Waiting for application startup.'; it is now checked before uvicorn starts
    (`zsnli.serve.early_preflight`), so its one line is all the output, as a refused setting's is."""
    import json
    import shutil

    no_entailment = tmp_path / "model"
    shutil.copytree(bert_dir, no_entailment)
    config = json.loads((no_entailment / "config.json").read_text())
    config["id2label"] = {"0": "positive", "1": "neutral", "2": "negative"}
    config["label2id"] = {v: int(k) for k, v in config["id2label"].items()}
    (no_entailment / "config.json").write_text(json.dumps(config))
    places = {"ABSENT": tmp_path / "absent.json", "NO_ENTAILMENT": no_entailment}
    proc = _server(bert_dir, _free_port(), **{k: str(places[v]) for k, v in env.items()})
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    lines = [line for line in out.splitlines() if line.strip() and "Writing model shards" not in line]
    assert len(lines) == 1 and lines[0].startswith("refusing to start: ") and needle in lines[0], out
    assert "Started server process" not in out and "Waiting for application startup" not in out


def test_a_store_that_cannot_be_written_at_run_time_is_503_before_any_arm_runs(bert_dir, tmp_path, monkeypatch):
    """A transient store fault keeps its 503 + Retry-After, now before the arms run (each bake-off used to run to
    the end and then fail to store)."""
    import asyncio

    from bakeoff_support import make_bakeoff_app
    from conftest import running_app

    from zsnli.compare.service import runner
    from zsnli.compare.service.store import Store

    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "k.pem"))

    def locked(self):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    async def never(*_a, **_k):
        raise AssertionError("an arm ran although the store cannot be written")

    monkeypatch.setattr(Store, "check_writable", locked)
    monkeypatch.setattr(runner, "run_bakeoff", never)
    request = {"task_description": "t", "candidates": ["majority"],
               "examples": [{"input": "a", "expected": "x"}, {"input": "b", "expected": "y"}]}

    async def run():
        async with running_app(make_bakeoff_app(bert_dir)) as client:
            return await client.post("/v1/bakeoff", json=request)

    r = asyncio.run(run())
    assert r.status_code == 503 and "Retry-After" in r.headers, r.text
    assert r.json()["error_type"] == "store" and "nothing was run" in r.json()["error"]


@pytest.mark.parametrize("runs", ["UNDER_A_FILE", "/proc/nope"])
def test_an_unusable_runs_dir_is_refused_when_the_server_would_write_under_it(tmp_path, monkeypatch, runs):
    """``ZSNLI_RUNS_DIR=/proc/nope`` started the server, then every bake-off answered 503 and ``/bakeoffs`` 500: the
    store and receipt key defaults under a ``ZSNLI_RUNS_DIR`` that is set are probed at start like explicit paths
    (one line naming ``ZSNLI_RUNS_DIR``); with the store and the key set elsewhere it is not needed."""
    (tmp_path / "afile").write_text("x")
    runs = str(tmp_path / "afile" / "runs") if runs == "UNDER_A_FILE" else runs
    monkeypatch.setenv("ZSNLI_RUNS_DIR", runs)
    env = {"ZSNLI_RUNS_DIR": runs}
    with pytest.raises(SettingsError) as err:
        check_paths(_settings(env), env)
    line = str(err.value)
    why = f"{tmp_path / 'afile'} is a file, not a folder" if "afile" in runs else "cannot be written"
    assert line.startswith(f"ZSNLI_RUNS_DIR={runs}: ") and why in line and "\n" not in line, line
    elsewhere = {**env, "ZSNLI_BAKEOFF_DB": str(tmp_path / "b.sqlite3"), "ZSNLI_RECEIPT_KEY": str(tmp_path / "k.pem")}
    assert check_paths(_settings(elsewhere), elsewhere) == []
    monkeypatch.setenv("ZSNLI_RUNS_DIR", str(tmp_path / "runs"))
    assert check_paths(_settings({"ZSNLI_RUNS_DIR": str(tmp_path / "runs")}), {"ZSNLI_RUNS_DIR": str(tmp_path / "runs")}) == []


@pytest.mark.parametrize("error", [OSError(30, "Read-only file system"), sqlite3.OperationalError("unable to open")])
def test_no_route_answers_500_when_the_store_cannot_be_read(bert_dir, tmp_path, monkeypatch, error):
    """Every route that reads the store answers 503 ``store`` naming ``ZSNLI_BAKEOFF_DB`` (was: 500 and a traceback),
    and the public-key route 503 ``receipt`` on a key file it cannot create or read."""
    import asyncio

    from bakeoff_support import make_bakeoff_app
    from conftest import running_app

    from zsnli.compare.receipts import Signer
    from zsnli.compare.service.store import Store

    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "k.pem"))

    def broken(*_a, **_k):
        raise error

    monkeypatch.setattr(Store, "_connect", broken)
    def no_key(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Signer, "private_key", no_key)
    some_id = "bo_" + "a" * 32

    async def run():
        async with running_app(make_bakeoff_app(bert_dir)) as client:
            return [await client.get(path) for path in ("/v1/bakeoffs", "/bakeoffs", f"/v1/bakeoffs/{some_id}",
                                                        f"/bakeoffs/{some_id}", f"/bakeoffs/{some_id}/badge.svg",
                                                        f"/bakeoffs/{some_id}/report.html", "/v1/receipts/public-key")]

    answers = asyncio.run(run())
    assert [r.status_code for r in answers] == [503] * 7, [(r.status_code, r.text[:200]) for r in answers]
    assert all(r.json()["error_type"] == "store" and "ZSNLI_BAKEOFF_DB" in r.json()["error"] for r in answers[:6])
    assert answers[6].json()["error_type"] == "receipt"


@pytest.mark.timeout(150)
def test_the_server_refuses_an_unusable_runs_dir_with_one_line_exit_3(bert_dir, monkeypatch):
    """The tryout: ``ZSNLI_RUNS_DIR=/proc/nope server.py`` started; now it is refused like ``ZSNLI_BAKEOFF_DB=/proc/x.db``."""
    monkeypatch.delenv("ZSNLI_BAKEOFF_DB", raising=False)
    monkeypatch.delenv("ZSNLI_RECEIPT_KEY", raising=False)
    proc = _server(bert_dir, _free_port(), ZSNLI_RUNS_DIR="/proc/nope")
    out, _ = proc.communicate(timeout=120)
    lines = [line for line in out.splitlines() if line.strip() and "Writing model shards" not in line]
    assert proc.returncode == 3 and len(lines) == 1, out
    assert lines[0].startswith("refusing to start: ZSNLI_RUNS_DIR=/proc/nope: ") and "Traceback" not in out, out
