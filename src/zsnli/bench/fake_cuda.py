"""A fake accelerator: torch reports one bf16 CUDA GPU, and every tensor of a ``cuda`` device is computed on the CPU.

`fake_cuda` is the one way this project runs its CUDA branch without a GPU (issue 58): the tests of the whole
server on it (``tests/serving/test_fake_accelerator.py``) and the padding measurement
(`zsnli.bench.accelerator_padding`). Inside the block:

* ``torch.cuda.is_available``, ``is_bf16_supported``, ``device_count``, ``get_device_name``, ``current_device``,
  ``synchronize``, ``empty_cache`` and the memory counters answer as one GPU named `FAKE_GPU_NAME` would, and
  ``torch.version.cuda`` is `FAKE_CUDA_VERSION`, so ``ZSNLI_DEVICE`` unset picks ``cuda``, the dtype is
  bf16 with fixed shapes on, the accelerator's token budget applies and ``/health`` says ``cuda``;
* `zsnli.runtime.devices.computed_on` puts every ``cuda`` tensor on the CPU (`zsnli.runtime.devices.placement`).
  Code that moved a tensor to ``cuda`` any other way fails, as torch's CPU build has no CUDA: the fake holds
  that every placement goes through that one function.

What it cannot show: GPU kernels, their speed, their rounding, memory. Threads: the patches are process-wide.

May import: `zsnli.runtime.devices` (and torch).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Iterator
from unittest import mock

from ..runtime.devices import computed_on

#: What the fake GPU calls itself (``/health`` does not show it; `zsnli.runtime.devices.torch_build` does).
FAKE_GPU_NAME = "fake CUDA GPU (computed on the CPU)"
#: The CUDA version the fake torch build reports.
FAKE_CUDA_VERSION = "12.8"


@contextmanager
def fake_cuda(bf16: bool = True) -> Iterator[None]:
    """Within the block torch reports one CUDA GPU (with bf16 support unless ``bf16`` is False) and every
    ``cuda`` tensor lives on the CPU (module docstring). Restores torch on exit."""
    import torch

    cuda = torch.cuda
    answers = {
        "is_available": lambda: True,
        "is_bf16_supported": lambda *a, **k: bf16,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "get_device_name": lambda *a, **k: FAKE_GPU_NAME,
        "synchronize": lambda *a, **k: None,
        "empty_cache": lambda: None,
        "memory_allocated": lambda *a, **k: 0,
        "max_memory_allocated": lambda *a, **k: 0,
        "reset_peak_memory_stats": lambda *a, **k: None,
    }
    with ExitStack() as stack:
        for name, answer in answers.items():
            stack.enter_context(mock.patch.object(cuda, name, answer))
        stack.enter_context(mock.patch.object(torch.version, "cuda", FAKE_CUDA_VERSION))
        stack.enter_context(computed_on("cuda", "cpu"))
        yield
