"""zsnli.serving.service without HTTP: start-up, the four classify steps, classify_many across documents, """

from __future__ import annotations

import numpy as np
import pytest
from conftest import cached_loader, direct_probabilities, make_settings

from zsnli.errors import ApiError, ErrorType
from zsnli.serving.service import ZeroShotClassifier, clean_text, fill_template

pytestmark = pytest.mark.anyio

TEXT = "The team won the match after a late goal, and the league title is theirs this season."
LABELS = ["sport", "business", "science", "sport"]
TEMPLATE = "This text is about {}."


async def started(model_dir, **overrides) -> ZeroShotClassifier:
    service = ZeroShotClassifier(make_settings(model_dir, **overrides), cached_loader, shutdown_hook=lambda: None)
    await service.start()
    await service.wait_ready(timeout=60)
    return service


async def test_classify_in_process(model_dir):
    service = await started(model_dir)
    try:
        probs = await service.classify(TEXT, LABELS, TEMPLATE)
        np.testing.assert_allclose(probs, direct_probabilities(service.state.model, TEXT, LABELS, TEMPLATE), atol=1e-6)
        assert probs[0] == probs[3] and abs(sum(probs) - 1) < 1e-9  # duplicates kept, in order
        multi = await service.classify(TEXT, LABELS, TEMPLATE, multi_label=True)
        assert len(multi) == 4 and all(0 <= p <= 1 for p in multi)
    finally:
        await service.stop()


async def test_label_that_does_not_fit_is_a_typed_error_naming_it(bert_dir):
    service = await started(bert_dir)
    try:
        with pytest.raises(ApiError) as info:
            await service.classify(TEXT, ["sport", "sport " * 100])
        assert (info.value.error_type, info.value.field) == (ErrorType.LABEL_TOO_LONG, "labels[1]")
        with pytest.raises(ApiError) as info:
            await service.classify(TEXT, ["sport", "\u200b"])
        assert (info.value.error_type, info.value.field) == (ErrorType.VALIDATION, "labels[1]")
        with pytest.raises(ApiError) as info:
            await service.classify(TEXT, ["a"] * 300)
        assert (info.value.error_type, info.value.field) == (ErrorType.VALIDATION, "labels")
        assert service.state.batcher.admitted_pairs == 0  # nothing left admitted by the refusals
    finally:
        await service.stop()


async def test_classify_many_batches_across_documents(bert_dir):
    service = await started(bert_dir, max_batch_wait_ms=50.0)
    try:
        docs = [{"text": f"{TEXT} {i}", "labels": LABELS[:3], "hypothesis_template": TEMPLATE} for i in range(12)]
        docs.append({"text": TEXT, "candidate_labels": ["sport", "sport " * 100]})
        before = service.state.batcher.stats.batches
        out = await service.classify_many(docs)
        forwards = service.state.batcher.stats.batches - before
        assert forwards < 12  # pairs of several documents share a forward
        for doc, probs in zip(docs[:12], out[:12]):
            np.testing.assert_allclose(probs, direct_probabilities(service.state.model, doc["text"], doc["labels"], TEMPLATE),
                                       atol=1e-5)
        assert isinstance(out[12], ApiError) and out[12].field == "labels[1]"
    finally:
        await service.stop()


async def test_not_ready_is_a_503_error(bert_dir):
    service = ZeroShotClassifier(make_settings(bert_dir), cached_loader, shutdown_hook=lambda: None)
    with pytest.raises(ApiError) as info:
        await service.classify(TEXT, LABELS)
    assert info.value.error_type is ErrorType.LOADING and info.value.headers(1) == {"Retry-After": "1"}


def test_clean_text_and_template():
    assert clean_text("a\ud800b") == "a\ufffdb" and clean_text("plain") == "plain"
    assert fill_template("About {}.", "{} x") == "About {} x." and fill_template(None, "x") == "x"


async def test_cosine_term_batched_across_requests_equals_each_request_alone(tmp_path, bert_dir, deberta_dir):
    """Issue 24: the texts and labels of concurrent requests are embedded together, in batches of their
    own kind; every answer equals the request run alone and the unbatched cosine within 1e-5."""
    from conftest import corpus_documents, write_calibration

    from zsnli.runtime.embedding import embedding_digest
    from zsnli.runtime.model import pad_to
    from zsnli.serving.service import LABEL_KIND, TEXT_KIND

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment_minus_contradiction", temperature=0.8,
                              k_exponent=0.1, embedding_weight=4.0, embedding_sha256=embedding_digest(bert_dir))
    docs = corpus_documents(30)  # 2-6 labels drawn from one pool, templates, duplicates, multi-label rows
    single = [d for d in docs if not d.get("multi_label")]
    service = await started(deberta_dir, calibration_path=str(calib), embedding_dir=str(bert_dir),
                            max_batch_wait_ms=50.0)
    try:
        st = service.state
        records = []
        service.batch_observers.append(records.append)
        together = await service.classify_many(docs)
        batched = list(records)
        alone = [(await service.classify_many([d]))[0] for d in docs]
        spread = 0.0
        for doc, got, ref in zip(docs, together, alone):
            assert np.abs(np.array(got) - np.array(ref)).max() <= 1e-5, doc["id"]
            if doc.get("multi_label"):
                continue
            # the unbatched reference: SentenceEncoder.cosine and one pair per forward, same scoring code
            prep = service.preprocess(doc["text"], doc["labels"], doc.get("hypothesis_template"), False)
            cos = st.encoder.cosine(prep.text, prep.unique)
            logits = np.stack([st.model.logits(st.model.encode([prep.text], [h]))[0] for h in prep.unique])
            expected = service.postprocess(prep, logits, cos)
            assert np.abs(np.array(got) - np.array(expected)).max() <= 1e-5, doc["id"]
            spread = max(spread, float(np.ptp(cos)))
        assert spread > 1e-3  # the cosine term moves the scores, so the checks above can fail
    finally:
        await service.stop()
    texts = [r for r in batched if r.kind == TEXT_KIND]
    labels = [r for r in batched if r.kind == LABEL_KIND]
    assert sum(r.pairs for r in texts) == len(single) and len(texts) < len(single)  # batched across requests
    assert sum(r.pairs - r.rows for r in labels) > 0  # a label sent by several requests is embedded once a batch
    # labels are never padded to a text's length: a label batch is as wide as its longest label
    longest_label = max(len(e) for e in st.encoder.tokenize(
        [h for d in single for h in service.preprocess(d["text"], d["labels"], d.get("hypothesis_template"), False).unique]))
    assert all(r.padded_tokens <= r.rows * pad_to(longest_label) for r in labels)
    assert max(r.padded_tokens // r.rows for r in texts) > pad_to(longest_label)  # (texts are longer here)


async def cosine_term_answers(tmp_path, bert_dir, deberta_dir, docs, **settings):
    """``classify_many(docs)`` on the deberta model served with an entailment + cosine calibration (the bert
    model as its sentence encoder) under ``settings``. Returns the answers, the stopped service's batcher
    (its settings and stats) and the forwards ``classify_many`` took (warm-up left out)."""
    from conftest import write_calibration

    from zsnli.runtime.embedding import embedding_digest

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment", embedding_weight=4.0,
                              embedding_sha256=embedding_digest(bert_dir))
    service = await started(deberta_dir, calibration_path=str(calib), embedding_dir=str(bert_dir),
                            max_batch_wait_ms=50.0, **settings)
    try:
        batcher = service.state.batcher
        before = batcher.stats.batches
        answers = await service.classify_many(docs)
        return answers, batcher, batcher.stats.batches - before
    finally:
        await service.stop()


async def test_sharing_identical_rows_off_gives_the_same_answers(tmp_path, bert_dir, deberta_dir):
    from conftest import corpus_documents

    docs = corpus_documents(12)
    answers = []
    for share in (True, False):
        out, batcher, _ = await cosine_term_answers(tmp_path, bert_dir, deberta_dir, docs, share_identical_rows=share)
        answers.append(out)
        assert (batcher.stats.shared_items > 0) is share
    for with_sharing, without in zip(*answers):
        assert np.abs(np.array(with_sharing) - np.array(without)).max() <= 1e-5


async def test_the_padding_bound_changes_batches_not_answers(tmp_path, bert_dir, deberta_dir):
    """ZSNLI_MAX_PADDING reaches the batcher; 0 (only equal widths share a batch) and 1 (no bound) answer alike."""
    from conftest import corpus_documents

    docs = corpus_documents(12)
    answers, batches = [], []
    for bound in (0.0, 1.0):
        out, batcher, forwards = await cosine_term_answers(tmp_path, bert_dir, deberta_dir, docs, max_padding=bound)
        assert batcher.max_padding == bound
        answers.append(out)
        batches.append(forwards)
    assert batches[0] > batches[1]  # the bound split batches
    for bounded, unbounded in zip(*answers):
        assert np.abs(np.array(bounded) - np.array(unbounded)).max() <= 1e-5


GROUPED = dict(rule="entailment", temperature=1.3, k_exponent=-0.2, embedding_weight=4.0,
               groups={"binary": {"rule": "entailment_logprob", "temperature": 0.8},
                       "many": {"rule": "entailment", "temperature": 2.0, "k_exponent": -0.1, "embedding_weight": 6.0}},
               calibrator={"features": ["bias", "log_k", "margin", "log_tokens"], "coefficients": [0.2, -0.1, 0.5, 0.05]},
               cascade={"min_labels": 6, "keep": 3})
MANY = [f"topic number {i}" for i in range(8)]


def expected_answer(service, scoring, text, labels, template=None, cascade=True):
    """The served scoring computed by hand: one pair per forward, cosines from the encoder, then the
    cascade's choice and `RequestScoring.probabilities` (what the server must answer)."""
    from zsnli.request_scoring import cascade_scores, request_group
    from zsnli.scoring import scores_from_logits

    model, encoder = service.state.model, service.state.encoder
    hyps = [fill_template(template, lb) for lb in labels]
    config = scoring.config_for(request_group(hyps))
    cos = encoder.cosine(text, hyps) if config.embedding_weight else None
    kept = np.arange(len(hyps))
    if cascade and scoring.cascade is not None and cos is not None and scoring.cascade.applies(len(hyps)):
        kept = scoring.cascade.kept(cos)
    logits = np.stack([model.logits(model.encode([text], [hyps[j]]))[0] for j in kept])
    nli = cascade_scores(scores_from_logits(logits, config.rule, model.entail_idx, model.contra_idx), kept, len(hyps))
    return scoring.probabilities(nli, hyps, cos, None, model.premise_tokens([text])[0])


async def test_groups_calibrator_and_cascade_are_served_as_calibration_json_says(tmp_path, bert_dir, deberta_dir):
    from conftest import write_calibration

    from zsnli.request_scoring import RequestScoring
    from zsnli.runtime.embedding import embedding_digest

    chosen = {**GROUPED, "embedding_sha256": embedding_digest(bert_dir)}
    chosen["groups"]["many"]["embedding_sha256"] = chosen["embedding_sha256"]
    calib = write_calibration(tmp_path / "calibration.json", **chosen)
    scoring = RequestScoring.from_chosen(chosen)
    service = await started(deberta_dir, calibration_path=str(calib), embedding_dir=str(bert_dir))
    try:
        health = service.health()[1]["scoring"]
        assert health["cascade"] == {"min_labels": 6, "keep": 3}
        assert health["calibrator"]["features"] == ["bias", "log_k", "margin", "log_tokens"]
        cases = [(TEXT, ["good", "bad"], "This review is {}."), (TEXT, ["sport", "business", "science"], TEMPLATE),
                 (TEXT, ["spam", "not spam"], "This message is {}."), (TEXT, MANY, None)]
        for text, labels, template in cases:
            got = await service.classify(text, labels, template)
            np.testing.assert_allclose(got, expected_answer(service, scoring, text, labels, template), atol=2e-6)
        exact = await service.classify(TEXT, MANY, cascade=False)
        np.testing.assert_allclose(exact, expected_answer(service, scoring, TEXT, MANY, cascade=False), atol=2e-6)
        assert not np.allclose(exact, await service.classify(TEXT, MANY), atol=1e-4)  # the cascade changed it
    finally:
        await service.stop()


async def test_a_cascaded_request_reserves_and_sends_only_its_kept_pairs(tmp_path, bert_dir, deberta_dir):
    from conftest import write_calibration

    from zsnli.runtime.embedding import embedding_digest

    chosen = {**GROUPED, "embedding_sha256": embedding_digest(bert_dir)}
    chosen["groups"] = {}
    calib = write_calibration(tmp_path / "calibration.json", **chosen)
    service = await started(deberta_dir, calibration_path=str(calib), embedding_dir=str(bert_dir))
    try:
        prep = service.preprocess(TEXT, MANY, None, False)
        assert prep.cascade is not None and prep.n_pairs == 3
        assert service.preprocess(TEXT, MANY, None, False, cascade=False).n_pairs == len(MANY)
        assert service.preprocess(TEXT, MANY[:5], None, False).cascade is None  # K < min_labels
        assert service.preprocess(TEXT, MANY, None, True).cascade is None  # multi-label: never pruned
        sent = []
        real = service.state.batcher.submit

        def spy(items, *args, **kwargs):
            sent.append((kwargs.get("kind", "nli"), len(items)))
            return real(items, *args, **kwargs)

        service.state.batcher.submit = spy
        await service.classify(TEXT, MANY)
        assert [n for kind, n in sent if kind == "nli"] == [3]
    finally:
        await service.stop()


async def test_cascaded_answers_do_not_depend_on_the_batch(tmp_path, bert_dir, deberta_dir):
    from conftest import corpus_documents, write_calibration

    from zsnli.runtime.embedding import embedding_digest

    chosen = {**GROUPED, "embedding_sha256": embedding_digest(bert_dir), "groups": {}}
    calib = write_calibration(tmp_path / "calibration.json", **chosen)
    service = await started(deberta_dir, calibration_path=str(calib), embedding_dir=str(bert_dir),
                            max_batch_wait_ms=50.0)
    try:
        docs = [{"text": d["text"], "labels": MANY} for d in corpus_documents(8)]
        together = await service.classify_many(docs)
        for doc, answer in zip(docs, together):
            alone = await service.classify(doc["text"], doc["labels"])
            assert np.abs(np.array(answer) - np.array(alone)).max() <= 1e-6
    finally:
        await service.stop()
