"""Where a runtime's tensors go, how the sentence encoder multiplies on an accelerator, and which torch this is.

* `placement`: the one place a device name (``ZSNLI_DEVICE``: ``cpu``, ``cuda``, ``cuda:1``) becomes the torch
  device that weights and inputs are moved to (`zsnli.runtime.model.NliModel`, `zsnli.runtime.embedding.SentenceEncoder`).
  It is the name itself, unless `computed_on` stands another device in for it: the fake accelerator of the
  tests and of `zsnli.bench.fake_cuda` runs the whole CUDA branch (dtype choice, fixed shapes, token budget,
  encoder, cascade) while every tensor lives on the CPU. Everything else keeps seeing the name (``/health``
  says ``cuda``).
* `tf32_matmuls`: TF32 for the fp32 matrix products inside a block, on a CUDA device only (the sentence
  encoder's forwards; docs/performance.md, issue 58: bf16 moved the cosine term past the bf16 tolerance).
* `device_problem`: why this torch cannot use a device name (the server's ``ZSNLI_DEVICE`` and every ``--device``
  flag), checked before anything loads.
* `torch_build`: one line naming the torch build (version, CUDA or not, GPUs seen), logged at start-up,
  so an image that holds a CPU torch on a GPU machine says so.

May import: the standard library (torch lazily, inside functions). Imported by `zsnli.runtime.model`,
`zsnli.runtime.embedding` and `zsnli.serving.startup`.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

_STAND_INS: dict[str, str] = {}
_LOCK = threading.Lock()


def device_kind(device: str) -> str:
    """``cuda`` for ``cuda:1``, ``cpu`` for ``cpu``: the part of a device name before the index."""
    return str(device).split(":")[0]


def placement(device: str) -> str:
    """The torch device that tensors of the runtime device ``device`` are moved to: ``device`` itself unless
    `computed_on` stands another device in for its kind (``cuda`` and ``cuda:0`` alike). Returns a str."""
    return _STAND_INS.get(device_kind(device), str(device))


@contextmanager
def computed_on(kind: str, host: str = "cpu") -> Iterator[None]:
    """Within the block, tensors of every ``kind`` device (``cuda``) go to ``host`` (`placement`): for a fake
    accelerator (tests, `zsnli.bench.fake_cuda`) whose torch reports a GPU that is not there. Nests; restores
    the previous stand-in on exit."""
    with _LOCK:
        before = _STAND_INS.get(kind)
        _STAND_INS[kind] = host
    try:
        yield
    finally:
        with _LOCK:
            if before is None:
                _STAND_INS.pop(kind, None)
            else:
                _STAND_INS[kind] = before


def tf32_supported(device: str) -> bool:
    """Whether `tf32_matmuls` changes anything for ``device``: a CUDA device (Ampere and newer compute TF32;
    older GPUs ignore the setting and stay fp32)."""
    return device_kind(device) == "cuda"


@contextmanager
def tf32_matmuls(device: str) -> Iterator[None]:
    """Within the block, fp32 matrix products on a CUDA ``device`` run in TF32 (inputs rounded to a 10-bit
    mantissa, products summed in fp32: torch's ``fp32_precision = "tf32"``); on any other device, nothing
    changes. The setting is process-wide and read at each product, so the block must hold only this thread's
    forward: the server's one forward thread runs every forward (`zsnli.serving.batching`)."""
    if not tf32_supported(device):
        yield
        return
    import torch

    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):  # torch >= 2.9
        before = matmul.fp32_precision
        matmul.fp32_precision = "tf32"
        try:
            yield
        finally:
            matmul.fp32_precision = before
        return
    before = matmul.allow_tf32
    matmul.allow_tf32 = True
    try:
        yield
    finally:
        matmul.allow_tf32 = before


def nvidia_devices_present(root: str = "/dev") -> bool:
    """Whether the machine shows an NVIDIA GPU to this process (a ``/dev/nvidia0``-style device node),
    whatever torch can do with it."""
    try:
        return any(p.name[len("nvidia"):].isdigit() for p in Path(root).glob("nvidia[0-9]*"))
    except OSError:
        return False


def device_problem(device: str, name: str = "ZSNLI_DEVICE", sep: str = "=") -> str | None:
    """Why this torch cannot use the device ``device``, in one line, or None when it can: not a torch device name
    (``gpu``), ``cuda`` without CUDA in this torch build or without a visible GPU, ``cuda:N`` past the visible GPUs,
    ``mps`` where MPS is unavailable. ``name`` and ``sep`` show where the value came from (``ZSNLI_DEVICE=cuda``, or
    ``--device cuda`` with ``sep=" "``). The one device check of the server (`zsnli.serving.startup.check_device`)
    and of every command line with a ``--device`` flag; imports torch for any device but ``cpu``."""
    if device == "cpu":
        return None
    import torch

    accepted = "cpu, cuda or cuda:N (a visible GPU), mps where available"
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        return f"{name} must be {accepted}; got {device!r}"
    shown = f"{name}{sep}{device}"
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", built without CUDA")
            return f"{shown} but CUDA is not available ({build}, 0 GPU(s) visible): use cpu"
        if dev.index is not None and dev.index >= count:
            return f"{shown} but only {count} GPU(s) are visible"
    elif dev.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            return f"{shown} but MPS is not available: use cpu"
    elif dev.type != "cpu":
        return f"{name} must be {accepted}; got {device!r}"
    return None


def torch_build() -> str:
    """One line on this process's torch: ``torch 2.13.0+cu128, CUDA 12.8, 1 GPU: NVIDIA H100 80GB HBM3`` (say) or
    ``torch 2.13.0+cpu, a CPU-only build`` (plus a warning clause when an NVIDIA GPU is present that this
    build cannot use: an image built with the CPU torch on a GPU machine)."""
    import torch

    head = f"torch {torch.__version__}"
    if not torch.version.cuda:
        if nvidia_devices_present():
            return (f"{head}, a CPU-only build: the NVIDIA GPU on this machine is NOT used (build the image with "
                    "--build-arg TORCH_VARIANT=cuda, docs/deployment.md)")
        return f"{head}, a CPU-only build"
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = ", ".join(dict.fromkeys(torch.cuda.get_device_name(i) for i in range(n))) if n else "none visible"
    return f"{head}, CUDA {torch.version.cuda}, {n} GPU{'' if n == 1 else 's'}: {gpus}"
