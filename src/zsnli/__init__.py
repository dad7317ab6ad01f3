"""zsnli: zero-shot text classification served from an NLI cross-encoder.

``zsnli.Client`` / ``zsnli.AsyncClient`` (and the client's errors) are the Python clients of the
server (`zsnli.client`); they are imported on first use, so ``import zsnli`` (and the server)
never needs httpx.
"""

__version__ = "0.1.0"

_CLIENT_NAMES = ("Client", "AsyncClient", "Classification", "ZsnliError", "APIError", "BadRequestError",
                 "ServerError", "UnavailableError", "ConnectionFailed", "InvalidArgument")
__all__ = ["__version__", *_CLIENT_NAMES]


def __getattr__(name: str):
    if name in _CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'zsnli' has no attribute {name!r}")
