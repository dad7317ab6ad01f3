"""The bake-off arm interface and the registry that maps suite-file names to arm classes.

An *arm* is one way of turning (text, candidate labels) into probabilities:
the served zsnli model, the transformers pipeline, a tf-idf classifier
trained on a few labelled rows, ... Every arm is a subclass of `Arm`:

* ``fit(texts, labels)`` (few-shot arms only, ``trains = True``): learn from
  the training rows of one dataset; ``labels[i]`` is the gold label string of
  ``texts[i]``. Zero-shot arms inherit the no-op.
* ``predict_proba(texts, labels) -> ndarray (n, k)``: one row per text, one
  column per candidate label in the given order, rows summing to 1.
* ``identity() -> dict``: name, type, parameters and, where there is a model,
  its sha256;
* ``use_encoder(encoder)`` (arms on sentence embeddings, ``uses_encoder = True``):
  take an already-loaded, shared `zsnli.runtime.embedding.SentenceEncoder` (or an
  object with its ``model_dir``, ``digest``, ``encode`` and ``cosine``) instead
  of loading one in ``setup``; the server's bake-off shares one between arms.

Adding an arm is one class plus one line: decorate it with
``@register("my_arm")`` and name ``type = "my_arm"`` in a suite file.

The parameters an arm takes are its ``__init__``'s keyword arguments; their annotations are its declared
schema (``calibration: Literal["platt", "raw"]``, ``C: float``), checked by `check_params` (pydantic, strict:
an integer is a float, nothing else converts), and the value checks its ``__init__`` makes (``C > 0``) run when
a suite is loaded (`zsnli.compare.suite.load_suite` builds every arm), so a bad value fails before anything runs.

This module imports only the standard library and numpy (pydantic inside `check_params`, transformers inside
`quiet_model_loading`).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

COST_LOCAL = "free (local)"


class ArmError(RuntimeError):
    """An arm could not be built or used (missing model, bad parameter, server down)."""


class Arm:
    """Base class of every bake-off arm; see the module docstring for the contract.

    Subclasses take their suite-file parameters as keyword arguments of
    ``__init__`` (``name`` is the display name the suite gives the arm) and
    set ``self.params`` to what `identity` should record.
    """

    type_name: ClassVar[str] = ""  # set by `register`
    trains: ClassVar[bool] = False  # True: the runner calls fit() on each training split
    cost: ClassVar[str] = COST_LOCAL
    uses_encoder: ClassVar[bool] = False  # True: runs on sentence embeddings and accepts `use_encoder`

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.type_name
        self.params: dict[str, Any] = {}

    def setup(self) -> None:
        """Load models / start servers before any timed call (default: nothing)."""

    def use_encoder(self, encoder: Any) -> None:
        """Use this loaded sentence encoder (shared with other arms) instead of loading one in `setup`.

        Raises ``ArmError`` for an arm that does not run on sentence embeddings.
        """
        raise ArmError(f"{self.name}: arm type {self.type_name!r} does not use a sentence encoder")

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        """Learn from one dataset's training rows (``labels[i]`` is the gold label string of ``texts[i]``).

        Zero-shot arms keep this no-op.
        """

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        """Probabilities, shape (len(texts), len(labels)), rows summing to 1, columns in ``labels`` order."""
        raise NotImplementedError

    def predict_documents(self, examples: Sequence[Any], on_done: Any = None) -> Any:
        """Score many examples at once (arms that keep several documents in flight, e.g. a server at a
        concurrency) as a `zsnli.compare.engine.Documents`, calling ``on_done()`` (when given) as each
        document is answered; None (the default): the runner calls `predict_proba` one document at a time."""
        return None

    def model_sha256(self) -> str | None:
        """sha256 of the model the arm runs (None when it has no model file)."""
        return None

    def check_plan(self, n_fits: int) -> None:
        """Called once before the first fit with the number of fits the protocol needs (one per fold); an arm
        whose fits are costly raises ``ArmError`` to refuse, with the reason (default: accept)."""

    def check_labels(self, labels: set[str]) -> None:
        """Called before a bake-off runs with every candidate label of its examples (the strings the arm will be
        asked about); an arm whose parameters name labels raises ``ArmError`` for one the data does not have
        (default: accept)."""

    def last_fit_replay(self) -> float | None:
        """After ``fit``: the seconds that fit took when it was trained, if this one replayed it from a cache
        (the bake-off reports those instead of the replay's wall time); None (default) when it trained now."""
        return None

    def offline_training(self) -> dict[str, Any] | None:
        """For arms trained before the bake-off: ``{"seconds": float, "source": str}`` read from a record."""
        return None

    def peak_rss_bytes(self) -> int | None:
        """Peak resident memory of a process outside the harness that ran the model (a server), else None."""
        return None

    def close(self) -> None:
        """Release servers and models (default: nothing). Called once, also after a failure."""

    def identity(self) -> dict[str, Any]:
        """``{"name", "type", "parameters", "model_sha256"}`` (plus whatever subclasses add)."""
        return {"name": self.name, "type": self.type_name, "parameters": dict(self.params),
                "model_sha256": self.model_sha256()}


ARMS: dict[str, type[Arm]] = {}
"""The registry: suite-file ``type`` -> arm class."""


def register(type_name: str) -> Callable[[type[Arm]], type[Arm]]:
    """Class decorator adding an `Arm` subclass to `ARMS` under ``type_name``.

    Raises ``ValueError`` when the name is taken by another class (re-registering
    the same class is allowed, so that reloading a module is harmless).
    """

    def decorate(cls: type[Arm]) -> type[Arm]:
        if not (isinstance(cls, type) and issubclass(cls, Arm)):
            raise TypeError(f"@register({type_name!r}) needs an Arm subclass, got {cls!r}")
        old = ARMS.get(type_name)
        if old is not None and old.__qualname__ != cls.__qualname__:
            raise ValueError(f"arm type {type_name!r} is already registered to {old.__qualname__}")
        cls.type_name = type_name
        ARMS[type_name] = cls
        return cls

    return decorate


def check_params(type_name: str, params: dict[str, Any]) -> type[Arm]:
    """The class registered as ``type_name``, after checking ``params`` against its ``__init__``: the names
    (`inspect.Signature.bind`) and each value against the parameter's annotation, its declared schema
    (`param_problem`).

    Raises ``ArmError`` naming the unknown type (and the known ones), the parameter that the class does not
    accept / is missing, or the parameter whose value breaks its annotation (with what it accepts).
    """
    cls = ARMS.get(type_name)
    if cls is None:
        raise ArmError(f"unknown arm type {type_name!r}; registered: {', '.join(sorted(ARMS)) or 'none'}")
    try:
        inspect.signature(cls.__init__).bind(None, **params)
    except TypeError as exc:
        accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "name")]
        raise ArmError(f"arm type {type_name!r}: {exc}; accepted parameters: {', '.join(accepted) or 'none'}") from exc
    for key, value in params.items():
        problem = param_problem(cls, key, value)
        if problem:
            raise ArmError(f"arm type {type_name!r}: parameter {key} = {value!r}: {problem}")
    return cls


def param_problem(cls: type[Arm], key: str, value: Any) -> str | None:
    """Why ``value`` breaks the annotation of ``cls.__init__``'s parameter ``key`` (pydantic's words, strict mode:
    an integer passes for a float, a string never for a number), or None when it fits or has no annotation.

    A blank string is refused for every parameter: each string an arm takes (a name, path, URL or command) means
    nothing empty, and it would otherwise fail only when the arm runs, after the arms before it."""
    if isinstance(value, str) and not value.strip():
        return "an empty string: give a value or leave the parameter out"
    import typing

    from pydantic import TypeAdapter, ValidationError

    try:
        hint = typing.get_type_hints(cls.__init__).get(key)
    except (NameError, TypeError):  # an annotation that cannot be evaluated declares nothing checkable
        return None
    if hint is None or hint is Any:
        return None
    try:
        TypeAdapter(hint).validate_python(value, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        return (f"{where}: " if where else "") + str(first.get("msg", "invalid value"))
    except Exception:  # noqa: BLE001 - a type pydantic cannot build a schema for declares nothing checkable
        return None
    return None


def build_arm(type_name: str, name: str, params: dict[str, Any]) -> Arm:
    """Instantiate the arm ``type_name`` with display ``name`` and suite ``params`` (see `check_params`)."""
    cls = check_params(type_name, {"name": name, **params})
    return cls(name=name, **params)


def quiet_model_loading() -> None:
    """Turn off transformers' progress bars before an arm loads a model: the "Loading weights: 100%|..." bar it
    draws on stderr (raw ``\\r`` frames in a bake-off log). Only the bars: transformers' warnings and errors, and
    any exception of the load, still reach the user."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def shown_path(path: str | Path) -> str:
    """A model directory as an arm's identity records it: relative to the working directory when under it
    (a checkout's ``model/embedding`` reads the same on every machine and in every clone), else as given.
    The directory's digest, recorded beside it, is what identifies the model."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def normalise_rows(probs: np.ndarray) -> np.ndarray:
    """Rows of a non-negative (n, k) array scaled to sum to 1; all-zero rows become uniform.

    Raises ``ArmError`` on a non-finite or negative entry.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ArmError(f"probabilities must be 2-D (n, k), got shape {p.shape}")
    if not np.all(np.isfinite(p)) or (p < 0).any():
        raise ArmError("probabilities must be finite and non-negative")
    sums = p.sum(axis=1, keepdims=True)
    uniform = np.full_like(p, 1.0 / max(p.shape[1], 1))
    return np.where(sums > 0, p / np.where(sums > 0, sums, 1.0), uniform)
