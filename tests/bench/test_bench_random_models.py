"""zsnli.bench.random_models: random-weight models built offline.
"""

from __future__ import annotations

import pytest


def test_random_model_uses_a_given_tokenizer_offline(tmp_path, bert_dir):
    from zsnli.bench.random_models import build_random_nli
    from zsnli.runtime.model import NliModel

    info = build_random_nli(tmp_path / "m", "deberta-tiny", tokenizer_from=bert_dir)
    assert info["random_weights"] and "tokenizer of" in info["tokenizer"]
    model = NliModel.load(info["model_dir"], device="cpu")
    assert model.model.config.model_type == "deberta-v2"
    assert not model.emits_token_type_ids
    logits = model.predict_logits(["the team won"], ["This text is about sport."])
    assert logits.shape == (1, 3)


def _wide_tokenizer(folder):
    """A fast WordLevel tokenizer of 3,000 tokens saved in ``folder`` (more than deberta-tiny's 2,000)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {name: i for i, name in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                                + [f"w{i}" for i in range(2995)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
    return folder


def test_a_named_tokenizer_is_used_even_when_wider_than_the_architecture(tmp_path, capsys):
    import json

    from zsnli.bench.random_models import main

    donor = _wide_tokenizer(tmp_path / "donor")
    assert main(["--arch", "deberta-tiny", "--out", str(tmp_path / "m"), "--tokenizer-from", str(donor)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert f"the tokenizer of {donor}" in info["tokenizer"] and "3000 tokens" in info["tokenizer"]
    assert json.loads((tmp_path / "m" / "config.json").read_text())["vocab_size"] == 3000


def test_each_mistake_is_one_line_exit_2(tmp_path, capsys):
    from zsnli.bench.random_models import main

    nli = tmp_path / "nli.jsonl"
    nli.write_text('{"premise": "a", "hypothesis": "b", "label": "entailment"}\n')
    (tmp_path / "no-tokenizer").mkdir()
    (tmp_path / "no-tokenizer" / "config.json").write_text("{}")
    for extra, needle in [(["--examples", str(nli)], "not an examples file"),
                          (["--examples", str(tmp_path / "none.jsonl")], "no such file"),
                          (["--tokenizer-from", str(tmp_path / "none")], "no such directory"),
                          (["--tokenizer-from", str(tmp_path / "no-tokenizer")], "no tokenizer files")]:
        assert main(["--arch", "deberta-tiny", "--out", str(tmp_path / "m"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "m").exists()


def test_the_help_says_the_whole_first_paragraph(capsys):
    import pytest

    from zsnli.bench.random_models import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "when no trained model of the wanted architecture is at hand." in out


def test_an_out_that_holds_a_model_is_refused_unless_forced(tmp_path, bert_dir, capsys):
    # The tester: --out model (the shipped model) was overwritten with random weights, exit 0.
    import json
    import shutil

    from zsnli.bench.random_models import main

    held = tmp_path / "held"
    shutil.copytree(bert_dir, held)
    before = {p.name: p.read_bytes() for p in held.iterdir() if p.is_file()}
    assert main(["--arch", "deberta-tiny", "--out", str(held)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {held} already holds" in err and "--force" in err, err
    assert {p.name: p.read_bytes() for p in held.iterdir() if p.is_file()} == before
    (tmp_path / "empty").mkdir()
    for fresh in (tmp_path / "empty", tmp_path / "new"):  # an empty or new folder needs no --force
        assert main(["--arch", "deberta-tiny", "--out", str(fresh)]) == 0
        assert (fresh / "config.json").is_file()
    capsys.readouterr()
    assert main(["--arch", "deberta-tiny", "--out", str(held), "--force"]) == 0
    assert json.loads((held / "config.json").read_text())["model_type"] == "deberta-v2"


def test_the_served_model_folder_is_refused_unless_forced(tmp_path, bert_dir, capsys, monkeypatch):
    import shutil

    from zsnli.bench.random_models import check_out, main
    from zsnli.runtime.embedding import REPO_MODEL_DIR

    for inside in (REPO_MODEL_DIR, REPO_MODEL_DIR / "base"):  # checked only: nothing is written there
        with pytest.raises(ValueError, match="is in the served model's folder"):
            check_out(inside)
    served = tmp_path / "served"
    monkeypatch.setenv("ZSNLI_MODEL_DIR", str(served))
    for out in (served, served / "base"):  # not there yet, or empty: still the served model's
        assert main(["--arch", "deberta-tiny", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is in the served model's folder" in err, err
        assert not out.exists()
    shutil.copytree(bert_dir, served)
    assert main(["--arch", "deberta-tiny", "--out", str(served), "--force"]) == 0


def test_a_file_as_out_is_said_to_be_a_file(tmp_path, capsys):
    from zsnli.bench.random_models import main

    out = tmp_path / "m.json"
    out.write_text("{}")
    for extra in ([], ["--force"]):
        assert main(["--arch", "deberta-tiny", "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out {out} is a file, not a folder" in err, err
    assert out.read_text() == "{}"


def test_the_examples_hint_names_every_required_field_and_the_note_names_the_file(tmp_path, capsys, monkeypatch):
    import json

    from zsnli.bench import random_models
    from zsnli.harness.examples import load_examples

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "a", "labels": ["x", "y"]}\n')  # what the old hint asked for
    assert random_models.main(["--arch", "deberta-tiny", "--out", str(tmp_path / "m"), "--examples", str(bad)]) == 2
    err = capsys.readouterr().err
    assert '{"id", "dataset", "text", "labels", "label"}' in err and "../shared" not in err, err
    good = tmp_path / "mine.jsonl"
    good.write_text(json.dumps({"id": 1, "dataset": "d", "text": "a b c", "labels": ["x", "y"], "label": 0}) + "\n")
    load_examples(good)  # the hint's fields are what the loader accepts
    monkeypatch.setattr(random_models, "DEBERTA_V3_TOKENIZER_IDS", ())  # no cached deberta-v3: the trained one
    assert random_models.main(["--arch", "deberta-tiny", "--out", str(tmp_path / "m"), "--examples", str(good)]) == 0
    note = json.loads(capsys.readouterr().out)["tokenizer"]
    assert f"trained offline on the texts and labels of {good}" in note and "benchmark" not in note


def test_the_help_documents_arch_and_out(capsys):
    from zsnli.bench.random_models import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: deberta-v3-base)" in out and "184M parameters" in out and "deberta-tiny" in out
    assert "--out DIR the folder the model is written into" in out and "--force" in out


def test_the_184m_of_the_help_is_the_default_architectures_count():
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    from zsnli.bench.random_models import ARCHS, NLI_ID2LABEL

    with torch.device("meta"):  # shapes only: nothing is allocated
        model = DebertaV2ForSequenceClassification(DebertaV2Config(**ARCHS["deberta-v3-base"], id2label=NLI_ID2LABEL))
    assert round(sum(p.numel() for p in model.parameters()) / 1e6) == 184
