"""The ONNX Runtime CPU runtime: `OnnxNliModel`, an `zsnli.runtime.model.NliRuntime` beside the torch one.

Tokenisation, truncation (``only_first``), padding (to a multiple of 8) and
``predict_logits`` are `NliRuntime`'s; only ``logits`` differs: it runs an
ONNX Runtime session on the file `zsnli.runtime.onnx_export` exported and cached.

int8 changes the numbers: on the shipped MiniLM the logits moved by up to
about 0.46 from fp32 (measured on this project's 2-core CPU, where the int8
graph ran 2.3x faster than torch fp32); docs/performance.md
carries the measured figures. Dynamic quantisation also scales each
activation tensor by its batch-wide range, so with int8 a pair's logits
depend slightly on the other pairs in its batch (other requests' pairs
under the server's cross-request batching); fp32 is batch-invariant.

May import: `zsnli.runtime.model`, `zsnli.runtime.model_config`, `zsnli.runtime.onnx_export`; onnxruntime and
transformers lazily. Imported by `zsnli.serving.startup` (the default loader).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .model import Encoded, NliRuntime
from .model_config import DEFAULT_MAX_LENGTH, label_indices, model_window
from .onnx_export import VARIANT_DTYPES, cache_path, cached_bytes, check_variant, import_ort


class OnnxNliModel(NliRuntime):
    """An `NliRuntime` whose forward runs in an ONNX Runtime CPU session.

    Extra attributes: ``session`` (``onnxruntime.InferenceSession``),
    ``variant`` (``"fp32"``/``"int8"``), ``backend``
    (``"onnx-fp32"``/``"onnx-int8"``), ``onnx_path`` (str) and ``onnx_sha256``
    (hex digest of the exact bytes the session was built from). ``device`` is
    ``"cpu"``; ``dtype`` is ``"float32"`` or ``"int8-dynamic"`` (int8
    weights, activations quantised at run time).
    """

    def __init__(self, tokenizer, config, session, variant: str, max_length: int,
                 onnx_path: str | Path, onnx_sha256: str) -> None:
        if variant not in VARIANT_DTYPES:
            raise ValueError(f"unknown ONNX variant {variant!r}; expected one of {tuple(VARIANT_DTYPES)}")
        super().__init__(tokenizer, config, "cpu", VARIANT_DTYPES[variant], max_length)
        self.session = session
        self.variant = variant
        self.backend = f"onnx-{variant}"
        self.onnx_path = str(onnx_path)
        self.onnx_sha256 = onnx_sha256
        self._inputs = [i.name for i in session.get_inputs()]

    @classmethod
    def load(cls, model_dir: str | Path, variant: str = "int8", threads: int | None = None,
             cache_dir: str | Path | None = None, max_length: int | None = None) -> "OnnxNliModel":
        """Load the tokenizer and config from ``model_dir`` and an ORT session on the cached ONNX file.

        variant: ``"fp32"`` or ``"int8"``.
        threads: ORT intra-op threads (None or 0: ORT's default, one per
            physical core); inter-op threads are 1, graph optimisation
            ``ORT_ENABLE_ALL``.
        cache_dir: cache root (default `zsnli.runtime.onnx_export.default_cache_dir`); the file is
            ``cache_path(model_dir, variant, cache_dir)`` and is exported
            (`zsnli.runtime.onnx_export.export_onnx`) only when missing.
        max_length: cap on the model window in tokens (default 512).
        Raises ``ModelConfigError`` when id2label has no entailment/contradiction
        label, ``OnnxUnavailableError`` when onnxruntime/onnx are missing,
        ``FileNotFoundError`` without ``model.safetensors``, ``OSError`` when
        the cache is not writable (the message names ZSNLI_ONNX_CACHE_DIR),
        ``RuntimeError`` when ORT cannot load the file. A cached file whose
        sha256 differs from the digest recorded at export (damaged, edited)
        is never served: it is exported again, with a warning.
        """
        from transformers import AutoConfig, AutoTokenizer

        check_variant(variant)
        ort = import_ort()
        model_dir = Path(model_dir)
        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        label_indices(config.id2label)  # refuse early, before exporting
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        path = cache_path(model_dir, variant, cache_dir)
        data, digest = cached_bytes(model_dir, path, variant)
        session = _session(ort, data, path, threads)
        window = model_window(tokenizer, config, max_length or DEFAULT_MAX_LENGTH)
        return cls(tokenizer, config, session, variant, window, path, digest)

    @classmethod
    def from_file(cls, model_dir: str | Path, onnx_path: str | Path, variant: str = "fp32",
                  threads: int | None = None, max_length: int | None = None) -> "OnnxNliModel":
        """An `OnnxNliModel` on a given ONNX file, outside the cache (offline measurement of a graph
        built elsewhere, e.g. the static int8 graphs of docs/performance.md; never served).

        Tokenizer and config come from ``model_dir``; ``variant`` (a key of
        `zsnli.runtime.onnx_export.VARIANT_DTYPES`) names what ``dtype`` reports; ``threads`` and
        ``max_length`` as in `load`. Raises ``ModelConfigError``, ``OnnxUnavailableError``,
        ``FileNotFoundError`` (no such file), ``RuntimeError`` (ORT cannot load it).
        """
        from transformers import AutoConfig, AutoTokenizer

        ort = import_ort()
        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        label_indices(config.id2label)
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        data = Path(onnx_path).read_bytes()
        window = model_window(tokenizer, config, max_length or DEFAULT_MAX_LENGTH)
        return cls(tokenizer, config, _session(ort, data, onnx_path, threads), variant, window, onnx_path,
                   hashlib.sha256(data).hexdigest())

    def describe(self) -> dict[str, Any]:
        """`NliRuntime.describe` plus ``onnx_sha256`` (the exact file the session runs)."""
        return {**super().describe(), "onnx_sha256": self.onnx_sha256}

    def logits(self, encoded_batch: Sequence[Encoded]) -> np.ndarray:
        """Forward one batch in the ORT session (padded by `NliRuntime.collate`): float32 ``[B, C]``."""
        if not encoded_batch:
            return np.zeros((0, self.num_labels), dtype=np.float32)
        inputs = self.collate(encoded_batch)
        (out,) = self.session.run(["logits"], {name: inputs[name] for name in self._inputs})
        return np.asarray(out, dtype=np.float32)


def _session(ort, data: bytes, path: str | Path, threads: int | None):
    """An ORT CPU session on the graph bytes ``data`` (read from ``path``): intra-op ``threads``
    (None or 0: ORT's default), one inter-op thread, no spinning, all graph optimisations.
    Raises ``RuntimeError`` when ORT cannot load the graph."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads or 0)
    opts.inter_op_num_threads = 1
    # No busy-waiting between ops, so idle ORT threads do not compete with the embedding,
    # tokeniser and event-loop threads on a small CPU. Not a measured speed-up: int8 with the
    # calibrated scoring, 100 public documents, two runs each, gave 5.82 / 4.34 docs/s spinning
    # and 4.36 / 4.92 without (run-to-run spread about 20%).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        return ort.InferenceSession(data, sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        raise RuntimeError(f"ONNX Runtime cannot load {path}: {exc} (delete it to re-export)") from exc
