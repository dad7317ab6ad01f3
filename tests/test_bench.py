"""zsnli.bench: helpers, the random-model builder, and tiny end-to-end runs of both benchmarks.

The end-to-end runs start real server processes (serve.sh) on tiny models
with a handful of documents and one thread; they check that the scripts run
and report, not any speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from zsnli.bench.ceiling import ParamCounts, compute_ceiling, pair_flops, pair_token_counts, param_counts
from zsnli.bench.side_by_side import agreement
from zsnli.bench.throughput_gate import PUBLIC_PROFILE, gate_documents, is_deberta_v3_base, synthetic_examples
from zsnli.harness.examples import Example, parse_examples, write_examples

REPO = Path(__file__).resolve().parents[1]

_DOCS = [
    {"id": "d0", "dataset": "t", "text": "the team won the football match and the player scored a goal .",
     "labels": ["This text is about sport.", "This text is about business."], "label": 0},
    {"id": "d1", "dataset": "t", "text": "the bank said the stock market price and company profit were good .",
     "labels": ["This text is about sport.", "This text is about business.", "about science"], "label": 1},
    {"id": "d2", "dataset": "t", "text": "research on space and computer software data .",
     "labels": ["about science", "about politics", "about music", "about food"], "label": 0},
    {"id": "d3", "dataset": "t", "text": "", "labels": ["about weather", "about the city"], "label": 0},
]


@pytest.fixture()
def examples_file(tmp_path) -> Path:
    return write_examples(tmp_path / "ex.jsonl", parse_examples([json.dumps(d) for d in _DOCS]))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "PYTHON": sys.executable})
    return env


# --------------------------------------------------------------------------- helpers


def test_agreement_counts_argmax_and_max_dp():
    ref = [[0.7, 0.3], [0.2, 0.5, 0.3], [0.5, 0.5]]
    oth = [[0.69, 0.31], [0.6, 0.1, 0.3], None]
    a = agreement(ref, oth)
    assert a == {"docs": 2, "same_argmax": 1, "missing": 1, "max_abs_dp": pytest.approx(0.4), "worst_doc": 1}


def test_compute_ceiling_arithmetic():
    params = ParamCounts(per_token=1000, per_pair=10, embedding=99999)
    assert pair_flops(5, params) == 2 * 1000 * 5 + 2 * 10
    c = compute_ceiling([[5, 7], [6]], params, rate_flops_per_s=1e6)
    total = pair_flops(5, params) + pair_flops(7, params) + pair_flops(6, params)
    assert c["total_flops"] == total
    assert c["pairs"] == 3 and c["docs"] == 2 and c["mean_tokens_per_pair"] == 6
    assert c["ceiling_docs_per_s"] == pytest.approx(1e6 / (total / 2))


def test_param_counts_split_bert(bert_dir):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(bert_dir)
    enc = sum(p.numel() for p in model.bert.encoder.parameters())
    emb = sum(p.numel() for p in model.bert.embeddings.parameters())
    total = sum(p.numel() for p in model.parameters())
    counts = param_counts(bert_dir)
    assert counts.per_token == enc
    assert counts.embedding == emb
    assert counts.per_pair == total - enc - emb  # pooler + classifier
    assert counts.non_embedding == total - emb


def test_param_counts_deberta_excludes_relative_embeddings(deberta_dir):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(deberta_dir)
    rel = model.deberta.encoder.rel_embeddings.weight.numel()
    enc = sum(p.numel() for p in model.deberta.encoder.parameters())
    assert param_counts(deberta_dir).per_token == enc - rel


def test_pair_token_counts_match_the_server_tokenisation(model_dir):
    from zsnli.model import NliModel

    nli_model = NliModel.load(model_dir, device="cpu")
    docs = [Example("a", "d", "the team won " * 40, ("This text is about sport.", "about music"), 0),
            Example("b", "d", "short", ("about food",), 0)]
    counts = pair_token_counts(model_dir, docs)
    enc = nli_model.encode([docs[0].text] * 2 + ["short"], list(docs[0].labels) + ["about food"])
    assert counts == [[len(enc[0]), len(enc[1])], [len(enc[2])]]
    assert max(counts[0]) <= nli_model.max_length


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


def test_random_model_uses_a_given_tokenizer_offline(tmp_path, bert_dir):
    from zsnli.bench.random_models import build_random_nli
    from zsnli.model import NliModel

    info = build_random_nli(tmp_path / "m", "deberta-tiny", tokenizer_from=bert_dir)
    assert info["random_weights"] and "tokenizer of" in info["tokenizer"]
    model = NliModel.load(info["model_dir"], device="cpu")
    assert model.model.config.model_type == "deberta-v2"
    assert not model.emits_token_type_ids
    logits = model.predict_logits(["the team won"], ["This text is about sport."])
    assert logits.shape == (1, 3)


# --------------------------------------------------------------------------- end to end


def test_gpu_sh_runs_tiny_on_cpu(tmp_path, examples_file):
    out = tmp_path / "gate.json"
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu.sh"), "--tiny", "--examples", str(examples_file), "--docs", "8",
         "--warmup", "2", "--concurrency", "4", "--threads", "1", "--matmul-n", "128", "--matmul-seconds", "0.05",
         "--no-progress", "--work-dir", str(tmp_path / "work"), "--out", str(out)],
        env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for needle in ("RANDOM WEIGHTS", "throughput:", "docs/s", "request seconds: mean", "p95", "GPU memory",
                   "compute ceiling", "matmul"):
        assert needle in proc.stdout, needle
    r = json.loads(out.read_text())
    assert r["docs"] == 8 and r["errors"] == {} and r["docs_per_s"] > 0
    assert r["label_counts"] == {"2": 4, "3": 2, "4": 2}
    assert r["random_weights"] is True and r["device"] == "cpu"
    assert 0 < r["fraction_of_ceiling"]


def test_compare_runs_every_arm_and_agrees_with_the_pipeline(tmp_path, bert_dir, examples_file):
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "zsnli.bench", "--model-dir", str(bert_dir), "--examples", str(examples_file),
         "--docs", "3", "--batch-sizes", "2", "--concurrency", "1,4", "--warmup", "1", "--threads", "1",
         "--matmul-n", "128", "--matmul-seconds", "0.05", "--repo-root", str(REPO), "--no-progress",
         "--variant", "small:ZSNLI_TOKEN_BUDGET=64", "--out", str(out)],
        env=_env(), capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert [a["key"] for a in r["arms"]] == ["a", "b2", "c1", "c4", "c4-small"]
    assert r["server"]["variants"]["small"]["settings"] == {"ZSNLI_TOKEN_BUDGET": "64"}
    assert r["server"]["launcher"] == "serve.sh"
    for arm in r["arms"]:
        assert arm["docs"] == 3 and arm["pairs"] == 2 + 3 + 4 and arm["docs_per_s"] > 0
        assert arm["peak_rss_mib"] > 0
    assert set(r["ratios"]) == {"c4/a", "c4/b", "c4-small/a", "c4-small/b"}
    for key in ("b2", "c1", "c4", "c4-small"):
        a = r["agreement_vs_a"][key]
        assert a["same_argmax"] == a["docs"] == 3 and a["max_abs_dp"] <= 1e-4, (key, a)
    assert "ratio (c4)/(a)" in proc.stdout and "compute ceiling" in proc.stdout


def test_parse_variant():
    from zsnli.bench.side_by_side import parse_variant

    assert parse_variant("bf16:ZSNLI_DTYPE=bfloat16, ZSNLI_TOKEN_BUDGET=1024") == (
        "bf16", {"ZSNLI_DTYPE": "bfloat16", "ZSNLI_TOKEN_BUDGET": "1024"})
    for bad in ("bf16", ":ZSNLI_DTYPE=x", "default:ZSNLI_DTYPE=x", "a b:ZSNLI_DTYPE=x", "x:DTYPE=bf16",
                "x:ZSNLI_DTYPE", "x:"):
        with pytest.raises(ValueError):
            parse_variant(bad)


def test_server_process_reports_a_refused_start(tmp_path):
    from conftest import build_bert_nli
    from zsnli.harness.server import ServerError, start_server

    bad = build_bert_nli(tmp_path / "generic", id2label={0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    with pytest.raises(ServerError, match="entailment") as info:
        start_server(bad, {}, "auto", REPO, threads=1, health_timeout_s=120)
    log = Path(info.value.args[0].split("(log ")[1].split(")")[0])
    assert log.is_file()
    log.unlink()


# --------------------------------------------------------------------------- CLI checks (no servers)


def _compare_args(examples_file, *extra):
    from zsnli.bench.side_by_side import parse_args

    return parse_args(["--examples", str(examples_file), *extra])


def _refused(capsys, call) -> str:
    """Run ``call``; it must be an argparse error (exit 2). Returns the error line."""
    with pytest.raises(SystemExit) as info:
        call()
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "error:" in x]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("variant, needle", [
    ("x:ZSNLI_BACKEND=onnx", "ZSNLI_BACKEND must be one of"),
    ("x:ZSNLI_BACKEN=onnx-int8", "unknown setting ZSNLI_BACKEN (did you mean ZSNLI_BACKEND?)"),
    ("x:ZSNLI_FOO=1", "unknown setting ZSNLI_FOO (known: ZSNLI_BACKEND, "),
    ("x:ZSNLI_TOKEN_BUDGET=lots", "ZSNLI_TOKEN_BUDGET must be a number"),
    ("x:ZSNLI_MAX_LABELS=0", "ZSNLI_MAX_LABELS must be > 0"),
    ("x:ZSNLI_BACKEND=onnx-int8,ZSNLI_DTYPE=bfloat16", "fixes the precision"),
])
def test_compare_refuses_a_bad_variant_before_any_arm(examples_file, capsys, variant, needle):
    line = _refused(capsys, lambda: _compare_args(examples_file, "--variant", variant))
    assert needle in line and "--variant" in line


def test_compare_refuses_duplicate_variant_names(examples_file, capsys):
    line = _refused(capsys, lambda: _compare_args(examples_file, "--variant", "a:ZSNLI_DTYPE=bfloat16",
                                                  "--variant", "a:ZSNLI_TOKEN_BUDGET=64"))
    assert "duplicate" in line and " a" in line


def test_compare_accepts_good_variants(examples_file):
    args = _compare_args(examples_file, "--variant", "int8:ZSNLI_BACKEND=onnx-int8", "--variant",
                         "bf16:ZSNLI_DTYPE=bfloat16,ZSNLI_TOKEN_BUDGET=2048")
    assert args.variant == [("int8", {"ZSNLI_BACKEND": "onnx-int8"}),
                            ("bf16", {"ZSNLI_DTYPE": "bfloat16", "ZSNLI_TOKEN_BUDGET": "2048"})]


@pytest.mark.parametrize("option, value", [("--concurrency", "1,x"), ("--batch-sizes", "a"),
                                           ("--concurrency", "0"), ("--batch-sizes", "8,-1"),
                                           ("--concurrency", ",")])
def test_compare_refuses_bad_integer_lists(examples_file, capsys, option, value):
    line = _refused(capsys, lambda: _compare_args(examples_file, f"{option}={value}"))
    assert f"argument {option}" in line and "positive integer" in line


def test_compare_integer_lists_parse(examples_file):
    args = _compare_args(examples_file, "--concurrency", "1, 8", "--batch-sizes", "4")
    assert args.concurrency == [1, 8] and args.batch_sizes == [4]
    assert _compare_args(examples_file).concurrency == [1, 32]  # string defaults go through the same type


def test_compare_refuses_a_missing_examples_file(tmp_path, monkeypatch, capsys):
    from zsnli.harness.examples import DEV_EXAMPLES, SHARED_PUBLIC_EXAMPLES
    from zsnli.bench.side_by_side import parse_args

    monkeypatch.chdir(tmp_path)  # no ../shared and no dev/ here
    line = _refused(capsys, lambda: parse_args([]))
    assert SHARED_PUBLIC_EXAMPLES in line and DEV_EXAMPLES in line and "pass --examples" in line
    line = _refused(capsys, lambda: parse_args(["--examples", "nope.jsonl"]))
    assert "nope.jsonl" in line and "hub:btzsc" in line
    with pytest.raises(SystemExit) as info:
        parse_args(["--help"])
    assert info.value.code == 0
    assert f"default: {SHARED_PUBLIC_EXAMPLES}" in " ".join(capsys.readouterr().out.split())


def test_compare_defaults_to_the_dev_set_without_shared_data(tmp_path, monkeypatch, capsys):
    """A clone (no ../shared) gets the repository's dev set, said in one line."""
    from zsnli.harness.examples import DEV_EXAMPLES
    from zsnli.bench.side_by_side import parse_args

    (tmp_path / "dev").mkdir()
    (tmp_path / DEV_EXAMPLES).write_text(json.dumps(_DOCS[0]) + "\n")
    monkeypatch.chdir(tmp_path)
    assert parse_args([]).examples == DEV_EXAMPLES
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and DEV_EXAMPLES in err[0] and "--examples" in err[0]


def test_compare_reports_a_failing_variant_and_runs_the_others(tmp_path, examples_file, monkeypatch, capsys):
    """Servers and pipeline arms are faked: 'bad' refuses to start, 'flaky' loses its connection mid-arm,
    'good' runs; the report and table still come, the failures are recorded, the exit code is 1."""
    import httpx

    from zsnli.bench import side_by_side as compare
    from zsnli.harness.examples import load_examples
    from zsnli.harness.load import Answer, RunResult
    from zsnli.harness.server import ServerError

    def uniform(docs):
        return [[1 / len(d.labels)] * len(d.labels) for d in docs]

    def fake_pipeline_arm(model_dir, examples, docs, batch_size, mode, warmup, threads, workdir, progress):
        ds = load_examples(examples, limit=docs).examples
        return {"docs": len(ds), "pairs": sum(len(d.labels) for d in ds), "wall_s": 1.0,
                "latencies_s": [0.1] * len(ds), "peak_rss_bytes": 2**20, "hwm_bytes": 2**20,
                "probabilities": uniform(ds)}

    class FakeServer:
        def __init__(self, settings):
            self.settings, self.launcher, self.url, self.pid = settings, "fake", "http://fake", os.getpid()
            self.startup_s, self.health = 0.1, {"status": "ok"}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def stop(self):
            return 0

    def fake_start(model_dir, settings, launcher, repo_root, threads):
        if settings.get("ZSNLI_MAX_LABELS") == "7":
            raise ServerError("server exited with code 3 before /health answered 200 (log /tmp/x.log):\n"
                              "Traceback (most recent call last):\nzsnli.config.SettingsError: boom")
        return FakeServer(settings)

    def fake_load(url, docs, concurrency, warmups=0, progress=True, desc="", **kwargs):
        if desc.endswith(" flaky"):
            raise httpx.ConnectError("connection refused")
        return RunResult([Answer(p, None, 200, 0.05) for p in uniform(docs)], wall_s=0.5, timed_out=False)

    monkeypatch.setattr(compare, "run_pipeline_arm", fake_pipeline_arm)
    monkeypatch.setattr(compare, "start_server", fake_start)
    monkeypatch.setattr(compare, "run_requests", fake_load)
    monkeypatch.setattr(compare, "param_counts", lambda model_dir: ParamCounts(per_token=1000, per_pair=10,
                                                                               embedding=5))
    monkeypatch.setattr(compare, "pair_token_counts",
                        lambda model_dir, docs, max_length=None: [[10] * len(d.labels) for d in docs])
    monkeypatch.setattr(compare, "matmul_rate", lambda *a, **k: {"device": "cpu", "dtype": "float32", "n": 128,
                                                                 "threads": 1, "flops_per_s": 1e9})
    out = tmp_path / "report.json"
    code = compare.main(["--model-dir", str(tmp_path), "--examples", str(examples_file), "--docs", "3",
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


def _overload():
    from zsnli.bench import overload

    return overload


@pytest.mark.parametrize("argv, option", [
    (["--text-chars", "0"], "--text-chars"), (["--text-chars=-5"], "--text-chars"),
    (["--requests", "0"], "--requests"), (["--requests", "100001"], "--requests"),
    (["--concurrency", "0"], "--concurrency"), (["--labels", "0"], "--labels"), (["--labels", "x"], "--labels"),
    (["--url", "http://example.com:8000"], "--url"), (["--spawn-model-dir", "/no/such/dir"], "--spawn-model-dir"),
])
def test_overload_refuses_bad_arguments(capsys, argv, option):
    line = _refused(capsys, lambda: _overload().parse_args(argv))
    assert option in line


def test_overload_accepts_ones():
    args = _overload().parse_args(["--text-chars", "1", "--requests", "1", "--concurrency", "1", "--labels", "1"])
    assert (args.text_chars, args.requests, args.concurrency, args.labels) == (1, 1, 1, 1)
    assert _overload().parse_args([]).text_chars is None


@pytest.mark.parametrize("report, passed, needle", [
    ({"requests": 10, "status_200": 6, "status_503": 4, "statuses": {"200": 6, "503": 4}}, True, "PASS"),
    ({"requests": 10, "status_200": 6, "status_503": 2, "statuses": {"200": 6, "503": 2, "500": 2}}, False,
     "2 of 10 requests not answered 200/503 (other: {'500': 2}"),
    ({"requests": 10, "status_200": 6, "status_503": 4, "503_without_retry_after": 3}, False,
     "3 503 answers without Retry-After"),
    ({"requests": 10, "status_200": 7, "status_503": 0, "unfinished": 3, "statuses": {"200": 7}}, False,
     "unfinished: 3"),
])
def test_overload_verdict_says_why(report, passed, needle):
    ok, line = _overload().verdict(report)
    assert ok is passed and line.startswith("verdict: " + ("PASS" if passed else "FAIL")) and needle in line


def test_overload_main_prints_a_verdict_when_nothing_listens(capsys):
    from zsnli.harness.server import free_port

    code = _overload().main(["--url", f"http://127.0.0.1:{free_port()}", "--requests", "1", "--ready-timeout", "60"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and out[-1].startswith("verdict: FAIL: no server:") and "connection refused" in out[-1]
