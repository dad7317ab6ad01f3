"""The served sentence encoder's embeddings (issue 49): TEI's ``POST /embed`` and OpenAI's ``POST /v1/embeddings``
(zsnli.serving.embeddings_api, ZeroShotClassifier.embed): the vectors the cosine term uses, through the batcher,
with the real ``openai`` and ``huggingface_hub`` clients, and their errors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cached_loader, make_settings, running_app, write_calibration
from http_support import ThreadServer

TEXT = "The striker scored twice as the home side won the derby 3-1."
TEXTS = [TEXT, "Shares fell 4% after the results.", "It rained all week in the valley."]


def encoder_settings(tmp_path, nli_dir, encoder_dir, **overrides):
    """Settings of a server whose scoring has the cosine term, ``encoder_dir`` as its sentence encoder."""
    from zsnli.runtime.embedding import embedding_digest

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment", embedding_weight=4.0,
                              embedding_sha256=embedding_digest(encoder_dir))
    return make_settings(nli_dir, calibration_path=str(calib), embedding_dir=str(encoder_dir), **overrides)


def encoder_app(tmp_path, nli_dir, encoder_dir, **overrides):
    from zsnli.serving.app import create_app

    return create_app(encoder_settings(tmp_path, nli_dir, encoder_dir, **overrides), loader=cached_loader)


@pytest.mark.anyio
async def test_embed_equals_the_encoder_and_the_cosine_term(tmp_path, bert_dir, deberta_dir):
    """/embed's vectors are the offline encoder's (what selection scores with) and give the served cosine term."""
    from zsnli.runtime.embedding import SentenceEncoder, cosines
    from zsnli.serving.document import tokenize

    app = encoder_app(tmp_path, deberta_dir, bert_dir)
    async with running_app(app) as client:
        r = await client.post("/embed", json={"inputs": TEXTS})
        assert r.status_code == 200, r.text
        served = np.array(r.json(), dtype=np.float64)
        one = await client.post("/embed", json={"inputs": TEXT, "normalize": True, "truncate": True})
        assert np.array(one.json()).shape == (1, served.shape[1])  # one text: still a list of vectors
        np.testing.assert_allclose(one.json()[0], served[0], atol=1e-6)
        offline = SentenceEncoder(bert_dir).encode(TEXTS)
        np.testing.assert_allclose(served, offline, atol=1e-6)
        np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-6)

        service = app.state.classifier
        labels = ["sport", "business"]
        prep = service.preprocess(TEXT, labels, "This text is about {}.", False)
        encoded = tokenize(service.state.model, service.state.encoder, prep)
        _, term = await service._forward(encoded, None)  # the cosines /classify scores with
        hyps = await client.post("/embed", json={"inputs": prep.unique})
        np.testing.assert_allclose(cosines(served[0], np.array(hyps.json())), term, atol=1e-6)


@pytest.mark.anyio
async def test_embedding_errors_name_the_field(tmp_path, bert_dir, deberta_dir):
    app = encoder_app(tmp_path, deberta_dir, bert_dir, max_batch_items=2)
    async with running_app(app) as client:
        cases = [
            ("/embed", {"inputs": ["ok", 3]}, 422, "inputs[1]"),
            ("/embed", {"inputs": []}, 422, "inputs"),
            ("/embed", {"inputs": ["a", "b", "c"]}, 422, "inputs"),
            ("/embed", {"inputs": "x", "normalise": True}, 422, "normalise"),
            ("/embed", {"inputs": "x", "dimensions": 7}, 422, "dimensions"),
            ("/embed", {"inputs": "word " * 400, "truncate": False}, 422, "inputs"),
            ("/embed", {"inputs": ["a", "word " * 400], "truncate": False}, 422, "inputs[1]"),
            ("/v1/embeddings", {"input": [[101, 102]], "model": "m"}, 422, "input[0]"),
            ("/v1/embeddings", {"model": "m"}, 422, "input"),
            ("/v1/embeddings", {"input": "x", "model": "m", "encoding_format": "int8"}, 422, "encoding_format"),
            # issue 57, item 8: as OpenAI, an empty text and a missing (or empty) model are refused
            ("/v1/embeddings", {"input": "", "model": "m"}, 422, "input"),
            ("/v1/embeddings", {"input": ["a", ""], "model": "m"}, 422, "input[1]"),
            ("/v1/embeddings", {"input": "x"}, 422, "model"),
            ("/v1/embeddings", {"input": "x", "model": None}, 422, "model"),
            ("/v1/embeddings", {"input": "x", "model": ""}, 422, "model"),
            ("/v1/embeddings", {"input": "x", "model": 3}, 422, "model"),
        ]
        for path, body, status, field in cases:
            r = await client.post(path, json=body)
            assert (r.status_code, r.json()["field"]) == (status, field), (path, body, r.text)
            error = r.json()["error"]  # OpenAI's error object on its route (the openai client shows its message)
            if path == "/v1/embeddings":
                assert error["param"] == field and error["type"] == r.json()["error_type"] == "validation"
                assert error["message"].startswith(field) and error["code"] is None, r.text
            else:
                assert isinstance(error, str) and error.startswith(field), r.text
        wrong_method = await client.get("/v1/embeddings")  # every error the route answers has the shape
        assert wrong_method.status_code == 405 and "not allowed" in wrong_method.json()["error"]["message"]
        assert isinstance((await client.get("/embed")).json()["error"], str)
        long = await client.post("/embed", json={"inputs": "word " * 400})  # truncated by default
        assert long.status_code == 200


@pytest.mark.anyio
async def test_token_ids_and_nested_texts_are_told_apart_and_an_empty_body_says_what_the_route_takes(
        tmp_path, bert_dir, deberta_dir):
    """A list of texts inside the list was "token ids are not accepted"; OpenAI's one token array ``[1, 2, 3]``
    was blamed on ``input[0]``; an empty body was told to "send a JSON object with text and labels", /classify's
    body, on every route (found by a new-user pass)."""
    app = encoder_app(tmp_path, deberta_dir, bert_dir)
    async with running_app(app) as client:
        cases = [("/embed", {"inputs": [["a", "b"]]}, "inputs[0]: must be a string"),
                 ("/embed", {"inputs": [[101, 102]]}, "inputs[0]: token ids are not accepted (send the text)"),
                 ("/v1/embeddings", {"input": [1, 2, 3], "model": "m"},
                  "input: token ids are not accepted (send the text)"),
                 ("/v1/embeddings", {"input": [[1, 2], [3]], "model": "m"},
                  "input[0]: token ids are not accepted (send the text)")]
        for path, body, message in cases:
            r = await client.post(path, json=body)
            error = r.json()["error"]
            assert r.status_code == 422 and (error["message"] if path.startswith("/v1") else error) == message, r.text
        expected = {"/embed": "a JSON object with inputs (a text or a list of texts)",
                    "/tokenize": "a JSON object with inputs (a text or a list of texts)",
                    "/v1/embeddings": "a JSON object with model and input (a text or a list of texts)",
                    "/predict": "a JSON object with inputs (a [premise, hypothesis] pair or a list of them)",
                    "/v1/zero-shot-classification": "a JSON object with inputs and parameters.candidate_labels",
                    "/classify": "a JSON object with text and labels"}
        for path, what in expected.items():
            r = await client.post(path, content=b"  ", headers={"content-type": "application/json"})
            error = r.json()["error"]
            assert r.status_code == 400 and (error["message"] if path.startswith("/v1/e") else error) == \
                f"empty body: send {what}", (path, r.text)


@pytest.mark.anyio
async def test_no_encoder_is_one_clear_501(bert_dir, make_app):
    async with running_app(make_app(bert_dir)) as client:  # uncalibrated: no cosine term, no encoder
        r = await client.post("/embed", json={"inputs": "x"})
        assert r.status_code == 501 and "no sentence encoder" in r.json()["error"]


@pytest.fixture
def encoder_server(tmp_path, bert_dir, deberta_dir, monkeypatch):
    from huggingface_hub import constants

    from zsnli.serving.app import create_app

    monkeypatch.setattr(constants, "is_offline_mode", lambda: False)  # HF_HUB_OFFLINE blocks even 127.0.0.1
    settings = encoder_settings(tmp_path, deberta_dir, bert_dir)
    with ThreadServer(create_app(settings, loader=cached_loader), settings) as srv:
        yield f"http://127.0.0.1:{srv.port}"


def test_openai_and_huggingface_clients_get_the_vectors(encoder_server, bert_dir):
    """The ``openai`` client (base64 by default, and float) and huggingface_hub's ``feature_extraction``."""
    import httpx

    from zsnli.runtime.embedding import SentenceEncoder

    expected = SentenceEncoder(bert_dir).encode(TEXTS)
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{encoder_server}/v1", api_key="unused", max_retries=0)
    for fmt in (openai.NOT_GIVEN, "float"):
        out = client.embeddings.create(model="zsnli-encoder", input=TEXTS, encoding_format=fmt)
        np.testing.assert_allclose([d.embedding for d in out.data], expected, atol=1e-6)
        assert [d.index for d in out.data] == [0, 1, 2] and out.usage.prompt_tokens > len(TEXTS)
    with pytest.raises(openai.UnprocessableEntityError) as refused:  # the client's message is the server's
        client.embeddings.create(model="zsnli-encoder", input=[[101, 102]])
    assert "input[0]" in str(refused.value) and refused.value.param == "input[0]", str(refused.value)
    with pytest.raises(openai.UnprocessableEntityError) as refused:  # "" is refused, as OpenAI refuses it
        client.embeddings.create(model="zsnli-encoder", input="")
    assert refused.value.param == "input", str(refused.value)
    single = client.embeddings.create(model="zsnli-encoder", input=TEXT)
    np.testing.assert_allclose(single.data[0].embedding, expected[0], atol=1e-6)

    from huggingface_hub import InferenceClient

    vectors = InferenceClient(model=f"{encoder_server}/embed").feature_extraction(TEXT)
    np.testing.assert_allclose(np.asarray(vectors).reshape(-1), expected[0], atol=1e-6)
    r = httpx.post(f"{encoder_server}/embed", json={"inputs": TEXTS})
    assert {"x-compute-time", "x-queue-time", "x-inference-time"} <= set(r.headers)


def test_the_shipped_encoder_declares_the_window_the_server_cuts_at():
    """Issue 57, item 8: sentence-transformers loaded ``model/embedding`` with a 512-token window while the server
    cuts at 256, so a long text's vectors differed by up to 0.047. The folder now carries the server's window (its
    tokenizer's ``model_max_length``, ``sentence_bert_config.json``), so the library cuts where the server does."""
    import json

    from transformers import AutoConfig, AutoTokenizer

    from zsnli.runtime.embedding import REPO_MODEL_DIR, encoder_window

    folder = REPO_MODEL_DIR / "embedding"
    window = encoder_window(AutoConfig.from_pretrained(folder))
    assert window == 256
    assert AutoTokenizer.from_pretrained(folder).model_max_length == window
    assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == window


def test_sentence_transformers_embeds_a_long_text_as_the_server_does():
    st = pytest.importorskip("sentence_transformers")
    from zsnli.runtime.embedding import REPO_MODEL_DIR, SentenceEncoder

    folder = REPO_MODEL_DIR / "embedding"
    long_text = " ".join([TEXT] * 40)  # about 600 tokens: past the window, inside the library's old 512
    library = st.SentenceTransformer(str(folder), device="cpu")
    assert library.max_seq_length == 256
    theirs = library.encode([long_text, TEXT], normalize_embeddings=True)
    ours = SentenceEncoder(folder).encode([long_text, TEXT])
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
