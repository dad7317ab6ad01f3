"""zsnli.bench.arm_ceiling: each server arm of ``python -m zsnli.bench`` is measured against the ceiling of the
model(s) it serves (its own ZSNLI_MODEL_DIR / ZSNLI_MODEL_VARIANT / ZSNLI_MODEL_ID, window, calibration, encoder),
and the printed lines name that model; what cannot be counted says so. No arm is timed: rows are made up."""

from __future__ import annotations

import io
import json
import shutil

import pytest

from bench_support import _DOCS, FakeServer
from zsnli.bench.arm_ceiling import apply_ceilings, arm_ceilings, arm_work, pipeline_work, work_ceiling
from zsnli.bench.ceiling import (embedding_token_counts, first_use_token_counts, pair_flops, pair_token_counts,
                                 param_counts)
from zsnli.harness.examples import parse_examples

DOCS = [d for d in parse_examples([json.dumps(d) for d in _DOCS]) if d.text]
RATE = 1e9  # FLOP/s: any positive rate (no timing here)


@pytest.fixture(scope="module")
def big_dir(bert_dir, tmp_path_factory):
    """A second tiny BERT NLI model, larger than ``bert_dir`` (3 layers, width 64) with a 24-token window."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, BertForSequenceClassification

    path = tmp_path_factory.mktemp("big") / "model"
    tok = AutoTokenizer.from_pretrained(bert_dir)
    tok.model_max_length = 24
    tok.save_pretrained(path)
    cfg = AutoConfig.from_pretrained(bert_dir)
    cfg.update({"hidden_size": 64, "num_hidden_layers": 3, "intermediate_size": 128, "max_position_embeddings": 24})
    torch.manual_seed(0)
    BertForSequenceClassification(cfg).save_pretrained(path)
    return path


@pytest.fixture()
def plain(tmp_path):
    """The (c) arms' calibration: the pipeline's semantics."""
    from zsnli.bench.side_by_side import PIPELINE_CALIBRATION_NAME, PIPELINE_SEMANTICS

    path = tmp_path / PIPELINE_CALIBRATION_NAME
    path.write_text(json.dumps(PIPELINE_SEMANTICS))
    return path


def env(model_dir, calibration, **settings) -> dict[str, str]:
    """A server arm's environment as `zsnli.bench.side_by_side.server_env` builds it (without this process's)."""
    return {"ZSNLI_MODEL_DIR": str(model_dir), "ZSNLI_DEVICE": "cpu", "ZSNLI_DTYPE": "float32",
            "ZSNLI_CALIBRATION_PATH": str(calibration), **{f"ZSNLI_{k}": str(v) for k, v in settings.items()}}


def nli_flops(model_dir, window: int) -> float:
    params = param_counts(model_dir)
    return sum(pair_flops(n, params) for row in pair_token_counts(model_dir, DOCS, window) for n in row)


def test_a_variant_serving_another_model_is_measured_against_that_models_ceiling(bert_dir, big_dir, plain):
    """The bug: --variant NAME:ZSNLI_MODEL_DIR=/other/model got the --model-dir model's FLOPs/pair and tokens."""
    small_params, big_params = param_counts(bert_dir), param_counts(big_dir)
    assert big_params.per_token > 2 * small_params.per_token  # two models of different sizes
    pipeline = pipeline_work(bert_dir)
    works = {None: pipeline, "default": arm_work(env(bert_dir, plain)),
             "big": arm_work(env(bert_dir, plain, MODEL_DIR=big_dir))}
    entries, of_arm = arm_ceilings(works, DOCS, RATE, {pipeline: work_ceiling(pipeline, DOCS, RATE, strict=True)})
    assert of_arm == {None: "nli", "default": "nli", "big": "nli-2"}  # (c) shares the pipeline's; the variant not
    big = entries["nli-2"]
    assert big["model_dir"] == big["model"] == str(big_dir.resolve()) and big["window"] == 24
    assert big["params"] == big_params.to_dict() and entries["nli"]["params"] == small_params.to_dict()
    assert big["ceiling"]["total_flops"] == pytest.approx(nli_flops(big_dir, 24))  # its tokenizer, its window
    assert entries["nli"]["ceiling"]["total_flops"] == pytest.approx(nli_flops(bert_dir, entries["nli"]["window"]))
    rows = [_row("c4", "(c) zsnli, concurrency 4", "default", 3.0), _row("c4-big", "(c) zsnli, concurrency 4, big",
                                                                      "big", 1.0)]
    apply_ceilings(rows, entries, of_arm)
    assert rows[1]["ceiling_id"] == "nli-2" and rows[1]["ceiling"] == "nli"
    assert rows[1]["fraction_of_ceiling"] == pytest.approx(1.0 / big["ceiling"]["ceiling_docs_per_s"])
    assert rows[0]["fraction_of_ceiling"] == pytest.approx(3.0 / entries["nli"]["ceiling"]["ceiling_docs_per_s"])
    out = _render(bert_dir, rows, entries)
    line = next(x for x in out.splitlines() if x.startswith("  (c) zsnli, concurrency 4, big:"))
    percent = f"{100 * rows[1]['fraction_of_ceiling']:.1f}%"
    assert f"{percent} of the ceiling of the NLI pairs of {big_dir.resolve()} (" in line
    assert f"FLOPs/pair = 2 x {big_params.per_token:,} (encoder params)" in out  # its own ceiling line
    assert f"FLOPs/pair = 2 x {small_params.per_token:,} (encoder params)" in out


def test_the_bench_command_line_gives_each_variant_its_own_work(bert_dir, big_dir, tmp_path, monkeypatch):
    """``python -m zsnli.bench --variant big:ZSNLI_MODEL_DIR=...`` through the run's own plan and environment."""
    from zsnli.bench.side_by_side import arm_works, server_plan
    from zsnli.bench.side_by_side_cli import parse_args
    from zsnli.harness.examples import write_examples

    monkeypatch.delenv("ZSNLI_MAX_LENGTH", raising=False)
    ex = write_examples(tmp_path / "ex.jsonl", DOCS)
    args = parse_args(["--model-dir", str(bert_dir), "--examples", str(ex), "--calibration", "none",
                       "--variant", f"big:ZSNLI_MODEL_DIR={big_dir}", "--variant", "short:ZSNLI_MAX_LENGTH=16",
                       "--variant", "bf16:ZSNLI_DTYPE=bfloat16"])
    works = arm_works(args, bert_dir.resolve(), server_plan(args, tmp_path))
    assert works["default"] == works[None] == works["bf16"]  # same model, same window: the same ceiling
    assert works["big"].model_dir == str(big_dir.resolve()) and works["big"].kind == "nli"
    assert works["short"].model_dir == str(bert_dir.resolve()) and works["short"].cap == 16


def test_the_base_variant_and_a_hub_model_are_resolved_as_the_server_does(bert_dir, big_dir, plain, tmp_path,
                                                                          monkeypatch):
    from conftest import write_hub_cache

    root = tmp_path / "model"
    shutil.copytree(bert_dir, root)
    shutil.copytree(big_dir, root / "base")
    base = arm_work(env(root, plain, MODEL_VARIANT="base", SKIP_MANIFEST_CHECK=1))
    assert base.kind == "nli" and base.model_dir == str((root / "base").resolve())
    assert arm_work(env(root, plain, MODEL_VARIANT="auto")).model_dir == str(root.resolve())  # auto on a CPU: small
    unpinned = arm_work(env(root, plain, MODEL_VARIANT="base"))  # the server refuses an unpinned base: no ceiling
    assert unpinned.kind == "unknown" and "manifest" in unpinned.error
    commit = "a" * 40
    snapshot = write_hub_cache(tmp_path / "hub", "org/big", big_dir, commit)
    cache = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    hub = arm_work({**env(root, plain, MODEL_ID="org/big", MODEL_REVISION=commit), **cache})
    assert hub.kind == "nli" and hub.model_dir == str(snapshot.resolve()) and hub.model == f"org/big@{commit}"
    assert work_ceiling(hub, DOCS, RATE)["params"] == param_counts(big_dir).to_dict()
    missing = arm_work({**env(root, plain, MODEL_ID="org/absent"), **cache})
    assert missing.kind == "unknown" and "not in the hub cache" in missing.error and missing.model == "org/absent"
    entries, of_arm = arm_ceilings({"absent": missing}, DOCS, RATE)
    assert entries["unknown"]["ceiling"] is None and of_arm == {"absent": "unknown"}
    rows = [_row("c4-absent", "(c) zsnli, concurrency 4, absent", "absent", 1.0)]
    apply_ceilings(rows, entries, of_arm)
    assert rows[0]["ceiling"] == "unknown" and rows[0]["fraction_of_ceiling"] != rows[0]["fraction_of_ceiling"]
    out = _render(bert_dir, rows, entries)
    assert "  (c) zsnli, concurrency 4, absent: 1.00 docs/s; no compute ceiling: " in out
    assert "compute ceiling of org/absent: not computed: " in out and "% of the" not in out


def test_the_window_is_the_arms_own(bert_dir, plain):
    """ZSNLI_MAX_LENGTH of the arm, else the bench's --max-length, else the server's default; never past the model's."""
    own = work_ceiling(arm_work(env(bert_dir, plain, MAX_LENGTH=16), max_length=20), DOCS, RATE)
    assert own["window"] == 16 and own["ceiling"]["total_flops"] == pytest.approx(nli_flops(bert_dir, 16))
    assert work_ceiling(arm_work(env(bert_dir, plain), max_length=20), DOCS, RATE)["window"] == 20
    assert arm_work(env(bert_dir, plain)).cap == 512
    assert nli_flops(bert_dir, 16) < nli_flops(bert_dir, 20) < nli_flops(bert_dir, 64)  # the window cuts these texts


def test_the_calibration_scoring_and_encoder_decide_what_is_counted(bert_dir, big_dir, plain, tmp_path):
    from conftest import write_calibration

    from zsnli.runtime.embedding import embedding_digest

    root = tmp_path / "model"
    shutil.copytree(bert_dir, root)
    shutil.copytree(big_dir, root / "embedding")  # the served model's own encoder (the server's default)
    cosine = write_calibration(tmp_path / "cosine.json", rule="entailment", temperature=2.0, embedding_weight=3.0,
                               embedding_sha256=embedding_digest(bert_dir))
    beside = arm_work(env(root, cosine))
    assert beside.kind == "default" and beside.embedding_dir == str((root / "embedding").resolve())
    named = work_ceiling(arm_work(env(root, cosine, EMBEDDING_DIR=bert_dir)), DOCS, RATE)
    assert named["embedding_dir"] == str(bert_dir.resolve())
    assert named["embedding_params"] == param_counts(bert_dir).to_dict()
    counted = work_ceiling(beside, DOCS, RATE)
    assert counted["embedding_params"] == param_counts(root / "embedding").to_dict()
    emb = first_use_token_counts(embedding_token_counts(root / "embedding", DOCS), DOCS)
    assert counted["ceiling"]["parts"]["embedding"]["tokens"] == sum(map(sum, emb))
    assert named["ceiling"]["ceiling_docs_per_s"] != counted["ceiling"]["ceiling_docs_per_s"]
    # another calibration: its own least work (here its content-free pairs), not the NLI pairs' ceiling
    cf = write_calibration(tmp_path / "cf.json", rule="entailment", temperature=1.5, content_free_premise="N/A")
    assert set(work_ceiling(arm_work(env(root, cf)), DOCS, RATE)["ceiling"]["parts"]) == {"nli", "content_free"}
    assert arm_work(env(root, cosine, SCORING="pipeline")).kind == "nli"
    assert arm_work(env(root, cosine, SCORING="embedding")).kind == "none"
    assert arm_work(env(root, plain)).kind == "nli"
    assert arm_work(env(root, tmp_path / "absent.json")).kind == "unknown"


def _row(key: str, arm: str, variant: str, docs_per_s: float) -> dict:
    """A server arm's row as `zsnli.bench.side_by_side.arm_row` makes it (figures made up)."""
    return {"key": key, "arm": arm, "variant": variant, "docs": 3, "pairs": 9, "docs_per_s": docs_per_s,
            "pairs_per_s": 3 * docs_per_s, "wall_s": 3 / docs_per_s, "p50_s": 0.1, "p95_s": 0.2, "peak_rss_mib": 100.0,
            "load1": [0.5, 0.5]}


def _render(model_dir, rows, entries) -> str:
    from rich.console import Console

    from zsnli.bench.side_by_side_table import render

    report = {"cpu": {"model": "test CPU", "logical_cpus": 2, "flags": ["avx2"]}, "docs": 3, "pairs": 9,
              "model_dir": str(model_dir.resolve()), "arms": rows, "best_b": None, "ratios": {}, "quality": {},
              "agreement": {}, "matmul": {"dtype": "float32", "flops_per_s": RATE, "n": 128, "threads": 1},
              "ceilings": entries, "shipped_calibration": None, "server": {}}
    buf = io.StringIO()
    render(report, Console(file=buf, width=400))
    return buf.getvalue()


def test_the_run_prints_each_variants_own_ceiling(bert_dir, big_dir, tmp_path, monkeypatch, capsys):
    """``python -m zsnli.bench --variant big:ZSNLI_MODEL_DIR=BIG`` end to end with the pipeline and the servers faked
    (no model runs, nothing is timed): the variant's row and line are against BIG's ceiling, the others against
    --model-dir's."""
    import os

    from zsnli.bench import side_by_side as compare
    from zsnli.bench.side_by_side_cli import main
    from zsnli.harness.examples import write_examples
    from zsnli.harness.load import Answer, RunResult

    def probs(docs):
        return [[1 / len(d.labels)] * len(d.labels) for d in docs]

    monkeypatch.setattr(compare, "run_pipeline_arm", lambda *a, **k: {
        "docs": len(DOCS), "pairs": 9, "wall_s": 1.0, "latencies_s": [0.1] * 3, "peak_rss_bytes": 2**20,
        "hwm_bytes": 2**20, "probabilities": probs(DOCS)})
    monkeypatch.setattr(compare, "start_server", lambda *a, **k: FakeServer())
    monkeypatch.setattr(compare, "run_requests", lambda url, docs, concurrency, **k: RunResult(
        [Answer(p, None, 200, 0.05) for p in probs(docs)], wall_s=0.5, timed_out=False))
    monkeypatch.setattr(compare, "matmul_rate", lambda *a, **k: {"device": "cpu", "dtype": "float32", "n": 128,
                                                                 "threads": 1, "flops_per_s": RATE})
    for name in [k for k in os.environ if k.startswith("ZSNLI_")]:
        monkeypatch.delenv(name)
    out = tmp_path / "report.json"
    ex = write_examples(tmp_path / "ex.jsonl", DOCS)
    code = main(["--model-dir", str(bert_dir), "--examples", str(ex), "--batch-sizes", "none", "--concurrency",
                 "1,4", "--warmup", "0", "--no-progress", "--calibration", "none",
                 "--variant", f"big:ZSNLI_MODEL_DIR={big_dir}", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    r = json.loads(out.read_text())
    rows = {a["key"]: a for a in r["arms"]}
    big_ceiling = r["ceilings"][rows["c4-big"]["ceiling_id"]]
    assert big_ceiling["model_dir"] == str(big_dir.resolve()) and rows["c4"]["ceiling_id"] == "nli"
    assert big_ceiling["params"] == param_counts(big_dir).to_dict()
    assert big_ceiling["ceiling"]["total_flops"] == pytest.approx(nli_flops(big_dir, 24))
    assert rows["c4-big"]["fraction_of_ceiling"] == pytest.approx(6.0 / big_ceiling["ceiling"]["ceiling_docs_per_s"])
    assert rows["c4"]["fraction_of_ceiling"] == pytest.approx(6.0 / r["ceiling"]["ceiling_docs_per_s"])
    line = next(x for x in printed.splitlines() if x.startswith("  (c) zsnli, concurrency 4, big:"))
    assert f"of the ceiling of the NLI pairs of {big_dir.resolve()} (" in line
