"""zsnli: zero-shot text classification served from an NLI cross-encoder.

``zsnli.Client`` / ``zsnli.AsyncClient`` (and the client's errors) are the Python clients of the
server (`zsnli.client`); they are imported on first use, so ``import zsnli`` (and the server)
never needs httpx. `import_entry` (with `exit_if_missing`) is the top-level scripts' (server.py, validate.py,
train.py) check that the third-party packages they need are importable: one line naming the missing ones and the
install command, exit 2, instead of a ``ModuleNotFoundError`` traceback.
"""

import importlib
import importlib.util
import sys

__version__ = "0.1.0"

_CLIENT_NAMES = ("Client", "AsyncClient", "Classification", "ZsnliError", "APIError", "BadRequestError",
                 "ServerError", "UnavailableError", "ConnectionFailed", "InvalidArgument")
__all__ = ["__version__", "exit_if_missing", *_CLIENT_NAMES]

#: The README's install command (Quick start), which installs every package the scripts need.
INSTALL_COMMAND = ("python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 "
                   "&& pip install -e '.[dev]'")


def missing_modules(modules) -> list[str]:
    """The names of ``modules`` (top-level import names, e.g. ``"fastapi"``) this interpreter cannot import,
    in the order given; located with ``importlib.util.find_spec``, nothing is imported."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def missing_line(command: str, missing) -> str:
    """The one line `exit_if_missing` prints: ``command`` (``./serve.sh``) cannot run, the missing module
    names, this interpreter, and the README's install command (or: activate the project's venv)."""
    return (f"{command}: missing Python package(s) {', '.join(missing)} for {sys.executable}; activate the "
            f"project's venv (. .venv/bin/activate) or install: {INSTALL_COMMAND} (README, Quick start)")


def exit_if_missing(command: str, modules) -> None:
    """Print `missing_line` to stderr and exit 2 (``SystemExit``) when any of ``modules`` cannot be imported;
    return None when all can."""
    missing = missing_modules(modules)
    if missing:
        print(missing_line(command, missing), file=sys.stderr)
        raise SystemExit(2)


def import_entry(command: str, modules, module: str, *names: str, import_command: str | None = None):
    """A top-level script's entry points: `exit_if_missing` (``command``, ``modules``), then ``module``'s attributes
    ``names`` (one value for one name, else a tuple). A third-party package ``modules`` does not name that fails on
    import (a broken install) is one `missing_line` too, under ``import_command`` (default ``command``), exit 2; a
    failure inside zsnli itself is raised as it is."""
    exit_if_missing(command, modules)
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:  # one ``modules`` does not name
        if not exc.name or exc.name.split(".")[0] == "zsnli":
            raise
        print(missing_line(import_command or command, [exc.name.split(".")[0]]), file=sys.stderr)
        raise SystemExit(2) from None
    values = tuple(getattr(loaded, name) for name in names)
    return values[0] if len(values) == 1 else values


def __getattr__(name: str):
    if name in _CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'zsnli' has no attribute {name!r}")
