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


def test_cpu_info_names_model_and_the_precision_flags(tmp_path):
    from zsnli.bench.ceiling import cpu_info, cpu_line, cpu_tag

    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nmodel name\t: Example CPU 9000\nflags\t\t: fpu sse2 avx avx2 fma avx512f "
                    "avx512_bf16 avx512_vnni amx_tile amx_int8\n\nprocessor\t: 1\nmodel name\t: Example CPU 9000\n")
    info = cpu_info(fake)
    assert info["model"] == "Example CPU 9000"
    assert info["flags"] == ["amx_int8", "amx_tile", "avx2", "avx512_bf16", "avx512_vnni", "avx512f", "fma"]
    assert info["native_bf16"] and info["native_int8_dot"]
    assert "avx2 avx512f avx512_bf16 avx512_vnni amx_tile amx_int8" in cpu_tag(info) and "no amx" not in cpu_tag(info)
    fake.write_text("model name\t: Old CPU\nflags\t\t: sse2 avx avx2 fma\n")
    old = cpu_info(fake)
    assert not old["native_bf16"] and not old["native_int8_dot"] and cpu_tag(old).endswith("avx2, no amx")
    assert "Old CPU" in cpu_line(old) and "(no amx)" in cpu_line(old)
    gone = cpu_info(tmp_path / "missing")
    assert gone["flags"] == [] and gone["model"] and "unavailable" in gone["source"]


def test_combined_ceiling_adds_the_parts():
    from zsnli.bench.ceiling import combined_ceiling

    nli, emb = ParamCounts(1000, 10, 0), ParamCounts(500, 0, 0)
    c = combined_ceiling({"nli": ([[5, 7], [6]], nli), "embedding": ([[4, 2, 2], [3, 2]], emb)}, 1e6)
    nli_flops = sum(pair_flops(n, nli) for n in (5, 7, 6))
    emb_flops = sum(pair_flops(n, emb) for n in (4, 2, 2, 3, 2))
    assert c["total_flops"] == nli_flops + emb_flops and c["docs"] == 2
    assert c["ceiling_docs_per_s"] == pytest.approx(1e6 / ((nli_flops + emb_flops) / 2))
    assert c["parts"]["embedding"] == {"sequences": 5, "tokens": 13, "flops": emb_flops,
                                       "share": pytest.approx(emb_flops / (nli_flops + emb_flops))}
    with pytest.raises(ValueError, match="different numbers of documents"):
        combined_ceiling({"nli": ([[5]], nli), "embedding": ([[4], [2]], emb)}, 1e6)


def test_embedding_and_content_free_token_counts_match_the_server(bert_dir):
    from zsnli.bench.ceiling import embedding_token_counts
    from zsnli.runtime.embedding import SentenceEncoder
    from zsnli.runtime.model import NliModel

    docs = [Example("a", "d", "the team won " * 40, ("about sport", "about music", "about sport"), 0),
            Example("b", "d", "short", ("about food",), 0)]
    enc = SentenceEncoder(bert_dir)
    expected = [[len(e) for e in enc.tokenize([d.text, *dict.fromkeys(d.labels)])] for d in docs]
    assert embedding_token_counts(bert_dir, docs) == expected and expected[0][0] == enc.max_length
    nli = NliModel.load(bert_dir, device="cpu")
    cf = pair_token_counts(bert_dir, docs, premise="N/A", distinct=True)
    assert cf == [[len(e) for e in nli.encode(["N/A"] * 2, ["about sport", "about music"])], [len(nli.encode(["N/A"], ["about food"])[0])]]
    assert [len(row) for row in pair_token_counts(bert_dir, docs, distinct=True)] == [2, 1]


def test_the_cascade_keeps_the_shortest_pairs_of_documents_with_enough_labels():
    from zsnli.bench.ceiling import cascade_token_counts

    assert cascade_token_counts([[9, 3, 7, 5], [4, 8]], min_labels=3, keep=2) == [[3, 5], [4, 8]]


def test_kept_label_embeddings_count_each_label_at_its_first_document_only():
    from zsnli.bench.ceiling import first_use_token_counts
    from zsnli.harness.examples import Example

    docs = [Example(0, "d", "a", ("x", "y", "x"), 0), Example(1, "d", "b", ("y", "z"), 0)]
    assert first_use_token_counts([[10, 2, 3], [11, 3, 4]], docs) == [[10, 2, 3], [11, 4]]
