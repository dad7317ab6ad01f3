"""The routes other clients speak (`add_compat_routes`): the Hugging Face Inference API's zero-shot payload
(``POST /v1/zero-shot-classification``, ``POST /``: `zsnli.serving.inference_api`), text-embeddings-inference's
``GET /info``, ``POST /predict``, ``POST /tokenize`` (`zsnli.serving.tei`) and ``POST /embed``, and OpenAI's
``POST /v1/embeddings`` (`zsnli.serving.embeddings_api`: the served sentence encoder's vectors).
May import: FastAPI, `zsnli.serving.api_types`, `zsnli.serving.openapi_docs`, `zsnli.errors`, `zsnli.serving.embeddings_api`,
`zsnli.serving.http_request`, `zsnli.serving.request_timing`, `zsnli.runtime.embedding` (the encoder's name),
`zsnli.serving.inference_api`, `zsnli.serving.routes_zsnli`, `zsnli.serving.service`, `zsnli.serving.tei`,
`zsnli.serving.text`. Imported by `zsnli.serving.app`.
"""

from __future__ import annotations

from typing import Any, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from .. import __version__
from . import embeddings_api, inference_api, tei
from .api_types import HealthResponse, ZeroShotAnswer, ZeroShotElement
from .openapi_docs import ERROR_RESPONSES, PREDICT_ERROR_RESPONSES, ZERO_SHOT_OPENAPI
from ..errors import ApiError
from .http_request import parse_classify_request, read_json_body, wait_disconnect
from .request_timing import note_request
from ..runtime.embedding import encoder_id
from .routes_zsnli import classify_each
from .service import ZeroShotClassifier
from .text import clean_text


def add_compat_routes(app: FastAPI, service: ZeroShotClassifier) -> None:
    """Add the Inference API's and text-embeddings-inference's routes to ``app``."""
    settings = service.settings
    zero_shot_answer = Union[ZeroShotAnswer, list[ZeroShotAnswer], list[ZeroShotElement], list[list[ZeroShotElement]]]

    @app.post("/v1/zero-shot-classification", response_model=zero_shot_answer, responses=ERROR_RESPONSES,
              openapi_extra=ZERO_SHOT_OPENAPI)
    async def zero_shot_classification(request: Request) -> Any:
        """The Hugging Face Inference API's zero-shot-classification payload, answered as the hosted API and the
        pipeline answer it: `{"sequence", "labels", "scores"}` sorted by score (a list for a list of inputs);
        to `huggingface_hub` 1.2 and later (by its User-Agent), as the hosted API answers today:
        `[{"label", "score"}, ...]` sorted by score (a list of those for a list of inputs).
        The scores are `/classify`'s probabilities for the same text, labels and template (the pipeline's
        default template `This example is {}.` when none is given); one label is scored on its own, as in
        the pipeline."""
        return await service.admitted(lambda: _zero_shot(service, request))

    @app.post("/", response_model=zero_shot_answer, responses=ERROR_RESPONSES, openapi_extra=ZERO_SHOT_OPENAPI)
    async def inference_endpoint(request: Request) -> Any:
        """The same as `POST /v1/zero-shot-classification`, at the path Inference Endpoints containers receive it."""
        return await service.admitted(lambda: _zero_shot(service, request))

    @app.get("/info", responses={503: {"model": HealthResponse, "description": "Loading, or failed to start."}})
    async def info() -> Any:
        """The served model and limits in text-embeddings-inference's `/info` shape (model_id, model_sha,
        model_dtype, model_type, max_input_length, max_batch_tokens, max_client_batch_size, version, ...)."""
        status, health = service.health()
        if status != 200:
            return JSONResponse(health, status_code=status, headers={"Retry-After": str(settings.retry_after_s)})
        return tei.info_body(health, version=__version__, token_budget=service.state.batcher.token_budget,
                             max_client_batch_size=settings.max_batch_items,
                             max_concurrent_requests=settings.max_connections)

    @app.post("/predict", responses=PREDICT_ERROR_RESPONSES, openapi_extra=tei.PREDICT_OPENAPI)
    async def predict(request: Request) -> Any:
        """The NLI head's classes of (premise, hypothesis) pairs, as text-embeddings-inference's `/predict`
        answers a sequence-classification model: `[{"score", "label"}]` per pair, highest first."""
        return await service.admitted(lambda: _predict(service, request))

    @app.post("/embed", responses=PREDICT_ERROR_RESPONSES, openapi_extra=embeddings_api.EMBED_OPENAPI)
    async def embed(request: Request) -> Any:
        """The served sentence encoder's embeddings of each text, as text-embeddings-inference's `/embed` answers:
        a list of vectors (one per input, also for one text); the vectors the cosine term uses."""
        return await service.admitted(lambda: _embed(service, request, openai=False))

    @app.post("/v1/embeddings", responses=embeddings_api.OPENAI_ERROR_RESPONSES, openapi_extra=embeddings_api.OPENAI_OPENAPI)
    async def openai_embeddings(request: Request) -> Any:
        """The served sentence encoder's embeddings in OpenAI's embeddings shape (`data[i].embedding`, `usage`),
        for `openai.OpenAI(base_url=...).embeddings.create`; the vectors of `/embed`."""
        return await service.admitted(lambda: _embed(service, request, openai=True))

    @app.post("/tokenize", responses=ERROR_RESPONSES, openapi_extra=tei.TOKENIZE_OPENAPI)
    async def tokenize(request: Request) -> Any:
        """The model tokenizer's tokens of each text, as text-embeddings-inference's `/tokenize` answers:
        a list of `{"id", "text", "special", "start", "stop"}` per text (always a list of lists; `start`/`stop`
        UTF-8 byte offsets, null for a special token); nothing is truncated."""
        return await service.admitted(lambda: _tokenize(service, request))


async def _zero_shot(service: ZeroShotClassifier, request: Request) -> Any:
    """An Inference API payload (`zsnli.serving.inference_api`): its labels validated as `/classify`'s, every input
    classified (`zsnli.serving.routes_zsnli.classify_each`). Errors name the payload's fields
    (``parameters.candidate_labels[2]``, ``inputs[1]``); the first input that fails, fails the request."""
    settings = service.settings
    payload = await read_json_body(request, settings.max_body_bytes,
                                   expected="a JSON object with inputs and parameters.candidate_labels")
    call = inference_api.read_zero_shot(payload, settings.max_batch_items)
    try:
        req, _ = parse_classify_request({"text": "", **call.body})
    except ApiError as exc:
        raise _renamed(exc, inference_api.FIELD_NAMES) from None
    inference_api.check_echo(call.texts, req.labels, settings.max_body_bytes)
    multi = inference_api.single_label_scored_alone(len(req.labels), req.multi_label)
    results = await classify_each(service, request, [(text, req.labels, req.hypothesis_template, multi, req.cascade,
                                                      req.scoring) for text in call.texts])
    answers = []
    labels = [clean_text(lb) for lb in req.labels]
    for i, (text, result) in enumerate(zip(call.texts, results)):
        if isinstance(result, ApiError):
            names = {**inference_api.FIELD_NAMES, "text": "inputs" if call.single else f"inputs[{i}]"}
            raise _renamed(result, names)
        answers.append(inference_api.pipeline_answer(clean_text(text), labels, result))
    if inference_api.wants_elements(request.headers.get("user-agent")):
        answers = [inference_api.elements_answer(a) for a in answers]
    return answers[0] if call.single else answers


async def _predict(service: ZeroShotClassifier, request: Request) -> Any:
    """A TEI ``/predict`` body (`zsnli.serving.tei.read_predict`) scored by the NLI head (`ZeroShotClassifier.predict`);
    errors name ``inputs`` / ``inputs[i]``, a full queue is TEI's 429 (`zsnli.serving.tei.tei_status`)."""
    payload = await read_json_body(
        request, service.settings.max_body_bytes,
        expected="a JSON object with inputs (a [premise, hypothesis] pair or a list of them)")
    call = tei.read_predict(payload, service.settings.max_batch_items)
    note_request(len(call.pairs), batch=not call.single, chars=sum(len(p) + len(h) for p, h in call.pairs),
                 family="predict")
    try:
        logits = await service.predict(call.pairs, disconnected=lambda: wait_disconnect(request))
    except ApiError as exc:
        raise tei.tei_status(tei.renamed_pair_fields(exc, call.single)) from None
    answers = tei.predictions(tei.scores_for(logits, call.raw_scores), service.state.model.id2label)
    return answers[0] if call.single else answers


async def _embed(service: ZeroShotClassifier, request: Request, *, openai: bool) -> Any:
    """An ``/embed`` (TEI) or ``/v1/embeddings`` (OpenAI) body (`zsnli.serving.embeddings_api`) embedded by
    `ZeroShotClassifier.embed`; errors name ``inputs[i]`` / ``input[i]``, a full queue is 429 on ``/embed`` (TEI's)."""
    service.check_ready()
    encoder = service.sentence_encoder()
    dim = encoder.dim if encoder is not None else 0
    payload = await read_json_body(request, service.settings.max_body_bytes, expected=(
        "a JSON object with model and input (a text or a list of texts)" if openai else
        "a JSON object with inputs (a text or a list of texts)"))
    read = embeddings_api.read_openai if openai else embeddings_api.read_embed
    call = read(payload, service.settings.max_batch_items, dim)
    field = "input" if openai else "inputs"
    note_request(len(call.texts), batch=not call.single, chars=sum(len(t) for t in call.texts), family="embed")
    try:
        vectors, tokens = await service.embed(call.texts, truncate=call.truncate,
                                              disconnected=lambda: wait_disconnect(request))
    except ApiError as exc:
        exc = exc.renamed("texts[0]", field) if call.single else exc.renamed("texts", field)
        raise exc if openai else tei.tei_status(exc) from None
    if not openai:
        return embeddings_api.embed_answer(vectors)
    return embeddings_api.openai_answer(vectors, tokens, encoder_id(encoder.model_dir, encoder.digest),
                                        call.encoding_format)


async def _tokenize(service: ZeroShotClassifier, request: Request) -> Any:
    """A TEI ``/tokenize`` body (`zsnli.serving.tei.read_tokenize`): each text's `zsnli.serving.tei.simple_tokens`."""
    payload = await read_json_body(request, service.settings.max_body_bytes,
                                   expected="a JSON object with inputs (a text or a list of texts)")
    call = tei.read_tokenize(payload, service.settings.max_batch_items, service.settings.max_text_chars)
    return await service.with_tokenizer(
        lambda tokenizer: [tei.simple_tokens(tokenizer, text, call.add_special_tokens) for text in call.texts])


def _renamed(exc: ApiError, names: dict[str, str]) -> ApiError:
    """``exc`` with every field of ``names`` (and its ``[i]`` items) renamed (`ApiError.renamed`)."""
    for old, new in names.items():
        exc = exc.renamed(old, new)
    return exc
