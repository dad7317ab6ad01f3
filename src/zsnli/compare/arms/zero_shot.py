"""Zero-shot arms: they never see a labelled row (``fit`` is the inherited no-op).

* ``served``: the zsnli server over HTTP, either a running one (``url``) or a
  model directory started with ``serve.sh`` for the run (``model_dir``);
  one ``POST /classify`` per document, every answer checked against the
  HTTP contract (`zsnli.harness.load.check_answer`);
* ``pipeline``: transformers' zero-shot-classification pipeline
  (`zsnli.compare.arms.baselines.PipelineBaseline`);
* ``embedding_similarity``: softmax(scale x cosine) of sentence embeddings
  (`zsnli.compare.arms.baselines.EmbeddingBaseline`).

Imports: `zsnli.compare.arms.base`, and lazily the baselines, the manifest helpers
and the harness's server/client modules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from zsnli.compare.arms.base import Arm, ArmError, register

LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def vmhwm_bytes(pid: int) -> int | None:
    """Peak resident set size (``VmHWM`` of /proc/PID/status, Linux) of one process in bytes; None if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _tree_peak_rss(pid: int) -> int | None:
    """Sum of `vmhwm_bytes` over a process and its descendants (psutil lists them)."""
    import psutil

    try:
        pids = [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return None
    peaks = [p for p in (vmhwm_bytes(x) for x in pids) if p is not None]
    return sum(peaks) if peaks else None


def model_dir_identity(model_dir: Path) -> dict[str, Any]:
    """Digest of a model directory's files, plus the sha256 of the training manifest and calibration.json
    the server would use with it (inside the directory, else beside it), if any."""
    from zsnli.manifest import CALIBRATION_NAME, MANIFEST_NAME, hash_model_dir, model_dir_digest, sha256_file

    ident: dict[str, Any] = {"model_dir": str(model_dir), "model_sha256": model_dir_digest(hash_model_dir(model_dir))}
    for name, key in ((MANIFEST_NAME, "manifest"), (CALIBRATION_NAME, "calibration")):
        for candidate in (model_dir / name, model_dir.parent / name):  # where the server looks, in its order
            if candidate.is_file():
                ident[key] = str(candidate)
                ident[f"{key}_sha256"] = sha256_file(candidate)
                break
    return ident


@register("served")
class ServedArm(Arm):
    """The zsnli HTTP server: ``url`` of a running one, or ``model_dir`` started with ``serve_cmd`` in ``root``."""

    def __init__(self, name: str | None = None, url: str | None = None, model_dir: str | None = None,
                 root: str = ".", serve_cmd: str = "bash serve.sh", startup_timeout: float = 300.0,
                 manifest: str | None = None, timeout: float = 300.0, concurrency: int = 1,
                 progress: bool = False) -> None:
        super().__init__(name)
        if (url is None) == (model_dir is None):
            raise ArmError(f"{self.name}: give exactly one of url and model_dir")
        if concurrency < 1:
            raise ArmError(f"{self.name}: concurrency must be >= 1, got {concurrency}")
        self.url, self.root = url, Path(root)
        self.model_dir = None if model_dir is None else (self.root / model_dir).resolve()
        self.serve_cmd, self.startup_timeout, self.timeout = serve_cmd, startup_timeout, timeout
        self.concurrency, self.progress = concurrency, progress
        self.manifest = None if manifest is None else self.root / manifest
        self.params = {"url": url, "model_dir": model_dir, "serve_cmd": serve_cmd if model_dir else None}
        self._server = None
        self._client = None
        self._health: dict[str, Any] = {}
        self._dir_identity: dict[str, Any] = {}
        self._peak: int | None = None

    @property
    def cost(self) -> str:  # type: ignore[override]
        """"free (local)" when the server runs on this machine; a remote server's cost is not known here."""
        if self.url is None or any(f"//{h}" in self.url for h in LOCAL_HOSTS):
            return "free (local)"
        return "not known (remote server)"

    def setup(self) -> None:
        import httpx

        from zsnli.harness.server import ServerError, ServerProcess, wait_for_url

        if self.model_dir is not None:
            if not self.model_dir.is_dir():
                raise ArmError(f"{self.name}: model directory not found: {self.model_dir}")
            self._dir_identity = model_dir_identity(self.model_dir)
            if self.manifest is None and "manifest" in self._dir_identity:
                self.manifest = Path(self._dir_identity["manifest"])
            self._server = ServerProcess(self.serve_cmd, cwd=self.root, env={"ZSNLI_MODEL_DIR": str(self.model_dir)})
            self._server.start()
            try:
                self._server.wait_healthy(self.startup_timeout)
            except ServerError as exc:
                self.close()
                raise ArmError(f"{self.name}: {exc}") from exc
            self.url = self._server.url
        try:  # a server still loading is waited for; nothing listening fails at once
            _, self._health = wait_for_url(self.url, self.startup_timeout)
        except ServerError as exc:
            self.close()
            raise ArmError(f"{self.name}: {exc}") from None
        self._client = httpx.Client(timeout=httpx.Timeout(self.timeout, connect=30.0))

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        from zsnli.harness.load import check_answer
        from zsnli.harness.examples import Example

        if self._client is None:
            raise ArmError(f"{self.name}: predict_proba before setup")
        out = np.empty((len(texts), len(labels)), dtype=np.float64)
        for i, text in enumerate(texts):
            example = Example(id=i, dataset="", text=text, labels=tuple(labels), label=0)
            resp = self._client.post(self.url.rstrip("/") + "/classify", json=example.request())
            try:
                body = resp.json()
            except ValueError:
                body = None
            probs, error = check_answer(resp.status_code, body, example)
            if error:
                raise ArmError(f"{self.name}: {error}")
            out[i] = probs
        return out

    def predict_documents(self, examples: Sequence[Any], on_done: Any = None) -> Any:
        """With ``concurrency`` > 1: every example through ``POST /classify`` with that many in flight
        (`zsnli.harness.load.run_requests`, each answer checked against the contract); else None."""
        if self.concurrency <= 1:
            return None
        from zsnli.compare.engine import Documents
        from zsnli.harness.load import run_requests

        result = run_requests(self.url, list(examples), concurrency=self.concurrency, warmups=0,
                              progress=self.progress, desc=self.name, request_timeout=self.timeout,
                              on_answer=on_done)
        rows = [(p, s, None if a.ok else a.error)
                for p, s, a in zip(result.probabilities, result.seconds, result.answers)]
        return Documents(rows, self.concurrency, result.wall_s)

    def model_sha256(self) -> str | None:
        return self._health.get("model_sha256") or self._dir_identity.get("model_sha256")

    def offline_training(self) -> dict[str, Any] | None:
        """``training.wall_seconds`` of the training manifest, if the manifest is known and names this model."""
        if self.manifest is None or not self.manifest.is_file():
            return None
        try:
            record = json.loads(self.manifest.read_text(encoding="utf-8"))
            seconds = float(record["training"]["wall_seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        served = self._health.get("model_sha256")
        if served and record.get("model_sha256") and served != record["model_sha256"]:
            return None  # the manifest describes another model
        return {"seconds": seconds, "source": f"{self.manifest.name} training.wall_seconds",
                "device": (record.get("environment") or {}).get("device")}

    def peak_rss_bytes(self) -> int | None:
        if self._server is not None and self._server.proc is not None and self._server.proc.poll() is None:
            self._peak = _tree_peak_rss(self._server.proc.pid)
        return self._peak

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._server is not None:
            self.peak_rss_bytes()
            self._server.stop()
            self._server = None

    def identity(self) -> dict[str, Any]:
        ident = super().identity()
        ident.update({k: self._health.get(k) for k in ("model", "scoring", "calibrated") if k in self._health})
        if self.url is not None:
            ident["url"] = self.url
        for key in ("manifest_sha256", "calibration_sha256"):
            if key in self._dir_identity:
                ident[key] = self._dir_identity[key]
        return ident


@register("pipeline")
class PipelineArm(Arm):
    """transformers' zero-shot pipeline on an NLI model directory (``model_dir`` under ``root``)."""

    def __init__(self, name: str | None = None, model_dir: str = "model", root: str = ".", batch_size: int = 1) -> None:
        super().__init__(name)
        self.model_dir = (Path(root) / model_dir).resolve()
        self.params = {"model_dir": model_dir, "batch_size": batch_size, "hypothesis_template": "{}"}
        self._model = None

    def setup(self) -> None:
        from zsnli.compare.arms.baselines import BaselineError, PipelineBaseline

        try:
            self._model = PipelineBaseline(self.model_dir, batch_size=self.params["batch_size"])
        except BaselineError as exc:
            raise ArmError(f"{self.name}: {exc}") from exc

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        return np.array([self._model.predict(t, labels) for t in texts], dtype=np.float64).reshape(len(texts), len(labels))

    def model_sha256(self) -> str | None:
        return self._model.identity().get("model_sha256") if self._model is not None else None


@register("embedding_similarity")
class EmbeddingSimilarityArm(Arm):
    """softmax(scale x cosine(document, label description)) of all-MiniLM-L6-v2 embeddings."""

    uses_encoder = True

    def __init__(self, name: str | None = None, model_dir: str | None = None, scale: float = 20.0) -> None:
        super().__init__(name)
        self.params = {"model_dir": model_dir, "scale": scale}
        self._model = None

    def setup(self) -> None:
        from zsnli.compare.arms.baselines import BaselineError, EmbeddingBaseline

        try:
            self._model = EmbeddingBaseline(self.params["model_dir"], scale=self.params["scale"])
        except BaselineError as exc:
            raise ArmError(f"{self.name}: {exc}") from exc

    def use_encoder(self, encoder: Any) -> None:
        """Embed with ``encoder`` (already loaded, shared) instead of loading one in `setup`."""
        from zsnli.compare.arms.baselines import EmbeddingBaseline

        self._model = EmbeddingBaseline(scale=self.params["scale"], encoder=encoder)

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        return np.array([self._model.predict(t, labels) for t in texts], dtype=np.float64).reshape(len(texts), len(labels))

    def model_sha256(self) -> str | None:
        return self._model.identity().get("model_sha256") if self._model is not None else None
