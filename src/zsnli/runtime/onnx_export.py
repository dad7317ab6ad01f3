"""ONNX export for the CPU backend: export, int8 quantisation and the weights-keyed cache.

Optional (``pip install 'zsnli[onnx]'``): nothing here imports onnxruntime
or onnx until a function that needs them runs, so the torch backend works
without them.

* `export_onnx` writes the served HF model as an ONNX graph (the TorchScript
  exporter, ``dynamo=False``, opset 17, dynamic batch and sequence axes) and,
  for the ``int8`` variant, quantises its weights with ONNX Runtime's dynamic
  quantisation (QInt8, per channel; activations are quantised at run time).
* The cache holds one file per model and variant:
  ``<cache_dir>/<weights_key>/<variant>.onnx``, ``cache_dir`` =
  ``ZSNLI_ONNX_CACHE_DIR`` else ``~/.cache/zsnli/onnx``. The key hashes the
  (manifest-verified) weights and config, the export format and the torch /
  transformers / onnxruntime / onnx versions: a change to any of them gets a
  new directory. A file is exported when missing or when it no longer
  matches the sha256 recorded beside it at export; it is written to a
  temporary name in the same directory and renamed into place
  (``os.replace``), so a crash never leaves a partial file under the final
  name and two processes exporting at once each rename a complete file.

The runtime that serves these files is `zsnli.runtime.onnx_model.OnnxNliModel`.

May import: `zsnli.manifest` (file hashing); torch, transformers, onnx and
onnxruntime lazily. Imported by `zsnli.runtime.onnx_model` and `zsnli.serving.startup`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
import warnings
from pathlib import Path

logger = logging.getLogger(__name__)

#: ONNX variants: ``fp32`` (the exported graph) and ``int8`` (dynamically quantised weights).
VARIANTS = ("fp32", "int8")
#: What ``dtype`` reports for each variant (the /health ``dtype`` field); ``int8-static`` is only
#: measured offline (the static int8 measurement of docs/performance.md, `zsnli.runtime.onnx_model.OnnxNliModel.from_file`), never cached or served.
VARIANT_DTYPES = {"fp32": "float32", "int8": "int8-dynamic", "int8-static": "int8-static"}
#: The file whose digest keys the cache.
WEIGHTS_NAME = "model.safetensors"
#: Hex characters of the cache key used as the cache directory name.
KEY_CHARS = 16
#: Bumped when the export or quantisation settings in this module change (part of the cache key).
EXPORT_FORMAT = "torchscript-opset17-int8-per-channel-v1"
#: Environment variable holding the cache directory (also `zsnli.config.Settings.onnx_cache_dir`).
CACHE_ENV = "ZSNLI_ONNX_CACHE_DIR"
OPSET = 17
INSTALL_HINT = "pip install 'zsnli[onnx]'"
_TMP_PREFIX = ".tmp-"


class OnnxUnavailableError(RuntimeError):
    """onnxruntime (or onnx, needed to export and quantise) is not installed."""


def require_onnx() -> None:
    """Raise ``OnnxUnavailableError`` naming ``pip install 'zsnli[onnx]'`` when a package is missing.

    Checks that onnxruntime and onnx can be found, without importing them
    (the server calls this among its fast startup checks).
    """
    missing = [name for name in ("onnxruntime", "onnx") if importlib.util.find_spec(name) is None]
    if missing:
        raise OnnxUnavailableError(f"the ONNX backend needs {' and '.join(missing)}: {INSTALL_HINT}")


def import_ort():
    try:
        import onnxruntime
    except ImportError as exc:
        raise OnnxUnavailableError(f"the ONNX backend needs onnxruntime ({exc}): {INSTALL_HINT}") from exc
    return onnxruntime


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown ONNX variant {variant!r}; expected one of {VARIANTS}")
    return variant


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- cache


def default_cache_dir() -> Path:
    """``$ZSNLI_ONNX_CACHE_DIR`` when set (non-empty), else ``~/.cache/zsnli/onnx``."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "zsnli" / "onnx"


def weights_key(model_dir: str | Path) -> str:
    """The cache key of a model directory (16 hex characters).

    First 16 hex of sha256 over: sha256(model.safetensors), sha256(config.json)
    (its id2label and shapes shape the graph), ``EXPORT_FORMAT`` and the torch,
    transformers, onnxruntime and onnx versions that trace, export and quantise. Any change to one of
    them gives a new directory, so a stale export is never served.
    Raises ``FileNotFoundError`` when the directory has no ``model.safetensors``
    or ``config.json`` (e.g. sharded or ``pytorch_model.bin`` checkpoints, which
    this backend does not key).
    """
    from ..manifest import sha256_file

    parts = []
    for name in (WEIGHTS_NAME, "config.json"):
        path = Path(model_dir) / name
        if not path.is_file():
            raise FileNotFoundError(f"the ONNX backend needs {path} (its sha256 keys the ONNX cache)")
        parts.append(f"{name}={sha256_file(path)}")
    parts.append(f"format={EXPORT_FORMAT}")
    parts.append(f"versions={_library_versions()}")
    return _sha256_bytes("\n".join(parts).encode())[:KEY_CHARS]


def _library_versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for dist in ("torch", "transformers", "onnxruntime", "onnx"):
        try:
            out.append(f"{dist}={version(dist)}")
        except PackageNotFoundError:
            out.append(f"{dist}=none")
    return ",".join(out)


def cache_path(model_dir: str | Path, variant: str, cache_dir: str | Path | None = None) -> Path:
    """Where the ``variant`` ONNX file of ``model_dir``'s weights lives (it may not exist yet).

    ``<cache_dir or default_cache_dir()>/<weights_key(model_dir)>/<variant>.onnx``.
    Raises ``ValueError`` on an unknown variant, ``FileNotFoundError`` as `weights_key`.
    """
    check_variant(variant)
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / weights_key(model_dir) / f"{variant}.onnx"


# --------------------------------------------------------------------------- export


def export_onnx(model_dir: str | Path, out_path: str | Path, quantize: bool) -> str:
    """Export the NLI model in ``model_dir`` to ONNX at ``out_path``; returns the file's sha256 (hex).

    The model is loaded from the local directory (``local_files_only``,
    float32, eager attention so the padding mask is applied as plain graph
    ops) and traced with ``torch.onnx.export(dynamo=False, opset_version=17)``
    on a padded batch of two pairs. Graph inputs: ``input_ids``,
    ``attention_mask`` and, only when the tokenizer's ``model_input_names``
    has it, ``token_type_ids`` (all int64 ``[batch, seq]``); output ``logits``
    float32 ``[batch, C]``. ``quantize``: weights become int8 with
    ``onnxruntime.quantization.quantize_dynamic`` (QInt8, per channel).

    The file is written under a temporary name in ``out_path``'s directory
    and renamed into place, so ``out_path`` is either absent or complete;
    its sha256 is recorded beside it (``digest_path(out_path)``) first.
    Raises ``OnnxUnavailableError`` when onnx/onnxruntime are missing,
    ``OSError`` when the directory is not writable, and what transformers or
    the exporter raise on a model they cannot load or trace.
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    require_onnx()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, local_files_only=True, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in getattr(tokenizer, "model_input_names", []):
        names.append("token_type_ids")
    # Two pairs of different lengths: batch > 1 and a mask with zeros, so no shape or
    # all-ones-mask special case is baked into the trace.
    sample = tokenizer(
        ["The team won the match.", "Shares fell after the bank cut its forecast for the year."],
        ["This text is about sport.", "This text is about business."],
        padding=True,
        return_tensors="pt",
        return_token_type_ids="token_type_ids" in names,
    )
    args = tuple(sample[n].to(torch.long) for n in names)

    class _Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return self.model(**dict(zip(names, tensors))).logits

    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes["logits"] = {0: "batch"}
    with tempfile.TemporaryDirectory(prefix=_TMP_PREFIX, dir=out_path.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        with warnings.catch_warnings(), torch.no_grad():
            # Python-bool shape checks in transformers' code: harmless for these dynamic axes
            # (the tests compare ORT with torch on batches of other shapes).
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            # the exporter's generic note on aten::index (no negative indices in these graphs)
            warnings.filterwarnings("ignore", message="Exporting aten::index", category=UserWarning)
            torch.onnx.export(_Logits().eval(), args, str(fp32), dynamo=False, input_names=names,
                              output_names=["logits"], dynamic_axes=axes, opset_version=OPSET)
        final = _quantize(fp32, Path(tmp) / "int8.onnx") if quantize else fp32
        with open(final, "rb+") as handle:
            data = handle.read()
            os.fsync(handle.fileno())
        digest = _sha256_bytes(data)
        # The digest goes in place first, then the model: a reader that finds the model always
        # finds a digest (the export is deterministic, so concurrent exports agree on it). The
        # work directory is inside out_path's directory, so both renames are atomic.
        staged = Path(tmp) / "digest"
        staged.write_text(digest + "\n", encoding="utf-8")
        os.replace(staged, digest_path(out_path))
        os.replace(final, out_path)
    logger.info("exported %s (%s, %.1f MB, sha256 %s)", out_path, "int8" if quantize else "fp32",
                len(data) / 1e6, digest[:12])
    return digest


def _quantize(fp32: Path, out: Path) -> Path:
    """Dynamic int8 quantisation of ``fp32`` into ``out`` (QInt8 weights, per channel); returns ``out``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantiser warns through logging.warning(), which installs a root handler when
    # there is none, after which every log line of the process is printed twice.
    root = logging.getLogger()
    guard = logging.NullHandler() if not root.handlers else None
    if guard is not None:
        root.addHandler(guard)
    try:
        quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True)
    finally:
        if guard is not None:
            root.removeHandler(guard)
    return out


def digest_path(onnx_path: str | Path) -> Path:
    """Where the sha256 (hex) recorded at export sits: ``<onnx_path>.sha256``."""
    onnx_path = Path(onnx_path)
    return onnx_path.with_name(onnx_path.name + ".sha256")


def ensure_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """Create the cache root if needed and check that a file can be written there.

    Returns the root. Raises ``OSError`` naming ``ZSNLI_ONNX_CACHE_DIR`` when
    it cannot be created or written (a file in the way, no permission).
    """
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(prefix=_TMP_PREFIX, dir=root):
            pass
    except OSError as exc:
        raise OSError(f"the ONNX cache {root} is not a writable directory ({exc.strerror or exc}); "
                      f"set {CACHE_ENV}") from exc
    return root


#: A ``.tmp-*`` entry older than this in a cache directory is a crashed export's leftover.
STALE_TEMP_S = 3600.0


def remove_stale_temps(directory: Path, max_age_s: float = STALE_TEMP_S) -> list[Path]:
    """Delete ``.tmp-*`` files and directories in ``directory`` last modified over ``max_age_s`` ago
    (an export killed mid-way leaves one; a running export's is younger). Returns what was removed;
    errors (already gone, no permission) are ignored."""
    import shutil
    import time

    removed: list[Path] = []
    if not directory.is_dir():
        return removed
    now = time.time()
    for entry in directory.glob(_TMP_PREFIX + "*"):
        try:
            if now - entry.stat().st_mtime <= max_age_s:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry)
        except OSError:
            continue
    return removed


def cached_bytes(model_dir: Path, path: Path, variant: str) -> tuple[bytes, str]:
    """The ONNX file's bytes and sha256, exported first when missing or not matching its recorded digest."""
    for stale in remove_stale_temps(path.parent):
        logger.info("removed a stale temporary export %s", stale)
    for attempt in (1, 2):
        if not path.is_file() or not digest_path(path).is_file():
            logger.info("no cached ONNX %s model at %s: exporting", variant, path)
            try:
                export_onnx(model_dir, path, quantize=variant == "int8")
            except OSError as exc:
                raise OSError(f"cannot write the ONNX cache {path.parent}: {exc} (set {CACHE_ENV})") from exc
        # Hash and load the same bytes: another process may replace the file meanwhile.
        data = path.read_bytes()
        digest = _sha256_bytes(data)
        expected = digest_path(path).read_text(encoding="utf-8").strip()
        if digest == expected:
            return data, digest
        logger.warning("cached ONNX file %s has sha256 %s, not the %s recorded at export: exporting it again",
                       path, digest[:12], expected[:12])
        path.unlink(missing_ok=True)
    raise RuntimeError(f"the ONNX file {path} does not match its recorded digest even after a fresh export")
