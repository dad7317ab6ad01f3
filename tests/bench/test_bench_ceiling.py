"""zsnli.bench.ceiling: parameter counts, token counts per pair, FLOPs and the compute ceiling.
"""

from __future__ import annotations

import pytest

from zsnli.bench.ceiling import ParamCounts, compute_ceiling, pair_flops, pair_token_counts, param_counts
from zsnli.harness.examples import Example


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
    from zsnli.runtime.model import NliModel

    nli_model = NliModel.load(model_dir, device="cpu")
    docs = [Example("a", "d", "the team won " * 40, ("This text is about sport.", "about music"), 0),
            Example("b", "d", "short", ("about food",), 0)]
    counts = pair_token_counts(model_dir, docs)
    enc = nli_model.encode([docs[0].text] * 2 + ["short"], list(docs[0].labels) + ["about food"])
    assert counts == [[len(enc[0]), len(enc[1])], [len(enc[2])]]
    assert max(counts[0]) <= nli_model.max_length
