"""zsnli.bench.throughput_gate (bench/gpu.sh): documents, model check, and a tiny CPU run of the gate.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from bench_support import REPO, child_env, examples_file  # noqa: F401
from zsnli.bench.throughput_gate import PUBLIC_PROFILE, gate_documents, is_deberta_v3_base, synthetic_examples


def test_gate_documents_keep_the_label_count_mix():
    examples = synthetic_examples(per_dataset=4)
    assert Counter(len(d.labels) for d in examples) == Counter({k: 4 for k, _ in PUBLIC_PROFILE.values()})
    docs = gate_documents(examples, 3 * len(examples) + 2)
    assert len(docs) == 3 * len(examples) + 2
    assert len({d.id for d in docs}) == len(docs)
    full = Counter(len(d.labels) for d in docs[: 3 * len(examples)])
    assert full == Counter({k: 12 for k, _ in PUBLIC_PROFILE.values()})
    assert all(d.text for d in examples)


def test_is_deberta_v3_base(tmp_path, bert_dir, deberta_dir):
    assert not is_deberta_v3_base(bert_dir)
    assert not is_deberta_v3_base(deberta_dir)  # deberta-v2 type, but tiny
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deberta-v2", "hidden_size": 768,
                                                      "num_hidden_layers": 12}))
    assert is_deberta_v3_base(tmp_path)
    assert not is_deberta_v3_base(tmp_path / "missing")


def test_gpu_sh_runs_tiny_on_cpu(tmp_path, examples_file):
    out = tmp_path / "gate.json"
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu.sh"), "--tiny", "--examples", str(examples_file), "--docs", "8",
         "--warmup", "2", "--concurrency", "4", "--threads", "1", "--matmul-n", "128", "--matmul-seconds", "0.05",
         "--no-progress", "--work-dir", str(tmp_path / "work"), "--out", str(out)],
        env=child_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for needle in ("RANDOM WEIGHTS", "throughput:", "docs/s", "request seconds: mean", "p95", "GPU memory",
                   "compute ceiling", "matmul", "startup:", "answers: 8 of 8 parsed", "torch "):
        assert needle in proc.stdout, needle
    result = json.loads(out.read_text())
    (r,) = result["arms"]
    assert r["docs"] == 8 and r["errors"] == {} and r["docs_per_s"] > 0 and r["startup_s"] > 0
    assert r["label_counts"] == {"2": 4, "3": 2, "4": 2}
    assert r["random_weights"] is True and r["device"] == result["device"] == "cpu"
    assert 0 < r["fraction_of_ceiling"]


def _gpu_sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "bench" / "gpu.sh"), *args], env=child_env(), capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def test_gpu_sh_without_arguments_plans_the_graded_setup():
    """``bench/gpu.sh`` with no argument serves model/ as shipped: serve.sh's own defaults (no device, dtype or
    model forced), the checkout's calibration.json with its encoder and cascade, 4,400 documents at concurrency 32
    after 16 warm-ups (``--dry-run`` shows the plan of exactly that command, starting nothing)."""
    proc = _gpu_sh("--dry-run")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    calibration = json.loads((REPO / "calibration.json").read_text())["chosen"]
    cascade = calibration["cascade"]
    assert f"arm served: serve.sh, ZSNLI_MODEL_DIR={REPO / 'model'}, settings: none (serve.sh's defaults)" in out
    assert f"calibration {REPO / 'calibration.json'}" in out and "RANDOM" not in out
    assert f"sentence encoder {REPO / 'model' / 'embedding'}" in out
    assert f"cascade {cascade['min_labels']}:{cascade['keep']}" in out
    assert "16 warm-up requests, then 4400 documents" in out and "at concurrency 32" in out


def test_gpu_sh_random_deberta_only_when_asked_and_usage_mistakes_are_one_line(tmp_path):
    proc = _gpu_sh("--dry-run", "--random-deberta")
    assert proc.returncode == 0 and "RANDOM WEIGHTS, deberta-v3-base" in proc.stdout, proc.stderr
    for args, needle in ((["--tiny", "--random-deberta"], "choose one random model"),
                         (["--model-dir", str(tmp_path)], "no config.json"),
                         (["--random-debreta"], "unrecognized arguments")):
        proc = _gpu_sh("--dry-run", *args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_the_plan_serves_each_variant_where_the_checkout_has_the_base_model(tmp_path, monkeypatch, bert_dir):
    """With ``model/base/`` and a server that reads ``ZSNLI_MODEL_VARIANT``, one arm per variant (small, then base,
    each counted on its own weights); without either, the one served arm."""
    import argparse
    import shutil

    from zsnli.bench import gate_plan

    model = tmp_path / "model"
    shutil.copytree(bert_dir, model)
    args = argparse.Namespace(model_dir=str(model), tiny=False, random_deberta=False, device=None, dtype=None)
    assert [(a.name, a.env, a.weights_dir) for a in gate_plan.plan(args)] == [("served", {}, model)]
    shutil.copytree(bert_dir, model / "base")
    known = gate_plan.setting_names()
    if "ZSNLI_MODEL_VARIANT" not in known:  # this checkout's server does not read it yet: no variant arm
        assert [a.name for a in gate_plan.plan(args)] == ["served"]
        monkeypatch.setattr(gate_plan, "setting_names", lambda: [*known, "ZSNLI_MODEL_VARIANT"])
    arms = gate_plan.plan(args)
    assert [(a.name, a.env, a.weights_dir) for a in arms] == [
        ("small", {"ZSNLI_MODEL_VARIANT": "small"}, model), ("base", {"ZSNLI_MODEL_VARIANT": "base"}, model / "base")]
    args.device = "cuda:1"
    assert gate_plan.plan(args)[0].env == {"ZSNLI_DEVICE": "cuda:1", "ZSNLI_MODEL_VARIANT": "small"}


@pytest.mark.parametrize("args", [("--rows", "--docs"), ("--rows", "--docs", "--dry-run"), ("--rows", "--out"),
                                  ("--rows", "--device"), ("--rows", "--examples")])
def test_gpu_sh_rows_flag_missing_its_value_is_one_line(args):
    """A ``--rows`` flag without its value names the flag in one line (exit 2), not bash's unbound variable."""
    proc = _gpu_sh(*args)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    flag = next(a for a in args if a not in ("--rows", "--dry-run"))
    assert proc.returncode == 2 and len(lines) == 1 and f"{flag} needs a value" in lines[0], proc.stderr
    assert "unbound" not in proc.stderr


@pytest.mark.parametrize("lead", [("--dry-run",), ("--rows", "--dry-run")])
def test_gpu_sh_out_that_cannot_be_written_is_refused_before_the_run(tmp_path, lead):
    """``--out`` is checked before anything runs (with ``--dry-run`` too): one line naming it, exit 2."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    examples = tmp_path / "examples.jsonl"  # --rows checks its examples too: a file of this test's, not ../shared
    examples.write_text('{"text": "a", "labels": ["x", "y"], "gold": "x"}\n')
    proc = _gpu_sh(*lead, "--examples", str(examples), "--out", str(blocker / "dir" / "x.json"))
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "--out" in lines[0] and f"{blocker} is a file, not a folder" in lines[0] and "Traceback" not in proc.stderr


def test_every_report_flag_of_the_benches_and_validate_is_checked_at_parse_time():
    """Every file-output flag (``--out``/``--json``/``--report``/``--html``) of `zsnli.bench` and `zsnli.compare`
    parses with `zsnli.harness.cli.output_file`, so an unwritable path is refused before the run (the random
    model builder's ``--out`` is a folder, not a report)."""
    import re

    pattern = re.compile(r'add_argument\("--(out|json|report|html)"[^\n]*')
    found = []
    for path in sorted((REPO / "src" / "zsnli").glob("[bc]*/*.py")):
        if path.parent.name not in ("bench", "compare") or path.name == "random_models.py":
            continue
        for m in pattern.finditer(path.read_text(encoding="utf-8")):
            found.append((path.name, m.group(0)))
    assert len(found) >= 14
    assert [f for f in found if "type=output_file" not in f[1]] == []


def test_output_file_refuses_one_line_and_leaves_nothing_behind(tmp_path):
    import argparse

    from zsnli.harness.cli import output_file

    blocker = tmp_path / "f"
    blocker.write_text("x")
    with pytest.raises(argparse.ArgumentTypeError, match=f"{blocker} is a file, not a folder"):
        output_file(str(blocker / "x.json"))
    with pytest.raises(argparse.ArgumentTypeError, match="is a directory"):
        output_file(str(tmp_path))
    assert output_file(str(tmp_path / "new" / "r.json")) == tmp_path / "new" / "r.json"
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("module, flag", [("overload", "--timeout"), ("overload", "--max-seconds"),
                                          ("overload", "--ready-timeout"), ("idle_clients", "--timeout"),
                                          ("read_routes", "--seconds"), ("fair_share", "--alone-s"),
                                          ("fair_share", "--array-timeout"), ("bakeoff_priority", "--seconds")])
def test_the_benches_seconds_flags_have_an_upper_bound(module, flag, capsys):
    """A wait of 1e9 s overflows the millisecond timeouts of select/poll (``OverflowError``): every seconds flag of
    the benches is at most `zsnli.harness.cli.MAX_WAIT_S`, one line naming it, exit 2, before anything starts."""
    import importlib

    mod = importlib.import_module(f"zsnli.bench.{module}")
    parse = getattr(mod, "parse_args", None) or (lambda argv: mod._parser().parse_args(argv))
    with pytest.raises(SystemExit) as exited:
        parse([flag, "1e9"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and flag in err and "604800" in err, err
