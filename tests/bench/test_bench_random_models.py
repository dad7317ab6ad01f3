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
