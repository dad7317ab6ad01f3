"""The argument checks the bench commands share, so each refuses the same mistake in the same one line (exit 2,
before any work: `zsnli.harness.cli.UsageParser`'s ``error``), and the description their ``--help`` shows
(`command_description`).

* `device_name`, `dtype_name`: the argparse types of ``--device`` and ``--dtype`` (``python -m zsnli.bench``,
  `zsnli.bench.throughput_gate`, `zsnli.bench.pipeline_arm`): the names the server accepts (``ZSNLI_DEVICE``,
  ``ZSNLI_DTYPE``: `zsnli.config.DTYPES`), checked when the flags parse; ``--device foo`` or ``cuda:x`` was a
  ``RuntimeError`` traceback after the pipeline arm or the matmul rate had started.
* `check_model_dir`: a ``--model-dir`` (or any flag naming a model folder) that is missing, a file, a folder
  without ``config.json``, or, where the command serves or scores the NLI model, no NLI cross-encoder (a sentence
  encoder, a head without an entailment label): `zsnli.training.usage.check_nli_model_dir` and
  `zsnli.training.usage.check_model_dir_arg`, ``train.py``'s rules and words, refused before any arm runs;
* `check_file`: a file flag (``--examples``, ``--calibration``) given a missing path or a directory, each called so
  (a directory was "no such file");
* `check_device`: a ``--device`` this torch cannot use (``cuda`` without a GPU: `zsnli.runtime.devices.device_problem`,
  the server's own check), refused before any server starts or model loads;
* `check_repo_root`: a ``--repo-root`` given that is not a checkout (a folder holding ``serve.sh`` or ``server.py``), refused before
  any server starts (it was a ``ServerError`` traceback, or work started on a checkout that was not there);
* `check_examples`: an examples file that cannot be read or holds no example, refused before any work (it ended
  the run with exit 1).

May import `zsnli.config` (the dtype names), `zsnli.harness.examples`, `zsnli.harness.cli` (`plain_text`) and
`zsnli.training.usage` (no torch at import; `check_device` imports it for any device but ``cpu``).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..config import DTYPES
from ..harness.cli import plain_text
from ..harness.examples import HUB_PREFIX, ExamplesError, load_examples
from ..training.usage import (UsageError, check_device_arg, check_file_arg, check_folder_arg, check_model_dir_arg,
                              check_nli_model_dir)

_DEVICE = re.compile(r"(cpu|mps|cuda(:\d+)?)")
CANONICAL_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
                    "float16": "float16", "fp16": "float16", "half": "float16"}
"""Every ``ZSNLI_DTYPE`` name (`zsnli.config.DTYPES`) and the torch dtype it names (what `dtype_name` returns)."""

#: the files a checkout of this project holds at its top, either of which the launcher can start (`check_repo_root`:
#: ``serve.sh`` for the serve.sh launcher, ``server.py`` beside the app for uvicorn)
CHECKOUT_MARKS = ("serve.sh", "server.py")
_OWN_NAME = re.compile(r"^python -m zsnli\.bench[\w.]*:\s*")
"""A docstring's leading ``python -m zsnli.bench.NAME:`` (`command_description` drops it)."""


def command_description(doc: str) -> str:
    """The ``--help`` description of a bench command whose module docstring is ``doc``: its first paragraph (up to
    the first blank line; its first *line* may stop mid-sentence, as speed_rounds' did at "one document per") as
    plain text (`zsnli.harness.cli.plain_text`), without a leading ``python -m zsnli.bench.NAME:`` (the usage line
    above it names the command), its first letter a capital."""
    text = _OWN_NAME.sub("", plain_text(doc.strip().split("\n\n")[0]), count=1)
    return text[:1].upper() + text[1:]


def device_name(text: str) -> str:
    """The argparse type of a ``--device`` flag: ``cpu``, ``cuda``, ``cuda:N`` (N a GPU index) or ``mps``, as
    given; anything else is ``argparse.ArgumentTypeError`` (one line at parse time, exit 2). Whether this torch can use
    it is `check_device`'s question, asked after the cheap checks (it imports torch)."""
    if not _DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:N (N a GPU index, e.g. cuda:0) or mps, "
                                         f"got {text!r}")
    return text


def dtype_name(text: str) -> str:
    """The argparse type of a ``--dtype`` flag: one of `zsnli.config.DTYPES` (any case, an optional ``torch.``
    prefix), returned as the torch dtype's name (``bf16`` -> ``bfloat16``, `CANONICAL_DTYPES`), which both the server
    and ``getattr(torch, name)`` take; anything else is ``argparse.ArgumentTypeError``."""
    name = text.strip().lower().removeprefix("torch.")
    if name not in DTYPES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(DTYPES)}, got {text!r}")
    return CANONICAL_DTYPES[name]


def check_model_dir(ap: argparse.ArgumentParser, model_dir: str | Path, flag: str = "--model-dir",
                    hint: str | None = None, nli: bool = True) -> None:
    """``ap.error`` (one line naming ``flag`` and the value as given, exit 2) unless ``model_dir`` is a model folder.
    With ``nli`` (a command that serves or scores the NLI cross-encoder): an NLI model's, as the server reads it
    (`zsnli.training.usage.check_nli_model_dir`: a sentence encoder's folder, or a ``config.json`` without an
    entailment label and its alternative, is called so); else any model's (a sentence encoder, a base encoder:
    `zsnli.training.usage.check_model_dir_arg`). A missing path, a file and a folder without ``config.json`` are each
    called so, in ``train.py``'s words. ``hint`` ends the line (default: those checks' own, where such a directory
    comes from)."""
    try:
        (check_nli_model_dir if nli else check_model_dir_arg)(model_dir, flag, hint)
    except UsageError as exc:
        ap.error(str(exc))


def check_file(ap: argparse.ArgumentParser, file: str | Path, flag: str, hint: str) -> None:
    """``ap.error`` (one line naming ``flag`` and the value as given, ending with ``hint``) unless ``file`` is a file:
    a directory there is called a directory, a missing path no such file, an empty value empty
    (`zsnli.training.usage.check_file_arg`, ``train.py``'s words)."""
    try:
        check_file_arg(file, flag, hint)
    except UsageError as exc:
        ap.error(str(exc))


def check_device(ap: argparse.ArgumentParser, device: str | None, flag: str = "--device") -> None:
    """``ap.error`` (one line naming ``flag`` and the value, exit 2) when this torch cannot use ``device``
    (`zsnli.training.usage.check_device_arg`: ``cuda`` on a machine without a GPU), before any server starts or model
    loads; None (the server's own default) and ``cpu`` pass without importing torch. Call it after the cheap checks:
    any other device imports torch."""
    if device is None:
        return
    try:
        check_device_arg(device, flag)
    except UsageError as exc:
        ap.error(str(exc))


def check_repo_root(ap: argparse.ArgumentParser, root: str | Path, flag: str = "--repo-root") -> None:
    """``ap.error`` (one line naming ``flag``) unless ``root`` is a checkout of this project: a folder holding
    one of `CHECKOUT_MARKS` (``serve.sh`` or ``server.py``). The parser's default for ``--repo-root`` is
    left alone: it is the working directory the ``auto`` launcher starts uvicorn in where there is no serve.sh
    (`zsnli.harness.server.start_server`), so a command run outside a checkout keeps working."""
    if root == ap.get_default(flag.lstrip("-").replace("-", "_")):
        return
    try:
        check_folder_arg(root, flag, "give the folder of a zsnli checkout (it holds server.py and serve.sh)")
    except UsageError as exc:
        ap.error(str(exc))
    path = Path(root).expanduser()
    if not any((path / mark).is_file() for mark in CHECKOUT_MARKS):
        ap.error(f"{flag} {root}: not a zsnli checkout (neither {' nor '.join(CHECKOUT_MARKS)} in it); give the "
                 "folder that holds serve.sh and server.py")


def check_examples(ap: argparse.ArgumentParser, given: str | Path | None, flag: str = "--examples") -> None:
    """``ap.error`` (one line naming ``flag``) when ``given`` (a file; ``hub:...`` and None are left to the
    command) cannot be read as examples or holds none (`zsnli.harness.examples.load_examples`)."""
    if given is None or str(given).startswith(HUB_PREFIX):
        return
    try:
        load_examples(given)
    except ExamplesError as exc:
        ap.error(f"{flag}: {exc}")
