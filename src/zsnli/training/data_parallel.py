"""Data-parallel training facts: the launch read from the environment, the batch split, the joint stop.

``torchrun`` and ``accelerate launch`` start one process per device and tell
each its place through environment variables (``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``; see the torchrun documentation, "Environment Variables").
`launch_from_env` reads them without importing torch, so the command line
can check the batch split before any slow work. A preset's ``batch_size``
is the GLOBAL batch: the examples behind one optimiser step, summed over
every process (and over the GPUs of a single process that uses
``torch.nn.DataParallel``); `per_device_batch` splits it. `any_rank` is the
collective "does any process want this?" that keeps decisions such as the
time-budget stop identical on every rank.

May import nothing from zsnli; torch only inside `any_rank` and `leave_process_group`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


class LaunchError(ValueError):
    """A launch setting that cannot work: its message is the one line to print (exit 2)."""


@dataclass(frozen=True)
class Launch:
    """This process's place in a data-parallel job (``world_size`` 1: a plain single process).

    ``rank`` is global (0 writes the model, the manifests and the logs);
    ``local_rank`` is the index on this machine (the GPU this process uses).
    """

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        """True when several processes train one model together."""
        return self.world_size > 1


def _env_int(name: str, default: int, low: int, environ) -> int:
    text = environ.get(name)
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise LaunchError(f"environment variable {name}={text!r} is not an integer >= {low}; it is set by "
                          "torchrun / accelerate launch (unset it for a single process)")
    return value


def launch_from_env(environ=None) -> Launch:
    """Read ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` (unset: a single process, rank 0).

    Raises `LaunchError` for a value that is not an integer, or a rank
    outside ``[0, WORLD_SIZE)``. Imports nothing heavy.
    """
    environ = os.environ if environ is None else environ
    world = _env_int("WORLD_SIZE", 1, 1, environ)
    rank = _env_int("RANK", 0, 0, environ)
    local_rank = _env_int("LOCAL_RANK", 0, 0, environ)
    if rank >= world:
        raise LaunchError(f"environment variable RANK={rank} is not below WORLD_SIZE={world}; they are set by "
                          "torchrun / accelerate launch (unset both for a single process)")
    return Launch(world, rank, local_rank)


def replicas(launch: Launch, cuda_devices: int) -> int:
    """Model copies that share one optimiser step.

    Launched processes (one device each) when distributed; else the CUDA
    devices a single process drives with ``DataParallel`` (the Trainer uses
    all visible GPUs then), at least 1 (CPU).
    """
    return launch.world_size if launch.distributed else max(1, cuda_devices)


def per_device_batch(global_batch: int, replicas: int) -> int:
    """The batch of each of ``replicas`` model copies so that one optimiser step sees ``global_batch`` examples.

    ``replicas`` is the number of processes times the GPUs each drives with
    ``DataParallel`` (1 under torchrun). Raises `LaunchError` when
    ``global_batch`` is not a multiple of ``replicas`` (rounding would
    silently change the recipe's batch, and with it the learning-rate fit).
    """
    if global_batch < 1 or replicas < 1:
        raise LaunchError(f"a global batch of {global_batch} over {replicas} model copies is not a batch split")
    if global_batch % replicas:
        raise LaunchError(f"the global batch of {global_batch} examples does not split evenly over {replicas} "
                          f"model copies")
    return global_batch // replicas


def leave_process_group() -> None:
    """Destroy this process's ``torch.distributed`` process group, if any (the end of a launched run)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def any_rank(flag: bool, device=None) -> bool:
    """True when ``flag`` is true on at least one process of the job (an all-reduce MAX; every rank must call it).

    Without an initialised ``torch.distributed`` process group (a single
    process) returns ``flag``. ``device``: where the one-element tensor goes
    (the process's CUDA device under NCCL; CPU under gloo).
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return bool(flag)
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
