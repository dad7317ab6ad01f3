"""`huggingface_hub`'s own InferenceClient (sync and async) against a live server (issue 40 A): it reads
``[{"label", "score"}]``, which the server answers to its User-Agent; other callers keep the pipeline's
``{"sequence", "labels", "scores"}`` (`zsnli.serving.inference_api.wants_elements`)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from conftest import cached_loader, make_settings
from http_support import ThreadServer

pytest.importorskip("huggingface_hub")

TEXT = "The striker scored twice as the home side won the derby 3-1."
LABELS = ["sport", "business", "science"]


@pytest.fixture
def server(bert_dir, monkeypatch):
    from huggingface_hub import constants

    from zsnli.serving.app import create_app

    # the tests run with HF_HUB_OFFLINE=1, which blocks every huggingface_hub request, even to 127.0.0.1
    monkeypatch.setattr(constants, "is_offline_mode", lambda: False)
    settings = make_settings(bert_dir)
    with ThreadServer(create_app(settings, loader=cached_loader), settings) as srv:
        yield f"http://127.0.0.1:{srv.port}"


def _pipeline(url: str, path: str = "/", inputs=TEXT, **headers) -> httpx.Response:
    return httpx.post(url + path, json={"inputs": inputs, "parameters": {"candidate_labels": LABELS}},
                      headers=headers)


def test_inference_client_reads_the_answer_sync_and_async(server):
    from huggingface_hub import AsyncInferenceClient, InferenceClient

    legacy = _pipeline(server).json()  # what the pipeline's users get (no hf_hub User-Agent)
    expected = list(zip(legacy["labels"], legacy["scores"]))
    for path in ("", "/v1/zero-shot-classification"):
        out = InferenceClient(model=server + path).zero_shot_classification(TEXT, candidate_labels=LABELS)
        assert [e.label for e in out] == [lb for lb, _ in expected]
        assert [e.score for e in out] == pytest.approx([sc for _, sc in expected])

        async def run():
            return await AsyncInferenceClient(model=server + path).zero_shot_classification(
                TEXT, candidate_labels=LABELS, multi_label=True, hypothesis_template="This text is about {}.")

        out = asyncio.run(run())
        assert sorted(e.label for e in out) == sorted(LABELS)
        assert [e.score for e in out] == sorted((e.score for e in out), reverse=True)


def test_the_answer_shape_follows_the_user_agent(server):
    hub = "unknown/None; hf_hub/1.4.0; python/3.11"
    one = _pipeline(server, **{"User-Agent": hub}).json()
    assert [sorted(e) for e in one] == [["label", "score"]] * 3
    many = _pipeline(server, "/v1/zero-shot-classification", inputs=[TEXT, "Shares fell 4%."],
                     **{"User-Agent": hub}).json()
    assert len(many) == 2 and all(isinstance(a, list) and a[0].keys() == {"label", "score"} for a in many)
    for agent in ("python-httpx/0.28", "unknown/None; hf_hub/0.27.1; python/3.11", "curl/8.5.0"):
        legacy = _pipeline(server, **{"User-Agent": agent}).json()
        assert legacy.keys() == {"sequence", "labels", "scores"}, agent


@pytest.mark.parametrize("agent,elements", [
    ("unknown/None; hf_hub/1.2.0; python/3.11.9", True), ("transformers/4.5; hf_hub/2.4.0", True),
    ("hf_hub/1.10.1", True), ("unknown/None; hf_hub/1.1.5; python/3.11", False), ("hf_hub/0.36.0", False),
    ("my_hf_hub/9.9", False), ("", False), (None, False)])
def test_wants_elements(agent, elements):
    from zsnli.serving.inference_api import wants_elements

    assert wants_elements(agent) is elements
