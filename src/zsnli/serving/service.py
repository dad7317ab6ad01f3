"""The zero-shot classification service, usable with or without HTTP: `ZeroShotClassifier`.

Its life (start-up, ``/health``, admission, the drain, stop) is `zsnli.serving.lifecycle.ServiceLifecycle`;
here is its request pipeline, ``classify`` as four steps:

1. ``preprocess``: clean the text (lone surrogates: `zsnli.serving.text.clean_text`, the rule the HTTP
   body reader applies to every request; ``ZSNLI_MAX_TEXT_CHARS``), NFKC the labels
   (`zsnli.serving.text.normalize_label`),
   fill the template, drop duplicate hypotheses, refuse what cannot fit;
2. `zsnli.serving.document.tokenize` (tokeniser thread): raise ``ApiError`` naming ``labels[i]``
   for a label with no tokens, only ``[UNK]`` tokens, or too long for the window, else encode the
   pairs and, when the scoring has a cosine term, the text and the distinct
   hypotheses for the sentence encoder;
3. ``_forward``: admitted against the queue capacity, the pairs go to the
   batcher, and so do the text and hypotheses to embed (kinds `TEXT_KIND` and
   `LABEL_KIND`: batched with other requests' texts and labels, texts and
   labels never padded to each other); wait with the request timeout, the
   client's disconnect and the drain deadline;
4. ``postprocess``: the scoring rules of `zsnli.scoring` (the cosines from the
   request's own embeddings, `zsnli.runtime.embedding.cosines`; a label embedded for an earlier
   request is taken from `zsnli.serving.label_cache.LabelEmbeddings`).

``classify_many`` submits many documents' pairs through the same batcher
(batched across documents); `zsnli.serving.offline` wraps it for blocking callers. Errors are `zsnli.errors.ApiError` (the HTTP layer answers them).

May import: `zsnli.serving.api_types` (the request-field rules only), `zsnli.serving.batching`,
`zsnli.serving.document`, `zsnli.serving.lifecycle`, `zsnli.runtime.embedding`, `zsnli.errors`, `zsnli.runtime.model`,
`zsnli.request_scoring`, `zsnli.scoring`, `zsnli.serving.text`. Never FastAPI or anything HTTP: `zsnli.serving.app` imports this
module, not the reverse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Awaitable, Callable, Iterator, Mapping, Sequence

import numpy as np

from .api_types import classify_fields
from .batching import BatchError, Batcher, BatcherClosed, DEFAULT_KIND, QueueFull
from ..runtime.embedding import SentenceEncoder, cosines
from ..errors import ApiError, ErrorType
from ..runtime.model import Encoded, NliRuntime
from ..request_scoring import RequestScoring, ScoringUnavailable, cascade_scores, prunes, request_group, scoring_named
from ..scoring import multi_label_probabilities, scores_from_logits
from .document import (HYPOTHESIS_CHARS_PER_TOKEN, LABEL_KIND, TEXT_KIND, Prepared, Tokenized, check_label_tokens,
                       embedding_tokens, fill_template, tokenize)
from .lifecycle import ServiceLifecycle
from .text import clean_text, normalize_label

logger = logging.getLogger("zsnli")

#: Awaitable that completes when the client has gone (the HTTP layer passes one).
Disconnected = Callable[[], Awaitable[None]]


class ZeroShotClassifier(ServiceLifecycle):
    """Zero-shot classification from an NLI cross-encoder: the request pipeline (see the module docstring)
    on top of the service's life (`zsnli.serving.lifecycle.ServiceLifecycle`: start, health, admission,
    drain, stop; its arguments)."""

    # ----------------------------------------------------------------- classify

    async def classify(self, text: str, labels: Sequence[str], hypothesis_template: str | None = None,
                       multi_label: bool = False, *, disconnected: Disconnected | None = None,
                       priority: int = 0, cascade: bool = True, scoring: str | None = None) -> list[float]:
        """Probabilities of each label for one document, in the labels' order.

        Single-label: ``K`` probabilities summing to 1 (the request group's scoring and temperature,
        `zsnli.request_scoring.RequestScoring.probabilities`); multi-label: each in [0, 1] on its own.
        disconnected: completes when the client has gone (its queued pairs are then dropped).
        priority: the batcher priority of its work (0, the default, is ``/classify``'s; a larger
        value waits while smaller ones are pending: the bake-off's served arms use 1).
        cascade: False scores every label with the cross-encoder even where calibration.json's cascade
        applies (`zsnli.request_scoring.Cascade`: the cosine ranks the labels, the top ones are scored).
        scoring: ``served`` (the `RequestScoring` loaded at start-up), ``pipeline`` (the transformers
        pipeline's own single-label scoring), ``embedding`` (the sentence encoder's cosine alone) or None (the
        server's default, ``ZSNLI_SCORING``); `scoring_config`.
        Raises ``ApiError``: 503 not ready / overloaded / timed out, 422 a label that
        cannot fit (field ``labels[i]``) or too many labels, 500 inference failure or
        non-finite numbers, 499 client gone.
        """
        self.check_ready()
        prep = self.preprocess(text, labels, hypothesis_template, multi_label, cascade, self.scoring_config(scoring))
        return await self.classify_prepared(prep, disconnected=disconnected, priority=priority)

    async def classify_prepared(self, prep: Prepared, *, disconnected: Disconnected | None = None,
                                priority: int = 0, group: object = None) -> list[float]:
        """`classify` of a document already through ``preprocess``: admitted against the queue capacity
        (``Prepared.n_pairs``), tokenised, computed, scored.

        Work once started is finished: ``ZSNLI_REQUEST_TIMEOUT_S`` bounds only the wait in the queue
        before the first of its items enters a batch (then 503 ``timeout``, nothing of it computed);
        from then on it ends with its answer, the client's disconnect (499) or the drain deadline.
        group: the batcher's fair-queue group of its jobs (`zsnli.serving.batching.Batcher.submit`;
        default: one of its own, so its pairs, text and labels share one place in the queue).
        Raises ``ApiError`` as `classify` does.
        """
        self.check_ready()
        st = self.state
        loop = asyncio.get_running_loop()
        group = group if group is not None else object()
        with self._work_errors():
            with st.batcher.admit(prep.n_pairs):
                first_cosine = None
                if prep.cascade is not None:  # the cosines first: they choose the pairs to score
                    emb = await loop.run_in_executor(self._tokenize_pool, embedding_tokens, st.model, st.encoder, prep)
                    _, first_cosine = await self._forward(emb, disconnected, priority, group)
                    prep.kept = prep.cascade.kept(first_cosine).tolist()
                if prep.kept == [] and not prep.needs_premise_tokens:
                    # a cascade that keeps no label (the embedding scoring): nothing left to tokenise or compute
                    empty = np.zeros((0, st.model.num_labels), dtype=np.float32)
                    return self.postprocess(prep, empty, first_cosine)
                encoder = self._request_encoder(prep) if first_cosine is None else None
                encoded = await loop.run_in_executor(self._tokenize_pool, tokenize, st.model, encoder, prep)
                logits, cosine = await self._forward(encoded, disconnected, priority, group)
                cosine = first_cosine if first_cosine is not None else cosine
        return self.postprocess(prep, logits, cosine, encoded.premise_tokens)

    @contextlib.contextmanager
    def _work_errors(self) -> Iterator[None]:
        """Batcher and wait failures of one request's work as the ``ApiError`` its answer is: 503
        ``overloaded`` (queue full), ``timeout``, ``unavailable`` (batcher closed), 500 ``inference``."""
        try:
            yield
        except QueueFull as exc:
            raise ApiError(ErrorType.OVERLOADED, f"overloaded: {exc}; retry later") from None
        except asyncio.TimeoutError:
            raise ApiError(ErrorType.TIMEOUT, f"timed out: waited {self.settings.request_timeout_s:g} s in the "
                           "queue (ZSNLI_REQUEST_TIMEOUT_S) before any of its work started; retry later") from None
        except BatchError as exc:
            raise ApiError(ErrorType.INFERENCE, str(exc)) from None
        except BatcherClosed as exc:
            raise ApiError(ErrorType.UNAVAILABLE, str(exc)) from None

    async def predict(self, pairs: Sequence[tuple[str, str]], *, disconnected: Disconnected | None = None) -> np.ndarray:
        """The NLI head's logits ``[N, C]`` (float32, C = the head's classes in ``id2label`` order) of each
        (premise, hypothesis) pair, through the same admission, tokeniser thread and batcher as ``classify``
        (TEI's ``/predict``).

        Each text is cleaned as in ``classify`` (lone surrogates; the premise cut to ``ZSNLI_MAX_TEXT_CHARS``
        and then to the window, on its side only). Raises ``ApiError``: 422 ``label_too_long`` naming
        ``pairs[i]`` for a hypothesis that cannot fit the window alone, 503 not ready / overloaded / timed
        out, 500 inference failure or non-finite logits, 499 client gone.
        """
        self.check_ready()
        st, settings = self.state, self.settings
        premises = [clean_text(p)[: settings.max_text_chars] for p, _ in pairs]
        hyps = [clean_text(h) for _, h in pairs]
        char_cap = HYPOTHESIS_CHARS_PER_TOKEN * st.model.max_length
        for i, h in enumerate(hyps):
            if len(h) > char_cap:
                raise ApiError(ErrorType.LABEL_TOO_LONG, f"pairs[{i}]: the hypothesis has {len(h)} characters "
                               f"(limit {char_cap}): it cannot fit the model window ({st.model.max_length} "
                               "tokens; ZSNLI_MAX_LENGTH caps it)", f"pairs[{i}]")
        _, logits = await self._one_kind(DEFAULT_KIND, len(pairs), disconnected, "the model produced non-finite "
                                         "logits for this request", _encode_pairs, st.model, premises, hyps)
        return logits

    async def embed(self, texts: Sequence[str], *, truncate: bool = True, disconnected: Disconnected | None = None
                    ) -> tuple[np.ndarray, list[int]]:
        """The served sentence encoder's embeddings ``[N, D]`` (float32 unit vectors) of ``texts`` and each one's
        tokens: cleaned and cut as ``classify`` cuts its text, then the same admission, tokeniser thread and
        batcher kind (`TEXT_KIND`) as the cosine term's text, so a vector is the one the cosine term uses
        (TEI's ``/embed``, OpenAI's ``/v1/embeddings``). ``truncate=False``: a text over the encoder's window
        is refused instead of cut. Raises ``ApiError``: 501 ``not_implemented`` without a sentence encoder,
        422 ``validation`` naming ``texts[i]`` (too long, ``truncate=False``), 503 not ready / overloaded /
        timed out, 500 inference failure or non-finite output, 499 client gone."""
        self.check_ready()
        st, settings = self.state, self.settings
        if st.encoder is None:
            raise ApiError(ErrorType.NOT_IMPLEMENTED, "no sentence encoder is loaded: the served scoring has no "
                           "cosine term (calibration.json's embedding_weight is 0), so this server has no embeddings")
        texts = [clean_text(t)[: settings.max_text_chars] if truncate else clean_text(t) for t in texts]
        encoded, vectors = await self._one_kind(TEXT_KIND, len(texts), disconnected, "the sentence encoder produced "
                                                "non-finite embeddings", _encode_texts, st.encoder, texts, truncate)
        return vectors, [len(e) for e in encoded]

    async def _one_kind(self, kind: str, units: int, disconnected: Disconnected | None, non_finite: str,
                        encode: Callable[..., Any], *args: Any) -> tuple[Any, np.ndarray]:
        """One request's work of a single batcher ``kind`` (``/predict``'s pairs, ``/embed``'s texts): admitted
        as ``units``, ``encode(*args)`` on the tokeniser thread, one job awaited; returns (encoded, output).
        Raises the ``ApiError`` of `_work_errors`, and 500 ``non_finite`` (message ``non_finite``) when the
        output holds NaN or infinity."""
        st = self.state
        with self._work_errors():
            with st.batcher.admit(units):
                encoded = await asyncio.get_running_loop().run_in_executor(self._tokenize_pool, encode, *args)
                (out,) = await _await_jobs(st.batcher, [(kind, encoded)], disconnected, self.settings.request_timeout_s)
        if not np.all(np.isfinite(out)):
            raise ApiError(ErrorType.NON_FINITE, non_finite)
        return encoded, out

    async def with_tokenizer(self, work: Callable[[Any], Any]) -> Any:
        """``work(tokenizer)`` (the served model's tokenizer) run in the tokeniser thread, off the event loop
        (TEI's ``/tokenize``: no model forward, so not admitted to the batcher's queue). Returns what
        ``work`` returns. Raises ``ApiError`` 503 ``loading`` / ``unavailable`` when not ready."""
        self.check_ready()
        return await asyncio.get_running_loop().run_in_executor(self._tokenize_pool, work, self.state.model.tokenizer)

    async def classify_request(self, docs: Sequence[Prepared | ApiError], *, disconnected: Disconnected | None = None
                               ) -> list[Any]:
        """Classify the documents of ONE request (a ``/classify`` array, an Inference API list of inputs),
        fairly beside other requests. ``docs``: each document through ``preprocess``, or the ``ApiError``
        it already got (passed through). Returns, in order, each one's probabilities or its ``ApiError``.

        * **Cap**: the request's whole work (`Prepared.work` summed: every document-label pair before the
          cascade, plus the label embeddings of documents with the cosine term) over
          ``ZSNLI_MAX_REQUEST_PAIRS`` is refused whole, before anything is admitted: ``ApiError`` 413
          ``payload_too_large`` (field ``body``) naming the setting (TEI's ``--max-client-batch-size`` is
          the same kind of cap). A request of one document is never refused by it (one ``/classify``
          document is not either: ``ZSNLI_MAX_LABELS`` bounds it).
        * **Share**: the documents are admitted progressively, in order: one is admitted only while the
          request holds nothing else in the queue or it still fits the request's share
          (``ZSNLI_REQUEST_SHARE_PAIRS``, at most ``ZSNLI_QUEUE_CAPACITY_PAIRS``); the others wait their
          turn inside the request, unadmitted (no timeout runs on that wait: the request was accepted
          whole). So a large array holds at most its share of the queue and the rest stays free for
          other requests; each admitted document is then `classify_prepared` (503 ``overloaded`` when
          the queue is full of other requests' work, as for one request).
        * **Turns**: all its documents' jobs are one group of the batcher's fair queue, so the whole
          request gets the forward's tokens as one request does, however many documents it has.
        * One watcher of the client's ``disconnected`` serves every document; once the client is gone
          the documents not yet started get 499 ``disconnected`` and are never admitted.
        """
        self.check_ready()
        settings = self.settings
        prepared = [d for d in docs if isinstance(d, Prepared)]
        total = sum(self.request_work(d) for d in prepared)
        if total > settings.max_request_pairs and len(prepared) > 1:
            raise ApiError(ErrorType.PAYLOAD_TOO_LARGE, f"body: the request asks for {total} units of work in all "
                           "((document, label) pairs before the cascade, plus label embeddings), more than "
                           f"ZSNLI_MAX_REQUEST_PAIRS={settings.max_request_pairs}: split it into smaller requests",
                           "body")
        share = min(settings.request_share_pairs, settings.queue_capacity_pairs)
        answers: list[Any] = list(docs)
        held = 0
        room = asyncio.Condition()
        group = object()  # one place in the batcher's fair queue for the whole request
        gone = asyncio.ensure_future(disconnected()) if disconnected is not None else None

        async def one(i: int, prep: Prepared, n: int) -> None:
            nonlocal held
            try:
                answers[i] = await self.classify_prepared(
                    prep, disconnected=(lambda: asyncio.shield(gone)) if gone is not None else None, group=group)
            except ApiError as exc:
                answers[i] = exc
            finally:
                async with room:
                    held -= n
                    room.notify_all()

        tasks: list[asyncio.Task] = []
        try:
            for i, doc in enumerate(docs):
                if not isinstance(doc, Prepared):
                    continue
                n = doc.n_pairs
                async with room:
                    await room.wait_for(lambda: held == 0 or held + n <= share or (gone is not None and gone.done()))
                    if gone is not None and gone.done():
                        answers[i] = ApiError(ErrorType.CLIENT_GONE, "client disconnected")
                        continue
                    held += n
                tasks.append(asyncio.create_task(one(i, doc, n)))
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            if gone is not None:
                gone.cancel()
        return answers

    async def check_labels(self, labels: Sequence[str], template: str | None = None) -> None:
        """``/classify``'s label checks without classifying (the bake-off runs them on its label descriptions).

        Raises exactly the ``ApiError`` a ``/classify`` request with these ``labels`` and ``template`` would
        get before any forward: 422 ``validation`` (too many labels, a label with no tokens or only the unknown token) or
        ``label_too_long`` (cannot fit the window), ``field`` ``labels[i]`` and a message starting with it;
        503 when the model is not loaded.
        """
        self.check_ready()
        prep = self.preprocess("", labels, template, multi_label=True)
        await asyncio.get_running_loop().run_in_executor(self._tokenize_pool, check_label_tokens, self.state.model, prep)

    def scoring_config(self, name: str | None = None) -> RequestScoring:
        """The `RequestScoring` of a request's ``scoring`` (`zsnli.request_scoring.scoring_named` decides:
        ``served``, ``pipeline`` or ``embedding``; None is the server's default, ``ZSNLI_SCORING``).
        Raises ``ApiError`` 422 (field ``scoring``) for an unknown name or a scoring this server lacks."""
        try:
            return scoring_named(name if name is not None else self.settings.scoring, self.state.scoring,
                                 self.state.embedding_scoring)
        except ScoringUnavailable as exc:
            raise ApiError(ErrorType.VALIDATION, str(exc), "scoring") from None

    def preprocess(self, text: str, labels: Sequence[str], template: str | None, multi_label: bool,
                   cascade: bool = True, scoring: RequestScoring | None = None) -> Prepared:
        """Clean and cut the text, fill the template, deduplicate the hypotheses; refuse with
        ``ApiError`` 422 more than ``ZSNLI_MAX_LABELS`` labels, or a label or template so long in
        characters that it cannot fit the window (checked before anything is tokenised).
        scoring: the single-label scoring (default the served one, ``state.scoring``): its group config's
        content-free premise, its cascade and calibrator apply; it travels in ``Prepared.scoring``."""
        settings, model = self.settings, self.state.model
        if not cascade and scoring is not None and scoring.cascade is not None and scoring.cascade.keep == 0:
            raise ApiError(ErrorType.VALIDATION, "cascade: false asks the cross-encoder for every label, and scoring "
                           "'embedding' sends it none (the cosine alone); leave out one of the two", "cascade")
        if len(labels) > settings.max_labels:
            raise ApiError(ErrorType.VALIDATION, f"too many labels: {len(labels)} > {settings.max_labels} "
                           "(ZSNLI_MAX_LABELS raises the limit)", "labels")
        text = clean_text(text)[: settings.max_text_chars]
        template = clean_text(template) if template is not None else None
        labels = [normalize_label(lb) for lb in labels]  # NFKC: what the model reads (answers echo the labels sent)
        # No token covers HYPOTHESIS_CHARS_PER_TOKEN characters, so a longer hypothesis cannot fit.
        char_cap = HYPOTHESIS_CHARS_PER_TOKEN * model.max_length
        extra = len(template) - 2 if template is not None else 0
        window = f"the model window ({model.max_length} tokens; ZSNLI_MAX_LENGTH caps it)"
        if extra > char_cap:
            raise ApiError(ErrorType.LABEL_TOO_LONG, f"hypothesis_template: {extra} characters without its slot "
                           f"(limit {char_cap}): it cannot fit {window}", "hypothesis_template")
        for i, lb in enumerate(labels):
            if len(lb) + extra > char_cap:
                raise ApiError(ErrorType.LABEL_TOO_LONG, f"labels[{i}]: {len(lb) + extra} characters with the "
                               f"template (limit {char_cap}): it cannot fit {window}; labels are never cut",
                               f"labels[{i}]")
        hyps = [fill_template(template, lb) for lb in labels]
        slot = {h: i for i, h in enumerate(dict.fromkeys(hyps))}
        scoring = self.state.scoring if scoring is None else scoring
        group = request_group(hyps, multi_label)
        config = scoring.config_for(group)
        content_free = config.content_free_premise if not multi_label else None
        pruned = scoring.cascade if cascade and prunes(scoring.cascade, config, len(slot), multi_label) else None
        return Prepared(text, labels, hyps, list(slot), [slot[h] for h in hyps],
                        list(dict.fromkeys(labels)) if template is not None else None, content_free, multi_label,
                        group, scoring.calibrator is not None and not multi_label, pruned, scoring=scoring)

    def request_work(self, prep: Prepared) -> int:
        """``prep``'s whole work as ``ZSNLI_MAX_REQUEST_PAIRS`` counts it (`Prepared.work`: pairs before the
        cascade, plus label embeddings when its scoring has the cosine term)."""
        return prep.work(self._request_encoder(prep) is not None)

    def _request_encoder(self, prep: Prepared) -> SentenceEncoder | None:
        """The sentence encoder when this request's group scoring has the cosine term (single-label only)."""
        if prep.multi_label or self._scoring_of(prep).config_for(prep.group).embedding_weight == 0:
            return None
        return self.state.encoder

    def _scoring_of(self, prep: Prepared) -> RequestScoring:
        """The `RequestScoring` ``prep`` was prepared with (the served one when it names none)."""
        return prep.scoring if prep.scoring is not None else self.state.scoring

    async def _forward(self, encoded: Tokenized, disconnected: Disconnected | None,
                       priority: int = 0, group: object = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Logits ``[pairs, C]`` of the encoded pairs from the batcher (``[0, C]`` without pairs) and, when the request has embedding work,
        the text-hypothesis cosines ``[K unique]`` from its own text and hypothesis embeddings (the
        labels' from `LabelEmbeddings` where kept there: only the others go to the batcher)."""
        cache = self.state.label_cache
        work = encoded.work()
        found = computed = None
        if cache is not None and encoded.labels:
            found, computed = cache.lookup(encoded.labels)
            work = [(kind, computed if kind == LABEL_KIND else items) for kind, items in work
                    if kind != LABEL_KIND or computed]
        outputs = await _await_jobs(self.state.batcher, work, disconnected, self.settings.request_timeout_s, priority,
                                    group)
        by_kind = {kind: out for (kind, _), out in zip(work, outputs)}
        if found is not None:
            by_kind[LABEL_KIND] = cache.complete(encoded.labels, found, computed,
                                                 by_kind.get(LABEL_KIND, np.zeros((0, self.state.encoder.dim))))
        cosine = cosines(by_kind[TEXT_KIND][0], by_kind[LABEL_KIND]) if TEXT_KIND in by_kind else None
        logits = by_kind.get(DEFAULT_KIND)
        if logits is None:  # no pairs (a cascade that kept no label): an empty [0, C] block
            logits = np.zeros((0, self.state.model.num_labels), dtype=np.float32)
        return logits, cosine

    def postprocess(self, prep: Prepared, logits: np.ndarray, cosine: np.ndarray | None,
                    premise_tokens: int = 0) -> list[float]:
        """Scores -> probabilities in the labels' order (duplicates included, K = labels sent), with the
        request group's scoring and the calibrator's temperature (`zsnli.request_scoring.RequestScoring`).
        premise_tokens: the text's tokens (`NliRuntime.premise_tokens`; the calibrator's length feature).

        Raises ``ApiError`` 500 ``non_finite`` for non-finite logits or probabilities and for
        any ``ValueError`` / ``ArithmeticError`` (overflow, division by zero) in the scoring
        arithmetic, so none escapes as a generic 500 ``internal``.
        """
        st = self.state
        model = st.model
        if not np.all(np.isfinite(logits)):
            logger.error("non-finite logits for a request with %d label(s)", len(prep.labels))
            raise ApiError(ErrorType.NON_FINITE, "the model produced non-finite logits for this request")
        k, where = len(prep.unique), prep.where
        try:
            if prep.multi_label:
                probs = multi_label_probabilities(logits[:k], model.entail_idx, model.contra_idx)[where]
            else:
                scoring = self._scoring_of(prep)
                config = scoring.config_for(prep.group)
                scores = scores_from_logits(logits, config.rule, model.entail_idx, model.contra_idx)
                m = len(prep.kept) if prep.kept is not None else k
                nli = scores[:m] if prep.kept is None else cascade_scores(scores[:m], np.array(prep.kept), k)
                cf = scores[m:2 * m][where] if prep.content_free is not None else None
                cos = cosine[where] if cosine is not None else None
                probs = scoring.probabilities(nli[where], prep.hyps, cos, cf, premise_tokens)
        except (ValueError, ArithmeticError) as exc:  # overflow included: never a generic 500 internal
            raise ApiError(ErrorType.NON_FINITE, f"scoring failed: {type(exc).__name__}: {exc}") from None
        if not np.all(np.isfinite(probs)):
            raise ApiError(ErrorType.NON_FINITE, "scoring produced non-finite probabilities")
        return [float(p) for p in probs]

    async def classify_many(self, docs: Sequence[Mapping[str, Any]], concurrency: int = 64) -> list[Any]:
        """Classify many documents in-process, their pairs batched together across documents.

        docs: mappings with ``text``, ``labels`` (or ``candidate_labels``, which get the pipeline's
        default template when none is given: `zsnli.serving.api_types.classify_fields`) and optionally
        ``hypothesis_template``, ``multi_label`` and ``scoring``, as a request body. At most ``concurrency``
        documents are admitted at once (keep ``concurrency x pairs per document`` under
        ``ZSNLI_QUEUE_CAPACITY_PAIRS``). Returns one entry per document, in order: its
        probabilities, or the ``ApiError`` that document got.
        """
        gate = asyncio.Semaphore(max(1, int(concurrency)))

        async def one(doc: Mapping[str, Any]) -> Any:
            async with gate:
                try:
                    labels, template, _ = classify_fields(doc)
                    return await self.classify(doc["text"], labels, template, bool(doc.get("multi_label", False)),
                                               scoring=doc.get("scoring"))
                except ApiError as exc:
                    return exc

        return list(await asyncio.gather(*(one(d) for d in docs)))


def _encode_pairs(model: NliRuntime, premises: list[str], hypotheses: list[str]) -> list[Encoded]:
    """Tokeniser thread: refuse (422 ``label_too_long``, field ``pairs[i]``) a hypothesis longer than the
    window allows, then encode the pairs (premise truncated, `zsnli.runtime.model.NliRuntime.encode`)."""
    limit = model.max_hypothesis_tokens()
    for i, n in enumerate(model.hypothesis_lengths(hypotheses)):
        if n > limit:
            raise ApiError(ErrorType.LABEL_TOO_LONG, f"pairs[{i}]: the hypothesis does not fit the model window "
                           f"({model.max_length} tokens with the premise; ZSNLI_MAX_LENGTH caps it)", f"pairs[{i}]")
    return model.encode(premises, hypotheses)


def _encode_texts(encoder: SentenceEncoder, texts: list[str], truncate: bool) -> list[Encoded]:
    """Tokeniser thread: with ``truncate`` off, refuse (422, field ``texts[i]``) a text over the encoder's
    window; then the encoder's tokens of each text (`SentenceEncoder.tokenize`, cut to the window)."""
    if not truncate:
        for i, n in enumerate(encoder.token_counts(texts)):
            if n > encoder.max_length:
                raise ApiError(ErrorType.VALIDATION, f"texts[{i}]: {n} tokens, more than the sentence encoder's "
                               f"window of {encoder.max_length}: send truncate true or a shorter text", f"texts[{i}]")
    return encoder.tokenize(texts)


async def _await_jobs(batcher: Batcher, work: Sequence[tuple[str, list[Encoded]]],
                      disconnected: Disconnected | None, timeout: float, priority: int = 0,
                      group: object = None) -> list[np.ndarray]:
    """Submit one job per ``(kind, items)`` at ``priority`` in the fair-queue ``group`` and wait for all of
    them; returns their outputs in order.

    ``timeout`` (seconds) bounds the wait before the first item of any of the jobs enters a batch
    (`zsnli.serving.batching.Job.started`); work once started is waited for to its end (never computed
    in part and thrown away). When the client leaves, the timeout passes, the caller is cancelled or
    one job fails (``BatchError``), every job's queued items are dropped, so abandoned work does not
    pile up behind a burst.
    """
    jobs = []
    try:
        for kind, items in work:
            jobs.append(batcher.submit(items, priority=priority, kind=kind, group=group))
        results = asyncio.ensure_future(asyncio.gather(*(job.result() for job in jobs)))
        # Retrieved whatever happens (a job cancelled below ends the gathering with CancelledError).
        results.add_done_callback(lambda f: f.cancelled() or f.exception())
        waiting = {results}
        gone = asyncio.ensure_future(disconnected()) if disconnected is not None else None
        if gone is not None:
            waiting.add(gone)
        deadline = time.monotonic() + timeout
        try:
            while True:
                started = any(job.started for job in jobs)
                left = None if started else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise asyncio.TimeoutError()
                done, _ = await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if results in done:
                    return results.result()
                if gone is not None and gone in done:
                    logger.info("client disconnected: dropped its queued pairs")
                    raise ApiError(ErrorType.CLIENT_GONE, "client disconnected")
        finally:
            for t in waiting:
                if not t.done():
                    t.cancel()
    finally:
        for job in jobs:
            batcher.cancel(job)  # a no-op for a finished job
