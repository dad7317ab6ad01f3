"""Start-up checks and the model loader: what runs before the service admits a request.

`preflight` is the fast refusal (explicit paths, the variant and its pin, a hub model found in the cache, model
directory, config, ONNX packages, training manifest, calibration, embedding digest) run
before the server listens; it returns a `Preflight` (what will be served); `resolve_variant` and `serve_variant`
decide which model folder is served (the base only as the top-level manifest pins it);
`default_loader` builds the runtime ``ZSNLI_BACKEND`` names;
`resolved_embedding_dir` says where the sentence encoder lives.

May import: `zsnli.config`, `zsnli.runtime.hub`, `zsnli.manifest`, `zsnli.runtime.model`, `zsnli.runtime.model_config`,
`zsnli.runtime.devices`,
`zsnli.scoring`, `zsnli.runtime.embedding`, `zsnli.runtime.precision`, `zsnli.runtime.shapes`,
`zsnli.runtime.onnx_export` (and
`zsnli.runtime.onnx_model` lazily). Imported by `zsnli.serving.service`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..config import HUB_BASE_REFUSAL, Settings, SettingsError
from ..manifest import (BASE_VARIANT_SUBDIR, CALIBRATION_NAME, PRETRAINED_DIRS, ManifestError, check_variant_pin,
                        hash_model_dir, interrupted_installs, load_manifest, model_dir_digest, variant_of,
                        verify_model_files)
from ..runtime.devices import device_kind, device_problem, nvidia_devices_present, torch_build
from ..runtime.embedding import SentenceEncoder, default_embedding_dir, embedding_digest
from ..runtime.hub import HubModelError, resolve_hub_model
from ..runtime.model import NliModel, NliRuntime, default_token_budget
from ..runtime.model_config import ModelConfigError, label_indices
from ..runtime.onnx_export import OnnxUnavailableError, ensure_cache_dir, require_onnx
from ..runtime.precision import fixed_shapes_for, serving_dtype
from ..runtime.progress import StderrHandler
from ..runtime.shapes import FixedShapes, accelerator_rows
from ..request_scoring import EMBEDDING_SCORING_KEY, RequestScoring, load_embedding_scoring, load_request_scoring
from ..scoring import ScoringConfigError, fitted_model_sha256

logger = logging.getLogger("zsnli")

#: What a refused start-up raises (each carries a one-line reason).
STARTUP_ERRORS = (ManifestError, ModelConfigError, ScoringConfigError, OnnxUnavailableError, HubModelError, OSError,
                  SettingsError)

ModelLoader = Callable[[Settings], NliRuntime]


class StartupRefused(RuntimeError):
    """A preflight check failed; the server does not start (uvicorn exits non-zero)."""


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (its type name when it has none)."""
    text = f"{exc}".strip() or type(exc).__name__
    return " ".join(text.split())


def default_loader(settings: Settings) -> NliRuntime:
    """``settings.backend``: torch -> ``NliModel.load``; onnx-fp32 / onnx-int8 -> ``OnnxNliModel.load``
    (ORT intra-op threads = ``ZSNLI_TORCH_THREADS`` when set).

    The torch runtime's dtype is ``ZSNLI_DTYPE``, else bf16 where the device computes it natively
    (`zsnli.runtime.precision.serving_dtype`; the reason lands in ``dtype_reason``), and it runs in
    fixed shapes (`zsnli.runtime.shapes`) as ``ZSNLI_FIXED_SHAPES`` says (`torch_shapes`)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if settings.backend.startswith("onnx-"):
        from ..runtime.onnx_model import OnnxNliModel

        return OnnxNliModel.load(settings.model_dir, variant=settings.backend[len("onnx-"):],
                                 threads=settings.torch_threads, cache_dir=settings.onnx_cache_dir,
                                 max_length=settings.max_length)
    device = settings.device or _default_device()
    build = torch_build()
    if device_kind(device) == "cpu" and nvidia_devices_present():
        logger.warning("%s; serving on the cpu", build)
    else:
        logger.info("%s; serving on %s", build, device)
    choice = serving_dtype(settings.dtype, device)
    model = NliModel.load(settings.model_dir, device=device, dtype=choice.name, max_length=settings.max_length)
    model.dtype_reason = choice.reason
    model.shapes = torch_shapes(settings, choice.name, model.max_length, model.device)
    return model


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def torch_shapes(settings: Settings, dtype: str, window: int, device: str) -> FixedShapes | None:
    """The fixed forward shapes of a torch runtime (NLI model or sentence encoder) of ``window`` tokens in
    ``dtype``, or None: `zsnli.runtime.precision.fixed_shapes_for` (``ZSNLI_FIXED_SHAPES``) decides, the
    rows per bucket come from the token budget (``ZSNLI_TOKEN_BUDGET`` or the device's default), capped on
    an accelerator at `zsnli.runtime.shapes.accelerator_rows` (the same rows for every width)."""
    if not fixed_shapes_for(settings.fixed_shapes, dtype):
        return None
    budget = settings.token_budget or default_token_budget(device)
    cap = None if device_kind(device) == "cpu" else accelerator_rows(budget)
    return FixedShapes.for_window(window, budget, max_rows=cap)


#: The sentence encoder's dtype: fp32 whatever the NLI model's (docs/performance.md, issue 33: the cosine
#: term is multiplied by the calibrated weight, and only fp32 cosines were measured out of fold).
ENCODER_DTYPE = "float32"
#: Its fp32 products in TF32 on a CUDA GPU (`zsnli.runtime.devices.tf32_matmuls`). Issue 58, 100 public documents,
#: against fp32 throughout: the encoder in bf16 moved answers by up to 1.2e-2 (the fast path's arg-max on 2 of 100),
#: past the 6.4e-3 that bf16 moves the NLI model's (docs/performance.md); TF32 (emulated on the CPU) by 8.4e-4 on
#: the fast path and not past the NLI model's bf16 on the default.
ENCODER_TF32 = True


def load_encoder(settings: Settings, model: NliRuntime) -> SentenceEncoder:
    """The sentence encoder of the cosine term (`resolved_embedding_dir`) on the NLI model's device, in
    `ENCODER_DTYPE` (TF32 products on a CUDA GPU: `ENCODER_TF32`), in fixed shapes whenever the NLI model runs
    in them (``model.shapes``, with its token budget and rows), so the whole answer of a request, cosine
    included, is the one it gets alone."""
    encoder = SentenceEncoder(resolved_embedding_dir(settings), device=str(model.device), dtype=ENCODER_DTYPE,
                              tf32=ENCODER_TF32)
    shapes = getattr(model, "shapes", None)
    if shapes is not None:
        encoder.with_fixed_shapes(shapes.token_budget, shapes.max_rows)
    return encoder


def resolved_embedding_dir(settings: Settings) -> Path:
    """The sentence-embedding model directory: ``ZSNLI_EMBEDDING_DIR``, else
    `zsnli.runtime.embedding.default_embedding_dir` of the served model directory (``<model dir>/embedding``; for
    the base variant, ``<ZSNLI_MODEL_DIR>/embedding``: the same rule as ``train.py select``'s default)."""
    if settings.embedding_dir:
        return Path(settings.embedding_dir)
    return default_embedding_dir(settings.model_dir)


def missing_model_dir(settings: Settings, flag: str | None = None, given: bool = False) -> str | None:
    """One line when the local model directory ``settings`` would serve does not exist (None when it does,
    or when a hub model is served), naming where the path came from and how to give another: the command's
    own ``flag`` (``--model-dir``) when it has one (``given``: the flag named this path), else
    ``ZSNLI_MODEL_DIR``; the default ``./model`` is relative to the working directory, so a command run
    outside the checkout is told so. For command lines that check before they start (`zsnli.cli`,
    `zsnli.batch.cli`); the server itself has no flag (`preflight` says ``set ZSNLI_MODEL_DIR``)."""
    if settings.model_id or Path(settings.model_dir).is_dir():
        return None
    where = Path(settings.model_dir)
    what = "is not a directory" if where.exists() else "not found"
    if given and flag:
        return f"{flag} {where}: {what}"
    if settings.model_dir == Settings.model_dir:
        source = f"the default {Settings.model_dir}, relative to the working directory {Path.cwd()}"
    else:
        source = "from ZSNLI_MODEL_DIR"
    how = f"give {flag} DIR or set ZSNLI_MODEL_DIR" if flag else "set ZSNLI_MODEL_DIR"
    return f"model directory {what}: {where} ({source}): {how}"


def _check_model_config(model_dir: Path) -> None:
    if not model_dir.is_dir():
        raise ModelConfigError(f"model directory not found: {model_dir} (set ZSNLI_MODEL_DIR)")
    config_path = model_dir / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ModelConfigError(f"no config.json in {model_dir}") from exc
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"config.json unreadable: {one_line(exc)}") from exc
    label_indices(config.get("id2label") or {})


@dataclass(frozen=True)
class Preflight:
    """What `preflight` found: the model to serve and how to score it.

    settings: the settings to serve with (``model_dir`` is the hub snapshot folder when
    ``ZSNLI_MODEL_ID`` is set). model_sha256: the digest of the model files
    (`zsnli.manifest.model_dir_digest`, the sentence encoder's subdirectory left out).
    files: ``{relative path: sha256}`` of every file under the model directory
    (``embedding/...`` included). model_id, revision: the hub id and commit, None for a
    local directory. verified: every file matched a training manifest. embedding_scoring: the
    ``scoring: "embedding"`` of calibration.json (`zsnli.request_scoring.load_embedding_scoring`), None without one.
    variant: ``small`` or ``base`` (`resolve_variant`).
    """

    settings: Settings
    model_sha256: str
    scoring: RequestScoring
    calibrated: bool
    verified: bool
    files: dict[str, str] = field(default_factory=dict)
    model_id: str | None = None
    revision: str | None = None
    embedding_scoring: RequestScoring | None = None
    variant: str = "small"


def _hash_all(model_dir: Path) -> tuple[str, dict[str, str]]:
    """``(digest of the trained files, {path: sha256} of every file, pretrained subdirectories included)``."""
    trained = hash_model_dir(model_dir)
    files = {name: entry["sha256"] for name, entry in trained.items()}
    for sub in PRETRAINED_DIRS:
        if (model_dir / sub).is_dir():
            files.update({f"{sub}/{name}": e["sha256"] for name, e in hash_model_dir(model_dir / sub).items()})
    return model_dir_digest(trained), dict(sorted(files.items()))


def _model_files(settings: Settings, model_dir: Path) -> tuple[str, dict[str, str], bool]:
    """``(digest of the model files, {path: sha256} of every file, verified against the training manifest)``.

    Every file is hashed once; with a manifest, each must match it (nothing missing or
    unlisted) or ``ManifestError`` names the first failing ones.
    """
    manifest_path = settings.resolved_manifest_path()
    if settings.skip_manifest_check:
        logger.warning("manifest check SKIPPED (ZSNLI_SKIP_MANIFEST_CHECK): development only")
        return (*_hash_all(model_dir), False)
    if not manifest_path.exists():
        if settings.model_id:
            logger.warning("no training manifest in the hub snapshot of %s: serving it unverified "
                           "(ZSNLI_MANIFEST_PATH names one to verify against)", settings.model_id)
        else:
            logger.warning("no training manifest at %s: serving %s unverified", manifest_path, model_dir)
        return (*_hash_all(model_dir), False)
    digest, files = verify_model_files(model_dir, manifest_path)
    logger.info("model files match %s", manifest_path)
    return digest, files, True


def _resolve_model(settings: Settings) -> tuple[Settings, str | None, str | None]:
    """``(settings to serve with, hub id, commit)``: with ``ZSNLI_MODEL_ID``, its cached (or, when
    allowed, downloaded) snapshot becomes ``model_dir``; otherwise the settings as they are."""
    if not settings.model_id:
        return settings, None, None
    hub = resolve_hub_model(settings.model_id, settings.model_revision, settings.allow_download)
    logger.info("ZSNLI_MODEL_ID=%s: serving commit %s from %s (ZSNLI_MODEL_DIR not used)",
                hub.model_id, hub.revision, hub.path)
    return replace(settings, model_dir=str(hub.path)), hub.model_id, hub.revision


def resolve_variant(settings: Settings) -> tuple[Settings, str]:
    """``(settings to serve with, variant)`` for ``ZSNLI_MODEL_VARIANT``: ``small`` serves ``model_dir`` as it is;
    ``base`` serves ``<model_dir>/base`` (`zsnli.manifest.BASE_VARIANT_SUBDIR`: a whole model folder with its own
    training_manifest.json and calibration.json, pinned by the top-level manifest's ``variants`` table:
    `serve_variant`); ``auto`` is ``base`` on a CUDA device (``ZSNLI_DEVICE``, else the default device) where that
    folder holds a model, else ``small``: the base-size model pays on a GPU, the small one on a CPU (issue 56).
    A ``model_dir`` that IS a variant folder (`zsnli.manifest.variant_of`: ``ZSNLI_MODEL_DIR=model/base``) is that
    variant, served as ``base`` is, and refused with ``small``. A hub model (``ZSNLI_MODEL_ID``) is ``small``.
    Raises ``SettingsError``, ``ManifestError`` or ``ScoringConfigError`` with a one-line reason."""
    if settings.model_id:
        if settings.model_variant == "base":
            raise SettingsError(HUB_BASE_REFUSAL)
        return settings, "small"
    found = variant_of(settings.model_dir)
    if found is not None:
        root, name = found
        if settings.model_variant == "small":
            raise SettingsError(f"model directory {settings.model_dir} is the '{name}' variant of {root}, and "
                                f"ZSNLI_MODEL_VARIANT=small: serve {root} for the small model, or set "
                                f"ZSNLI_MODEL_VARIANT={name} or auto")
        return serve_variant(replace(settings, model_dir=str(root)), name)
    if settings.model_variant == "small":
        return settings, "small"
    folder = Path(settings.model_dir) / BASE_VARIANT_SUBDIR
    present = (folder / "config.json").is_file()
    if settings.model_variant == "auto":
        device = settings.device or _default_device()
        if not (present and device_kind(device) == "cuda"):
            return settings, "small"
    elif not present:
        raise SettingsError(f"ZSNLI_MODEL_VARIANT=base: no base model in {folder} (no config.json there); "
                            "set ZSNLI_MODEL_VARIANT=small or auto")
    return serve_variant(settings, BASE_VARIANT_SUBDIR)


def serve_variant(settings: Settings, name: str) -> tuple[Settings, str]:
    """``(settings serving <model_dir>/<name>, name)`` once the top-level manifest (``ZSNLI_MANIFEST_PATH``, else the
    default lookup of ``model_dir``) pins that folder (`zsnli.manifest.check_variant_pin`: every field of its
    ``variants`` entry); with ``skip_manifest_check`` the pin is not read (development only: served unverified, as
    the small model is). Its calibration is its own ``calibration.json`` (or ``ZSNLI_CALIBRATION_PATH``), never the
    small model's; its sentence encoder still ``<model_dir>/embedding``
    (`zsnli.runtime.embedding.default_embedding_dir`). Raises ``ManifestError`` (no readable top-level manifest,
    no pin, a pin that does not hold) or ``ScoringConfigError`` (no calibration), one line each."""
    root = Path(settings.model_dir)
    folder = root / name
    if settings.skip_manifest_check:
        logger.warning("the %s model's pin is not checked (ZSNLI_SKIP_MANIFEST_CHECK): development only", name)
    else:
        top = settings.resolved_manifest_path()
        if not top.is_file():
            raise ManifestError(missing_manifest(settings, f"pins the {name} model {folder} (its 'variants' table): "
                                                           "refusing to serve it unpinned (train.py install-base "
                                                           "writes the pin)"))
        check_variant_pin(root, load_manifest(top), name)
    calibration = settings.calibration_path or str(folder / CALIBRATION_NAME)
    if not settings.calibration_path and not Path(calibration).is_file():  # never the small model's beside it
        raise ScoringConfigError(f"{folder} has no {CALIBRATION_NAME}: the {name} model is served with its own "
                                 "(train.py select writes it), or set ZSNLI_MODEL_VARIANT=small")
    logger.info("serving the %s model in %s (ZSNLI_MODEL_VARIANT=%s)", name, folder, settings.model_variant)
    # ZSNLI_MANIFEST_PATH names the top-level manifest (the pin above); the folder's files are checked against its own.
    return replace(settings, model_dir=str(folder), manifest_path=None, calibration_path=calibration), name


def missing_manifest(settings: Settings, what: str = "") -> str:
    """The one line refusing a training manifest that is not a file: ``ZSNLI_MANIFEST_PATH=...`` when it is set
    (``does not exist`` / ``is not a file``), else the default lookup's path followed by ``what``."""
    path = settings.resolved_manifest_path()
    if settings.manifest_path:
        state = "is not a file" if path.exists() else "does not exist"
        return (f"ZSNLI_MANIFEST_PATH={settings.manifest_path} {state}: refusing to serve unverified "
                "(unset it to use the default lookup)")
    return f"no training manifest at {path} {what}".strip()


def check_explicit_paths(settings: Settings) -> None:
    """Refuse an explicitly set ``ZSNLI_MANIFEST_PATH`` (unless ``skip_manifest_check``) or
    ``ZSNLI_CALIBRATION_PATH`` that is not a file, whichever variant is served; only the default lookup falls back.
    Raises ``ManifestError`` or ``ScoringConfigError`` (one line)."""
    if settings.manifest_path and not settings.skip_manifest_check and not settings.resolved_manifest_path().is_file():
        raise ManifestError(missing_manifest(settings))
    if settings.calibration_path and not Path(settings.calibration_path).is_file():
        raise ScoringConfigError(f"ZSNLI_CALIBRATION_PATH={settings.calibration_path} does not exist: "
                                 "refusing to serve uncalibrated (unset it to use the default lookup)")


def preflight(settings: Settings) -> Preflight:
    """The fast startup checks, before the server listens: refuse early and loudly.

    Refuses an explicit ``ZSNLI_MANIFEST_PATH`` / ``ZSNLI_CALIBRATION_PATH`` that is not a file
    (`check_explicit_paths`), then resolves the variant (`resolve_variant`: the base only as pinned, and never with a
    hub id, checked before the cache is read). With ``ZSNLI_MODEL_ID`` set, finds its snapshot in the hub cache
    (`zsnli.runtime.hub.resolve_hub_model`: downloaded only with ``ZSNLI_ALLOW_DOWNLOAD=1``).
    Checks the model directory and its config.json (an entailment label and its
    alternative, contradiction or not_entailment, in ``id2label``), that onnxruntime and onnx are
    installed and the ONNX cache directory is writable for an ONNX backend, verifies every file against the
    training manifest when one exists (unless ``skip_manifest_check``), and
    reads calibration.json (`_load_scoring`: one whose ``model_sha256`` names another
    model is refused when named explicitly, skipped with a warning when found by default; one recording none is
    refused for the base, served with an "unpinned" warning for the small model).
    An explicitly set ``ZSNLI_MANIFEST_PATH`` or ``ZSNLI_CALIBRATION_PATH`` that does not exist is a refusal; only the
    default lookup falls back (unverified / uncalibrated, with a warning). A hub
    model has no calibration of its own unless its snapshot holds one: it is
    served with the pipeline's scoring (softmax over the entailment logits, T = 1).
    Reads the embedding scoring beside it (``embedding_scoring``; ``ZSNLI_SCORING=embedding`` without one is a
    refusal) and checks the sentence encoder's digest against every scoring that uses it.
    Returns a `Preflight`.
    Raises ``HubModelError``, ``ManifestError``, ``ModelConfigError``, ``ScoringConfigError``, ``SettingsError`` or
    ``OnnxUnavailableError`` with a one-line reason; a refusal of the model, its files, scoring or encoder also
    names an install a kill left unfinished beside the local model directory (`zsnli.manifest.interrupted_installs`:
    ``model/embedding`` or ``model/base`` missing or not yet committed, and the command that finishes it).
    """
    if settings.backend.startswith("onnx-"):
        require_onnx()
        ensure_cache_dir(settings.onnx_cache_dir)
    check_device(settings.device)
    check_explicit_paths(settings)
    try:
        return _checked_model(settings)
    except (ManifestError, ModelConfigError, ScoringConfigError, SettingsError) as exc:
        named = [] if settings.model_id else interrupted_installs(settings.model_dir)
        if not named:
            raise
        raise type(exc)(f"{exc}; {'; '.join(named)}") from exc


def _checked_model(settings: Settings) -> Preflight:
    """`preflight` from the variant on: the model to serve, its files, its scoring and its encoder. Raises as
    `preflight` does."""
    settings, variant = resolve_variant(settings)  # before the hub cache: base with a hub id is refused first
    settings, model_id, revision = _resolve_model(settings)
    model_dir = Path(settings.model_dir)
    _check_model_config(model_dir)
    digest, files, verified = _model_files(settings, model_dir)
    scoring, calibrated = _load_scoring(settings, digest, variant)
    fast = load_embedding_scoring(settings.resolved_calibration_path()) if calibrated else None
    if settings.scoring == "embedding" and fast is None:
        raise ScoringConfigError(f"ZSNLI_SCORING=embedding needs calibration.json's {EMBEDDING_SCORING_KEY!r} "
                                 f"object (none in {settings.resolved_calibration_path()}): run train.py select, "
                                 "or set ZSNLI_SCORING=served")
    for fitted in (s for s in (scoring, fast) if s is not None and s.needs_encoder):
        embedding_dir = resolved_embedding_dir(settings)
        found = embedding_digest(embedding_dir)
        if found != fitted.embedding_sha256:
            raise ManifestError(f"embedding model {embedding_dir} has digest {found[:12]}, "
                                f"calibration was fitted with {str(fitted.embedding_sha256)[:12]}")
    return Preflight(settings, digest, scoring, calibrated, verified, files, model_id, revision, fast, variant)


def _load_scoring(settings: Settings, digest: str, variant: str = "small") -> tuple[RequestScoring, bool]:
    """``(scoring, calibrated)`` from calibration.json, once `_fitted_here` accepts it for the served model
    (``digest``, ``variant``); one fitted for another model and found only by the default lookup is skipped with a
    warning (uncalibrated). Raises ``ScoringConfigError`` as `_fitted_here` and the calibration reader do."""
    calibration_path = settings.resolved_calibration_path()
    scoring, calibrated = load_request_scoring(calibration_path)
    if calibrated and not _fitted_here(settings, calibration_path, digest, variant):
        scoring, calibrated = RequestScoring(), False
    if calibrated:
        logger.info("scoring from %s: %s", calibration_path, scoring.to_dict())
    elif settings.model_id:
        logger.info("uncalibrated: scoring with the entailment logit and T = 1 (the zero-shot pipeline's "
                    "scoring; a hub model has no calibration.json unless its snapshot or ZSNLI_CALIBRATION_PATH "
                    "holds one)")
    else:
        logger.warning("uncalibrated: scoring with the entailment logit and T = 1 (the zero-shot pipeline's "
                       "scoring; no calibration.json for this model at %s)", calibration_path)
    return scoring, calibrated


def _fitted_here(settings: Settings, path: Path, digest: str, variant: str) -> bool:
    """Whether the calibration at ``path`` may score the served model, by the ``model_sha256`` it records
    (`zsnli.scoring.fitted_model_sha256`): the served ``digest`` -> True; none -> refused for a variant (``base``:
    it must be pinned to its model; the message names the ``train.py select`` that records it), True with a
    warning (unpinned) for the small model; another digest -> refused for a variant (naming the same command) or
    when ``ZSNLI_CALIBRATION_PATH`` names it, False with a warning when only the default lookup found it.
    Raises ``ScoringConfigError`` (one line)."""
    recorded = fitted_model_sha256(path)
    select = (f"run the train.py select --model-dir {settings.model_dir} --out "
              f"{Path(settings.model_dir) / CALIBRATION_NAME} ... that records it (train.py install-base prints the "
              "whole command)")
    if recorded is None:
        if variant != "small":
            raise ScoringConfigError(f"{path} records no model_sha256, so nothing says it was fitted for the "
                                     f"{variant} model {digest[:12]}: {select}")
        logger.warning("%s records no model_sha256: its scoring is not pinned to the served model %s (unpinned; "
                       "the next train.py select records it)", path, digest[:12])
        return True
    if recorded == digest:
        return True
    why = f"{path} was fitted for model {recorded[:12]}, not the served model {digest[:12]}"
    if variant != "small":
        raise ScoringConfigError(f"{why}: the {variant} model is served with its own calibration: {select}")
    if settings.calibration_path:
        raise ScoringConfigError(f"{why}: point ZSNLI_CALIBRATION_PATH at this model's calibration, "
                                 "or unset it for the default scoring")
    logger.warning("%s: not used", why)
    return False


def check_device(device: str | None) -> None:
    """Refuse a ``ZSNLI_DEVICE`` this torch cannot use, before anything loads (`zsnli.runtime.devices.device_problem`:
    not a torch device name, ``cuda`` without CUDA or a visible GPU, ``cuda:N`` past the GPUs, ``mps`` where MPS is
    unavailable). Raises `zsnli.config.SettingsError` (one line naming the variable and what is accepted, or that
    it may be unset). None (unset) picks ``cuda`` when available, else ``cpu``."""
    if device is None:
        return
    problem = device_problem(device)
    if problem:
        raise SettingsError(f"{problem} (or unset it for the default)")


def configure_logging(level: str) -> None:
    """Send the ``zsnli`` loggers to stderr at ``level`` (one of `zsnli.config.LOG_LEVELS`; ``trace`` is
    uvicorn's level 5) unless logging is already configured."""
    root = logging.getLogger("zsnli")
    root.setLevel(5 if level.lower() == "trace" else level.upper())
    if not root.handlers and not logging.getLogger().handlers:
        handler = StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
