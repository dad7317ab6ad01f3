"""zsnli.bench.random_models: random-weight models built offline.
"""

from __future__ import annotations


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
