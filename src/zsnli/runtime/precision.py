"""Which dtype the torch runtime serves in when ``ZSNLI_DTYPE`` is unset, and why.

bf16 is the default on a CUDA GPU that reports bf16 support (compute capability
8.0 and newer); on a CPU the default is fp32, also where the CPU has native bf16
(the ``avx512_bf16`` or ``amx_bf16`` flag): a reduced-precision answer depends on
the batch's shapes unless every forward runs in fixed shapes (`zsnli.runtime.shapes`),
and in fixed shapes bf16 served the shipped default no faster than fp32 (0.94-1.05x in
two quiet runs of two mixes on an AMX Xeon at concurrency 32, 0.62x in a run under load;
docs/performance.md), while fp32 answers a
lone request about 3x sooner and scores exactly as the selection did (its cache is fp32).
``ZSNLI_DTYPE=bfloat16`` still serves bf16 there. The choice is made once at start-up
(`choose_dtype`, a pure function of the device and its flags, so it is testable on fake
flag sets), and its reason is named in ``/health`` (``dtype_reason``) and the start-up
log, e.g. ``float32 (cpu has avx512_bf16; bf16 in fixed shapes is no faster)``;
`fixed_shapes_for` says when fixed shapes are on.

May import: the standard library (torch lazily, inside `device_supports_bf16`).
Imported by `zsnli.runtime.model` and `zsnli.serving.startup`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

#: CPU flags (``/proc/cpuinfo``) that mean native bf16 matrix arithmetic.
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
#: Values of ``ZSNLI_FIXED_SHAPES``: ``auto`` (on for a reduced-precision dtype, off for fp32), ``on``, ``off``.
FIXED_SHAPES_MODES = ("auto", "on", "off")
REDUCED = ("bfloat16", "float16")
#: Why a CPU with native bf16 still serves fp32 by default (the module docstring's measurement).
CPU_BF16_NOTE = "bf16 in fixed shapes is no faster"
#: Every ``ZSNLI_DTYPE`` spelling (case-insensitive, an optional ``torch.`` prefix) -> its torch dtype name.
DTYPE_ALIASES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
                 "float16": "float16", "fp16": "float16", "half": "float16"}


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype the runtime loads in: ``name`` (``float32``, ``bfloat16`` or ``float16``) and ``reason``
    (one phrase: ``cpu has avx512_bf16``, ``ZSNLI_DTYPE=float32``...). ``str()`` is ``name (reason)``."""

    name: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name} ({self.reason})"


def cpu_flags(path: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The ``flags`` of the first processor in ``path`` (empty where the file is absent, e.g. not Linux)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def choose_dtype(requested: str | None, device: str, flags: Iterable[str] = (),
                 cuda_bf16: bool = False) -> DtypeChoice:
    """The serving dtype for ``device`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``).

    requested: ``ZSNLI_DTYPE`` as set (any alias `zsnli.runtime.model` resolves) or None; a set value
    always wins (reason ``ZSNLI_DTYPE=...``). Unset: ``bfloat16`` on a CUDA device with ``cuda_bf16``
    (``torch.cuda.is_bf16_supported()``), else ``float32``; on a CPU the reason says whether its ``flags``
    hold one of `BF16_CPU_FLAGS` (module docstring: why fp32 even then). Pure: the caller reads the
    flags (`cpu_flags`, `device_supports_bf16`).
    """
    if requested is not None:
        return DtypeChoice(canonical_dtype(requested), f"ZSNLI_DTYPE={requested}")
    kind = str(device).split(":")[0]
    if kind == "cpu":
        have = sorted(set(flags) & set(BF16_CPU_FLAGS))
        if have:
            return DtypeChoice("float32", f"cpu has {have[0]}; {CPU_BF16_NOTE}")
        return DtypeChoice("float32", f"cpu has neither {' nor '.join(sorted(BF16_CPU_FLAGS))}")
    if kind == "cuda":
        if cuda_bf16:
            return DtypeChoice("bfloat16", "cuda device supports bf16")
        return DtypeChoice("float32", "cuda device without bf16")
    return DtypeChoice("float32", f"no native bf16 known for {kind}")


def canonical_dtype(name: str) -> str:
    """``float32`` / ``bfloat16`` / ``float16`` for any ``ZSNLI_DTYPE`` alias (``fp32``, ``bf16``,
    ``half``, ``torch.bfloat16``, any case). Raises ``ValueError`` naming the accepted values."""
    key = str(name).strip().lower().removeprefix("torch.")
    if key not in DTYPE_ALIASES:
        raise ValueError(f"unsupported dtype {name!r}; expected one of {sorted(DTYPE_ALIASES)}")
    return DTYPE_ALIASES[key]


def device_supports_bf16(device: str) -> bool:
    """Whether ``device`` computes bf16 natively: the CPU's flags (`cpu_flags`), or
    ``torch.cuda.is_bf16_supported()`` for a CUDA device; False for anything else."""
    kind = str(device).split(":")[0]
    if kind == "cpu":
        return bool(cpu_flags() & set(BF16_CPU_FLAGS))
    if kind == "cuda":
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return False


def serving_dtype(requested: str | None, device: str) -> DtypeChoice:
    """`choose_dtype` for this machine: the CPU flags or the CUDA device's bf16 support read here."""
    kind = str(device).split(":")[0]
    flags = cpu_flags() if kind == "cpu" else ()
    cuda_bf16 = kind == "cuda" and device_supports_bf16(device)
    return choose_dtype(requested, device, flags, cuda_bf16)


def fixed_shapes_for(mode: str, dtype: str) -> bool:
    """Whether forwards run in fixed shapes: ``on`` / ``off`` as set (``ZSNLI_FIXED_SHAPES``), ``auto``
    for a reduced-precision ``dtype`` only (fp32 rounding is already within 1e-6 across batches).
    Raises ``ValueError`` on a mode outside `FIXED_SHAPES_MODES`."""
    if mode not in FIXED_SHAPES_MODES:
        raise ValueError(f"fixed-shapes mode must be one of {', '.join(FIXED_SHAPES_MODES)}, got {mode!r}")
    return mode == "on" or (mode == "auto" and canonical_dtype(dtype) in REDUCED)
