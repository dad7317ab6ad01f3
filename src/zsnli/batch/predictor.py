"""The per-actor scorer of ``zsnli-batch``: rows of a corpus in, one output row per input row out.

`Predictor` is what Ray Data's ``map_batches`` builds once per actor: it
loads the model once through `zsnli.serving.offline.OfflineClassifier` (the same
`zsnli.serving.service.ZeroShotClassifier` that answers ``POST /classify``, so the
probabilities are the server's), then turns each Arrow batch into the
output columns of `OUTPUT_SCHEMA`. A row that cannot be scored (no text,
no labels, a label that cannot fit the window, a failed forward) gets an
``error`` and null probabilities; it is never dropped and never fails the job.

Nothing here imports Ray: the module is usable (and tested) on its own.

May import: pyarrow, `zsnli.config`, `zsnli.manifest`, `zsnli.serving.offline`,
`zsnli.errors`. Imported by `zsnli.batch.cli`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..config import Settings
from ..errors import ApiError
from ..manifest import sha256_file
from ..serving.offline import OfflineClassifier

logger = logging.getLogger("zsnli.batch")

#: Environment variable naming a marker file for the fault test: the first batch call that
#: creates it (exclusively) kills its own actor process, as a crashed worker would.
FAULT_MARKER_ENV = "ZSNLI_BATCH_FAULT_KILL_MARKER"

#: An actor that takes longer than this to load is reported with a warning (seconds).
SLOW_START_S = 20.0


@dataclass(frozen=True)
class ColumnSpec:
    """Where a row's fields are: ``id_col`` and ``text_col`` name input columns; the labels come
    from ``labels_col`` (a list per row) or are ``labels`` for every row. ``template`` and
    ``multi_label`` apply to every row (``None``: the labels are the hypotheses)."""

    id_col: str = "id"
    text_col: str = "text"
    labels_col: str | None = None
    labels: tuple[str, ...] | None = None
    template: str | None = None
    multi_label: bool = False

    def input_columns(self) -> list[str]:
        """The input columns a run reads."""
        return [self.id_col, self.text_col] + ([self.labels_col] if self.labels_col else [])


def output_schema(id_name: str, id_type: pa.DataType) -> pa.Schema:
    """The output table's schema; the id column keeps the input's name and Arrow type (resume
    matches output ids against input ids by that name)."""
    return pa.schema([
        (id_name, id_type),
        ("labels", pa.list_(pa.string())),
        ("probabilities", pa.list_(pa.float64())),
        ("top_label", pa.string()),
        ("top_probability", pa.float64()),
        ("error", pa.string()),
        ("model_sha256", pa.string()),
        ("calibration_sha256", pa.string()),
    ])


def calibration_digest(settings: Settings) -> str | None:
    """sha256 of the calibration.json the service reads (None when there is none: uncalibrated)."""
    path = settings.resolved_calibration_path()
    return sha256_file(path) if Path(path).is_file() else None


def row_document(text: Any, labels: Any, spec: ColumnSpec) -> dict | str:
    """One row as a `ZeroShotClassifier.classify_many` document, or the reason it cannot be scored."""
    if not isinstance(text, str):
        return "text is missing" if text is None else f"text must be a string, got {type(text).__name__}"
    if labels is None or isinstance(labels, str) or not hasattr(labels, "__iter__"):
        return "labels must be a list of strings"
    labels = list(labels)
    if not labels:
        return "labels is empty"
    if not all(isinstance(lb, str) for lb in labels):
        return "labels must be a list of strings"
    doc = {"text": text, "labels": labels, "multi_label": spec.multi_label}
    if spec.template is not None:
        doc["hypothesis_template"] = spec.template
    return doc


class Predictor:
    """Callable class for ``map_batches``: loads once in ``__init__``, scores in ``__call__``.

    settings: the service settings (model dir, calibration, device...). spec: the columns.
    concurrency: documents admitted at once inside the actor (their pairs share forwards).
    fault_marker: see `FAULT_MARKER_ENV` (tests only).
    Raises what `OfflineClassifier` raises when the model cannot be loaded (the actor fails to start).
    """

    def __init__(self, settings: Settings, spec: ColumnSpec, concurrency: int = 64,
                 fault_marker: str | None = None) -> None:
        t0 = time.monotonic()
        self.spec, self.concurrency, self.fault_marker = spec, concurrency, fault_marker
        self._clf = OfflineClassifier(settings).__enter__()
        state = self._clf.service.state
        self.model_sha256 = state.model_sha256
        self.calibration_sha256 = calibration_digest(self._clf.service.settings) if state.calibrated else None
        took = time.monotonic() - t0
        log = logger.warning if took > SLOW_START_S else logger.info
        log("batch actor pid %d ready in %.1f s (model %s, device %s)%s", os.getpid(), took, self.model_sha256[:12],
            state.model.device, " - slow start: loading the model dominates short runs" if took > SLOW_START_S else "")

    def _maybe_die(self) -> None:
        if not self.fault_marker:
            return
        try:
            fd = os.open(self.fault_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        logger.warning("fault test: actor pid %d exits mid-run", os.getpid())
        os._exit(17)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Score one Arrow batch; returns a table of `output_schema`, one row per input row, in order."""
        self._maybe_die()
        spec = self.spec
        texts = batch.column(spec.text_col).to_pylist()
        per_row = batch.column(spec.labels_col).to_pylist() if spec.labels_col else [spec.labels] * len(texts)
        docs = [row_document(t, lb, spec) for t, lb in zip(texts, per_row)]
        todo = [i for i, d in enumerate(docs) if isinstance(d, dict)]
        try:
            results = self._clf.classify_many([docs[i] for i in todo], self.concurrency)
        except Exception as exc:  # noqa: BLE001 - a broken batch becomes per-row errors, never a failed job
            logger.exception("batch of %d rows failed", len(todo))
            results = [f"batch failed: {type(exc).__name__}: {exc}"] * len(todo)
        outcome: list[Any] = list(docs)
        for i, res in zip(todo, results):
            outcome[i] = res
        return self._table(batch.column(spec.id_col), docs, outcome)

    def _table(self, ids: pa.ChunkedArray, docs: list, outcome: list) -> pa.Table:
        cols: dict[str, list] = {k: [] for k in ("labels", "probabilities", "top_label", "top_probability", "error")}
        for doc, res in zip(docs, outcome):
            labels = doc["labels"] if isinstance(doc, dict) else None
            if isinstance(res, ApiError):
                res = f"{res.body()['error_type']}: {res}"
            if isinstance(res, str):
                probs, top, err = None, None, res
            elif not all(math.isfinite(p) for p in res):
                probs, top, err = None, None, "non_finite: probabilities are not finite"
            else:
                probs, err = res, None
                top = max(range(len(res)), key=res.__getitem__)
            cols["labels"].append(labels)
            cols["probabilities"].append(probs)
            cols["top_label"].append(labels[top] if top is not None else None)
            cols["top_probability"].append(probs[top] if top is not None else None)
            cols["error"].append(err)
        n = len(docs)
        schema = output_schema(self.spec.id_col, ids.type)
        return pa.table([ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids] +
                        [pa.array(cols[k], schema.field(k).type) for k in cols] +
                        [pa.array([self.model_sha256] * n, pa.string()),
                         pa.array([self.calibration_sha256] * n, pa.string())], schema=schema)

    def __del__(self) -> None:
        clf = getattr(self, "_clf", None)
        if clf is not None:
            try:
                clf.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass
