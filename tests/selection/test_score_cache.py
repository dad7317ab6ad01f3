"""The score cache with the tiny NLI fixture (and a tiny encoder as the embedding model)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from test_devsets_negation import write_zsc
from zsnli.selection import score_cache
from zsnli.selection.premise_windows import PremiseWindows
from zsnli.selection.devsets import read_examples, read_zsc_dev
from zsnli.runtime.embedding import SentenceEncoder
from zsnli.runtime.model import NliModel


@pytest.fixture(scope="module")
def tiny_model_dir(bert_dir, tmp_path_factory):
    """The tiny BERT NLI model with a copy of itself as ``embedding/`` (so the real MiniLM is never loaded)."""
    root = tmp_path_factory.mktemp("withemb") / "model"
    shutil.copytree(bert_dir, root)
    shutil.copytree(bert_dir, root / "embedding")
    return root


def _jobs(tmp_path):
    data = tmp_path / "zsc"
    data.mkdir()
    write_zsc(data, "toy", n=24)
    ex = tmp_path / "ex.jsonl"
    ex.write_text("\n".join(json.dumps({"id": i, "dataset": "d", "text": f"the match {i}", "labels": ["sport", "business", "music"],
                                        "label": i % 3}) for i in range(6)))
    return [("zsc-dev", read_zsc_dev(data, "toy"))] + [("dev", ds) for ds in read_examples(ex).values()]


def test_fill_cache_holds_the_servers_logits_and_cosines(tmp_path, tiny_model_dir):
    jobs = _jobs(tmp_path)
    out = score_cache.fill_cache(jobs, tmp_path / "cache", tiny_model_dir, max_rows=12, max_rows_for={}, seed=0)
    assert set(out) == {"zsc-dev/toy", "dev/d"}
    toy = out["zsc-dev/toy"]
    assert len(toy) == 12 and toy.k.tolist() == [2] * 12 and np.bincount(toy.gold).tolist() == [9, 3]
    nli = NliModel.load(tiny_model_dir, device="cpu")
    full = jobs[0][1]
    rows = toy.meta["key"]["max_rows"], toy.meta["n_rows"]
    assert rows == (12, 12)
    sub = score_cache.stratified_subsample(full, 12, 0)
    expect = nli.predict_logits([t for t in sub.texts for _ in range(2)], [h for r in sub.hypotheses for h in r])
    np.testing.assert_allclose(toy.logits, expect, atol=1e-5)
    cf = nli.predict_logits(["N/A", "N/A"], full.hypotheses[0])
    np.testing.assert_allclose(toy.cf_logits[:2], cf, atol=1e-5)
    enc = SentenceEncoder(tiny_model_dir / "embedding")
    np.testing.assert_allclose(toy.cosine[:2], enc.cosine(sub.texts[0], sub.hypotheses[0]), atol=1e-5)
    d = out["dev/d"]
    assert d.k.tolist() == [3] * 6 and d.hypotheses == ["sport", "business", "music"]


def test_fill_cache_resumes_and_recomputes_on_key_change(tmp_path, tiny_model_dir, monkeypatch):
    jobs = _jobs(tmp_path)
    score_cache.fill_cache(jobs, tmp_path / "cache", tiny_model_dir, max_rows=12, max_rows_for={})
    calls = []
    real = score_cache.compute_set
    monkeypatch.setattr(score_cache, "compute_set", lambda ds, nli, enc, windows=None: calls.append(ds.name) or real(ds, nli, enc, windows))
    score_cache.fill_cache(jobs, tmp_path / "cache", tiny_model_dir, max_rows=12, max_rows_for={})
    assert calls == []
    (tmp_path / "cache" / "dev__d.npz").unlink()
    score_cache.fill_cache(jobs, tmp_path / "cache", tiny_model_dir, max_rows=12, max_rows_for={})
    assert calls == ["d"]
    out = score_cache.fill_cache(jobs, tmp_path / "cache", tiny_model_dir, max_rows=12, max_rows_for={"toy": 8})
    assert calls == ["d", "toy"] and len(out["zsc-dev/toy"]) == 8


def test_cli_mistakes_exit_2_with_one_line(tmp_path, capsys, tiny_model_dir):
    """Every flag mistake is one line, exit 2, before any model loads: before, --model-dir said "no config.json" in
    its own words (and took a sentence encoder's folder), --device cuda without a GPU failed once torch had loaded
    the model, a misspelt --only name or a spare --examples-group cached fewer sets than asked with exit 0, and --out
    as a file failed at the first write."""
    import torch

    ex = tmp_path / "ex.jsonl"
    ex.write_text(json.dumps({"id": 1, "dataset": "d", "text": "t", "labels": ["a", "b"], "label": 0}) + "\n")
    a_file, model, examples = tmp_path / "f.txt", ["--model-dir", str(tiny_model_dir)], ["--examples", str(ex)]
    a_file.write_text("x")
    cases = [
        (["--zsc-dev-dir", str(tmp_path / "nope")], f"--zsc-dev-dir {tmp_path / 'nope'}: no such directory; give "),
        (["--examples", str(tmp_path)], f"--examples {tmp_path}: a directory, not a file; "),
        (["--max-rows-for", "x=0", *examples, *model], "--max-rows-for"),
        (["--max-rows-for", "dd=3", *examples, *model], "--max-rows-for dd=3: no set named 'dd' was read (sets: d)"),
        ([*examples, "--model-dir", str(tmp_path)], f"--model-dir {tmp_path}: not a model directory (no config.json)"),
        ([*examples, *model, "--out", str(a_file)], f"--out {a_file}: a file, not a directory; "),
        ([*examples, *model, "--only", "dd"], "--only dd: no set named 'dd' was read (sets: d)"),
        ([*examples, *model, "--examples-group", "a", "--examples-group", "b"],
         "--examples-group given 2 times for 1 --examples file(s)"),
        ([*examples, *model, "--device", "gpu"], "--device must be cpu, cuda or cuda:N"),
    ]
    if not torch.cuda.is_available():
        cases.append(([*examples, *model, "--device", "cuda"], "--device cuda but CUDA is not available ("))
    for argv, says in cases:
        assert score_cache.main([*argv, "--out", str(tmp_path / "cache")] if "--out" not in argv else argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("python -m zsnli.selection.score_cache: error: "), (argv, err)
        assert says in err[0], (argv, err)
    assert not (tmp_path / "cache").exists()


def test_another_runtime_needs_its_digest_in_the_key(tmp_path):
    from zsnli.selection.score_cache import fill_cache

    with pytest.raises(ValueError, match="go together"):
        fill_cache([], tmp_path, tmp_path, runtime=lambda: None)
    with pytest.raises(ValueError, match="go together"):
        fill_cache([], tmp_path, tmp_path, runtime_digest="0" * 64)


def test_non_finite_logits_are_refused_naming_the_set(tmp_path):
    """A model that gives NaN never reaches a fit (calibrate or select): one ValueError naming the data set."""
    from zsnli.selection.devsets import DevSet

    class NanModel:
        entail_idx, contra_idx = 0, 2

        def predict_logits(self, premises, hypotheses, token_budget=None, on_plan=None):
            out = np.zeros((len(premises), 3), dtype=np.float32)
            out[-1, 0] = np.nan
            return out

    ds = DevSet(name="toy", task_kind="", texts=["a", "b"], hypotheses=[["x", "y"], ["x", "y"]],
                gold=np.array([0, 1]), label_classes=[np.arange(2), np.arange(2)], classes=["x", "y"],
                row_ids=np.arange(2))
    with pytest.raises(ValueError, match="toy: the model gave non-finite"):
        score_cache.score_in_memory(ds, "g", NanModel(), None)


def test_another_encoder_gets_new_cosines_and_keeps_the_nli_logits(tmp_path, tiny_model_dir, monkeypatch):
    from conftest import build_bert_nli
    from zsnli.runtime.embedding import embedding_digest

    jobs = _jobs(tmp_path)
    first = score_cache.fill_cache(jobs, tmp_path / "cache", tiny_model_dir, max_rows=12, max_rows_for={})
    other = build_bert_nli(tmp_path / "other", seed=5)

    def no_nli(*args, **kwargs):
        raise AssertionError("the NLI model must not be loaded when only the encoder changed")

    monkeypatch.setattr(score_cache, "_load_nli", no_nli)
    second = score_cache.fill_cache(jobs, tmp_path / "cache", tiny_model_dir, max_rows=12, max_rows_for={},
                                    embedding_dir=other)
    enc = SentenceEncoder(other)
    sub = score_cache.stratified_subsample(jobs[0][1], 12, 0)
    for name in first:
        a, b = first[name], second[name]
        np.testing.assert_array_equal(a.logits, b.logits)
        np.testing.assert_array_equal(a.cf_logits, b.cf_logits)
        assert b.meta["key"]["embedding_digest"] == embedding_digest(other) != a.meta["key"]["embedding_digest"]
        assert not np.allclose(a.cosine, b.cosine)
    toy = second["zsc-dev/toy"]
    np.testing.assert_allclose(toy.cosine[:2], enc.cosine(sub.texts[0], sub.hypotheses[0]), atol=1e-5)
    # and back: the first encoder's cosines again, still without the NLI model
    again = score_cache.fill_cache(jobs, tmp_path / "cache", tiny_model_dir, max_rows=12, max_rows_for={})
    np.testing.assert_allclose(again["zsc-dev/toy"].cosine, first["zsc-dev/toy"].cosine, atol=1e-6)


def _long_jobs(tmp_path):
    """One set whose documents run to about 60 words, and one of 2-3 word documents."""
    ex = tmp_path / "long.jsonl"
    words = "the match went on and the crowd sang while the players ran across the wet field".split()
    rows = [{"id": i, "dataset": "long", "text": " ".join(words[(i + j) % len(words)] for j in range(60)),
             "labels": ["sport", "music"], "label": i % 2} for i in range(4)]
    rows += [{"id": 10 + i, "dataset": "short", "text": f"match {i}", "labels": ["sport", "music"], "label": i % 2}
             for i in range(4)]
    ex.write_text("\n".join(json.dumps(r) for r in rows))
    return [("dev", ds) for ds in read_examples(ex).values()]


def test_premise_windows_score_each_window_and_fold_them_by_the_rule(tmp_path, tiny_model_dir):
    from zsnli.scoring import aggregate_window_logits

    jobs = _long_jobs(tmp_path)
    spec = PremiseWindows.parse("24:0.5:max")
    out = score_cache.fill_cache(jobs, tmp_path / "cache", tiny_model_dir, max_rows=8, max_rows_for={}, windows=spec)
    nli = NliModel.load(tiny_model_dir, device="cpu")
    long, short = out["dev/long"], out["dev/short"]
    assert long.meta["key"]["premise_windows"] == "24:0.5:max" and "premise_windows" not in short.meta["key"]
    ds = [d for _, d in jobs if d.name == "long"][0]
    sub = score_cache.stratified_subsample(ds, 8, 0)
    text, hyps = sub.texts[0], sub.hypotheses[0]
    width = nli.premise_width(hyps, 24)
    windows = nli.premise_windows(text, width, 0.5, 2048)
    assert len(windows) > 2 and all(w in text for w in windows) and windows[0] == text[: len(windows[0])]
    assert all(len(nli.encode([w], [h])[0]) <= 24 for w in windows for h in hyps)
    raw = nli.predict_logits([w for _ in hyps for w in windows], [h for h in hyps for _ in windows])
    expect = aggregate_window_logits(raw, np.repeat(np.arange(len(hyps)), len(windows)), len(hyps), "max", nli.entail_idx)
    np.testing.assert_allclose(long.logits[: len(hyps)], expect, atol=1e-5)
    with np.load(tmp_path / "cache" / "dev__long.npz") as arrays:
        assert int(arrays["window_pairs"]) > long.k.sum()
    # the short set is the uncut entry: a second fill without windows scores nothing
    uncut = score_cache.fill_cache([j for j in jobs if j[1].name == "short"], tmp_path / "cache", tiny_model_dir,
                                   max_rows=8, max_rows_for={})
    np.testing.assert_allclose(uncut["dev/short"].logits, short.logits)


def test_a_premise_within_the_width_is_one_window_the_premise_itself(tiny_model_dir):
    nli = NliModel.load(tiny_model_dir, device="cpu")
    assert nli.premise_windows("the match", 8, 0.5, 2048) == ["the match"]
    with pytest.raises(ValueError, match="overlap"):
        nli.premise_windows("the match", 8, 1.0, 2048)


@pytest.mark.parametrize("text", ["128", "128:0.5", "128:x:max", "128:0.5:median", "4:0.5:max", "128:1:max",
                                  "128:0.5:max:1"])
def test_premise_windows_spec_mistakes_name_the_text(text):
    with pytest.raises(ValueError, match="premise-windows"):
        PremiseWindows.parse(text)


def test_a_window_too_small_for_a_hypothesis_is_one_line_from_select(tmp_path, tiny_model_dir, capsys):
    from test_devsets_negation import write_zsc
    from zsnli.selection import cli

    data = tmp_path / "zsc"
    data.mkdir()
    write_zsc(data, "toy", n=8)
    dev = tmp_path / "dev.jsonl"
    dev.write_text(json.dumps({"id": 0, "dataset": "d", "text": "x", "labels": ["a", "b"], "label": 0}) + "\n")
    code = cli.main(["--zsc-dev-dir", str(data), "--dev-examples", str(dev), "--model-dir", str(tiny_model_dir),
                     "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "c.json"),
                     "--data-sources", str(tmp_path / "ds.json"), "--premise-windows", "8:0.5:max"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("train.py select: error")]
    assert code == 2 and "Traceback" not in err and len(errors) == 1  # (the model's loading bar is on stderr too)
    assert "--premise-windows 8:0.5:max" in errors[0] and "larger WINDOW" in errors[0]
