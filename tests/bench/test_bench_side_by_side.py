"""zsnli.bench.side_by_side and its command line (python -m zsnli.bench): agreement, CLI checks, a failing variant, and a tiny end-to-end run.

The end-to-end run starts real server processes (serve.sh) on a tiny model with a
handful of documents and one thread; it checks that the script runs and reports, not any speed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_support import _DOCS, REPO, FakeServer, child_env, examples_file, refused, write_nli_config  # noqa: F401
from zsnli.bench.ceiling import ParamCounts
from zsnli.bench.side_by_side import agreement


def test_agreement_counts_argmax_and_max_dp():
    ref = [[0.7, 0.3], [0.2, 0.5, 0.3], [0.5, 0.5]]
    oth = [[0.69, 0.31], [0.6, 0.1, 0.3], None]
    a = agreement(ref, oth)
    assert a == {"docs": 2, "same_argmax": 1, "missing": 1, "max_abs_dp": pytest.approx(0.4), "worst_doc": 1}


@pytest.mark.timeout(600)  # five server starts; minutes on a loaded 2-core machine
def test_compare_runs_every_arm_and_agrees_with_the_pipeline(tmp_path, bert_dir, examples_file):
    """Every arm on tiny models: (a), (b), the plain server (c), the shipped default with a cosine term (d)
    and a variant; the report's shape, ratios, agreement and ceilings (no timing is checked)."""
    from conftest import write_calibration

    from zsnli.runtime.embedding import embedding_digest

    out = tmp_path / "report.json"
    calib = write_calibration(tmp_path / "shipped.json", rule="entailment_minus_contradiction", temperature=1.3,
                              embedding_weight=3.0, embedding_sha256=embedding_digest(bert_dir))
    doc = json.loads(calib.read_text())  # and the fast path's row: arm (f)
    doc["embedding_scoring"] = {"temperature": 1.0, "k_exponent": 0.0, "embedding_sha256": embedding_digest(bert_dir)}
    calib.write_text(json.dumps(doc))
    proc = subprocess.run(
        [sys.executable, "-m", "zsnli.bench", "--model-dir", str(bert_dir), "--examples", str(examples_file),
         "--docs", "3", "--batch-sizes", "2", "--concurrency", "1,4", "--warmup", "1", "--threads", "1",
         "--matmul-n", "128", "--matmul-seconds", "0.05", "--repo-root", str(REPO), "--no-progress",
         "--calibration", str(calib), "--embedding-dir", str(bert_dir), "--fast-path",
         "--variant", "small:ZSNLI_TOKEN_BUDGET=64", "--out", str(out)],
        env=child_env(), capture_output=True, text=True, timeout=420, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert [a["key"] for a in r["arms"]] == ["a", "b2", "c1", "c4", "d1", "d4", "f1", "f4", "c4-small"]
    assert r["server"]["fast"]["health"]["default_scoring"] == "embedding"
    assert r["server"]["variants"]["small"]["settings"] == {"ZSNLI_TOKEN_BUDGET": "64"}
    assert r["server"]["shipped"]["settings"] == {"ZSNLI_CALIBRATION_PATH": str(calib),
                                                  "ZSNLI_EMBEDDING_DIR": str(bert_dir)}
    assert r["server"]["shipped"]["health"]["scoring"]["embedding_weight"] == 3.0
    assert r["server"]["launcher"] == "serve.sh"
    for arm in r["arms"]:
        assert arm["docs"] == 3 and arm["pairs"] == 2 + 3 + 4 and arm["docs_per_s"] > 0
        assert arm["peak_rss_mib"] > 0
        assert arm["ceiling"] == {"d": "default", "f": "none"}.get(arm["key"][0], "nli")
    assert set(r["ratios"]) == {"c4/a", "c4/b", "c4-small/a", "c4-small/b", "d4/c4", "d4/a", "d4/b", "f4/d4"}
    for key in ("b2", "c1", "c4", "c4-small"):
        a = r["agreement"][key]
        assert a["vs"] == "a" and a["same_argmax"] == a["docs"] == 3 and a["max_abs_dp"] <= 1e-4, (key, a)
    # d4 and f4 against d1 and f1: the batched-vs-alone lines below
    assert set(r["agreement"]) == {"b2", "c1", "c4", "c4-small"} and r["agreement_unmatched"] == {}
    alone = r["agreement_batched_vs_alone"]
    assert set(alone) == {"c4", "d4", "f4"} and alone["d4"]["docs"] == 3 and alone["d4"]["max_abs_dp"] <= 1e-5
    assert alone["f4"]["docs"] == 3 and alone["f4"]["max_abs_dp"] <= 1e-5  # the fast path batched = alone
    # the shipped default's ceiling counts its NLI pairs, the texts and each label once (labels are kept)
    parts = r["default_ceiling"]["parts"]
    assert set(parts) == {"nli", "embedding"} and parts["nli"]["sequences"] == 9
    distinct_labels = len({label for doc in _DOCS[:3] for label in doc["labels"]})
    assert distinct_labels < 9 and parts["embedding"]["sequences"] == 3 + distinct_labels
    assert r["default_ceiling"]["ceiling_docs_per_s"] < r["ceiling"]["ceiling_docs_per_s"]
    assert r["cpu"]["model"] and r["cpu"]["logical_cpus"] >= 1 and isinstance(r["cpu"]["flags"], list)
    for needle in ("ratio (c4)/(a)", "ratio (d4)/(c4) docs/s", "(target >= 2x", "(target >= 3x", "(target >= 2.5x",
                   "answers d4 vs each request alone (d1)", "compute ceiling (shipped default", "CPU: "):
        assert needle in proc.stdout, needle
    figure_lines = [x for x in proc.stdout.splitlines() if x.startswith(("ratio", "compute", "  ("))]
    assert len(figure_lines) == 8 + 2 + 5 and all("CPU: " in x for x in figure_lines), proc.stdout
    assert all(" load " in x for x in figure_lines if x.startswith("ratio")), proc.stdout  # issue 57
    print(proc.stdout)  # the report, for a reader of -s output


def test_each_arm_is_compared_with_the_first_arm_serving_its_model_and_scoring(tmp_path, examples_file,
                                                                                 monkeypatch, capsys):
    """Agreement used to be keyed on the calibration path alone: a variant on the shipped calibration with
    ZSNLI_SCORING=pipeline (the pipeline's answers) got no line, nor did one on the shipped calibration (d's
    answers). Now every arm is compared with the first arm serving the same model and scoring, and an arm no other
    matches (another model) says what it serves. Arms are faked (`_fake_bench`); nothing is timed."""
    from conftest import write_calibration

    from zsnli.bench.side_by_side_cli import main

    _fake_bench(monkeypatch)
    shipped = write_calibration(tmp_path / "shipped.json", rule="entailment_minus_contradiction", temperature=1.3)
    other = tmp_path / "other-model"
    other.mkdir()
    write_nli_config(tmp_path)  # an NLI model directory, as --model-dir is checked to be (faked arms)
    out = tmp_path / "report.json"
    code = main(["--model-dir", str(tmp_path), "--examples", str(examples_file), "--docs", "3",
                 "--batch-sizes", "2", "--concurrency", "1,4", "--warmup", "0", "--no-progress",
                 "--calibration", str(shipped), "--variant", f"pipe:ZSNLI_CALIBRATION_PATH={shipped},ZSNLI_SCORING=pipeline",
                 "--variant", f"noshare:ZSNLI_CALIBRATION_PATH={shipped},ZSNLI_SHARE_IDENTICAL_ROWS=0",
                 "--variant", "bf16:ZSNLI_DTYPE=bfloat16", "--variant", f"big:ZSNLI_MODEL_DIR={other}",
                 "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    r = json.loads(out.read_text())
    assert {k: a["vs"] for k, a in r["agreement"].items()} == {
        "b2": "a", "c1": "a", "c4": "a", "c4-pipe": "a", "c4-noshare": "d1", "c4-bf16": "a"}
    assert all(a["same_argmax"] == a["docs"] == 3 for a in r["agreement"].values())
    assert list(r["agreement_unmatched"]) == ["c4-big"] and str(other) in r["agreement_unmatched"]["c4-big"]
    assert {a["key"]: a.get("scoring") for a in r["arms"]} == {
        "a": None, "b2": None, "c1": "pipeline", "c4": "pipeline", "d1": "shipped", "d4": "shipped",
        "c4-pipe": "pipeline", "c4-noshare": "shipped", "c4-bf16": "pipeline", "c4-big": "pipeline"}
    assert "agreement c4-pipe vs (a): same argmax 3/3" in printed
    assert "agreement c4-noshare vs (d1): same argmax 3/3" in printed
    assert f"agreement c4-big: none, no other arm serves the pipeline scoring of {other}" in printed


def test_the_fast_path_is_matched_on_its_calibration_and_encoder_not_the_cross_encoder(bert_dir, tmp_path):
    """``ZSNLI_SCORING=embedding`` never runs the cross-encoder: two such arms on different models answer alike
    when calibration and encoder are the same, and differently when the encoder differs."""
    from conftest import write_calibration

    from zsnli.bench.arm_agreement import answers_of
    from zsnli.bench.arm_ceiling import arm_work

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment")
    base = {"ZSNLI_CALIBRATION_PATH": str(calib), "ZSNLI_SCORING": "embedding", "ZSNLI_EMBEDDING_DIR": str(bert_dir)}
    one = answers_of(arm_work({**base, "ZSNLI_MODEL_DIR": str(bert_dir)}))
    assert one == answers_of(arm_work({**base, "ZSNLI_MODEL_DIR": str(tmp_path)}))
    assert one != answers_of(arm_work({**base, "ZSNLI_MODEL_DIR": str(bert_dir), "ZSNLI_EMBEDDING_DIR": str(tmp_path)}))
    assert answers_of(arm_work({**base, "ZSNLI_SCORING": "pipeline", "ZSNLI_MODEL_DIR": str(bert_dir)})) == (
        "nli", str(bert_dir.resolve()), None, None)


def test_recorded_quality_reads_each_scorings_figures_both_ways(tmp_path):
    from zsnli.bench.side_by_side import recorded_quality

    kw = {"plain_entailment": {"weighted_normalised": 30.0},
          "served_leave_one_dataset_out": {"weighted_normalised": 37.3},
          "leave_one_kind_out": {"served": {"weighted_normalised": 35.1}},
          "embedding_scoring": {"leave_one_dataset_out": {"weighted_normalised": 31.0},
                                "leave_one_kind_out": {"weighted_normalised": 29.5}}}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"chosen": {}, "selection": {"kind_weighted": kw}}))
    assert recorded_quality(path) == {"plain": {"lodo": 30.0, "loko": 30.0}, "default": {"lodo": 37.3, "loko": 35.1},
                                      "fast": {"lodo": 31.0, "loko": 29.5}}
    path.write_text(json.dumps({"chosen": {}}))
    assert recorded_quality(path) == {}


def test_fast_path_needs_the_embedding_row_in_one_line(tmp_path, examples_file, capsys):
    from conftest import write_calibration

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment", temperature=2.0)
    line = refused(capsys, lambda: _shipped_args(tmp_path, "--calibration", str(calib), "--fast-path"))
    assert "--fast-path" in line and "embedding_scoring" in line


def _shipped_args(tmp_path, *extra):
    from zsnli.bench.side_by_side_cli import parse_args

    return parse_args(["--examples", str(tmp_path / "ex.jsonl"), *extra])


def test_the_shipped_arm_follows_the_servers_calibration_lookup(tmp_path, bert_dir, examples_file, capsys,
                                                              monkeypatch):
    from conftest import write_calibration

    from zsnli.runtime.embedding import embedding_digest

    model = tmp_path / "m"
    model.mkdir()
    write_nli_config(model)  # an NLI model directory (--model-dir is checked to be one)
    assert _shipped_args(tmp_path, "--model-dir", str(model)).shipped is None  # none there: no arm (d)
    write_calibration(tmp_path / "calibration.json", rule="entailment", temperature=2.0)  # beside the model dir
    args = _shipped_args(tmp_path, "--model-dir", str(model))
    assert args.shipped[0] == (tmp_path / "calibration.json").resolve() and args.shipped[1].temperature == 2.0
    inside = write_calibration(model / "calibration.json", rule="entailment", embedding_weight=1.0,
                               embedding_sha256=embedding_digest(bert_dir))
    args = _shipped_args(tmp_path, "--model-dir", str(model), "--embedding-dir", str(bert_dir))
    assert args.shipped[0] == inside.resolve() and args.shipped[1].embedding_weight == 1.0
    assert _shipped_args(tmp_path, "--model-dir", str(model), "--calibration", "none").shipped is None
    # a cosine term without its sentence encoder (none in the model dir, none in the checkout): one line
    monkeypatch.setattr("zsnli.runtime.embedding.REPO_MODEL_DIR", tmp_path / "no-checkout-model")
    line = refused(capsys, lambda: _shipped_args(tmp_path, "--model-dir", str(model)))
    assert "cosine term" in line and "--embedding-dir" in line


@pytest.mark.parametrize("extra, needle", [
    (["--calibration", "missing.json"], "--calibration missing.json: no such file"),
    (["--calibration", "{bad}"], "--calibration: calibration file"),
    (["--embedding-dir", "no-such-dir"], "--embedding-dir no-such-dir: no such directory"),
    (["--variant", "shipped:ZSNLI_DTYPE=bfloat16"], "NAME 'shipped' is a built-in arm's name"),
])
def test_the_shipped_arm_refuses_bad_arguments_in_one_line(tmp_path, examples_file, capsys, extra, needle):
    bad = tmp_path / "bad.json"
    bad.write_text('{"chosen": {"rule": "no-such-rule"}}')
    extra = [str(bad) if x == "{bad}" else x for x in extra]
    line = refused(capsys, lambda: _shipped_args(tmp_path, *extra))
    assert needle in line, line


def test_batch_sizes_none_leaves_out_the_pipeline_sweep(examples_file):
    assert _compare_args(examples_file, "--batch-sizes", "none").batch_sizes == []


def test_parse_variant():
    from zsnli.bench.side_by_side_cli import parse_variant

    assert parse_variant("bf16:ZSNLI_DTYPE=bfloat16, ZSNLI_TOKEN_BUDGET=1024") == (
        "bf16", {"ZSNLI_DTYPE": "bfloat16", "ZSNLI_TOKEN_BUDGET": "1024"})
    for bad in ("bf16", ":ZSNLI_DTYPE=x", "default:ZSNLI_DTYPE=x", "a b:ZSNLI_DTYPE=x", "x:DTYPE=bf16",
                "x:ZSNLI_DTYPE", "x:"):
        with pytest.raises(ValueError):
            parse_variant(bad)


def _compare_args(examples_file, *extra):
    from zsnli.bench.side_by_side_cli import parse_args

    return parse_args(["--examples", str(examples_file), *extra])


@pytest.mark.parametrize("variant, needle", [
    ("x:ZSNLI_BACKEND=onnx", "ZSNLI_BACKEND must be one of"),
    ("x:ZSNLI_BACKEN=onnx-int8", "unknown setting ZSNLI_BACKEN (did you mean ZSNLI_BACKEND?)"),
    ("x:ZSNLI_FOO=1", "unknown setting ZSNLI_FOO (known: ZSNLI_ALLOWED_HOSTS, ZSNLI_ALLOWED_ORIGINS, ZSNLI_ALLOW_DOWNLOAD, "
                      "ZSNLI_API_KEY, ZSNLI_BACKEND, "),
    ("x:ZSNLI_TOKEN_BUDGET=lots", "ZSNLI_TOKEN_BUDGET must be an integer"),
    ("x:ZSNLI_MAX_LABELS=0", "ZSNLI_MAX_LABELS must be in [1, 4096]"),
    ("x:ZSNLI_BACKEND=onnx-int8,ZSNLI_DTYPE=bfloat16", "fixes the precision"),
    ("x:ZSNLI_DTYPE=bfloat16,ZSNLI_DTYPE=float32", "ZSNLI_DTYPE is given twice ('bfloat16' and 'float32')"),
    ("x:ZSNLI_TOKEN_BUDGET=64, ZSNLI_TOKEN_BUDGET=64", "ZSNLI_TOKEN_BUDGET is given twice"),
])
def test_compare_refuses_a_bad_variant_before_any_arm(examples_file, capsys, variant, needle):
    line = refused(capsys, lambda: _compare_args(examples_file, "--variant", variant))
    assert needle in line and "--variant" in line


def test_compare_refuses_duplicate_variant_names(examples_file, capsys):
    line = refused(capsys, lambda: _compare_args(examples_file, "--variant", "a:ZSNLI_DTYPE=bfloat16",
                                                  "--variant", "a:ZSNLI_TOKEN_BUDGET=64"))
    assert "duplicate" in line and " a" in line
    line = refused(capsys, lambda: _compare_args(examples_file, "--variant", "a:ZSNLI_DTYPE=bfloat16",
                                                  "--variant", "A:ZSNLI_TOKEN_BUDGET=64"))
    assert "duplicate name(s) A = a (names are compared ignoring case" in line


def test_duplicate_variant_names_ignore_case():
    from zsnli.bench.side_by_side_cli import duplicate_names

    assert duplicate_names(["a", "A", "b", "bf16", "BF16", "Bf16", "c"]) == ["A = a", "BF16 = Bf16 = bf16"]
    assert duplicate_names(["a", "a"]) == ["a"]
    assert duplicate_names(["a", "b", "c-1", "c_1"]) == []


@pytest.mark.parametrize("name", ["default", "shipped", "fast", "Fast"])
def test_compare_refuses_a_variant_named_as_a_built_in_arm(examples_file, capsys, name):
    """A variant named ``fast`` used to become the report's fast-path arm (its row keyed f32, its server under
    server.fast); every name a built-in server arm has in the report is refused, the line naming them all."""
    from zsnli.bench.side_by_side import BUILTIN_SERVERS

    assert set(BUILTIN_SERVERS) == {"default", "shipped", "fast"}
    line = refused(capsys, lambda: _compare_args(examples_file, "--variant", f"{name}:ZSNLI_TOKEN_BUDGET=64"))
    assert "--variant" in line and f"NAME {name!r}" in line and "reserved: default, shipped, fast" in line


def test_compare_accepts_good_variants(examples_file):
    args = _compare_args(examples_file, "--variant", "int8:ZSNLI_BACKEND=onnx-int8", "--variant",
                         "bf16:ZSNLI_DTYPE=bfloat16,ZSNLI_TOKEN_BUDGET=2048")
    assert args.variant == [("int8", {"ZSNLI_BACKEND": "onnx-int8"}),
                            ("bf16", {"ZSNLI_DTYPE": "bfloat16", "ZSNLI_TOKEN_BUDGET": "2048"})]


@pytest.mark.parametrize("option, value", [("--concurrency", "1,x"), ("--batch-sizes", "a"),
                                           ("--concurrency", "0"), ("--batch-sizes", "8,-1"),
                                           ("--concurrency", ",")])
def test_compare_refuses_bad_integer_lists(examples_file, capsys, option, value):
    line = refused(capsys, lambda: _compare_args(examples_file, f"{option}={value}"))
    assert f"argument {option}" in line and "positive integer" in line


def test_compare_integer_lists_parse(examples_file):
    args = _compare_args(examples_file, "--concurrency", "1, 8", "--batch-sizes", "4")
    assert args.concurrency == [1, 8] and args.batch_sizes == [4]
    assert _compare_args(examples_file).concurrency == [1, 32]  # string defaults go through the same type


def test_compare_refuses_a_missing_examples_file(tmp_path, monkeypatch, capsys):
    from zsnli.harness.examples import DEV_EXAMPLES, SHARED_PUBLIC_EXAMPLES
    from zsnli.bench.side_by_side_cli import parse_args

    monkeypatch.chdir(tmp_path)  # no ../shared and no dev/ here
    line = refused(capsys, lambda: parse_args([]))
    assert SHARED_PUBLIC_EXAMPLES in line and DEV_EXAMPLES in line and "pass --examples" in line
    line = refused(capsys, lambda: parse_args(["--examples", "nope.jsonl"]))
    assert "nope.jsonl" in line and "hub:btzsc" in line
    with pytest.raises(SystemExit) as info:
        parse_args(["--help"])
    assert info.value.code == 0
    assert f"default: {SHARED_PUBLIC_EXAMPLES}" in " ".join(capsys.readouterr().out.split())


def test_compare_defaults_to_the_dev_set_without_shared_data(tmp_path, monkeypatch, capsys):
    """A clone (no ../shared) gets the repository's dev set, said in one line."""
    from zsnli.harness.examples import DEV_EXAMPLES
    from zsnli.bench.side_by_side_cli import parse_args

    (tmp_path / "dev").mkdir()
    (tmp_path / DEV_EXAMPLES).write_text(json.dumps(_DOCS[0]) + "\n")
    (tmp_path / "model").mkdir()
    write_nli_config(tmp_path / "model")  # the default --model-dir, checked to be an NLI model directory
    monkeypatch.chdir(tmp_path)
    assert parse_args([]).examples == DEV_EXAMPLES
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and DEV_EXAMPLES in err[0] and "--examples" in err[0]


def _uniform(docs):
    return [[1 / len(d.labels)] * len(d.labels) for d in docs]


def _fake_bench(monkeypatch, start=None, load=None) -> None:
    """Fake every arm of ``python -m zsnli.bench``: the pipeline arms and the servers answer uniform probabilities
    (``start(settings)`` / ``load(desc)`` may raise first), the model counts behind each ceiling, the matmul rate,
    and the load average (0, 1, 2, ... at each read)."""
    from zsnli.bench import arm_ceiling
    from zsnli.bench import side_by_side as compare
    from zsnli.harness.examples import load_examples
    from zsnli.harness.load import Answer, RunResult

    def fake_pipeline_arm(model_dir, examples, docs, batch_size, mode, warmup, threads, workdir, progress, device="cpu"):
        ds = load_examples(examples, limit=docs).examples
        return {"docs": len(ds), "pairs": sum(len(d.labels) for d in ds), "wall_s": 1.0,
                "latencies_s": [0.1] * len(ds), "peak_rss_bytes": 2**20, "hwm_bytes": 2**20,
                "probabilities": _uniform(ds)}

    def fake_start(model_dir, settings, launcher, repo_root, threads):
        if start is not None:
            start(settings)
        return FakeServer(settings)

    def fake_load(url, docs, concurrency, warmups=0, progress=True, desc="", **kwargs):
        if load is not None:
            load(desc)
        return RunResult([Answer(p, None, 200, 0.05) for p in _uniform(docs)], wall_s=0.5, timed_out=False)

    monkeypatch.setattr(compare, "run_pipeline_arm", fake_pipeline_arm)
    monkeypatch.setattr(compare, "start_server", fake_start)
    monkeypatch.setattr(compare, "run_requests", fake_load)
    monkeypatch.setattr(arm_ceiling, "param_counts", lambda model_dir: ParamCounts(per_token=1000, per_pair=10,
                                                                                   embedding=5))
    monkeypatch.setattr(arm_ceiling, "pair_token_counts",
                        lambda model_dir, docs, max_length=None: [[10] * len(d.labels) for d in docs])
    monkeypatch.setattr(arm_ceiling, "model_dir_window", lambda model_dir, cap=512: cap)
    monkeypatch.setattr(compare, "matmul_rate", lambda *a, **k: {"device": "cpu", "dtype": "float32", "n": 128,
                                                                 "threads": 1, "flops_per_s": 1e9})
    readings = iter(range(100))
    monkeypatch.setattr(compare, "load_average", lambda: float(next(readings)))  # the load read around each arm


def test_compare_reports_a_failing_variant_and_runs_the_others(tmp_path, examples_file, monkeypatch, capsys):
    """Servers and pipeline arms are faked: 'bad' refuses to start, 'flaky' loses its connection mid-arm,
    'good' runs; the report and table still come, the failures are recorded, the exit code is 1."""
    import httpx

    from zsnli.bench.side_by_side_cli import main
    from zsnli.harness.server import ServerError

    def start(settings):
        if settings.get("ZSNLI_MAX_LABELS") == "7":
            raise ServerError("server exited with code 3 before /health answered 200 (log /tmp/x.log):\n"
                              "Traceback (most recent call last):\nzsnli.config.SettingsError: boom")

    def load(desc):
        if desc.endswith(" flaky"):
            raise httpx.ConnectError("connection refused")

    _fake_bench(monkeypatch, start, load)
    write_nli_config(tmp_path)  # an NLI model directory, as --model-dir is checked to be (faked arms)
    out = tmp_path / "report.json"
    code = main(["--model-dir", str(tmp_path), "--examples", str(examples_file), "--docs", "3",
                         "--batch-sizes", "2", "--concurrency", "1,4", "--warmup", "0", "--no-progress",
                         "--variant", "bad:ZSNLI_MAX_LABELS=7", "--variant", "flaky:ZSNLI_TOKEN_BUDGET=64",
                         "--variant", "good:ZSNLI_MAX_BATCH_WAIT_MS=1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    r = json.loads(out.read_text())
    assert [a["key"] for a in r["arms"]] == ["a", "b2", "c1", "c4", "c4-good"]
    variants = r["server"]["variants"]
    assert variants["bad"]["error"] == ("ServerError: server exited with code 3 before /health answered 200 "
                                        "(log /tmp/x.log): ... zsnli.config.SettingsError: boom")
    assert "boom" in variants["bad"]["error_detail"]
    assert variants["flaky"]["error"] == "ConnectError: connection refused"
    assert "error" not in variants["good"] and "error" not in r["server"]
    assert variants["good"]["exit_code"] == 0 and variants["bad"]["settings"] == {"ZSNLI_MAX_LABELS": "7"}
    assert set(r["ratios"]) == {"c4/a", "c4/b", "c4-good/a", "c4-good/b"}
    failed = [x for x in captured.err.splitlines() if "failed, skipped" in x]
    assert failed == [f"zsnli.bench: server bad failed, skipped: {variants['bad']['error']}",
                      f"zsnli.bench: server flaky failed, skipped: {variants['flaky']['error']}"]
    assert "server bad failed: ServerError" in captured.out and "ratio (c4-good)/(a)" in captured.out
    # issue 57: the load beside every ratio, read before and after each of its arms (they run one after another)
    loads = {a["key"]: a["load1"] for a in r["arms"]}
    assert loads["a"] == [0.0, 1.0] and all(b > a for a, b in loads.values())
    ratio_lines = [x for x in captured.out.splitlines() if x.startswith("ratio (")]
    assert len(ratio_lines) == len(r["ratios"]) == 4
    good = loads["c4-good"]
    assert any(f"[c4-good load {good[0]:.2f}-{good[1]:.2f}, a load 0.00-1.00; CPU: " in x for x in ratio_lines)
    assert all("load " in x and "; CPU: " in x for x in ratio_lines)


def test_pipeline_arm_writes_no_bars_when_stderr_is_not_a_terminal(deberta_dir, capfd):
    """The bench log (stderr redirected to a file) used to hold raw tqdm and "Loading weights" frames."""
    from transformers.utils import logging as hf_logging

    from zsnli.bench.pipeline_arm import build_pipeline, run_doc_mode, run_stream_mode
    from zsnli.harness.examples import Example

    hf_logging.enable_progress_bar()
    pipe = build_pipeline(str(deberta_dir))
    docs = [Example(id=i, dataset="d", text="the team won the match", labels=("sport", "food"), label=0)
            for i in range(2)]
    _, _, doc_probs = run_doc_mode(pipe, docs, 1, progress=True)
    _, _, stream_probs = run_stream_mode(pipe, docs, 2, progress=True)
    captured = capfd.readouterr()
    assert len(doc_probs) == len(stream_probs) == 2
    assert "Loading weights" not in captured.err and "pipeline" not in captured.err, captured.err


def test_the_bench_help_is_plain_text_with_a_help_line_for_every_option(capsys):
    """``--help`` showed the module docstring's reST (double backquotes) and nothing for --launcher,
    --matmul-seconds, --no-progress (nor --model-dir)."""
    from zsnli.bench.side_by_side_cli import build_parser, parse_args

    parser = build_parser()
    assert [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help] == []
    with pytest.raises(SystemExit) as info:
        parse_args(["--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and "`" not in out
    for option in ("--launcher", "--matmul-seconds", "--no-progress", "--model-dir"):
        assert option in out
    assert "The side-by-side throughput benchmark: the transformers zero-shot pipeline" in out


def test_no_bench_command_shows_rest_markup_in_its_help(monkeypatch):
    """Every ``python -m zsnli.bench.*`` command's description is plain text (`zsnli.harness.cli.plain_text`)."""
    import importlib
    import pkgutil

    import zsnli.bench
    from zsnli.harness.cli import UsageParser

    class Built(BaseException):
        pass

    parsers = []

    def capture(self, *args, **kwargs):
        parsers.append(self)
        raise Built

    monkeypatch.setattr(UsageParser, "parse_args", capture)
    monkeypatch.setattr(UsageParser, "parse_known_args", capture)
    names = [m.name for m in pkgutil.iter_modules(zsnli.bench.__path__) if m.name != "__main__"]
    commands = 0
    for name in names:
        main = getattr(importlib.import_module(f"zsnli.bench.{name}"), "main", None)
        if main is None:
            continue
        with pytest.raises(Built):
            main([])
        commands += 1
        assert "`" not in parsers[-1].format_help(), name
    assert commands >= 14


def test_plain_text_drops_rest_markup():
    from zsnli.harness.cli import plain_text

    assert plain_text("The ``python -m zsnli.bench`` command\n(`zsnli.bench.x`, :func:`f`).") == \
        "The python -m zsnli.bench command (zsnli.bench.x, f)."
    assert plain_text("see `the docs <https://example.com>`_ now") == "see the docs now"
